"""SGLang's conv-input chain as CUDA autocast runs it (the family module's baselines, kept here so the overlay
needs no kda_lab): the fallback of register.py's EXPORTS outside the kernel's contract."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def sglang_chain(x: torch.Tensor, pad: list[int] | tuple[int, ...], norm: bool, eps: float) -> torch.Tensor:
    wl, wr, ht, hb, tf, tb = pad
    h = x
    if norm:  # PerChannelRMSNorm with autocast's fp32 cast of x**2, then SiLU
        rms = torch.sqrt(torch.mean(x.float() ** 2, dim=1, keepdim=True) + eps)
        h = F.silu(x / rms)
    b, c, t, hh, w = h.shape
    out = torch.empty((b, c, t + tf + tb, hh, w), dtype=h.dtype, device=h.device,
                      memory_format=torch.channels_last_3d)
    out[:, :, tf: tf + t].copy_(h)
    if tf:
        out[:, :, :tf].copy_(h[:, :, :1])
    if tb:
        out[:, :, tf + t:].copy_(h[:, :, -1:])
    out = F.pad(out.permute(0, 2, 3, 4, 1), (0, 0, wl, wr, ht, hb), mode="reflect").permute(0, 4, 1, 2, 3)
    return out.to(torch.bfloat16)
