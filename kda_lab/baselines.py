"""Baseline entry points of the two single-shape reference tasks (task.toml ``entry = "kda_lab.baselines:..."``).

The diffusion tasks call SGLang through its facade; these two tasks have no facade entry, so their baselines
live here, each with the signature of the lab function (kda_lab/families/int8_scaled_mm.py, mha.py):

| function | arch | baseline | what it runs |
|---|---|---|---|
| ``int8_scaled_mm`` | b200 | :func:`sgl_int8_scaled_mm` | ``sgl_kernel.int8_scaled_mm`` (what SGLang 0.5.23's W8A8 linear calls) |
| ``int8_scaled_mm`` | h200 | :func:`sgl_int8_scaled_mm` | the same (sgl-kernel 0.4.5 staged on the box) |
| ``int8_scaled_mm`` | (eager reference) | :func:`torch_int8_scaled_mm` | ``torch._int_mm`` (cuBLASLt int8 GEMM, int32 out) + the dequant epilogue as separate torch ops |
| ``mha_forward`` | b200 | :func:`fa4_mha` | FlashAttention-4 (CuTe DSL, ``flash_attn.cute``) as vendored in SGLang 0.5.23 |
| ``mha_forward`` | h200 | :func:`sdpa_flash_mha` | torch SDPA restricted to its FlashAttention backend |
| ``mha_forward`` | h200 (diffusion shapes) | :func:`sglang_fa3_mha` | SGLang's default H200 diffusion attention: FA3 from ``sgl_kernel`` |

Optional packages (``sgl_kernel``, its FA3 extension, the CuTe DSL behind FA4) are resolved lazily, at the first call: importing
this module needs neither them nor a GPU, so the tasks validate on CPU. A missing one raises
:class:`BaselineUnavailable` saying what to install.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from contextlib import nullcontext
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
            f"does not import here: {e}. On the offline box carry sgl_kernel's core, .gpu-stage-d1 "
            f"(scripts/gpu_stage_sgl_kernel.sh, docs/gpu-box.md); elsewhere install the sgl-kernel wheel of "
            f"requirements/sgl-kernel.txt for this CUDA/torch.") from e
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

# ``key_lens`` (mha contract, kda_lab/families/mha.py): host-side valid-key counts, one per batch element. Kernels
# that take device metadata get it from these caches, filled at the first (eager, uncaptured) call and reused by
# every later one, CUDA-graph replays included: SGLang keeps its FA metadata the same way
# (layers/attention/backends/flash_attn.py: cu_seqlens_on_device, an lru_cache of host bounds).


@functools.lru_cache(maxsize=64)
def device_lens(lens: tuple[int, ...], device: torch.device) -> torch.Tensor:
    """``lens`` as an int32 device tensor (FA3's and FA4's ``seqused_k``); callers must not mutate it."""
    return torch.tensor(lens, dtype=torch.int32, device=device)


@functools.lru_cache(maxsize=64)
def key_padding_mask(lens: tuple[int, ...], sk: int, device: torch.device) -> torch.Tensor:
    """SDPA's boolean ``attn_mask`` ``[B, 1, 1, Sk]`` (True: attend) for a prefix of ``lens[b]`` valid keys."""
    valid = torch.arange(sk, device=device)[None, :] < torch.tensor(lens, device=device)[:, None]
    return valid[:, None, None, :]


def _lens(key_lens: Any) -> tuple[int, ...] | None:
    return None if key_lens is None else tuple(int(n) for n in key_lens)


def sdpa_flash_mha(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
                   softmax_scale: float | None = None, key_lens: Any = None) -> torch.Tensor:
    """torch SDPA pinned to its FlashAttention backend; q/k/v ``[B, S, H, D]`` (transposed views, no copies)."""
    return sdpa_mha(q, k, v, causal, softmax_scale, backends=("FLASH_ATTENTION",), key_lens=key_lens)


def sdpa_mha(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
             softmax_scale: float | None = None, backends: tuple[str, ...] | None = ("FLASH_ATTENTION",),
             key_lens: Any = None) -> torch.Tensor:
    """SDPA on ``[B, S, H, D]`` tensors restricted to ``backends`` (names of ``torch.nn.attention.SDPBackend``;
    None: torch's own choice). ``key_lens``: a boolean ``attn_mask`` of the valid keys, except for the
    FlashAttention backend alone, which takes no mask: each batch element then attends over its valid keys
    only (``k[b, :key_lens[b]]``, the same attention; one call per batch element, outputs concatenated)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    lens = _lens(key_lens)
    if lens is not None and backends == ("FLASH_ATTENTION",):
        if len(lens) == 1:
            return sdpa_mha(q, k[:, : lens[0]], v[:, : lens[0]], causal, softmax_scale, backends)
        return torch.cat([sdpa_mha(q[b: b + 1], k[b: b + 1, :n], v[b: b + 1, :n], causal, softmax_scale, backends)
                          for b, n in enumerate(lens)])
    mask = None if lens is None else key_padding_mask(lens, k.shape[1], q.device)
    with sdpa_kernel([getattr(SDPBackend, b) for b in backends]) if backends is not None else nullcontext():
        o = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), attn_mask=mask,
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
            softmax_scale: float | None = None, key_lens: Any = None) -> torch.Tensor:
    """FlashAttention-4 forward through SGLang's wrapper, called the way its diffusion FlashAttention backend
    does with ``fa_ver=4``: dense ``[B, S, H, D]`` tensors, ``cu_seqlens`` None, max sequence lengths given;
    ``key_lens`` as ``seqused_k``."""
    fn = _fa4_varlen()
    lens = _lens(key_lens)
    kw = {} if lens is None else {"seqused_k": device_lens(lens, q.device)}
    return fn(q, k, v, None, None, max_seqlen_q=q.shape[1], max_seqlen_k=k.shape[1], softmax_scale=softmax_scale,
              causal=causal, **kw)


FA3_MODULE = "sglang.kernels.ops.attention.flash_attention"


@functools.cache
def _sglang_fa3_varlen() -> Callable[..., Any]:
    """SGLang's ``flash_attn_varlen_func`` (ver=3 reaches ``sgl_kernel.flash_attn`` through
    ``flash_attention_v3._load_fa3_kernels`` while ``SGLANG_USE_SGL_FA3_KERNEL`` is on, its default), after
    checking that sgl_kernel's FA3 extension imports here (SGLang would import it only at the first call)."""
    try:
        from sglang.kernels.ops.attention.flash_attention import flash_attn_varlen_func
    except ImportError as e:
        raise BaselineUnavailable(f"cannot import {FA3_MODULE} (SGLang 0.5.23's FlashAttention wrapper): {e}. "
                                  "Install the pinned SGLang (`pip install --no-deps sglang==0.5.23`).") from e
    try:
        import sgl_kernel.flash_attn  # noqa: F401 - what SGLang's FA3 loader imports at its first call
    except ImportError as e:
        raise BaselineUnavailable(
            f"SGLang's default H200 diffusion attention is FA3 from sgl_kernel (sgl_kernel.flash_attn, its flash_ops "
            f"extension), which does not import here: {e}. On the offline box carry sgl_kernel's core "
            "(.gpu-stage-d1) and every fa3 chunk folder (.gpu-stage-d2 ...), scripts/gpu_stage_sgl_kernel.sh and "
            "docs/gpu-box.md; elsewhere install the sgl-kernel wheel of requirements/sgl-kernel.txt.") from e
    return flash_attn_varlen_func


def sglang_fa3_mha(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
                   softmax_scale: float | None = None, key_lens: Any = None) -> torch.Tensor:
    """SGLang 0.5.23's default diffusion attention on an H200, called as its FlashAttention backend calls it
    (layers/attention/backends/flash_attn.py: FlashAttentionImpl.forward with ``fa_ver`` 3): dense
    ``[B, S, H, D]`` tensors, ``cu_seqlens`` None, ``max_seqlen_q``/``max_seqlen_k`` the sequence lengths;
    ``key_lens`` as FA3's ``seqused_k`` (the first ``key_lens[b]`` keys of batch element ``b``)."""
    fn = _sglang_fa3_varlen()
    lens = _lens(key_lens)
    return fn(q, k, v, None, None, max_seqlen_q=q.shape[1], max_seqlen_k=k.shape[1],
              seqused_k=None if lens is None else device_lens(lens, q.device), softmax_scale=softmax_scale,
              causal=causal, ver=3)
