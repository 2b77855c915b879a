"""Candidate c005: a Triton kernel for the two select01 LayerNorm modulation functions (ln_select01.py: the
semantics, why c005 (c004's H200 loss and its cause), the design, the byte model and the bound beside the kernel);
``fuse_scale_shift_kernel`` stays on SGLang's own kernel.

Contract of the c005 kernel (prompt.md K), everything else goes to SGLang's function (``lazy_baseline``, from
the module that defines it, never from the facade the overlay rebinds), which also raises where SGLang raises:

- x ``[B,L,C]`` contiguous, fp32/fp16/bf16, B*L > 0, 0 < C <= ``MAX_C``; for the residual form residual and
  residual_gate of x's shape, contiguous, fp32/fp16/bf16;
- weight/bias None or 1-D ``[C]`` fp32/fp16/bf16 (any stride: a strided one is made dense, as SGLang does);
- scale0/shift0/gate0/scale1/shift1/gate1 2-D ``[B|1, C]`` fp32/fp16/bf16 (a non-unit C stride is made dense,
  as SGLang's ``.contiguous()`` does; a batch dim of 1 broadcasts over B), each pair of one dtype (scale0 and
  scale1, shift0 and shift1, gate0 and gate1: the kernel selects between the pair's base pointers, so it loads
  only the selected row); a pair of two dtypes goes to SGLang;
- index 2-D ``[B|1, L]``, bool or an integer dtype, any strides;
- every tensor on one CUDA device (or the CPU under the Triton interpreter), no autograd recording.

Host path: as c004 (``kda_kernels.launch_cache.runs_here`` decides where the kernel may run; Triton's dispatch
launches it).

Importing this module builds nothing and needs no GPU; Triton compiles on the first call.
"""

from __future__ import annotations

import torch

from kda_kernels import lazy_baseline
from kda_kernels.launch_cache import runs_here

from .ln_select01 import MAX_C, launch

_FLOATS = (torch.float32, torch.float16, torch.bfloat16)
_INDEX_DTYPES = (torch.bool, torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64)

_sglang_select01 = lazy_baseline("fuse_layernorm_scale_shift_gate_select01_kernel")
_sglang_residual_select01 = lazy_baseline("fuse_residual_layernorm_scale_shift_gate_select01_kernel")


def _dense_rows(t: object, shape: torch.Size) -> bool:
    return isinstance(t, torch.Tensor) and t.shape == shape and t.dtype in _FLOATS and t.is_contiguous()


def _prepare(x: object, rows: tuple[object, ...], weight: object, bias: object, mods: tuple[object, ...],
             index: object) -> tuple[torch.Tensor | None, torch.Tensor | None, tuple[torch.Tensor, ...]] | None:
    """(weight, bias, mods) ready for the kernel when every input is inside its contract, else None."""
    if not isinstance(x, torch.Tensor) or x.dim() != 3 or x.dtype not in _FLOATS or not x.is_contiguous():
        return None
    batch, seq_len, c = x.shape
    if batch * seq_len == 0 or not 0 < c <= MAX_C:
        return None
    if not all(_dense_rows(r, x.shape) for r in rows):
        return None
    for t in (weight, bias):
        if t is not None and not (isinstance(t, torch.Tensor) and t.dim() == 1 and t.shape[0] == c
                                  and t.dtype in _FLOATS):
            return None
    for m in mods:
        if not (isinstance(m, torch.Tensor) and m.dim() == 2 and m.shape[0] in (1, batch) and m.shape[1] == c
                and m.dtype in _FLOATS):
            return None
    if any(mods[i].dtype != mods[i + 3].dtype for i in range(3)):  # type: ignore[union-attr]
        return None  # the kernel selects between a pair's base pointers: one element type per pair
    if not (isinstance(index, torch.Tensor) and index.dim() == 2 and index.shape[0] in (1, batch)
            and index.shape[1] == seq_len and index.dtype in _INDEX_DTYPES):
        return None
    present = [x, *rows, *(t for t in (weight, bias) if t is not None), *mods, index]
    if not runs_here(*present):  # type: ignore[arg-type]
        return None
    w = weight.contiguous() if weight is not None else None  # type: ignore[union-attr]
    b = bias.contiguous() if bias is not None else None  # type: ignore[union-attr]
    dense = tuple(m if m.stride(1) == 1 else m.contiguous() for m in mods)  # type: ignore[union-attr]
    return w, b, dense


def fuse_layernorm_scale_shift_gate_select01_kernel(
    x: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None,
    scale0: torch.Tensor, shift0: torch.Tensor, gate0: torch.Tensor,
    scale1: torch.Tensor, shift1: torch.Tensor, gate1: torch.Tensor,
    index: torch.Tensor, eps: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    mods = (scale0, shift0, gate0, scale1, shift1, gate1)
    ready = _prepare(x, (), weight, bias, mods, index)
    if ready is None:
        return _sglang_select01(x, weight, bias, *mods, index, eps)
    w, b, dense = ready
    y, gate_out = launch(x, None, None, w, b, dense, index, float(eps))
    return y, gate_out


def fuse_residual_layernorm_scale_shift_gate_select01_kernel(
    x: torch.Tensor, residual: torch.Tensor, residual_gate: torch.Tensor,
    weight: torch.Tensor | None, bias: torch.Tensor | None,
    scale0: torch.Tensor, shift0: torch.Tensor, gate0: torch.Tensor,
    scale1: torch.Tensor, shift1: torch.Tensor, gate1: torch.Tensor,
    index: torch.Tensor, eps: float,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    mods = (scale0, shift0, gate0, scale1, shift1, gate1)
    ready = _prepare(x, (residual, residual_gate), weight, bias, mods, index)
    if ready is None:
        return _sglang_residual_select01(x, residual, residual_gate, weight, bias, *mods, index, eps)
    w, b, dense = ready
    y, residual_out, gate_out = launch(x, residual, residual_gate, w, b, dense, index, float(eps))
    return y, residual_out, gate_out


EXPORTS = {
    "fuse_scale_shift_kernel": lazy_baseline("fuse_scale_shift_kernel"),
    "fuse_layernorm_scale_shift_gate_select01_kernel": fuse_layernorm_scale_shift_gate_select01_kernel,
    "fuse_residual_layernorm_scale_shift_gate_select01_kernel": fuse_residual_layernorm_scale_shift_gate_select01_kernel,
}
