"""One Triton kernel for the input of each causal conv of SGLang's LTX-2 VAE decoder: per-voxel RMSNorm over the
channels (fp32), SiLU, the temporal replicate pad and the H/W reflect pad, written once in bf16 channels_last_3d.

Numerics (the family module lists SGLang's rounding points): x is read in its dtype and widened to fp32 exactly;
``x*x`` is exact in fp32; the channel sum is one ``tl.sum`` over the voxel's C values in fp32 (Triton's tree
order, not torch's reduce order: the one place the result can differ from SGLang, by an fp32 ulp of the sum);
``mean = sum * (1/C)`` as torch's CUDA mean does (an fp32 factor; exact for power-of-two C), then ``+ eps``
as a separate rounding (the kernel is compiled without FMA contraction),
``sqrt_rn``, ``x / rms`` and SiLU's ``y / (1 + exp(-y))`` with ``div_rn`` are IEEE-rounded fp32 operations
(Triton's default ``/`` and ``tl.sqrt`` are approximate on NVIDIA GPUs: no fast math here). ``x / rms`` is
Markstein's division by the voxel's correctly rounded reciprocal (``r = 1/rms`` once per voxel, ``q0 = x*r``,
the exact remainder ``fma(-q0, rms, x)``, ``fma(remainder, r, q0)``, x's sign bit): the correctly rounded
quotient wherever the remainder does not underflow, so a tile holding a nonzero |x| below 2^-100 or a
non-finite rms (an inf in x, squares past the fp32 range) takes ``div_rn`` (dev/markstein_check.py checks the
step bit for bit; docs/notes.md). ``exp`` is
libdevice's ``__nv_expf``, the CUDA math library's ``expf`` that torch's SiLU kernel calls. The one rounding to
bf16 is round-to-nearest-even done on the fp32 bits (``_round_bf16``), identical to ``cvt.rn.bf16.f32`` and
torch's cast for finite values, and also correct in Triton's CPU interpreter, whose fp32 -> bf16 cast truncates.
bf16 x is read through an int16 view for the same reason (its widening is a 16-bit shift).

Byte model and bound (per call; H200 HBM3e peak 4.8 TB/s, the lab's measured copy ceiling about 4.29 TB/s):
x is read once (2 bytes per element in bf16, 4 for the fp32 latent) and the padded output written once (2 bytes
per element of ``[B, C, T+tf+tb, H+ht+hb, W+wl+wr]``); every voxel's C values are one tile row, so the norm
needs no second pass over x. A source voxel on the border is read again for each padded copy of it
((T+2)(H+2)(W+2)/(THW) of x: 1.05x on the largest rows, up to 2.7x on the 2-row tiles); those re-reads hit L2.
SGLang's chain moves about 46 bytes per element of x (pow: 2 read + 4 written; mean: 4; x / rms: 2 + 4; SiLU,
the temporal pad and the reflect pad: 4 + 4 each; autocast's cast: 4 + 2) against 4 here, about 11x; the
production rows' total is 28.5 GB per decode, 5.9 ms at 4.8 TB/s (task.toml notes).

The bound that binds is the issue rate, not the bytes (docs/notes.md): at the H200's copy ceiling the kernel has
about 31 instructions per element; c003 took 78 (two IEEE divisions and int64 voxel arithmetic), this one 54
(static sm_90a count of the Markstein path, dev/sass_mix.py; the pad-and-cast kernel 28 -> 12).

Tiles: [BLOCK_V voxels, BLOCK_C = next_pow2(C) channels], BLOCK_V * BLOCK_C about 4096 elements, on a grid of
(output frames, blocks of H x W voxels): the voxel arithmetic is int32 (``fits``: every offset inside a frame
of x and a plane of the output below 2^31), the frame and plane bases int64 once per program. C above MAX_C,
or a frame past int32 offsets, is outside this kernel's contract (register.py falls back).
Not tuned yet: an NCDHW x (the first resnet after each upsampler, 1 call in 10) is read with loads strided by
T*H*W along the tile's channels; staging it through shared memory is the next step if its rows lag.
"""

from __future__ import annotations

import os

import torch
import triton
import triton.language as tl
from triton.language.extra import libdevice

MAX_C = 4096
# Triton contracts a * b + c into one FMA by default (one rounding where SGLang's mean * (1/C) + eps has two):
# compile without it (the interpreter takes no compile options and rounds each operation anyway)
TILE_ELEMENTS = 4096
_INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"

_NO_FMA: dict[str, bool] = {} if _INTERPRET else {"enable_fp_fusion": False}

if _INTERPRET:
    @triton.jit
    def _exp(x):
        # the interpreter binds no libdevice; its tl.exp is numpy's (CPU runs are checked against the tolerance)
        return tl.exp(x)
else:
    @triton.jit
    def _exp(x):
        return libdevice.exp(x)


@triton.jit
def _reflect(i, n):
    i = tl.abs(i)
    return tl.where(i > n - 1, 2 * (n - 1) - i, i)


@triton.jit
def _round_bf16(y):
    """bf16 bits (in int32) of fp32 y, round to nearest even; NaN -> the canonical quiet NaN."""
    u = y.to(tl.uint32, bitcast=True)
    r = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    r = tl.where(y != y, 0x7FC0, r)
    return r.to(tl.int32)


@triton.jit
def _conv_input_kernel(x_ptr, out_ptr, C, T, H, W, To, HWo, Wo,
                       sxb, sxc, sxt, sxh, sxw, wl, ht, tf, inv_c, eps,
                       NORM: tl.constexpr, X_BF16: tl.constexpr, BLOCK_V: tl.constexpr, BLOCK_C: tl.constexpr):
    # program (plane, block): plane = b * To + to, one output frame; the block's voxels run along H x W in the
    # output's memory order. Per-voxel arithmetic is int32 (launch() keeps every in-plane offset below 2^31);
    # the plane's bases are int64, once per program.
    plane = tl.program_id(0)
    to = plane % To
    b = plane // To
    ti = tl.minimum(tl.maximum(to - tf, 0), T - 1)  # replicate: frame 0 in front, the last frame behind
    x_base = b.to(tl.int64) * sxb + ti.to(tl.int64) * sxt
    out_base = plane.to(tl.int64) * HWo * C
    v = tl.program_id(1) * BLOCK_V + tl.arange(0, BLOCK_V)  # voxel within the output plane
    c = tl.arange(0, BLOCK_C)
    vm = v < HWo
    cm = c < C
    ho = v // Wo
    wo = v - ho * Wo
    hi = _reflect(ho - ht, H)
    wi = _reflect(wo - wl, W)
    offs = (hi * sxh + wi * sxw)[:, None] + c[None, :] * sxc
    m = vm[:, None] & cm[None, :]
    if X_BF16:
        bits = tl.load(x_ptr + x_base + offs, mask=m, other=0).to(tl.int32) & 0xFFFF
        x = (bits << 16).to(tl.float32, bitcast=True)
    else:
        x = tl.load(x_ptr + x_base + offs, mask=m, other=0.0).to(tl.float32)
    if NORM:
        s = tl.sum(x * x, axis=1)
        rms = tl.sqrt_rn(s * inv_c + eps)
        # x / rms, correctly rounded. Markstein: with r = RN(1/rms) and q0 = RN(x*r), q0 + RN(x - q0*rms) * r
        # rounds to RN(x/rms) whenever the remainder is exact, which fails only where it underflows (|x| below
        # about 2^-103: dev/markstein_check.py); such a tile, or one with a non-finite rms, divides.
        ax = tl.abs(x)
        tiny = tl.min(tl.where(ax == 0.0, 1.0, ax))
        if (tiny >= 7.888609052210118e-31) & (tl.max(rms) < float("inf")):  # 2^-100
            r = tl.div_rn(1.0, rms)[:, None]
            q0 = x * r
            q = tl.fma(q0 * -1.0, rms[:, None], x)
            q = tl.fma(q, r, q0)
            sign = x.to(tl.uint32, bitcast=True) & 0x80000000  # x/rms has x's sign (rms > 0), zeros included
            y = ((q.to(tl.uint32, bitcast=True) & 0x7FFFFFFF) | sign).to(tl.float32, bitcast=True)
        else:
            y = tl.div_rn(x, rms[:, None])
        y = tl.div_rn(y, 1.0 + _exp(-y))
    else:
        y = x
    o = v[:, None] * C + c[None, :]
    tl.store(out_ptr + out_base + o, _round_bf16(y).to(tl.int16), mask=m)


def fits(x: torch.Tensor, pad: tuple[int, ...]) -> bool:
    """Whether the kernel's int32 voxel arithmetic holds: every offset inside one frame of x and one plane of the
    padded output below 2^31 (the largest production plane: 2.2 M elements). Callers run SGLang's chain otherwise."""
    wl, wr, ht, hb, _, _ = pad
    _, c, _, h, w = x.shape
    _, sxc, _, sxh, sxw = x.stride()
    return max((h - 1) * sxh + (w - 1) * sxw + (c - 1) * sxc, (h + ht + hb) * (w + wl + wr) * c) < 2 ** 31


def launch(x: torch.Tensor, out: torch.Tensor, pad: tuple[int, ...], norm: bool, eps: float) -> None:
    """Write the conv input of x into ``out`` (bf16, channels_last_3d, the padded shape); ``fits(x, pad)``."""
    wl, _, ht, _, tf, _ = pad
    b, c, t, h, w = x.shape
    _, _, to, ho, wo = out.shape
    sxb, sxc, sxt, sxh, sxw = x.stride()
    block_c = triton.next_power_of_2(c)
    block_v = max(1, min(256, TILE_ELEMENTS // block_c))
    xv = x.view(torch.int16) if x.dtype == torch.bfloat16 else x
    grid = (b * to, triton.cdiv(ho * wo, block_v))
    _conv_input_kernel[grid](xv, out.view(torch.int16), c, t, h, w, to, ho * wo, wo, sxb, sxc, sxt, sxh, sxw,
                             wl, ht, tf, 1.0 / c, eps, NORM=norm, X_BF16=x.dtype == torch.bfloat16,
                             BLOCK_V=block_v, BLOCK_C=block_c, **_NO_FMA)
