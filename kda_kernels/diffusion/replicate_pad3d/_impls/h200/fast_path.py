"""Module-level fast path for SGLang 0.5.23's HunyuanVideo VAE decoder: NDHWC from conv_in to conv_out.

SGLang's decoder runs every causal conv as ``F.pad(x, (1,1,1,1,2,0), "replicate")`` then ``nn.Conv3d`` on NCDHW,
and cuDNN wraps each implicit-GEMM conv in an NCDHW -> NDHWC copy of the padded input and an NDHWC -> NCDHW copy of
its output (issue 23's profile: pad 24 %, those copies 11 % of the tiled decode). Inside the decoder this path keeps
activations channels_last_3d instead:

- ``HunyuanVideoCausalConv3d``: one Triton gather writes the padded tensor directly in NDHWC from x in either
  layout (``pad_kernels._pad_ndhwc``), then the conv runs with an NDHWC copy of its weight (cached per module, made
  again when the weight changes), so cuDNN reads and writes NDHWC and makes no copies;
- ``HunyuanVideoUpsampleCausal3D``: SGLang's nearest upsample of frame 0 (2-D) and of the other frames (3-D),
  their ``torch.cat`` and the conv's pad are all copies, so one gather produces the conv's padded NDHWC input;
- ``HunyuanVideoResnetBlockCausal3D`` and the decoder's final norm: GroupNorm + SiLU on NDHWC (``gn_silu_cl``)
  instead of ``.contiguous()`` plus an NCDHW kernel; the block's structure and op order are SGLang's;
- ``HunyuanVideoDecoder3D``: opens the fast region for its own forward only (the encoder is untouched) and returns
  its output contiguous (NCDHW), as SGLang's does.

The mid-block attention takes the NDHWC activations as they come (its permute to tokens becomes a view).

Numerics: pads, upsampling, the concatenation and layout changes are copies (bit-exact). The conv is cuDNN's on
the same operands in NDHWC; SGLang's NCDHW call runs cuDNN in NDHWC too (after its copies), so the arithmetic is
the same where cuDNN picks the same algorithm. GroupNorm + SiLU reduces in another order than SGLang's Triton
kernel (fp32 Chan-merged statistics): a few output ulps per norm, within the GroupNorm task's tolerances.

Outside the contract the module's own SGLang forward runs: spatial-parallel decoders, autograd recording,
``torch.compile`` tracing, a device that is neither CUDA (of an arch this impl serves, see ``install``) nor the
CPU under the Triton interpreter, dtypes other than fp16/bf16/fp32, non-default padding modes, upsample factors that
are not positive ints, norms that are not affine ``nn.GroupNorm`` + non-inplace ``nn.SiLU``.
"""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Callable
from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F

from .gn_silu_cl import group_norm_silu_cl
from .gn_silu_cl import supports as gn_supports
from .pad_kernels import launch_ndhwc

_CL = torch.channels_last_3d
_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
HUNYUAN = "sglang.multimodal_gen.runtime.models.vaes.hunyuanvae"
# (class or module-level function, attribute) -> replacement, in install order
_PATCHED = ("HunyuanVideoDecoder3D.forward", "HunyuanVideoResnetBlockCausal3D.forward",
            "HunyuanVideoCausalConv3d.forward", "HunyuanVideoUpsampleCausal3D.forward", "_apply_group_norm_silu")


class _Region(threading.local):
    depth = 0


_region = _Region()
_weights: weakref.WeakKeyDictionary[nn.Module, tuple[tuple[Any, ...], torch.Tensor]] = weakref.WeakKeyDictionary()


def _device_ok(x: torch.Tensor, serves: Callable[[torch.device], bool]) -> bool:
    if x.is_cuda:
        return serves(x.device)
    return x.device.type == "cpu" and os.environ.get("TRITON_INTERPRET") == "1"


def _tensor_ok(x: object) -> bool:
    return (isinstance(x, torch.Tensor) and x.dim() == 5 and x.dtype in _DTYPES and x.numel() > 0
            and not (torch.is_grad_enabled() and x.requires_grad))


def _in_region(x: object) -> bool:
    return _region.depth > 0 and _tensor_ok(x) and not torch.compiler.is_compiling()


def padded_channels_last(x: torch.Tensor, pad: tuple[int, ...], factors: tuple[int, int, int] = (1, 1, 1)
                         ) -> torch.Tensor:
    """The replicate pad (F.pad order) of x nearest-upsampled by ``factors`` the HunyuanVideo way (frame 0 once,
    later frames ft times), written channels_last_3d; x in any layout."""
    wl, wr, hl, hr, tf, tb = pad
    ft, fh, fw = factors
    b, c, t, h, w = x.shape
    shape = (b, c, 1 + ft * (t - 1) + tf + tb, fh * h + hl + hr, fw * w + wl + wr)
    out = torch.empty(shape, dtype=x.dtype, device=x.device, memory_format=_CL)
    launch_ndhwc(x, out, tuple(pad), (ft, fh, fw))
    return out


def _cl_weight(conv: nn.Conv3d) -> torch.Tensor:
    w = conv.weight
    key = (w.data_ptr(), w._version, w.dtype, w.device, tuple(w.shape))
    hit = _weights.get(conv)
    if hit is None or hit[0] != key:
        hit = (key, w.detach().contiguous(memory_format=_CL))
        _weights[conv] = hit
    return hit[1]


def _conv_cl(conv: nn.Conv3d, x: torch.Tensor) -> torch.Tensor:
    return F.conv3d(x, _cl_weight(conv), conv.bias, conv.stride, conv.padding, conv.dilation, conv.groups)


def _gn_silu(x: torch.Tensor, norm: nn.Module, act: nn.Module) -> torch.Tensor | None:
    if (type(norm) is nn.GroupNorm and norm.affine and type(act) is nn.SiLU and not act.inplace
            and gn_supports(x, norm.weight, norm.bias, norm.num_groups)):
        return group_norm_silu_cl(x, norm.weight, norm.bias, norm.num_groups, norm.eps)
    return None


class HunyuanVideoVaeFastPath:
    """Patches SGLang's HunyuanVideo VAE classes (class attributes, so every instance, before or after) and puts
    the originals back. ``serves(device)`` says whether this impl runs on a CUDA device (the overlay's arch
    dispatch); elsewhere the originals run."""

    name = "hunyuanvideo_vae_decoder"

    def __init__(self) -> None:
        self._originals: dict[str, Any] = {}
        self._serves: Callable[[torch.device], bool] = lambda device: False

    @property
    def installed(self) -> bool:
        return bool(self._originals)

    def patched(self) -> list[str]:
        return [f"{HUNYUAN}.{name}" for name in self._originals]

    def install(self, serves: Callable[[torch.device], bool]) -> list[str]:
        import importlib

        mod = importlib.import_module(HUNYUAN)
        self._serves = serves
        if self._originals:
            return self.patched()
        replacements = self._replacements(mod)
        for name in _PATCHED:
            owner, attr = self._owner(mod, name)
            self._originals[name] = owner.__dict__[attr]
            setattr(owner, attr, replacements[name])
        return self.patched()

    def uninstall(self) -> list[str]:
        import importlib

        if not self._originals:
            return []
        mod = importlib.import_module(HUNYUAN)
        restored = self.patched()
        for name, original in self._originals.items():
            owner, attr = self._owner(mod, name)
            setattr(owner, attr, original)
        self._originals.clear()
        _weights.clear()
        return restored

    @staticmethod
    def _owner(mod: Any, name: str) -> tuple[Any, str]:
        cls, _, attr = name.rpartition(".")
        return (getattr(mod, cls) if cls else mod), attr

    def _replacements(self, mod: Any) -> dict[str, Any]:
        orig = {name: self._owner(mod, name)[0].__dict__[self._owner(mod, name)[1]] for name in _PATCHED}
        path = self

        def decoder_forward(dec: nn.Module, hidden_states: torch.Tensor) -> torch.Tensor:
            if (getattr(dec, "spatial_parallel", False) or not _tensor_ok(hidden_states)
                    or not _device_ok(hidden_states, path._serves) or torch.compiler.is_compiling()):
                return orig["HunyuanVideoDecoder3D.forward"](dec, hidden_states)
            _region.depth += 1
            try:
                out = orig["HunyuanVideoDecoder3D.forward"](dec, hidden_states)
            finally:
                _region.depth -= 1
            return out.contiguous()

        def causal_conv_forward(m: nn.Module, hidden_states: torch.Tensor) -> torch.Tensor:
            if not _in_region(hidden_states) or m.spatial_parallel or m.conv.padding_mode != "zeros":
                return orig["HunyuanVideoCausalConv3d.forward"](m, hidden_states)
            pad = m.time_causal_padding
            if any(pad):
                x = padded_channels_last(hidden_states, pad)
            else:
                x = hidden_states.contiguous(memory_format=_CL)
            return _conv_cl(m.conv, x)

        def upsample_forward(m: nn.Module, hidden_states: torch.Tensor) -> torch.Tensor:
            factors = tuple(m.upsample_factor)
            conv = m.conv
            if (not _in_region(hidden_states) or conv.spatial_parallel or conv.conv.padding_mode != "zeros"
                    or len(factors) != 3 or not all(isinstance(f, int) and f >= 1 for f in factors)):
                return orig["HunyuanVideoUpsampleCausal3D.forward"](m, hidden_states)
            x = padded_channels_last(hidden_states, conv.time_causal_padding, factors)  # type: ignore[arg-type]
            return _conv_cl(conv.conv, x)

        def apply_group_norm_silu(hidden_states: torch.Tensor, norm: nn.Module, nonlinearity: nn.Module,
                                  spatial_parallel: bool) -> torch.Tensor:
            if not spatial_parallel and _in_region(hidden_states):
                y = _gn_silu(hidden_states.contiguous(memory_format=_CL), norm, nonlinearity)
                if y is not None:
                    return y
            return orig["_apply_group_norm_silu"](hidden_states, norm, nonlinearity, spatial_parallel)

        def resnet_forward(m: nn.Module, hidden_states: torch.Tensor) -> torch.Tensor:
            if not _in_region(hidden_states) or m.spatial_parallel:
                return orig["HunyuanVideoResnetBlockCausal3D.forward"](m, hidden_states)
            # SGLang's block with its leading .contiguous() made channels_last_3d (a no-op inside the region)
            hidden_states = hidden_states.contiguous(memory_format=_CL)
            residual = hidden_states
            hidden_states = apply_group_norm_silu(hidden_states, m.norm1, m.nonlinearity, False)
            hidden_states = m.conv1(hidden_states)
            hidden_states = apply_group_norm_silu(hidden_states, m.norm2, m.nonlinearity, False)
            hidden_states = m.dropout(hidden_states)
            hidden_states = m.conv2(hidden_states)
            if m.conv_shortcut is not None:
                residual = m.conv_shortcut(residual)
            return hidden_states + residual

        return {"HunyuanVideoDecoder3D.forward": decoder_forward,
                "HunyuanVideoResnetBlockCausal3D.forward": resnet_forward,
                "HunyuanVideoCausalConv3d.forward": causal_conv_forward,
                "HunyuanVideoUpsampleCausal3D.forward": upsample_forward,
                "_apply_group_norm_silu": apply_group_norm_silu}


FAST_PATH = HunyuanVideoVaeFastPath()
