"""Baseline entry points of the two single-shape reference tasks (task.toml ``entry = "kda_lab.baselines:..."``).

The diffusion tasks call SGLang through its facade; these two tasks have no facade entry, so their baselines
live here, each with the signature of the lab function (kda_lab/families/int8_scaled_mm.py, mha.py):

| function | arch | baseline | what it runs |
|---|---|---|---|
| ``int8_scaled_mm`` | b200 | :func:`sgl_int8_scaled_mm` | ``sgl_kernel.int8_scaled_mm`` (what SGLang 0.5.23's W8A8 linear calls) |
| ``int8_scaled_mm`` | h200 | :func:`torch_int8_scaled_mm` | ``torch._int_mm`` (cuBLASLt int8 GEMM, int32 out) + the dequant epilogue as separate torch ops |
| ``mha_forward`` | b200 | :func:`fa4_mha` | FlashAttention-4 (CuTe DSL, ``flash_attn.cute``) as vendored in SGLang 0.5.23 |
| ``mha_forward`` | h200 | :func:`sdpa_flash_mha` | torch SDPA restricted to its FlashAttention backend |

Optional packages (``sgl_kernel``, the CuTe DSL behind FA4) are resolved lazily, at the first call: importing
this module needs neither them nor a GPU, so the tasks validate on CPU. A missing one raises
:class:`BaselineUnavailable` saying what to install.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F


class BaselineUnavailable(RuntimeError):
    """The baseline's package is not installed (or has no kernel for this GPU); the message says what to do."""


# ------------------------------------------------------------------------------------------------ int8 GEMM

_INT_MM_MIN_ROWS = 17  # torch._int_mm on CUDA: "self.size(0) needs to be greater than 16"


def torch_int8_scaled_mm(mat_a: torch.Tensor, mat_b: torch.Tensor, scales_a: torch.Tensor, scales_b: torch.Tensor,
                         out_dtype: torch.dtype, bias: torch.Tensor | None = None) -> torch.Tensor:
    """The best int8 path stock torch has: ``torch._int_mm`` (int32 ``[M, N]``), then the epilogue in fp32.

    ``mat_b`` is the column-major ``[K, N]`` view of the ``[N, K]`` weight (cuBLASLt's fast TN int8 layout).
    The epilogue ``float(acc) * scales_a * scales_b + bias`` runs as separate eager torch ops after the GEMM
    (not fused: stock torch has no fused int8 GEMM with per-row/per-column scales). On CUDA, M <= 16 is
    zero-padded to 32 rows (cuBLASLt's int8 GEMM refuses M <= 16) and sliced back.
    """
    m = mat_a.shape[0]
    a = mat_a
    if a.is_cuda and m < _INT_MM_MIN_ROWS:
        a = torch.cat([a, a.new_zeros((32 - m, a.shape[1]))])
    acc = torch._int_mm(a, mat_b)
    if acc.shape[0] != m:
        acc = acc[:m]
    y = acc.to(torch.float32).mul_(scales_a.reshape(-1, 1)).mul_(scales_b.reshape(1, -1))
    if bias is not None:
        y.add_(bias.reshape(1, -1))
    return y.to(out_dtype)


@functools.cache
def _sgl_int8_scaled_mm() -> Callable[..., torch.Tensor]:
    try:
        from sgl_kernel import int8_scaled_mm
    except ImportError as e:
        raise BaselineUnavailable(
            f"the int8_scaled_mm baseline is sgl_kernel.int8_scaled_mm (SGLang 0.5.23's W8A8 GEMM), and sgl_kernel "
            f"does not import here: {e}. Install the sgl-kernel wheel matching SGLang 0.5.23 for this CUDA/torch "
            f"(`pip install sgl-kernel`) on the GPU machine; the offline box's staged environment "
            f"(scripts/gpu_stage.sh) does not include it.") from e
    return int8_scaled_mm


def sgl_int8_scaled_mm(mat_a: torch.Tensor, mat_b: torch.Tensor, scales_a: torch.Tensor, scales_b: torch.Tensor,
                       out_dtype: torch.dtype, bias: torch.Tensor | None = None) -> torch.Tensor:
    """``sgl_kernel.int8_scaled_mm`` (CUTLASS int8 GEMM with the scale/bias epilogue fused), resolved lazily."""
    fn = _sgl_int8_scaled_mm()
    try:
        return fn(mat_a, mat_b, scales_a, scales_b, out_dtype, bias)
    except NotImplementedError as e:
        cc = torch.cuda.get_device_capability(mat_a.device) if mat_a.is_cuda else None
        raise BaselineUnavailable(
            f"sgl_kernel.int8_scaled_mm has no kernel for compute capability {cc} in this sgl-kernel build ({e}). "
            "Some sgl-kernel releases dispatch int8 GEMMs only up to sm_90; this task then has no SGLang baseline "
            "on this GPU until a build with a Blackwell int8 path is staged (see the task's prompt.md).") from e


# ------------------------------------------------------------------------------------------------ attention

def sdpa_flash_mha(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
                   softmax_scale: float | None = None) -> torch.Tensor:
    """torch SDPA pinned to its FlashAttention backend; q/k/v ``[B, S, H, D]`` (transposed views, no copies)."""
    return sdpa_mha(q, k, v, causal, softmax_scale, backends=("FLASH_ATTENTION",))


def sdpa_mha(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
             softmax_scale: float | None = None, backends: tuple[str, ...] = ("FLASH_ATTENTION",)) -> torch.Tensor:
    """SDPA on ``[B, S, H, D]`` tensors restricted to ``backends`` (names of ``torch.nn.attention.SDPBackend``)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    with sdpa_kernel([getattr(SDPBackend, b) for b in backends]):
        o = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                           is_causal=causal, scale=softmax_scale)
    return o.transpose(1, 2)


FA4_MODULE = "sglang.kernels.ops.attention.flash_attention_v4"


@functools.cache
def _fa4_varlen() -> Callable[..., Any]:
    try:
        from sglang.kernels.ops.attention import flash_attention_v4 as fa4
    except ImportError as e:
        raise BaselineUnavailable(f"cannot import {FA4_MODULE} (SGLang 0.5.23's FlashAttention-4 wrapper): {e}. "
                                  "Install the pinned SGLang (`pip install --no-deps sglang==0.5.23`).") from e
    if not fa4.is_flash_attention_v4_available():
        raise BaselineUnavailable(
            "SGLang 0.5.23's vendored FlashAttention-4 (sglang.kernels.ops.attention.flash_attn.cute) does not import "
            f"here: {fa4._flash_attn_import_error!r}. It needs the CuTe DSL (nvidia-cutlass-dsl==4.8.0 with its "
            "libs, cuda-bindings) on the GPU machine: requirements/gpu.txt, or on the offline box the second "
            "folder of scripts/gpu_stage.sh (docs/gpu-box.md).")
    return fa4.flash_attn_varlen_func


def fa4_mha(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
            softmax_scale: float | None = None) -> torch.Tensor:
    """FlashAttention-4 forward through SGLang's wrapper, called the way its diffusion FlashAttention backend
    does with ``fa_ver=4``: dense ``[B, S, H, D]`` tensors, ``cu_seqlens`` None, max sequence lengths given."""
    fn = _fa4_varlen()
    return fn(q, k, v, None, None, max_seqlen_q=q.shape[1], max_seqlen_k=k.shape[1], softmax_scale=softmax_scale,
              causal=causal)
