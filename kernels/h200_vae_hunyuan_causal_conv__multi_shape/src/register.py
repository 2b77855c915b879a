"""Candidate: replicate-pad kernels and the HunyuanVideo VAE decoder fast path built on them (fast_path.py,
FAST_PATHS below; the overlay installs it). ``replicate_pad3d`` runs pad_vec.cu on the H200 (CUDA, sm_90a; its
byte model and bound in its header) and the Triton plane kernel elsewhere; ``replicate_pad3d_channels_last`` runs
the Triton kernel of pad_kernels.py.

Contract (prompt.md K): ``(x, pad) -> Tensor``, x ``[B, C, T, H, W]`` fp16/bf16/fp32 with any strides, pad six
non-negative ints in F.pad order; the output is bit-identical to ``F.pad(x, pad, mode="replicate")``, contiguous
NCDHW for ``replicate_pad3d`` and channels_last_3d for ``replicate_pad3d_channels_last``. Outside the contract
(another rank, dtype or pad length, negative pads, an empty x, autograd recording, a device that is neither
CUDA nor the CPU under the Triton interpreter; for ``replicate_pad3d`` also a non-contiguous x, whose output
layout F.pad chooses per device, and CUDA outputs under 1 MiB, where F.pad's own kernel is faster) the call
is SGLang's own: ``F.pad(x, pad, mode="replicate")``
(then ``.contiguous(memory_format=torch.channels_last_3d)`` for the channels-last variant).

Importing this module builds nothing and needs no GPU; Triton compiles on the first CUDA call. The CUDA extension
lives in kda_kernels' build cache under a name that carries its sources' hash (kda_kernels.prebuilt): imported
from the task folder (the lab) the first H200 call builds it; the exported overlay copy never compiles (a missing
build leaves replicate_pad3d on the Triton kernel, and status() says so).
"""

from __future__ import annotations

import hashlib
import os

import torch
import torch.nn.functional as F

from kda_kernels.prebuilt import Extension

from .fast_path import FAST_PATH
from .pad_kernels import launch_ncdhw, launch_ndhwc

_HERE = os.path.dirname(os.path.abspath(__file__))
_CUDA_SOURCES = ("pad_vec.cu", "pad_vec_binding.cpp")


def _cuda_source_hash() -> str:
    h = hashlib.sha256()
    for name in _CUDA_SOURCES:
        with open(os.path.join(_HERE, name), "rb") as f:
            h.update(f.read())
    return h.hexdigest()[:12]


EXTENSION = Extension(
    name=f"kda_h200_pad_vec_{_cuda_source_hash()}",
    arch="h200",
    sources=tuple(os.path.join(_HERE, s) for s in _CUDA_SOURCES),
    cflags=("-O3", "-std=c++17"),
    cuda_cflags=("-O3", "-std=c++17", "-gencode=arch=compute_90a,code=sm_90a"),
)
# The exported copy is imported as kda_kernels....register: serving code, where a first call must never run nvcc.
_BUILD_ON_FIRST_USE = not __name__.startswith("kda_kernels.")
_sm90: dict[int, bool] = {}


def _pad_vec_ext(x: torch.Tensor):
    """pad_vec's extension module where x is on an sm_90 device and the build is there (or may be made), else None."""
    if not x.is_cuda:
        return None
    idx = x.device.index if x.device.index is not None else torch.cuda.current_device()
    ok = _sm90.get(idx)
    if ok is None:
        ok = _sm90[idx] = torch.cuda.get_device_capability(idx) == (9, 0)
    if not ok:
        return None
    return EXTENSION.module or EXTENSION.load(build=_BUILD_ON_FIRST_USE)

_DTYPES = (torch.float16, torch.bfloat16, torch.float32)


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
PLAIN_MIN_OUT_BYTES = 1 << 20


def replicate_pad3d(x: torch.Tensor, pad: list[int]) -> torch.Tensor:
    shape = _padded_shape(x, pad)
    if shape is None or not x.is_contiguous():  # a strided x: F.pad picks the output layout per device
        return F.pad(x, pad, mode="replicate")
    if x.is_cuda and x.element_size() * shape[0] * shape[1] * shape[2] * shape[3] * shape[4] < PLAIN_MIN_OUT_BYTES:
        return F.pad(x, pad, mode="replicate")
    out = torch.empty(shape, dtype=x.dtype, device=x.device)
    ext = _pad_vec_ext(x)
    if ext is not None and shape[0] * shape[1] * shape[2] * shape[3] < 2**31:
        ext.pad_vec(x, out, pad[0], pad[2], pad[4])
    else:
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
