"""Replicate padding of a 5-D video tensor: the ``F.pad`` inside HunyuanVideo's causal 3-D convolution.

SGLang 0.5.23 has no function for it: ``HunyuanVideoCausalConv3d.forward`` (``models/vaes/hunyuanvae.py``) does

    padding = self.spatial_parallel_time_padding if self.spatial_parallel else self.time_causal_padding
    if any(padding):
        hidden_states = F.pad(hidden_states, padding, mode=self.pad_mode)   # pad_mode "replicate"
    return self.conv(hidden_states)

with ``time_causal_padding = (k_w//2, k_w//2, k_h//2, k_h//2, k_t - 1, 0)`` ((1, 1, 1, 1, 2, 0) for every 3x3x3
conv of the VAE; 1x1x1 convs pad nothing and never call ``F.pad``). The baselines below are that call lifted
verbatim into functions with the lab's signature (``tests/families/test_replicate_pad3d.py`` reads SGLang's
source and fails when the call changes), so ``task.toml`` names them as the functions' ``sglang`` and
``entry``.

Contract, both functions ``(x, pad) -> Tensor``:
- ``x`` ``[B, C, T, H, W]``, fp16/bf16/fp32, any strides; ``pad`` six non-negative ints in F.pad order
  ``(w_left, w_right, h_top, h_bottom, t_front, t_back)``;
- ``out[b, c, t, h, w] = x[b, c, clamp(t - t_front, 0, T-1), clamp(h - h_top, 0, H-1), clamp(w - w_left, 0, W-1)]``,
  shape ``[B, C, T + t_front + t_back, H + h_top + h_bottom, W + w_left + w_right]``, x.dtype: a copy, so the
  output is bit-identical to ``F.pad(x, pad, mode="replicate")`` (task.toml ``exact = true``, zero tolerances);
- ``replicate_pad3d``: the output is contiguous (NCDHW) for a contiguous x, as F.pad returns it (for a strided x:
  the layout F.pad gives on that device, :func:`f_pad_strides`);
- ``replicate_pad3d_channels_last``: the same values, written in ``torch.channels_last_3d`` memory format (the
  layout cuDNN's implicit-GEMM conv3d consumes; SGLang's path pays a separate NCDHW -> NDHWC copy for it).

Byte model (:data:`BYTE_MODELS`): x read once, the padded output written once. A row carries an ``out_like``
spec (the padded shape, x's dtype) that names the output for the byte model; :func:`prepare` checks it against
x and pad and drops it before the call (as the int8_scaled_mm family does with its ``out_like``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from kda_lab.families.base import Args, FunctionContract

ROW_ONLY = ("out_like",)


def hunyuan_causal_pad(x: torch.Tensor, pad: list[int]) -> torch.Tensor:
    """SGLang 0.5.23's ``F.pad(hidden_states, padding, mode=self.pad_mode)`` of HunyuanVideoCausalConv3d."""
    return F.pad(x, pad, mode="replicate")


def hunyuan_causal_pad_channels_last(x: torch.Tensor, pad: list[int]) -> torch.Tensor:
    """SGLang's pad followed by the NCDHW -> channels_last_3d copy cuDNN makes before its implicit-GEMM conv."""
    return F.pad(x, pad, mode="replicate").contiguous(memory_format=torch.channels_last_3d)


def check_pad(pad: Any) -> tuple[int, int, int, int, int, int]:
    """The six non-negative pads of the contract, or a ValueError saying what is wrong."""
    if not isinstance(pad, (list, tuple)) or len(pad) != 6 or not all(isinstance(p, int) for p in pad):
        raise ValueError(f"pad must be six ints (w_left, w_right, h_top, h_bottom, t_front, t_back), got {pad!r}")
    if any(p < 0 for p in pad):
        raise ValueError(f"pad must be non-negative (negative replicate pads crop), got {list(pad)}")
    return tuple(pad)  # type: ignore[return-value]


def padded_shape(shape: tuple[int, ...], pad: Any) -> tuple[int, int, int, int, int]:
    if len(shape) != 5:
        raise ValueError(f"x must be 5-D [B, C, T, H, W], got shape {list(shape)}")
    wl, wr, hl, hr, tl, tr = check_pad(pad)
    b, c, t, h, w = shape
    return b, c, t + tl + tr, h + hl + hr, w + wl + wr


def out_bytes(shape: tuple[int, ...], pad: Any, itemsize: int) -> int:
    """Bytes of the padded output (written once)."""
    n = 1
    for d in padded_shape(shape, pad):
        n *= d
    return n * itemsize


def model_bytes(shape: tuple[int, ...], pad: Any, itemsize: int) -> int:
    """The byte model of one call: x read once plus the padded output written once."""
    n = 1
    for d in shape:
        n *= d
    return n * itemsize + out_bytes(shape, pad, itemsize)


def prepare(args: Args) -> Args:
    """Drop the row's ``out_like`` after checking it is the padded output (shape and dtype)."""
    if "out_like" not in args:  # already prepared
        return args
    a = dict(args)
    out_like, x = a.pop("out_like"), a["x"]
    want = padded_shape(tuple(x.shape), a["pad"])
    if tuple(out_like.shape) != want or out_like.dtype != x.dtype:
        raise ValueError(f"row's out_like {out_like.dtype}{list(out_like.shape)} is not the padded output "
                         f"{x.dtype}{list(want)} of x {list(x.shape)} and pad {a['pad']}")
    return a


def replicate_index(n: int, before: int, after: int, device: torch.device) -> torch.Tensor:
    """Source index of each padded position along one dimension: clamp(i - before, 0, n - 1)."""
    return (torch.arange(-before, n + after, device=device)).clamp_(0, n - 1)


def oracle(a: Args) -> tuple[torch.Tensor, ...]:
    """fp64 gather of the clamped source of every output element (no F.pad involved); every fp16/bf16/fp32 value
    is exact in fp64, so comparing with zero tolerance is a bitwise comparison of the values."""
    x = a["x"]
    wl, wr, hl, hr, tl, tr = check_pad(a["pad"])
    if x.dim() != 5:
        raise ValueError(f"x must be 5-D [B, C, T, H, W], got shape {list(x.shape)}")
    _, _, t, h, w = x.shape
    d = x.device
    y = x.double()
    y = y.index_select(2, replicate_index(t, tl, tr, d))
    y = y.index_select(3, replicate_index(h, hl, hr, d))
    y = y.index_select(4, replicate_index(w, wl, wr, d))
    return (y,)


class LayoutError(ValueError):
    """An output in another memory format than the function's contract."""


def f_pad_strides(x: torch.Tensor, pad: Any) -> tuple[int, ...]:
    """Strides of SGLang's ``F.pad(x, pad, mode="replicate")`` output on x's device: contiguous for a contiguous x;
    for a strided x torch picks the layout (the CPU kernel keeps a channels_last_3d x channels-last), so it is
    read off a real call (test rows only: SGLang's decode pads contiguous tensors)."""
    if x.is_contiguous():
        return torch.empty(padded_shape(tuple(x.shape), pad), device="meta").stride()
    return F.pad(x, list(pad), mode="replicate").stride()


@dataclass(frozen=True)
class PadContract(FunctionContract):
    """A FunctionContract that also holds the output to its memory format (a value check cannot see layout):
    ``memory_format`` when given, else the layout SGLang's F.pad gives for this x (:func:`f_pad_strides`)."""

    memory_format: torch.memory_format | None = None

    def outputs(self, result: Any, args: Args) -> tuple[torch.Tensor, ...]:
        outs = super().outputs(result, args)
        for o in outs:
            if self.memory_format is not None:
                ok, want = o.is_contiguous(memory_format=self.memory_format), str(self.memory_format)
            else:
                strides = f_pad_strides(args["x"], args["pad"])
                ok, want = o.stride() == strides, f"strides {list(strides)} (F.pad's layout for this x)"
            if not ok:
                raise LayoutError(f"{self.name}: output {list(o.shape)} strides {list(o.stride())} is not "
                                  f"{want.removeprefix('torch.')} (the function's contract)")
        return outs


FUNCTIONS = {
    "replicate_pad3d": PadContract(name="replicate_pad3d", oracle=oracle, torch_reference=hunyuan_causal_pad,
                                   prepare=prepare),
    "replicate_pad3d_channels_last": PadContract(
        name="replicate_pad3d_channels_last", oracle=oracle, torch_reference=hunyuan_causal_pad_channels_last,
        prepare=prepare, memory_format=torch.channels_last_3d),
}

BYTE_MODELS = {
    "replicate_pad3d": (("x",), ("out_like",)),
    "replicate_pad3d_channels_last": (("x",), ("out_like",)),
}

# A pad is a copy: SGLang's output is the contract bit for bit (the stamper writes exact = true, zero tolerances).
EXACT = True

BASELINE_CALLS = {
    "replicate_pad3d": hunyuan_causal_pad,
    "replicate_pad3d_channels_last": hunyuan_causal_pad_channels_last,
}

# SGLang has no facade entry for these functions: the stamper (kda new-task) writes these as task.toml's
# ``sglang`` and ``entry`` and reads the parameter names from them.
BASELINES = {
    "replicate_pad3d": "kda_lab.families.replicate_pad3d:hunyuan_causal_pad",
    "replicate_pad3d_channels_last": "kda_lab.families.replicate_pad3d:hunyuan_causal_pad_channels_last",
}
