"""Candidate c006: replicate-pad kernels and the HunyuanVideo VAE decoder fast path built on them (fast_path.py,
FAST_PATHS below; the overlay installs it). c004 with one change: ``replicate_pad3d`` on an sm_90 CUDA device runs
pad_stage.cu (CUDA, sm_90a: source rows staged in shared memory with cp.async, aligned 16-byte output vectors; its
byte model and bound in its header), through pad_stage_binding.cpp, which answers with a code instead of raising;
any call it does not launch runs c004's Triton kernel (pad_kernels.py), as does everything that is not CUDA.
``replicate_pad3d_channels_last`` and the fast path are c004's, unchanged.

Contract (prompt.md K): ``(x, pad) -> Tensor``, x ``[B, C, T, H, W]`` fp16/bf16/fp32 with any strides, pad six
non-negative ints in F.pad order; the output is bit-identical to ``F.pad(x, pad, mode="replicate")``, contiguous
NCDHW for ``replicate_pad3d`` and channels_last_3d for ``replicate_pad3d_channels_last``. Outside the contract
(another rank, dtype or pad length, negative pads, an empty x, autograd recording, a device that is neither
CUDA nor the CPU under the Triton interpreter; for ``replicate_pad3d`` also a non-contiguous x, whose output
layout F.pad chooses per device, and CUDA outputs under 1 MiB, where F.pad's own kernel is faster) the call
is SGLang's own: ``F.pad(x, pad, mode="replicate")``
(then ``.contiguous(memory_format=torch.channels_last_3d)`` for the channels-last variant).

Importing this module builds nothing and needs no GPU; Triton compiles on the first CUDA call. The CUDA extension
(kda_kernels.prebuilt.Extension, named by its sources' hash) is built on the first CUDA call of the task-folder
copy (the lab; a failed build raises there, since a silent fallback would be measured as c006); the exported
overlay copy never compiles: without a prebuilt binary (``python -m kda_kernels build``) its plain pad stays on
the Triton kernel.
"""

from __future__ import annotations

import hashlib
import os
from typing import Any

import torch
import torch.nn.functional as F

from kda_kernels.prebuilt import Extension

from .fast_path import FAST_PATH
from .pad_kernels import launch_ncdhw, launch_ndhwc

_DTYPES = (torch.float16, torch.bfloat16, torch.float32)

_HERE = os.path.dirname(os.path.abspath(__file__))
_CUDA_SOURCES = ("pad_stage.cu", "pad_stage_binding.cpp")
_CUDA_HEADERS = ("pad_stage_core.cuh", "pad_vec_core.cuh")



def _source_hash() -> str:
    """12 hex digits of sha256 over each CUDA file's name and bytes: a changed source gets a new extension name,
    so a stale binary in the build cache never loads."""
    h = hashlib.sha256()
    for name in _CUDA_SOURCES + _CUDA_HEADERS:
        with open(os.path.join(_HERE, name), "rb") as f:
            h.update(name.encode() + b"\0" + f.read())
    return h.hexdigest()[:12]


EXTENSION = Extension(
    name=f"kda_h200_pad_stage_{_source_hash()}",
    arch="h200",
    sources=tuple(os.path.join(_HERE, s) for s in _CUDA_SOURCES),
    include_paths=(_HERE,),
    cflags=("-O3", "-std=c++17"),
    cuda_cflags=("-O3", "-std=c++17", "-gencode=arch=compute_90a,code=sm_90a"),
)
# The exported copy is imported as kda_kernels.diffusion.replicate_pad3d._impls.h200.register: serving code, where
# a first call must never start nvcc (it only loads a prebuilt binary). The lab's task-folder copy builds.
_BUILD_ON_FIRST_USE = not __name__.startswith("kda_kernels.")
_ext: Any = None  # the extension module, once a CUDA call has loaded it
_ext_tried = False
_sm90: dict[int, bool] = {}


def load_extension(verbose: bool = False) -> Any:
    """The extension module, or None where it is not built and this copy may not build it (the Triton kernel then
    serves every call). Tried once; in the lab a failed build raises: a silent fallback would be measured as c006."""
    global _ext, _ext_tried
    if _ext is None and not _ext_tried:
        _ext_tried = True
        _ext = EXTENSION.module or EXTENSION.load(build=_BUILD_ON_FIRST_USE, verbose=verbose)
    return _ext


def _on_cuda(x: torch.Tensor) -> bool:
    """x is a CUDA tensor (one place, so the CPU tests can stand CPU tensors in for CUDA ones)."""
    return x.is_cuda


def _stage_ext(x: torch.Tensor) -> Any:
    """pad_stage's extension module for a CUDA x on a compute-capability 9.0 device, else None (the Triton kernel
    runs). Other devices never load it: the build is sm_90a only, and the lab must not build it for nothing."""
    idx = x.device.index if x.device.index is not None else torch.cuda.current_device()
    ok = _sm90.get(idx)
    if ok is None:
        ok = _sm90[idx] = torch.cuda.get_device_capability(idx) == (9, 0)
    if not ok:
        return None
    return _ext if _ext_tried else load_extension()


def _padded_shape(x: torch.Tensor, pad: object) -> tuple[int, ...] | None:
    """The output shape when (x, pad) is inside this kernel's contract, else None (SGLang's F.pad runs)."""
    if not isinstance(x, torch.Tensor) or x.dim() != 5 or x.dtype not in _DTYPES or x.numel() == 0:
        return None
    if not isinstance(pad, (list, tuple)) or len(pad) != 6:
        return None
    if not all(isinstance(p, int) and not isinstance(p, bool) and p >= 0 for p in pad):
        return None
    if torch.is_grad_enabled() and x.requires_grad:
        return None  # F.pad records the backward; this kernel does not
    if not (x.is_cuda or (x.device.type == "cpu" and os.environ.get("TRITON_INTERPRET") == "1")):
        return None
    wl, wr, hl, hr, tl, tr = pad
    b, c, t, h, w = x.shape
    return b, c, t + tl + tr, h + hl + hr, w + wl + wr


# Below this many output bytes the plain pad is SGLang's F.pad: on the H200 (run 20261125-043459-7699c5) its
# native kernel took 1.7-2.7 us on the 0.06-0.42 MB rows against this kernel's 2.3-3.0 us (0.73-0.92x); from
# 4 MB up this kernel wins 2.2x. The channels-last variant wins on every row (it saves the layout copy too).
# c006 keeps the rule: those rows are launch-bound (a 0.4 MB pad moves in ~0.1 us at the copy bound), so the CUDA
# kernel's better bandwidth cannot pay for a launch there either; no H200 measurement of it below 1 MiB yet.
PLAIN_MIN_OUT_BYTES = 1 << 20


def replicate_pad3d(x: torch.Tensor, pad: list[int]) -> torch.Tensor:
    shape = _padded_shape(x, pad)
    if shape is None or not x.is_contiguous():  # a strided x: F.pad picks the output layout per device
        return F.pad(x, pad, mode="replicate")
    on_cuda = _on_cuda(x)
    if on_cuda and x.element_size() * shape[0] * shape[1] * shape[2] * shape[3] * shape[4] < PLAIN_MIN_OUT_BYTES:
        return F.pad(x, pad, mode="replicate")
    out = torch.empty(shape, dtype=x.dtype, device=x.device)
    if on_cuda:
        ext = _stage_ext(x)
        # 0: pad_stage.cu wrote out; any other code (a shape, layout or device it does not take, a launch it
        # refused) leaves the whole of out to the Triton kernel below
        if ext is not None and ext.pad(x, out, pad[0], pad[2], pad[4]) == 0:
            return out
    launch_ncdhw(x, out, tuple(pad))
    return out


def replicate_pad3d_channels_last(x: torch.Tensor, pad: list[int]) -> torch.Tensor:
    shape = _padded_shape(x, pad)
    if shape is None:
        return F.pad(x, pad, mode="replicate").contiguous(memory_format=torch.channels_last_3d)
    out = torch.empty(shape, dtype=x.dtype, device=x.device, memory_format=torch.channels_last_3d)
    launch_ndhwc(x, out, tuple(pad))
    return out


# Module-level fast paths the overlay installs (kda_kernels.registry.FAST_PATHS): install(serves) / uninstall().
FAST_PATHS = {FAST_PATH.name: FAST_PATH}

EXPORTS = {
    "replicate_pad3d": replicate_pad3d,
    "replicate_pad3d_channels_last": replicate_pad3d_channels_last,
}
