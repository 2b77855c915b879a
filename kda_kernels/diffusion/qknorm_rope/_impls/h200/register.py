"""Candidate c009: fused in-place QK RMSNorm + RoPE as a CUDA kernel for the H200 (sm_90a): c008's kernel, taking
only the calls of >= 65536 rows (N x (Hq + Hk)), where it beat SGLang on the H200; smaller calls go to SGLang
(``kernel_pays`` in qknorm_rope_contract.h, measured reasons beside it).

Sources: qknorm_rope_core.cuh (the per-thread code, its byte model and bound, the launch plan; shared with the CPU
emulator of tests/emu), qknorm_rope.cu (kernels, PDL launch), qknorm_rope_contract.h (which calls the kernel
takes), qknorm_rope_binding.cpp (torch binding). docs/notes.md: the analysis of SGLang's kernel and this design.

The kernel's contract (qknorm_rope_contract.h; everything else goes to SGLang's own function, captured through
``lazy_baseline`` from its defining module, which also raises where SGLang raises):

- ``round_norm_before_rope=False`` (True: SGLang's bits are the contract, handed to SGLang);
- q ``[N,Hq,D]`` and k ``[N,Hk,D]`` of one dtype, fp16 or bf16, D in {64, 128, 256}, ``head_dim`` 0 or D, last
  stride 1, rows 16-byte aligned and apart (token and head strides multiples of 8 elements, no overlap), SGLang's
  one head stride where both have more than one head; N x (Hq + Hk) < 2^31;
- weights ``[D]`` contiguous in q's dtype; positions ``[N]`` int32/int64 contiguous; cos_sin_cache ``[P, W]``
  contiguous, fp32 or q's dtype, 0 < P < 2^31, 16-byte aligned; ``rope_dim = rope_dim or (W // 2 if full width else W)``
  valid for SGLang (``0 < rope_dim <= D``, ``W == (2 if full width else 1) * rope_dim``, ``rope_dim % (D/32) == 0``,
  NeoX: an even lane count) and for this kernel's 8-element lanes: ``rope_dim % 8 == 0`` (NeoX: ``rope_dim / 2``);
- every tensor on one CUDA device that is the current one, of compute capability 9.0; no autograd recording;
  exact ``torch.Tensor`` (or ``nn.Parameter``) objects, flags of type bool, not under ``torch.compile`` tracing.

N == 0 or Hq + Hk == 0: nothing to do, returns (SGLang returns early too).

Host path: the Python checks above that need no tensor attribute (classes, flag types, compile state), then one
pybind11 call; the binding reads sizes, strides, dtypes and devices in C++, decides, and launches with
cudaLaunchKernelEx on torch's current stream, or returns False (then SGLang runs). No signature cache, no
allocation, no synchronization.

Build: the extension (kda_kernels.prebuilt.Extension, named by the sources' hash) builds on the first CUDA call
in the lab (``src/`` imported by the harness). Imported as the exported overlay copy
(``kda_kernels.diffusion...``) it never compiles inside a serving process: a missing build sends every call to
SGLang until ``python -m kda_kernels build`` has run. Importing this module builds nothing and needs no GPU.
"""

from __future__ import annotations

import hashlib
import os
from typing import Any

import torch

from kda_kernels import lazy_baseline
from kda_kernels.prebuilt import Extension

_HERE = os.path.dirname(os.path.abspath(__file__))
_SOURCES = ("qknorm_rope.cu", "qknorm_rope_binding.cpp")
_HEADERS = ("qknorm_rope_core.cuh", "qknorm_rope_contract.h", "qknorm_rope_launch.h")


def _source_hash() -> str:
    h = hashlib.sha256()
    for name in _SOURCES + _HEADERS:
        with open(os.path.join(_HERE, name), "rb") as f:
            h.update(name.encode() + b"\0" + f.read())
    return h.hexdigest()[:12]


# The exported copy is imported as kda_kernels.diffusion.<family>._impls.h200.register: serving code, where a
# first call must never start nvcc.
_BUILD_ON_FIRST_USE = not __name__.startswith("kda_kernels.")

EXTENSION = Extension(
    name=f"kda_h200_qknorm_rope_{_source_hash()}",
    arch="h200",
    sources=tuple(os.path.join(_HERE, s) for s in _SOURCES),
    include_paths=(_HERE,),
    cflags=("-O3", "-std=c++20"),
    cuda_cflags=("-O3", "-std=c++20", "-gencode=arch=compute_90a,code=sm_90a"),
)

_sglang_qknorm_rope = lazy_baseline("fused_inplace_qknorm_rope")

_TENSORS = (torch.Tensor, torch.nn.Parameter)
_is_compiling = torch.compiler.is_compiling
_ext: Any = None  # the extension module, once a CUDA call has loaded it
_ext_tried = False

# flags of the binding's call: bit 0 is_neox, bit 1 cache_has_full_width; dev knobs (dev/sweep.py) above
FLAG_NEOX, FLAG_FULL_WIDTH = 1, 2
PIPE_SHIFT, GRID_SHIFT, FLAG_EARLY_TRIGGER = 4, 8, 1 << 12
FLAG_FORCE_KERNEL = 1 << 13  # the dev knobs time the kernel on every call, small ones included


def load_extension(verbose: bool = False) -> Any:
    """The CUDA extension module, or None where it is not built and this copy may not build it."""
    global _ext, _ext_tried
    if _ext is None:
        _ext = EXTENSION.module or EXTENSION.load(build=_BUILD_ON_FIRST_USE, verbose=verbose)
    _ext_tried = True
    return _ext


def fused_inplace_qknorm_rope(q: torch.Tensor, k: torch.Tensor, q_weight: torch.Tensor, k_weight: torch.Tensor,
                              cos_sin_cache: torch.Tensor, positions: torch.Tensor, *, is_neox: bool,
                              eps: float = 1e-6, head_dim: int = 0, rope_dim: int = 0,
                              round_norm_before_rope: bool = False, cache_has_full_width: bool = False) -> None:
    ext = _ext
    if ext is None and not _ext_tried and isinstance(q, torch.Tensor) and q.is_cuda:
        ext = load_extension()  # the first CUDA call (the lab builds here; a serving copy only loads)
    if (ext is not None and round_norm_before_rope is False and is_neox.__class__ is bool
            and cache_has_full_width.__class__ is bool and q.__class__ in _TENSORS and k.__class__ in _TENSORS
            and q_weight.__class__ in _TENSORS and k_weight.__class__ in _TENSORS
            and cos_sin_cache.__class__ in _TENSORS and positions.__class__ in _TENSORS and not _is_compiling()):
        try:
            if ext.qknorm_rope(q, k, q_weight, k_weight, cos_sin_cache, positions, eps, head_dim, rope_dim,
                               is_neox + FLAG_FULL_WIDTH * cache_has_full_width):
                return None
        except TypeError:  # an eps, head_dim or rope_dim pybind11 does not convert: SGLang's call to answer
            pass
    return _sglang_qknorm_rope(q, k, q_weight, k_weight, cos_sin_cache, positions, is_neox=is_neox, eps=eps,
                               head_dim=head_dim, rope_dim=rope_dim, round_norm_before_rope=round_norm_before_rope,
                               cache_has_full_width=cache_has_full_width)


def _knob_flags(is_neox: bool, full_width: bool, pipe: int, grid: int, early_trigger: bool) -> int:
    assert pipe in (0, 1, 2) and grid in (0, 1, 2)
    return (int(is_neox) + FLAG_FULL_WIDTH * int(full_width) + (pipe << PIPE_SHIFT) + (grid << GRID_SHIFT)
            + (FLAG_EARLY_TRIGGER if early_trigger else 0) + FLAG_FORCE_KERNEL)


def run_variant(q: torch.Tensor, k: torch.Tensor, q_weight: torch.Tensor, k_weight: torch.Tensor,
                cos_sin_cache: torch.Tensor, positions: torch.Tensor, *, is_neox: bool, eps: float = 1e-6,
                rope_dim: int = 0, cache_has_full_width: bool = False, pipe: int = 0, grid: int = 0,
                early_trigger: bool = False) -> None:
    """The kernel with the dev knobs of dev/sweep.py (pipe 2: the double-buffered kernel; grid 1: one row per
    group, no persistent loop, 2: half the resident CTAs; launch_dependents first); raises for a call outside the
    contract (no SGLang fallback here)."""
    ext = load_extension()
    flags = _knob_flags(is_neox, cache_has_full_width, pipe, grid, early_trigger)
    if ext is None or not ext.qknorm_rope(q, k, q_weight, k_weight, cos_sin_cache, positions, eps, 0, rope_dim,
                                          flags):
        raise ValueError("qknorm_rope c009: the call is outside the kernel's contract")


def launch_plan(q: torch.Tensor, k: torch.Tensor, q_weight: torch.Tensor, k_weight: torch.Tensor,
                cos_sin_cache: torch.Tensor, positions: torch.Tensor, *, is_neox: bool, rope_dim: int = 0,
                cache_has_full_width: bool = False, pipe: int = 0, grid: int = 0) -> dict[str, int]:
    """What the kernel would launch for this call (empty outside the contract): double buffer (0/1), rows per
    group, rows, CTAs, resident CTAs per SM of the launched kernel, step_head."""
    ext = load_extension()
    flags = _knob_flags(is_neox, cache_has_full_width, pipe, grid, False)
    out = [] if ext is None else ext.plan(q, k, q_weight, k_weight, cos_sin_cache, positions, 1e-6, 0, rope_dim,
                                          flags)
    keys = ("pipe", "rounds", "n_rows", "blocks", "ctas_per_sm", "step_head")
    return dict(zip(keys, out, strict=True)) if out else {}


EXPORTS = {
    "fused_inplace_qknorm_rope": fused_inplace_qknorm_rope,
}
