"""Candidate: Triton rotary kernels, bit-exact with SGLang 0.5.23 (gptj_rope.py, ltx2_split_rope.py: the byte
model and the bound beside each kernel).

Contract of the kernels (prompt.md K), everything else goes to SGLang's own function (``lazy_baseline``, from
the module that defines it, never from the facade the overlay rebinds), which also raises where SGLang raises:

- ``apply_rotary_embedding(x, cos, sin, interleaved=False)``: x ``[B,T,H,D]`` or ``[T,H,D]`` in fp16/bf16/fp32,
  viewable as ``[B*T,H,D]`` (SGLang's ``x.view``), last stride 1, D even and > 0, no empty dim; cos and sin 2-D
  fp16/bf16/fp32/fp64 with at least T rows and at least D/2 columns, last stride 1 (with ``interleaved=True``
  and D columns the kernel reads every other column, as SGLang's ``cos[..., ::2]``); CUDA tensors on one device
  (or CPU tensors under the Triton interpreter), no autograd recording.
- ``apply_ltx2_split_rotary_emb(x, cos, sin)``: x ``[B,S,H*D]`` contiguous fp16/bf16/fp32, cos/sin
  ``[B,H,S,D/2]`` of one shape, fp16/bf16/fp32, last stride 1 and non-negative strides; same device rules.
  Shape mismatches go to SGLang, which raises its ValueError.

One exception to "everything else goes to SGLang": inputs whose last dim is not unit-stride. SGLang 0.5.23 accepts
them and answers wrong (its kernels index the last dim as if it were dense); here they run on dense copies.

Host path: the first call of a signature (shapes, strides, dtypes, devices, ``interleaved``) runs the checks
above and launches through ``kernel[grid]``; its compiled launch is kept (``kda_kernels.launch_cache``) and later calls
of that signature skip the checks that the signature decides and Triton's dispatch: exact ``torch.Tensor``
inputs on CUDA, 16-byte aligned, no autograd recording and not under ``torch.compile`` tracing (those are
checked on every call; anything else takes the checked path).

Importing this module builds nothing and needs no GPU; Triton compiles on the first call.
"""

from __future__ import annotations

import os

import torch

from kda_kernels import lazy_baseline
from kda_kernels.launch_cache import LaunchCache, aligned16, current_device

from .gptj_rope import launch as launch_gptj  # variant: from .gptj_rope_headloop import launch as launch_gptj
from .ltx2_split_rope import launch as launch_ltx2
from .ltx2_split_rope import (
    plan_auto,
    plan_sglang_tiles,
    plan_stream,
    plan_stream_evict,
    plan_stream_h8,
    plan_stream_r32,
    plan_stream_row,
    plan_stream_w8,
    plan_vec16_tiles,
)

_X_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
_TABLE_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)

_sglang_rotary = lazy_baseline("apply_rotary_embedding")
_sglang_ltx2 = lazy_baseline("apply_ltx2_split_rotary_emb")

# The LTX-2 tile plan (ltx2_split_rope.py): plan_auto streams large calls in memory order with 16-byte vectors
# (plan_stream) and keeps c004's plan (plan_sglang_tiles) on small ones. The others are dev-sweep variants
# (dev/ltx2_sweep.py); any of them is one line away: plan_ltx2 = <plan>.
PLANS_LTX2 = (plan_auto, plan_sglang_tiles, plan_vec16_tiles, plan_stream, plan_stream_w8, plan_stream_row,
              plan_stream_h8, plan_stream_evict, plan_stream_r32)
plan_ltx2 = plan_auto

ROPE_LAUNCHES = LaunchCache()  # signature -> the compiled launch of its first (checked) call
LTX2_LAUNCHES = LaunchCache()


def _signature(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, *extra: object) -> tuple[object, ...] | None:
    """What the contract checks and the launch plan depend on, for exact CUDA tensors; None otherwise
    (tensor subclasses, CPU tensors, non-tensors: the checked path every time)."""
    if x.__class__ is not torch.Tensor or cos.__class__ is not torch.Tensor or sin.__class__ is not torch.Tensor \
            or not x.is_cuda:
        return None
    return (x.shape, x.stride(), x.dtype, x.get_device(), cos.shape, cos.stride(), cos.dtype, cos.get_device(),
            sin.shape, sin.stride(), sin.dtype, sin.get_device(), current_device(), *extra)


def _may_repeat(out: torch.Tensor, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> bool:
    """The per-call conditions a signature does not decide (a kept launch was compiled for aligned pointers)."""
    if torch.is_grad_enabled() and (x.requires_grad or cos.requires_grad or sin.requires_grad):
        return False
    return not torch.compiler.is_compiling() and aligned16(out, x, cos, sin)


def _runs_here(*tensors: torch.Tensor) -> bool:
    """All on one CUDA device (or on the CPU under the Triton interpreter), none recording autograd."""
    device = tensors[0].device
    if any(t.device != device for t in tensors):
        return False
    if not (device.type == "cuda" or (device.type == "cpu" and os.environ.get("TRITON_INTERPRET") == "1")):
        return False
    return not (torch.is_grad_enabled() and any(t.requires_grad for t in tensors))


def _table_col_stride(t: torch.Tensor, head_size: int, interleaved: bool, num_tokens: int) -> int:
    """The kernel's column step through a cos/sin table, or 0 when the table is outside the contract."""
    if not isinstance(t, torch.Tensor) or t.dim() != 2 or t.dtype not in _TABLE_DTYPES or t.stride(1) != 1:
        return 0
    if t.shape[0] < num_tokens or t.stride(0) < 0:
        return 0
    if interleaved and t.shape[1] == head_size:
        return 2  # SGLang's cos[..., ::2], read in place
    return 1 if t.shape[1] >= head_size // 2 else 0


def apply_rotary_embedding(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                           interleaved: bool = False) -> torch.Tensor:
    key = _signature(x, cos, sin, interleaved) if interleaved.__class__ is bool else None
    kept = ROPE_LAUNCHES.get(key) if key is not None else None
    if kept is not None:
        out = torch.empty_like(x)
        if _may_repeat(out, x, cos, sin):
            kept(out, x, cos, sin)
            return out
    return _rotary_checked(x, cos, sin, interleaved, key)


def _strided_last(*tensors: object) -> bool:
    """Some tensor's last dim is not unit-stride: SGLang 0.5.23's Triton kernels assume it is and read the wrong
    elements (the H200 overlay fuzz, 2026-11-25: max errors 3-12 on every ``/strided`` case, docs/notes.md)."""
    return all(isinstance(t, torch.Tensor) for t in tensors) and any(
        t.dim() > 0 and t.size(-1) > 1 and t.stride(-1) != 1 for t in tensors)  # type: ignore[union-attr]


def _rotary_checked(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, interleaved: bool,
                    key: tuple[object, ...] | None) -> torch.Tensor:
    if _strided_last(x, cos, sin):  # the right answer on dense copies, where SGLang's would be wrong
        return _rotary_checked(x.contiguous(), cos.contiguous(), sin.contiguous(), interleaved, None)
    if not isinstance(x, torch.Tensor) or x.dim() not in (3, 4) or x.dtype not in _X_DTYPES or x.stride(-1) != 1:
        return _sglang_rotary(x, cos, sin, interleaved)
    if x.dim() == 4:
        bsz, num_tokens, num_heads, head_size = x.shape
    else:
        num_tokens, num_heads, head_size = x.shape
        bsz = 1
    if head_size % 2 or x.numel() == 0:
        return _sglang_rotary(x, cos, sin, interleaved)
    col = _table_col_stride(cos, head_size, interleaved, num_tokens)
    if not col or col != _table_col_stride(sin, head_size, interleaved, num_tokens) \
            or not _runs_here(x, cos, sin):
        return _sglang_rotary(x, cos, sin, interleaved)
    try:
        x3 = x.view(bsz * num_tokens, num_heads, head_size)
    except RuntimeError:
        return _sglang_rotary(x, cos, sin, interleaved)  # SGLang's view raises the same error
    out = torch.empty_like(x)
    out3 = out.view(bsz * num_tokens, num_heads, head_size)
    if out3.stride(-1) != 1:
        return _sglang_rotary(x, cos, sin, interleaved)
    kept = launch_gptj(out3, x3, cos, sin, num_tokens, col)
    if key is not None and _may_repeat(out, x, cos, sin):
        ROPE_LAUNCHES.keep(key, kept)
    return out


def apply_ltx2_split_rotary_emb(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    key = _signature(x, cos, sin)
    kept = LTX2_LAUNCHES.get(key) if key is not None else None
    if kept is not None:
        out = torch.empty_like(x)
        if _may_repeat(out, x, cos, sin):
            kept(out, x, cos, sin)
            return out
    return _ltx2_checked(x, cos, sin, key)


def _ltx2_checked(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                  key: tuple[object, ...] | None) -> torch.Tensor:
    if _strided_last(x, cos, sin):  # the right answer on dense copies, where SGLang's would be wrong
        return _ltx2_checked(x.contiguous(), cos.contiguous(), sin.contiguous(), None)
    if not (isinstance(x, torch.Tensor) and isinstance(cos, torch.Tensor) and isinstance(sin, torch.Tensor)) \
            or x.dim() != 3 or cos.dim() != 4 or sin.shape != cos.shape:
        return _sglang_ltx2(x, cos, sin)
    batch, seq_len, inner = x.shape
    cos_batch, num_heads, cos_seq, half_dim = cos.shape
    if cos_batch != batch or cos_seq != seq_len or inner != num_heads * 2 * half_dim or x.numel() == 0:
        return _sglang_ltx2(x, cos, sin)
    if x.dtype not in _X_DTYPES or cos.dtype not in _X_DTYPES or sin.dtype not in _X_DTYPES \
            or not x.is_contiguous() or cos.stride(-1) != 1 or sin.stride(-1) != 1 \
            or min(cos.stride()) < 0 or min(sin.stride()) < 0 or not _runs_here(x, cos, sin):
        return _sglang_ltx2(x, cos, sin)
    out = torch.empty_like(x)
    kept = launch_ltx2(out, x, cos, sin, plan_ltx2)
    if key is not None and _may_repeat(out, x, cos, sin):
        LTX2_LAUNCHES.keep(key, kept)
    return out


def run_ltx2_plan(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, plan: object) -> torch.Tensor:
    """Dev sweep only: the LTX-2 kernel with the tile plan ``plan`` (one of PLANS_LTX2), through Triton's dispatch
    every call (no kept launch), for inputs inside the kernel's contract (no checks here)."""
    out = torch.empty_like(x)
    launch_ltx2(out, x, cos, sin, plan)
    return out


EXPORTS = {
    "apply_rotary_embedding": apply_rotary_embedding,
    "apply_ltx2_split_rotary_emb": apply_ltx2_split_rotary_emb,
}
