"""The input of every 3x3x3 conv of SGLang 0.5.23's LTX-2 VAE decoder, as the CUDA decode computes it.

SGLang has no function for it. On CUDA the decoding stage decodes a bf16 VAE under ``torch.autocast("cuda",
torch.bfloat16)`` with the module left in its loaded dtype (``DecodingStage.decode_raw`` and LTX-2's
``LTX2AVDecodingStage._decode_video``: ``autocast_context``; ``temporary_module_dtype`` casts the module only
when autocast is off), and the loader puts the conv weights in channels_last_3d on one GPU (``vae_loader``).
In ``models/vaes/ltx_2_vae.py`` every conv input is then made like this:

    # LTX2VideoResnetBlock3d.forward (conv1 and conv2), LTX2VideoDecoder3d.forward (conv_out)
    hidden_states = self.norm1(hidden_states)          # PerChannelRMSNorm, eps 1e-8 (resnet_eps not passed)
    hidden_states = self.nonlinearity(hidden_states)   # nn.SiLU
    hidden_states = self.conv1(hidden_states, causal=causal, ...)

    # PerChannelRMSNorm.forward
    mean_sq = torch.mean(x**2, dim=self.channel_dim, keepdim=True)
    rms = torch.sqrt(mean_sq + self.eps)
    return x / rms

    # LTX2VideoCausalConv3d.forward, weights channels_last_3d, CUDA, padding_mode "reflect"
    hidden_states = self._causal_temporal_pad_channels_last(hidden_states, left, right)
    hidden_states = F.pad(hidden_states.permute(0, 2, 3, 4, 1),
                          (0, 0, width_pad, width_pad, height_pad, height_pad),
                          mode="reflect").permute(0, 4, 1, 2, 3)
    return F.conv3d(hidden_states, self.conv.weight, self.conv.bias, self.conv.stride, 0, ...)

Under CUDA autocast the conv returns bf16; ``x**2`` is on autocast's fp32 list (x is cast to fp32 first), so
the mean, the sqrt, ``x / rms`` (bf16 / fp32 promotes to fp32), SiLU, the temporal replicate pad
(``torch.empty(..., dtype=x.dtype)``, fp32) and the reflection pad all run in fp32, and ``F.conv3d`` casts its
fp32 input to bf16 (autocast's cast keeps the channels_last_3d strides). ``causal``: the LTX-2 decoder is
built with ``decoder_causal=False`` (``LTXVideoVAEArchConfig``), so ``left = right = (k_t - 1) // 2`` = 1; the
causal variant pads ``(k_t - 1, 0)``. The conv_in of the decoder and the upsamplers' convs get the same pads
without the norm: conv_in's input is the fp32 latent, an upsampler's the bf16 output of a residual add.

The two functions are those conv inputs, written once in bf16 channels_last_3d (what the conv reads):

- ``ltx2_rms_silu_pad(x, pad, eps)``: x ``[B, C, T, H, W]`` bf16 (any strides: the conv outputs are
  channels_last_3d, the upsamplers' pixel-shuffled outputs are contiguous NCDHW), ``pad`` six ints in F.pad
  order ``(w_left, w_right, h_top, h_bottom, t_front, t_back)``: W and H reflect (each pad < that size, as
  ``reflection_pad3d`` requires), T replicates (frame 0 in front, the last frame behind), ``eps`` SGLang's
  1e-8. ``out[b, c, t, h, w] = silu(x / sqrt(mean_c(x^2) + eps))`` at ``x[b, c, clamp(t - t_front), reflect(h
  - h_top), reflect(w - w_left)]``, rounded once to bf16, shape ``[B, C, T + t_front + t_back, H + h_top +
  h_bottom, W + w_left + w_right]``, channels_last_3d (:class:`~kda_lab.families.replicate_pad3d.PadContract`
  holds the layout).
- ``ltx2_pad_cast(x, pad)``: the same pads and layout without the norm, ``x`` fp32 (the latent) or bf16:
  ``x_padded.to(torch.bfloat16)``, one rounding of each value, so bit-exact (``exact = true``: bit for bit
  with SGLang; its oracle rounds the same way, so it passes with zero error).

Rounding points of SGLang's CUDA chain for ``ltx2_rms_silu_pad``, per element: ``x`` is bf16; ``x*x`` in fp32
is exact (8-bit significands square into 16 bits); the channel sum is an fp32 reduction in the order of
torch's reduce kernel, which depends on x's layout and the launch configuration; ``mean = sum * (1/C)``
(torch's CUDA MeanOps multiplies by an fp32 factor; exact for LTX-2's power-of-two C); ``+ eps``, ``sqrt``,
``x / rms`` and SiLU's ``x / (1 + exp(-x))`` are each one IEEE fp32 rounding (plus expf's); the pads are
copies; the conv's cast is one round-to-nearest-even to bf16. A kernel with its own channel-sum order can move
the sum by an fp32 ulp, which moves a bf16 output by one ulp when it lies at a rounding boundary: the function
is not exact (the overlay serves it from the ``lossless`` tier). The oracle is fp64 (no rounding); the bf16
tolerance ``rtol = 4e-3`` (2^-8 plus fp32 slack) bounds the one final rounding (half a bf16 ulp is at most
2^-8 of the value) and nothing more: a bf16 RMSNorm (SGLang's CPU path, where autocast keeps ``x**2`` in bf16)
or a pad off by one is rejected (tests/families/test_ltx2_rms_silu_pad.py).

Byte model (:data:`BYTE_MODELS`): x read once, the padded bf16 output written once (``out_like``, which a row
carries for the byte model and :func:`prepare` drops after checking it).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from kda_lab.families.base import Args
from kda_lab.families.replicate_pad3d import PadContract

EPS = 1e-8  # PerChannelRMSNorm's default; SGLang builds every norm of the decoder with it


def check_pad(x: torch.Tensor, pad: Any) -> tuple[int, int, int, int, int, int]:
    """The six pads of the contract for x, or a ValueError saying what is wrong."""
    if x.dim() != 5:
        raise ValueError(f"x must be 5-D [B, C, T, H, W], got shape {list(x.shape)}")
    if not isinstance(pad, (list, tuple)) or len(pad) != 6 or not all(isinstance(p, int) for p in pad):
        raise ValueError("pad must be six ints (w_left, w_right, h_top, h_bottom, t_front, t_back), "
                         f"got {pad!r}")
    wl, wr, ht, hb, tf, tb = pad
    if min(pad) < 0:
        raise ValueError(f"pads must be non-negative, got {list(pad)}")
    _, _, _, h, w = x.shape
    if max(wl, wr) >= w or max(ht, hb) >= h:
        raise ValueError(f"a reflect pad must be smaller than the size it pads: pad {list(pad)} for H {h}, "
                         f"W {w}")
    return wl, wr, ht, hb, tf, tb


def padded_shape(shape: tuple[int, ...], pad: Any) -> tuple[int, int, int, int, int]:
    wl, wr, ht, hb, tf, tb = pad
    b, c, t, h, w = shape
    return b, c, t + tf + tb, h + ht + hb, w + wl + wr


def prepare(args: Args) -> Args:
    """Drop the row's ``out_like`` after checking it is the padded bf16 output (or of x's dtype: the CPU
    interpreter's runs retype every tensor of a row, ``Workload.with_dtype``; the output stays bf16)."""
    if "out_like" not in args:
        return args
    a = dict(args)
    out_like, x = a.pop("out_like"), a["x"]
    want = padded_shape(tuple(x.shape), check_pad(x, a["pad"]))
    if tuple(out_like.shape) != want or out_like.dtype not in (torch.bfloat16, x.dtype):
        raise ValueError(f"row's out_like {out_like.dtype}{list(out_like.shape)} is not the padded bf16 "
                         f"output {list(want)} of x {list(x.shape)} and pad {a['pad']}")
    return a


# ------------------------------------------------------------------------------------------ SGLang's code


def _causal_temporal_pad_channels_last(x: torch.Tensor, left: int, right: int) -> torch.Tensor:
    """``LTX2VideoCausalConv3d._causal_temporal_pad_channels_last`` (no streaming cache), verbatim."""
    b, c, t, h, w = x.shape
    out = torch.empty((b, c, t + left + right, h, w), dtype=x.dtype, device=x.device,
                      memory_format=torch.channels_last_3d)
    out[:, :, left: left + t].copy_(x)
    if left:
        out[:, :, :left].copy_(x[:, :, :1])
    if right:
        out[:, :, left + t:].copy_(x[:, :, -1:])
    return out


def _sglang_pads_and_cast(hidden_states: torch.Tensor, pad: Any) -> torch.Tensor:
    """LTX2VideoCausalConv3d.forward's pads on CUDA with channels_last_3d weights, then the cast autocast's
    ``F.conv3d`` makes of its input (``.to(bfloat16)``, strides kept)."""
    wl, wr, ht, hb, tf, tb = pad
    hidden_states = _causal_temporal_pad_channels_last(hidden_states, tf, tb)
    hidden_states = F.pad(hidden_states.permute(0, 2, 3, 4, 1), (0, 0, wl, wr, ht, hb),
                          mode="reflect").permute(0, 4, 1, 2, 3)
    return hidden_states.to(torch.bfloat16)


def sglang_ltx2_rms_silu_pad(x: torch.Tensor, pad: list[int], eps: float = EPS) -> torch.Tensor:
    """SGLang's norm -> SiLU -> causal-conv pads, with CUDA autocast's casts written out (``x**2`` on its
    fp32 list: x cast to fp32 first; the conv's input cast to bf16), so it computes the CUDA chain on any
    device."""
    mean_sq = torch.mean(x.float() ** 2, dim=1, keepdim=True)
    rms = torch.sqrt(mean_sq + eps)
    hidden_states = x / rms
    hidden_states = F.silu(hidden_states)
    return _sglang_pads_and_cast(hidden_states, pad)


def sglang_ltx2_pad_cast(x: torch.Tensor, pad: list[int]) -> torch.Tensor:
    """SGLang's causal-conv pads of a conv input without a norm (conv_in, the upsamplers), then the cast."""
    return _sglang_pads_and_cast(x, pad)


# ----------------------------------------------------------------------------------------------- oracles


def _source_index(n: int, before: int, after: int, reflect: bool, device: torch.device) -> torch.Tensor:
    """Source index of each padded position along one dimension: reflection (edge not repeated) or
    replicate."""
    i = torch.arange(-before, n + after, device=device)
    if reflect:
        i = i.abs()
        return torch.where(i > n - 1, 2 * (n - 1) - i, i)
    return i.clamp(0, n - 1)


def _gather(y: torch.Tensor, pad: tuple[int, ...]) -> torch.Tensor:
    wl, wr, ht, hb, tf, tb = pad
    _, _, t, h, w = y.shape
    d = y.device
    y = y.index_select(2, _source_index(t, tf, tb, False, d))
    y = y.index_select(3, _source_index(h, ht, hb, True, d))
    return y.index_select(4, _source_index(w, wl, wr, True, d))


def ltx2_rms_silu_pad_oracle(a: Args) -> tuple[torch.Tensor, ...]:
    """fp64: the per-voxel RMS over channels, the division, SiLU, then the pads as index gathers (no F.pad);
    no rounding (the tolerance covers the one bf16 rounding)."""
    x = a["x"]
    pad = check_pad(x, a["pad"])
    xd = x.double()
    y = xd / torch.sqrt((xd * xd).mean(dim=1, keepdim=True) + float(a.get("eps", EPS)))
    y = y / (1.0 + torch.exp(-y))
    return (_gather(y, pad),)


def ltx2_pad_cast_oracle(a: Args) -> tuple[torch.Tensor, ...]:
    """fp64 gather of the sources, each rounded once to bf16 (a value of x is exact in fp64, so this is the
    single round-to-nearest-even of autocast's cast): zero tolerance."""
    x = a["x"]
    return (_gather(x.double(), check_pad(x, a["pad"])).to(torch.bfloat16).double(),)


FUNCTIONS = {
    "ltx2_rms_silu_pad": PadContract(name="ltx2_rms_silu_pad", oracle=ltx2_rms_silu_pad_oracle,
                                     torch_reference=sglang_ltx2_rms_silu_pad, prepare=prepare,
                                     memory_format=torch.channels_last_3d),
    "ltx2_pad_cast": PadContract(name="ltx2_pad_cast", oracle=ltx2_pad_cast_oracle,
                                 torch_reference=sglang_ltx2_pad_cast, prepare=prepare,
                                 memory_format=torch.channels_last_3d),
}

# x read once, the padded bf16 output (the row's out_like) written once
BYTE_MODELS = {
    "ltx2_rms_silu_pad": (("x",), ("out_like",)),
    "ltx2_pad_cast": (("x",), ("out_like",)),
}

# SGLang has no facade entry for these: tasks name them as task.toml's sglang and entry.
BASELINES = {
    "ltx2_rms_silu_pad": "kda_lab.families.ltx2_rms_silu_pad:sglang_ltx2_rms_silu_pad",
    "ltx2_pad_cast": "kda_lab.families.ltx2_rms_silu_pad:sglang_ltx2_pad_cast",
}
