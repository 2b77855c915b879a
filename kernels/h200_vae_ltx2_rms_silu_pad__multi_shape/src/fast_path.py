"""Module-level fast path for SGLang 0.5.23's LTX-2 VAE decoder: each conv input made by one kernel.

SGLang's decoder, decoded under CUDA autocast to bf16 with channels_last_3d conv weights (the family module
quotes the code), makes each 3x3x3 conv's input in five fp32 passes after a bf16 conv: ``x**2`` and its mean,
``x / rms``, SiLU, the temporal replicate pad (a channels-last copy) and ``reflection_pad3d``, and then autocast
casts it to bf16 for ``F.conv3d``. Inside the decoder this path makes that input with one kernel
(``conv_input.launch``: fp32 math, one bf16 rounding, channels_last_3d) and calls the same ``F.conv3d`` SGLang's
reflect branch calls, on a bf16 channels_last_3d tensor of the same strides:

- ``LTX2VideoResnetBlock3d``: norm1 -> SiLU -> conv1's pads, and norm2 -> SiLU -> (dropout) -> conv2's pads, one
  kernel each; the shortcut (norm3, conv_shortcut) and the residual add are SGLang's;
- ``LTX2VideoCausalConv3d`` (the decoder's conv_in on the fp32 latent, the upsamplers' convs on bf16): the pads
  and the cast in one kernel (bit-exact: a copy and autocast's one rounding);
- ``LTX2VideoDecoder3d``: opens the fast region for its own forward (the encoder is untouched) and fuses
  norm_out -> conv_act -> conv_out's pads; its blocks, the unpatchify and the output are SGLang's.

Numerics: the pads and casts are bit-exact; the RMSNorm sums each voxel's channels in the kernel's order instead
of torch's reduce order, so a conv input can differ from SGLang's by one bf16 ulp where its fp32 value sits at a
rounding boundary (everything else is the same fp32 operations, IEEE-rounded): the overlay serves it from the
``lossless`` tier (kda_kernels.registry).

Outside the contract the module's own SGLang forward runs (``FALLBACKS`` counts why, ``fallbacks()``, shown by
``kda_kernels.status()``): a device that is neither CUDA of an arch this impl serves nor the CPU under the
Triton interpreter, no autocast to bf16 on the tensor's device (SGLang's fp32 decode, or
``temporary_module_dtype``'s bf16 module without autocast, whose roundings differ), autograd recording,
``torch.compile`` tracing, dtypes other than bf16/fp32/fp16, spatial-parallel convs (``SpatialParallelConv3d``)
or weights not in channels_last_3d (SGLang's other branch), padding modes other than reflect, the streaming conv
cache, timestep conditioning, noise injection, gradient checkpointing, activations other than ``nn.SiLU``,
norms other than SGLang's ``PerChannelRMSNorm`` on dim 1, and inputs the kernel's contract refuses.
CPU autocast is outside too: it keeps ``x**2`` and LayerNorm in bf16, so SGLang's CPU chain is another one.
"""

from __future__ import annotations

import os
import threading
from collections import Counter
from collections.abc import Callable
from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F

from kda_kernels.class_patch import ClassPatches

from .conv_input import MAX_C, fits, launch

LTX = "sglang.multimodal_gen.runtime.models.vaes.ltx_2_vae"
_DTYPES = (torch.bfloat16, torch.float32, torch.float16)
_CL = torch.channels_last_3d
_PATCHED = ("LTX2VideoDecoder3d.forward", "LTX2VideoResnetBlock3d.forward", "LTX2VideoCausalConv3d.forward")
FALLBACKS: Counter[str] = Counter()


class _Region(threading.local):
    depth = 0


_region = _Region()


def _device_ok(x: torch.Tensor, serves: Callable[[torch.device], bool]) -> bool:
    if x.is_cuda:
        return serves(x.device)
    return x.device.type == "cpu" and os.environ.get("TRITON_INTERPRET") == "1"


def _autocast_bf16(x: torch.Tensor) -> bool:
    """Whether convs on x's device run under CUDA autocast to bf16 (the chain the kernel reproduces). The CPU
    tests replace this function while they emulate CUDA autocast's casts on the CPU."""
    return (x.is_cuda and torch.is_autocast_enabled("cuda")
            and torch.get_autocast_dtype("cuda") == torch.bfloat16)


def _tensor_ok(x: object) -> bool:
    return (isinstance(x, torch.Tensor) and x.dim() == 5 and x.dtype in _DTYPES and x.numel() > 0
            and not (torch.is_grad_enabled() and x.requires_grad))


def _fallback(why: str) -> bool:
    FALLBACKS[why] += 1
    return False


def _conv_ok(m: Any, x: torch.Tensor, conv_cache: object) -> bool:
    conv = m.conv
    if conv_cache is not None:
        return _fallback("streaming conv cache")
    if type(conv) is not nn.Conv3d:
        return _fallback("spatial-parallel or custom conv")
    if conv.padding_mode != "reflect":
        return _fallback(f"padding mode {conv.padding_mode}")
    if not m._weight_is_channels_last_3d():
        return _fallback("conv weight not channels_last_3d")
    _, hp, wp = conv.padding
    _, _, _, h, w = x.shape
    if x.shape[1] > MAX_C or hp >= h or wp >= w or not fits(x, _pads(m, causal=False)):
        return _fallback("outside the kernel's contract")
    return True


def _pads(m: Any, causal: bool) -> tuple[int, int, int, int, int, int]:
    kt = m.kernel_size[0]
    left, right = (kt - 1, 0) if causal else ((kt - 1) // 2, (kt - 1) // 2)
    _, hp, wp = m.conv.padding
    return wp, wp, hp, hp, left, right


def _conv_input(x: torch.Tensor, pad: tuple[int, ...], norm: bool, eps: float) -> torch.Tensor:
    b, c, t, h, w = x.shape
    wl, wr, ht, hb, tf, tb = pad
    out = torch.empty((b, c, t + tf + tb, h + ht + hb, w + wl + wr), dtype=torch.bfloat16, device=x.device,
                      memory_format=_CL)
    launch(x, out, pad, norm, eps)
    return out


def _conv(m: Any, x: torch.Tensor) -> torch.Tensor:
    # SGLang's reflect branch's call; under autocast the bf16 input is used as is
    conv = m.conv
    return F.conv3d(x, conv.weight, conv.bias, conv.stride, 0, conv.dilation, conv.groups)


class Ltx2VaeFastPath:
    """Patches SGLang's LTX-2 VAE classes (class attributes, so every instance, before or after) and puts the
    originals back. ``serves(device)`` says whether this impl runs on a CUDA device (the overlay's arch dispatch
    and request tier); elsewhere the originals run."""

    name = "ltx2_vae_decoder"
    contract = ("LTX-2 VAE decoder under CUDA autocast to bf16, channels_last_3d conv weights, reflect padding; "
                "SGLang's forwards elsewhere (see fallbacks)")

    def __init__(self) -> None:
        self._patches = ClassPatches(LTX, _PATCHED)
        self._serves: Callable[[torch.device], bool] = lambda device: False

    @property
    def installed(self) -> bool:
        return self._patches.applied

    def patched(self) -> list[str]:
        return self._patches.patched()

    @staticmethod
    def fallbacks() -> dict[str, int]:
        """Why calls ran SGLang's own forwards since install (reason -> calls)."""
        return dict(FALLBACKS)

    def install(self, serves: Callable[[torch.device], bool]) -> list[str]:
        self._serves = serves
        if not self._patches.applied:
            FALLBACKS.clear()
        return self._patches.apply(self._replacements)

    def uninstall(self) -> list[str]:
        return self._patches.restore()

    def _replacements(self, mod: Any, orig: dict[str, Any]) -> dict[str, Any]:
        path = self
        rms_norm = mod.PerChannelRMSNorm

        def norm_ok(norm: Any) -> bool:
            return type(norm) is rms_norm and norm.channel_dim == 1 or _fallback("norm not PerChannelRMSNorm dim 1")

        def silu_ok(act: Any) -> bool:
            return type(act) is nn.SiLU or _fallback("activation not nn.SiLU")

        def in_region(x: object) -> bool:
            return _region.depth > 0 and _tensor_ok(x) and not torch.compiler.is_compiling()

        def region_ok(dec: Any, x: object) -> bool:
            if not _tensor_ok(x) or torch.compiler.is_compiling():
                return _fallback("tensor outside the contract, autograd or torch.compile")
            if not _device_ok(x, path._serves):  # type: ignore[arg-type]
                return _fallback("device not served (CPU, another arch, or the request's tier)")
            if not _autocast_bf16(x):  # type: ignore[arg-type]
                return _fallback("no CUDA autocast to bf16")
            return True

        def decoder_forward(dec: nn.Module, hidden_states: torch.Tensor, temb: torch.Tensor | None = None,
                            causal: bool | None = None, conv_cache: dict | None = None) -> torch.Tensor:
            if not region_ok(dec, hidden_states):
                return orig["LTX2VideoDecoder3d.forward"](dec, hidden_states, temb, causal, conv_cache)
            _region.depth += 1
            try:
                if (conv_cache is not None or dec.time_embedder is not None
                        or (torch.is_grad_enabled() and dec.gradient_checkpointing)
                        or not norm_ok(dec.norm_out) or not silu_ok(dec.conv_act)):
                    return orig["LTX2VideoDecoder3d.forward"](dec, hidden_states, temb, causal, conv_cache)
                # SGLang's forward without the streaming cache, timestep conditioning and checkpointing (refused
                # above), norm_out -> conv_act -> conv_out's pads fused
                causal = causal or dec.is_causal
                hidden_states = dec.conv_in(hidden_states, causal=causal, conv_cache=None, cache_key=None)
                hidden_states = dec.mid_block(hidden_states, temb, causal=causal, conv_cache=None, cache_key=None)
                for up_block in dec.up_blocks:
                    hidden_states = up_block(hidden_states, temb, causal=causal, conv_cache=None, cache_key=None)
                if _conv_ok(dec.conv_out, hidden_states, None):
                    x = _conv_input(hidden_states, _pads(dec.conv_out, causal), True, dec.norm_out.eps)
                    hidden_states = _conv(dec.conv_out, x)
                else:
                    hidden_states = dec.conv_act(dec.norm_out(hidden_states))
                    hidden_states = dec.conv_out(hidden_states, causal=causal, conv_cache=None, cache_key=None)
                p, p_t = dec.patch_size, dec.patch_size_t
                batch_size, num_channels, num_frames, height, width = hidden_states.shape
                hidden_states = hidden_states.reshape(batch_size, -1, p_t, p, p, num_frames, height, width)
                return (hidden_states.permute(0, 1, 5, 2, 6, 4, 7, 3)
                        .flatten(6, 7).flatten(4, 5).flatten(2, 3))
            finally:
                _region.depth -= 1

        def causal_conv_forward(m: nn.Module, hidden_states: torch.Tensor, causal: bool = True,
                                conv_cache: dict | None = None, cache_key: str | None = None) -> torch.Tensor:
            if not in_region(hidden_states) or not _conv_ok(m, hidden_states, conv_cache):
                return orig["LTX2VideoCausalConv3d.forward"](m, hidden_states, causal, conv_cache, cache_key)
            return _conv(m, _conv_input(hidden_states, _pads(m, causal), False, 0.0))

        def resnet_forward(m: nn.Module, inputs: torch.Tensor, temb: torch.Tensor | None = None,
                           generator: torch.Generator | None = None, causal: bool = True,
                           conv_cache: dict | None = None, cache_key: str | None = None) -> torch.Tensor:
            if (not in_region(inputs) or m.scale_shift_table is not None or m.per_channel_scale1 is not None
                    or m.per_channel_scale2 is not None or (m.training and m.dropout.p > 0)
                    or not norm_ok(m.norm1) or not norm_ok(m.norm2) or not silu_ok(m.nonlinearity)
                    or not _conv_ok(m.conv1, inputs, conv_cache)):
                return orig["LTX2VideoResnetBlock3d.forward"](m, inputs, temb, generator, causal, conv_cache,
                                                               cache_key)
            hidden_states = _conv(m.conv1, _conv_input(inputs, _pads(m.conv1, causal), True, m.norm1.eps))
            if _conv_ok(m.conv2, hidden_states, None):
                hidden_states = _conv(m.conv2, _conv_input(hidden_states, _pads(m.conv2, causal), True,
                                                           m.norm2.eps))
            else:
                hidden_states = m.dropout(m.nonlinearity(m.norm2(hidden_states)))
                hidden_states = m.conv2(hidden_states, causal=causal)
            if m.norm3 is not None:
                inputs = m.norm3(inputs.movedim(1, -1)).movedim(-1, 1)
            if m.conv_shortcut is not None:
                inputs = m.conv_shortcut(inputs)
            return hidden_states + inputs

        return {"LTX2VideoDecoder3d.forward": decoder_forward,
                "LTX2VideoResnetBlock3d.forward": resnet_forward,
                "LTX2VideoCausalConv3d.forward": causal_conv_forward}


FAST_PATH = Ltx2VaeFastPath()
