"""LayerNorm / RMSNorm inference (``norm_infer``) and the tiled one-pass RMSNorm (``triton_one_pass_rms_norm``).

Contract (SGLang 0.5.23, ``norm/norm_triton.py`` and ``norm/rmsnorm_onepass_triton.py``):

- ``norm_infer(x, weight, bias, eps, is_rms_norm=False, out=None) -> Tensor``: x is 2-D ``[M, N]`` (any strides:
  the wrapper calls ``x.contiguous()``); weight / bias are ``None`` or ``[N]`` with last stride 1, any float dtype
  (upcast to fp32). fp32 statistics, one row per program:
  LayerNorm ``y = (x - mean) * rstd * w + b`` with the centered (biased) variance, RMSNorm
  ``y = x * rstd * w + b`` (the bias is added in the RMS branch too), ``rstd = 1 / sqrt(var + eps)``.
  The result goes to ``out`` when given (written through out's row stride, stored in out's dtype, and ``out``
  itself is returned), else to a new tensor like x (x's dtype). ``N * x.element_size()`` must stay below 64 KiB
  (N <= 16384 fp32, <= 32768 bf16/fp16) or it raises.
- ``triton_one_pass_rms_norm(x, w, eps=1e-6) -> Tensor``: x ``[..., D]`` (made contiguous, viewed as rows),
  w ``[D]``; fp32 math ``y = x * rsqrt(mean(x^2) + eps) * w``, one rounding to x's dtype, x's shape.

The oracle is fp64 with the output unrounded; the tolerance (task.toml) allows the single output rounding plus
fp32 statistics. Outputs of ``norm_infer(out=...)`` are read from ``out``: the call must write into it and
return it (anything else fails the row), and ``out`` is NaN-poisoned before each call so an unwritten element
fails too.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from kda_lab.families.base import Args, FunctionContract, returned


def _rms64(x: torch.Tensor, eps: float) -> torch.Tensor:
    return x * torch.rsqrt(x.square().mean(-1, keepdim=True) + eps)


def _ln64(x: torch.Tensor, eps: float) -> torch.Tensor:
    mean = x.mean(-1, keepdim=True)
    var = (x - mean).square().mean(-1, keepdim=True)  # centered, biased
    return (x - mean) * torch.rsqrt(var + eps)


def norm_infer_oracle(a: Args) -> tuple[torch.Tensor, ...]:
    x = a["x"].double()
    if x.dim() != 2:
        raise ValueError(f"norm_infer takes a 2-D x [M, N], got {list(x.shape)}")
    eps = float(a["eps"])
    y = _rms64(x, eps) if a.get("is_rms_norm", False) else _ln64(x, eps)
    if a.get("weight") is not None:
        y = y * a["weight"].double()
    if a.get("bias") is not None:
        y = y + a["bias"].double()
    return (y,)


def norm_infer_reference(x, weight, bias, eps, is_rms_norm=False, out=None):
    """Eager torch in fp32 (the torch.compile peer): same math, one rounding to the output dtype."""
    xf = x.float()
    if is_rms_norm:
        y = xf * torch.rsqrt(xf.square().mean(-1, keepdim=True) + eps)
    else:
        y = F.layer_norm(xf, xf.shape[-1:], None, None, eps)
    if weight is not None:
        y = y * weight.float()
    if bias is not None:
        y = y + bias.float()
    if out is not None:
        out.copy_(y)
        return out
    return y.to(x.dtype)


def one_pass_oracle(a: Args) -> tuple[torch.Tensor, ...]:
    return (_rms64(a["x"].double(), float(a.get("eps", 1e-6))) * a["w"].double(),)


def one_pass_reference(x, w, eps=1e-6):
    xf = x.float()
    return (xf * torch.rsqrt(xf.square().mean(-1, keepdim=True) + eps) * w.float()).to(x.dtype)


def _poison_out(a: Args) -> Args:
    """``out`` arrives filled with seeded values: NaN-fill it so an element the call never writes fails."""
    out = a.get("out")
    if isinstance(out, torch.Tensor) and out.is_floating_point():
        with torch.no_grad():
            out.fill_(float("nan"))
    return a


@dataclass(frozen=True)
class NormInferContract(FunctionContract):
    """``norm_infer``: with ``out=`` the result must be written into ``out`` and ``out`` returned."""

    def outputs(self, result: Any, args: Args) -> tuple[torch.Tensor, ...]:
        out = args.get("out")
        if isinstance(out, torch.Tensor):
            same = (isinstance(result, torch.Tensor) and result.data_ptr() == out.data_ptr()
                    and result.shape == out.shape and result.stride() == out.stride())
            if not same:
                raise TypeError("norm_infer(..., out=out) must write the result into `out` and return `out` "
                                f"(got {type(result).__name__} that is not `out`)")
            return (out,)
        return returned(result, args)


FUNCTIONS = {
    "norm_infer": NormInferContract(
        name="norm_infer", oracle=norm_infer_oracle, torch_reference=norm_infer_reference, prepare=_poison_out,
    ),
    "triton_one_pass_rms_norm": FunctionContract(
        name="triton_one_pass_rms_norm", oracle=one_pass_oracle, torch_reference=one_pass_reference,
    ),
}

# Byte models the stamper writes into task.toml: (reads, writes-like). A given `out` is written, not read.
BYTE_MODELS = {
    "norm_infer": (("x", "weight", "bias"), ("x",)),
    "triton_one_pass_rms_norm": (("x", "w"), ("x",)),
}
