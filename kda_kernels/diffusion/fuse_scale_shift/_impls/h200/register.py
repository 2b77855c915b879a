"""Candidate c009: c008 (c007's kept select01 launches, below, and the MulAdd tile plan the H200 sweep measured)
with a flat MulAdd kernel for the production layout (muladd.flat_layout: dense x and shift, one broadcast scale
row), which the H200 sweep of 2026-11-27 measured ahead of the 2-D tile on the calls of a few hundred tokens or
fewer. c005's Triton kernel for the two select01 LayerNorm modulation functions
(ln_select01.py: the semantics, why c005 (c004's H200 loss and its cause), the design, the byte model and the
bound beside the kernel),
plus ``fuse_scale_shift_kernel`` on a memory-order MulAdd kernel with a kept launch (muladd.py: why, the byte
model and the bound).

Contract of the MulAdd kernel (SGLang's wrapper, the ``fuse_scale_shift_kernel_blc_opt`` path): x ``[B,L,C]``
contiguous fp32/fp16/bf16 with B*L*C > 0; scale and shift fp32/fp16/bf16, each 0-D or one element (a scalar),
``[B|1, C]`` or ``[B|1, L|1, C]`` with any strides (shift may also be anything ``expand(B, L, C)`` accepts, as
in SGLang), not both scalars (SGLang's all-zero copy path); ``scale_constant`` a Python int or float. A 4-D
(per-frame) scale, both-scalar modulation, other dtypes or devices, autograd and torch.compile tracing go to
SGLang's function, which also raises where SGLang raises (a 1-D ``[C]`` scale, a non-contiguous x, shapes that
do not broadcast). The first call of a signature (shapes, strides, dtypes, devices, ``scale_constant``) runs
the checks and Triton's dispatch; later calls repeat its compiled launch (``kda_kernels.launch_cache``).

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

Host path (c007): the first call of a signature (every tensor's shape, stride, dtype and device, eps) runs the
checks and Triton's dispatch (``kda_kernels.launch_cache.runs_here`` decides where the kernel may run); when the
kernel got the caller's own tensors (no dense copies), later calls of the signature repeat its compiled launch.
c006's select01 path went through Triton's dispatch every call: 66.8 / 73.2 us eager on the H200 against SGLang's
52.7 / 66.0 us (run 20261127-160853-1f2839).

Importing this module builds nothing and needs no GPU; Triton compiles on the first call.
"""

from __future__ import annotations

import torch

from kda_kernels import lazy_baseline
from kda_kernels.launch_cache import LaunchCache, current_device, may_repeat, runs_here

from . import muladd
from .ln_select01 import MAX_C, launch, lead_tensors

_FLOATS = (torch.float32, torch.float16, torch.bfloat16)
PLAIN = "fuse_layernorm_scale_shift_gate_select01_kernel"
RESID = "fuse_residual_layernorm_scale_shift_gate_select01_kernel"
_INDEX_DTYPES = (torch.bool, torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64)

_sglang_select01 = lazy_baseline("fuse_layernorm_scale_shift_gate_select01_kernel")
_sglang_residual_select01 = lazy_baseline("fuse_residual_layernorm_scale_shift_gate_select01_kernel")
_sglang_muladd = lazy_baseline("fuse_scale_shift_kernel")

MULADD_LAUNCHES = LaunchCache()  # signature -> the compiled launch of its first (checked) call
SELECT01_LAUNCHES = LaunchCache()
KEEP_ON_CPU = False  # tests/test_kept_launch.py: CPU tensors through the hot path (Triton's driver stood in for)


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


def _tensor_key(t: object) -> tuple[object, ...] | None:
    return None if t is None else (t.shape, t.stride(), t.dtype, t.get_device())  # type: ignore[attr-defined]


def _select01_signature(fn: str, tensors: tuple[object, ...], eps: object) -> tuple[object, ...] | None:
    """Everything the select01 checks and plan depend on (x first; absent optional operands None), for exact CUDA
    tensors and a float eps; None otherwise (the checked path every time)."""
    x = tensors[0]
    if x.__class__ is not torch.Tensor or eps.__class__ is not float or not (x.is_cuda or KEEP_ON_CPU):  # type: ignore[attr-defined]
        return None
    if any(t is not None and t.__class__ is not torch.Tensor for t in tensors):
        return None
    return (fn, *(_tensor_key(t) for t in tensors), eps, current_device())


def _no_copies(weight: object, bias: object, mods: tuple[object, ...], dense: tuple[torch.Tensor, ...],
               w: torch.Tensor | None, b: torch.Tensor | None) -> bool:
    """The checked path handed the kernel the caller's own tensors (no dense copies): only then can a later call
    of the signature pass its own tensors to the kept launch."""
    return w is weight and b is bias and all(d is m for d, m in zip(dense, mods, strict=True))


def fuse_layernorm_scale_shift_gate_select01_kernel(
    x: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None,
    scale0: torch.Tensor, shift0: torch.Tensor, gate0: torch.Tensor,
    scale1: torch.Tensor, shift1: torch.Tensor, gate1: torch.Tensor,
    index: torch.Tensor, eps: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    mods = (scale0, shift0, gate0, scale1, shift1, gate1)
    key = _select01_signature(PLAIN, (x, weight, bias, *mods, index), eps)
    kept = SELECT01_LAUNCHES.get(key) if key is not None else None
    if kept is not None:
        y, gate_out = torch.empty_like(x), torch.empty_like(x)
        if may_repeat(x, weight, bias, *mods, index, y, gate_out):
            kept(*lead_tensors(y, y, gate_out, x, None, None, weight, bias, mods, index))
            return y, gate_out
    ready = _prepare(x, (), weight, bias, mods, index)
    if ready is None:
        return _sglang_select01(x, weight, bias, *mods, index, eps)
    w, b, dense = ready
    (y, gate_out), kept = launch(x, None, None, w, b, dense, index, float(eps))
    if key is not None and _no_copies(weight, bias, mods, dense, w, b) and may_repeat(x, w, b, *dense, index, y):
        SELECT01_LAUNCHES.keep(key, kept)
    return y, gate_out


def fuse_residual_layernorm_scale_shift_gate_select01_kernel(
    x: torch.Tensor, residual: torch.Tensor, residual_gate: torch.Tensor,
    weight: torch.Tensor | None, bias: torch.Tensor | None,
    scale0: torch.Tensor, shift0: torch.Tensor, gate0: torch.Tensor,
    scale1: torch.Tensor, shift1: torch.Tensor, gate1: torch.Tensor,
    index: torch.Tensor, eps: float,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    mods = (scale0, shift0, gate0, scale1, shift1, gate1)
    key = _select01_signature(RESID, (x, residual, residual_gate, weight, bias, *mods, index), eps)
    kept = SELECT01_LAUNCHES.get(key) if key is not None else None
    if kept is not None:
        y, res_out, gate_out = torch.empty_like(x), torch.empty_like(x), torch.empty_like(x)
        if may_repeat(x, residual, residual_gate, weight, bias, *mods, index, y, res_out, gate_out):
            kept(*lead_tensors(y, res_out, gate_out, x, residual, residual_gate, weight, bias, mods, index))
            return y, res_out, gate_out
    ready = _prepare(x, (residual, residual_gate), weight, bias, mods, index)
    if ready is None:
        return _sglang_residual_select01(x, residual, residual_gate, weight, bias, *mods, index, eps)
    w, b, dense = ready
    (y, residual_out, gate_out), kept = launch(x, residual, residual_gate, w, b, dense, index, float(eps))
    if key is not None and _no_copies(weight, bias, mods, dense, w, b) \
            and may_repeat(x, residual, residual_gate, w, b, *dense, index, y):
        SELECT01_LAUNCHES.keep(key, kept)
    return y, residual_out, gate_out


def _muladd_signature(x: object, scale: object, shift: object, scale_constant: object) -> tuple[object, ...] | None:
    """Everything the MulAdd checks and plan depend on, for exact CUDA tensors; None otherwise (the checked path
    every time)."""
    if x.__class__ is not torch.Tensor or scale.__class__ is not torch.Tensor \
            or shift.__class__ is not torch.Tensor or scale_constant.__class__ not in (int, float) \
            or not (x.is_cuda or KEEP_ON_CPU):  # type: ignore[attr-defined]
        return None
    x_, sc, sh = x, scale, shift  # type: ignore[assignment]
    return (x_.shape, x_.stride(), x_.dtype, x_.get_device(), sc.shape, sc.stride(), sc.dtype,  # type: ignore[attr-defined]
            sc.get_device(), sh.shape, sh.stride(), sh.dtype, sh.get_device(),  # type: ignore[attr-defined]
            scale_constant.__class__, scale_constant, current_device())


def _as_blc(t: torch.Tensor, x_shape: torch.Size, is_shift: bool) -> tuple[torch.Tensor, tuple[int, int, int], bool]:
    """SGLang's mapping of a modulation tensor onto [B,L,C]: (kernel argument, strides of its [B,L,C] view,
    is a scalar). Raises where SGLang's ``expand`` raises (the caller then hands the call to SGLang)."""
    if t.dim() == 0 or (t.dim() == 1 and t.numel() == 1):
        return t.reshape(1), (0, 0, 0), True
    if t.dim() == 2:
        blc = t[:, None, :]
    elif t.dim() == 3 or is_shift:  # SGLang expands any other shift as it is; any other scale raises
        blc = t
    else:
        raise ValueError("scale must be 0D/1D(1)/2D/3D or 4D")
    s_b, s_l, s_c = blc.expand(*x_shape).stride()
    return t, (s_b, s_l, s_c), False


def fuse_scale_shift_kernel(x: torch.Tensor, scale: torch.Tensor, shift: torch.Tensor, scale_constant: float = 1.0,
                            block_l: int = 128, block_c: int = 128) -> torch.Tensor:
    key = _muladd_signature(x, scale, shift, scale_constant)
    kept = MULADD_LAUNCHES.get(key) if key is not None else None
    if kept is not None:
        y = torch.empty_like(x)
        if may_repeat(x, scale, shift, y):
            kept(x, shift, scale, y)
            return y
    return _muladd_checked(x, scale, shift, scale_constant, block_l, block_c, key)


def _muladd_checked(x: torch.Tensor, scale: torch.Tensor, shift: torch.Tensor, scale_constant: float,
                    block_l: int, block_c: int, key: tuple[object, ...] | None) -> torch.Tensor:
    def sglang() -> torch.Tensor:
        return _sglang_muladd(x, scale, shift, scale_constant, block_l, block_c)

    if not (isinstance(x, torch.Tensor) and isinstance(scale, torch.Tensor) and isinstance(shift, torch.Tensor)) \
            or scale_constant.__class__ not in (int, float):
        return sglang()
    if x.dim() != 3 or not x.is_contiguous() or x.numel() == 0 or scale.dim() == 4 \
            or any(t.dtype not in _FLOATS for t in (x, scale, shift)) or not runs_here(x, scale, shift):
        return sglang()
    try:
        scale_arg, scale_strides, scale_scalar = _as_blc(scale, x.shape, is_shift=False)
        shift_arg, shift_strides, shift_scalar = _as_blc(shift, x.shape, is_shift=True)
    except (RuntimeError, ValueError):
        return sglang()  # SGLang raises the same error
    if scale_scalar and shift_scalar:
        return sglang()  # SGLang's all-zero check (a host sync) and copy path
    if not (scale_scalar or shift_scalar) and muladd.flat_layout(x, scale, shift):
        y, kept = muladd.launch_flat(x, scale, shift, scale_constant)
    else:
        y, kept = muladd.launch(x, scale_arg, scale_strides, scale_scalar, shift_arg, shift_strides, shift_scalar,
                                scale_constant)
    if key is not None and may_repeat(x, scale, shift, y):
        MULADD_LAUNCHES.keep(key, kept)
    return y


EXPORTS = {
    "fuse_scale_shift_kernel": fuse_scale_shift_kernel,
    "fuse_layernorm_scale_shift_gate_select01_kernel": fuse_layernorm_scale_shift_gate_select01_kernel,
    "fuse_residual_layernorm_scale_shift_gate_select01_kernel": fuse_residual_layernorm_scale_shift_gate_select01_kernel,
}
