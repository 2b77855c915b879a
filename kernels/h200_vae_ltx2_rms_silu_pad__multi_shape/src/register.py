"""Candidate: one Triton kernel per LTX-2 VAE conv input (conv_input.py: numerics, byte model and bound beside
the kernel), and the LTX-2 VAE decoder fast path built on it (fast_path.py, FAST_PATHS below; the overlay
installs it).

Contract (prompt.md K): ``ltx2_rms_silu_pad(x, pad, eps)`` and ``ltx2_pad_cast(x, pad)``, x ``[B, C, T, H, W]``
bf16/fp32/fp16 with any strides, pad six non-negative ints in F.pad order (the H/W reflect pads smaller than H/W);
the output is bf16 channels_last_3d. Outside the contract (another rank or dtype, a pad the reflection cannot
make, an empty x, C above ``conv_input.MAX_C``, a frame past int32 offsets (``conv_input.fits``), autograd recording, a device that is neither CUDA nor the CPU
under the Triton interpreter) the call is SGLang's chain (chain.py, a copy of the family module's baselines).

Importing this module builds nothing and needs no GPU; Triton compiles on the first CUDA call.
"""

from __future__ import annotations

import os

import torch

from .chain import sglang_chain
from .conv_input import MAX_C, fits, launch
from .fast_path import FAST_PATH

_DTYPES = (torch.bfloat16, torch.float32, torch.float16)
EPS = 1e-8


def padded_shape(x: object, pad: object) -> tuple[int, ...] | None:
    """The output shape when (x, pad) is inside this kernel's contract, else None (SGLang's chain runs)."""
    if not isinstance(x, torch.Tensor) or x.dim() != 5 or x.dtype not in _DTYPES or x.numel() == 0:
        return None
    if not isinstance(pad, (list, tuple)) or len(pad) != 6:
        return None
    if not all(isinstance(p, int) and not isinstance(p, bool) and p >= 0 for p in pad):
        return None
    if torch.is_grad_enabled() and x.requires_grad:
        return None
    if not (x.is_cuda or (x.device.type == "cpu" and os.environ.get("TRITON_INTERPRET") == "1")):
        return None
    wl, wr, ht, hb, tf, tb = pad
    b, c, t, h, w = x.shape
    if c > MAX_C or max(wl, wr) >= w or max(ht, hb) >= h:
        return None  # reflection pads must be smaller than the size they pad (F.pad refuses them too)
    if not fits(x, tuple(pad)):
        return None
    return b, c, t + tf + tb, h + ht + hb, w + wl + wr


def conv_input(x: torch.Tensor, pad: tuple[int, ...], norm: bool, eps: float = EPS) -> torch.Tensor | None:
    """The conv input in bf16 channels_last_3d, or None outside the kernel's contract."""
    shape = padded_shape(x, pad)
    if shape is None:
        return None
    out = torch.empty(shape, dtype=torch.bfloat16, device=x.device, memory_format=torch.channels_last_3d)
    launch(x, out, tuple(pad), norm, float(eps))
    return out


def ltx2_rms_silu_pad(x: torch.Tensor, pad: list[int], eps: float = EPS) -> torch.Tensor:
    out = conv_input(x, pad, True, eps)
    return sglang_chain(x, pad, True, eps) if out is None else out


def ltx2_pad_cast(x: torch.Tensor, pad: list[int]) -> torch.Tensor:
    out = conv_input(x, pad, False)
    return sglang_chain(x, pad, False, EPS) if out is None else out


# Module-level fast paths the overlay installs (kda_kernels.registry.FAST_PATHS): install(serves) / uninstall().
FAST_PATHS = {FAST_PATH.name: FAST_PATH}

EXPORTS = {
    "ltx2_rms_silu_pad": ltx2_rms_silu_pad,
    "ltx2_pad_cast": ltx2_pad_cast,
}
