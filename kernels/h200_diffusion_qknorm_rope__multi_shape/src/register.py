"""Candidate c002: fused in-place QK RMSNorm + RoPE in Triton (qknorm_rope.py: the kernel, its byte model and
the bound).

The kernel's contract (prompt.md K, SGLang 0.5.23's accepted inputs on the default path), everything else goes to
SGLang's own function (``lazy_baseline``: from its defining module, never from the facade the overlay rebinds),
which also raises where SGLang raises:

- ``round_norm_before_rope=False`` (True: SGLang's bits are the contract, handed to SGLang);
- q ``[N,Hq,D]`` and k ``[N,Hk,D]`` of one dtype, fp16 or bf16 (fp32 too, which SGLang rejects: same math, the
  CPU interpreter's fp32 rows run it), D in {64, 128, 256}, ``head_dim`` 0 or D, last stride 1, any token
  stride, the same head stride (where both have more than one head), no zero strides on a dim of size > 1 (an
  in-place write through overlapping rows is SGLang's to answer);
- weights ``[D]`` contiguous in q's dtype; positions ``[N]`` int32/int64 contiguous; cos_sin_cache ``[P, W]``
  contiguous, fp32/fp16/bf16, P > 0, ``rope_dim = rope_dim or (W // 2 if cache_has_full_width else W)`` with
  ``W == (2 if full width else 1) * rope_dim``, ``0 < rope_dim <= D``, ``rope_dim % (D/32) == 0`` and, for NeoX,
  an even number ``>= 2`` of rotary lanes ``rope_dim / (D/32)`` (SGLang's template asserts);
- flags of type bool, head_dim/rope_dim ints, eps a real number; every tensor on one CUDA device (or the CPU
  under the Triton interpreter), no autograd recording.

N == 0 or Hq + Hk == 0: nothing to do, returns (SGLang returns early too).

Host path: the first call of a signature (shapes, strides, dtypes, devices, the current device and every
non-tensor argument) runs the checks above and ``kernel[grid]``; the compiled launch is kept
(``kda_kernels.launch_cache``) and later calls of that signature skip the checks the signature decides and Triton's
dispatch: exact ``torch.Tensor`` inputs on CUDA, 16-byte aligned, no autograd recording and not under
``torch.compile`` tracing are checked on every call; anything else takes the checked path.

Importing this module builds nothing and needs no GPU; Triton compiles on the first call.
"""

from __future__ import annotations

import numbers

import torch

from kda_kernels import lazy_baseline
from kda_kernels.launch_cache import LaunchCache, current_device, may_repeat, runs_here

from .qknorm_rope import launch

_X_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
_CACHE_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
_POS_DTYPES = (torch.int32, torch.int64)
_HEAD_DIMS = (64, 128, 256)

_sglang_qknorm_rope = lazy_baseline("fused_inplace_qknorm_rope")

LAUNCHES = LaunchCache()  # signature -> the compiled launch of its first (checked) call


def _signature(q: torch.Tensor, k: torch.Tensor, q_weight: torch.Tensor, k_weight: torch.Tensor,
               cache: torch.Tensor, positions: torch.Tensor, *extra: object) -> tuple[object, ...] | None:
    """What the contract checks and the launch plan depend on, for exact CUDA tensors; None otherwise."""
    tensors = (q, k, q_weight, k_weight, cache, positions)
    if any(t.__class__ is not torch.Tensor for t in tensors) or not q.is_cuda:
        return None
    return (*((t.shape, t.stride(), t.dtype, t.device) for t in tensors), current_device(), *extra)



def fused_inplace_qknorm_rope(q: torch.Tensor, k: torch.Tensor, q_weight: torch.Tensor, k_weight: torch.Tensor,
                              cos_sin_cache: torch.Tensor, positions: torch.Tensor, *, is_neox: bool,
                              eps: float = 1e-6, head_dim: int = 0, rope_dim: int = 0,
                              round_norm_before_rope: bool = False, cache_has_full_width: bool = False) -> None:
    key = None
    if not round_norm_before_rope and is_neox.__class__ is bool and cache_has_full_width.__class__ is bool:
        key = _signature(q, k, q_weight, k_weight, cos_sin_cache, positions, is_neox, eps, head_dim, rope_dim,
                         cache_has_full_width)
    kept = LAUNCHES.get(key) if key is not None else None
    if kept is not None and may_repeat(q, k, q_weight, k_weight, cos_sin_cache, positions):
        kept(q, k, q_weight, k_weight, cos_sin_cache, positions)
        return None
    return _checked(q, k, q_weight, k_weight, cos_sin_cache, positions, is_neox, eps, head_dim, rope_dim,
                    round_norm_before_rope, cache_has_full_width, key)




def rope_width(head_dim: int, cache_width: int, rope_dim: int, is_neox: bool, full_width: bool) -> int:
    """SGLang's rope_dim (its wrapper's default, its template's asserts), or 0 where the kernel does not take it."""
    rope = rope_dim or (cache_width // 2 if full_width else cache_width)
    lane = head_dim // 32  # elements per lane of SGLang's warp kernel
    if rope <= 0 or rope > head_dim or rope % lane or cache_width != (2 * rope if full_width else rope):
        return 0
    if is_neox and (rope // lane < 2 or (rope // lane) % 2):
        return 0
    return rope


def _overlapping(t: torch.Tensor) -> bool:
    return any(size > 1 and stride == 0 for size, stride in zip(t.shape[:-1], t.stride()[:-1], strict=True))


def _in_contract(q: object, k: object, q_weight: object, k_weight: object, cache: object, positions: object,
                 is_neox: object, eps: object, head_dim: object, rope_dim: object, round_norm: object,
                 full_width: object) -> int:
    """The rope width the kernel runs the call with, or 0 when the call goes to SGLang."""
    if not all(isinstance(t, torch.Tensor) for t in (q, k, q_weight, k_weight, cache, positions)):
        return 0
    if not (isinstance(is_neox, bool) and isinstance(round_norm, bool) and isinstance(full_width, bool)):
        return 0
    if round_norm or not isinstance(eps, numbers.Real) or isinstance(eps, bool):
        return 0
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in (head_dim, rope_dim)):
        return 0
    assert isinstance(q, torch.Tensor) and isinstance(k, torch.Tensor)  # for the type checker
    assert isinstance(q_weight, torch.Tensor) and isinstance(k_weight, torch.Tensor)
    assert isinstance(cache, torch.Tensor) and isinstance(positions, torch.Tensor)
    if q.dim() != 3 or k.dim() != 3 or q.dtype not in _X_DTYPES or k.dtype != q.dtype:
        return 0
    n, hq, d = q.shape
    if k.shape[0] != n or k.shape[2] != d or d not in _HEAD_DIMS or head_dim not in (0, d):
        return 0
    if q.stride(2) != 1 or k.stride(2) != 1 or _overlapping(q) or _overlapping(k):
        return 0
    if hq > 1 and k.shape[1] > 1 and q.stride(1) != k.stride(1):
        return 0
    for w in (q_weight, k_weight):
        if w.dim() != 1 or w.shape[0] != d or w.dtype != q.dtype or not w.is_contiguous():
            return 0
    if positions.dim() != 1 or positions.shape[0] != n or positions.dtype not in _POS_DTYPES \
            or not positions.is_contiguous():
        return 0
    if cache.dim() != 2 or cache.dtype not in _CACHE_DTYPES or not cache.is_contiguous() or cache.shape[0] == 0:
        return 0
    if not runs_here(q, k, q_weight, k_weight, cache, positions):
        return 0
    return rope_width(d, cache.shape[1], rope_dim, is_neox, full_width)


def _checked(q: torch.Tensor, k: torch.Tensor, q_weight: torch.Tensor, k_weight: torch.Tensor,
             cache: torch.Tensor, positions: torch.Tensor, is_neox: bool, eps: float, head_dim: int, rope_dim: int,
             round_norm: bool, full_width: bool, key: tuple[object, ...] | None) -> None:
    rope = _in_contract(q, k, q_weight, k_weight, cache, positions, is_neox, eps, head_dim, rope_dim, round_norm,
                        full_width)
    if not rope:
        return _sglang_qknorm_rope(q, k, q_weight, k_weight, cache, positions, is_neox=is_neox, eps=eps,
                                   head_dim=head_dim, rope_dim=rope_dim, round_norm_before_rope=round_norm,
                                   cache_has_full_width=full_width)
    if q.shape[0] == 0 or q.shape[1] + k.shape[1] == 0:
        return None
    kept = launch(q, k, q_weight, k_weight, cache, positions, float(eps), rope, is_neox, full_width)
    if key is not None and may_repeat(q, k, q_weight, k_weight, cache, positions):
        LAUNCHES.keep(key, kept)
    return None


EXPORTS = {
    "fused_inplace_qknorm_rope": fused_inplace_qknorm_rope,
}
