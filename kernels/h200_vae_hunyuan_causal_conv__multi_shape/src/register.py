"""Candidate: Triton replicate-pad kernels (pad_kernels.py: byte model and bound beside the kernels), and the
HunyuanVideo VAE decoder fast path built on them (fast_path.py, FAST_PATHS below; the overlay installs it).

Contract (prompt.md K): ``(x, pad) -> Tensor``, x ``[B, C, T, H, W]`` fp16/bf16/fp32 with any strides, pad six
non-negative ints in F.pad order; the output is bit-identical to ``F.pad(x, pad, mode="replicate")``, contiguous
NCDHW for ``replicate_pad3d`` and channels_last_3d for ``replicate_pad3d_channels_last``. Outside the contract
(another rank, dtype or pad length, negative pads, an empty x, autograd recording, a device that is neither
CUDA nor the CPU under the Triton interpreter; for ``replicate_pad3d`` also a non-contiguous x, whose output
layout F.pad chooses per device, and CUDA outputs under 1 MiB, where F.pad's own kernel is faster) the call
is SGLang's own: ``F.pad(x, pad, mode="replicate")``
(then ``.contiguous(memory_format=torch.channels_last_3d)`` for the channels-last variant).

Importing this module builds nothing and needs no GPU; Triton compiles on the first CUDA call.
"""

from __future__ import annotations

import os

import torch
import torch.nn.functional as F

from .fast_path import FAST_PATH
from .pad_kernels import launch_ncdhw, launch_ndhwc

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
