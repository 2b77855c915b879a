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
from types import ModuleType
from typing import Any

import torch
import torch.nn.functional as F

from kda_lab.families.base import Args, FunctionContract, returned
from kda_lab.families.peers import FLASHINFER, FLOATS, HALF, LIGER, QUACK, Peer, part


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
        out_args=("out",),
    ),
    "triton_one_pass_rms_norm": FunctionContract(
        name="triton_one_pass_rms_norm", oracle=one_pass_oracle, torch_reference=one_pass_reference,
    ),
}

# ------------------------------------------------------------------------------------------------ public peers
# Each adapter takes SGLang's keyword arguments; x is made contiguous as SGLang's wrappers do.

def _why_not(a: Args, *, x_dtypes: tuple[torch.dtype, ...] = FLOATS, weight: str = "any", bias: str = "any",
             out: bool = False, two_d: bool = True, who: str = "") -> str | None:
    """Shared applicability of the norm peers: x / weight / bias / out constraints, in words."""
    x = a.get("x")
    if not isinstance(x, torch.Tensor) or x.dtype not in x_dtypes:
        return f"{who} takes x in " + "/".join(str(d).removeprefix("torch.") for d in x_dtypes)
    if two_d and x.dim() != 2:
        return f"{who} takes a 2-D x"
    w, b = a.get("weight", a.get("w")), a.get("bias")
    if weight == "required" and w is None:
        return f"{who} needs a weight"
    if weight == "fp32" and (w is None or w.dtype != torch.float32):
        return f"{who} needs an fp32 weight"
    if weight == "like_x" and (w is None or w.dtype != x.dtype):
        return f"{who} needs a weight in x's dtype"
    if bias == "none" and b is not None:
        return f"{who} has no bias"
    if bias == "fp32" and (b is None or b.dtype != torch.float32):
        return f"{who} needs an fp32 bias"
    if bias == "fp32_or_none" and b is not None and b.dtype != torch.float32:
        return f"{who} needs an fp32 bias"
    if bias == "required" and b is None:
        return f"{who} needs a bias"
    if a.get("out") is not None and not out:
        return f"{who} allocates its output (no out= to write into)"
    return None


def quack_norm_applies(a: Args) -> str | None:
    if a.get("is_rms_norm", False):
        return _why_not(a, who="QuACK rmsnorm_fwd")
    return _why_not(a, weight="fp32", bias="fp32_or_none", who="QuACK layernorm_fwd")


def quack_norm(rmsnorm: ModuleType, a: Args) -> torch.Tensor:
    x, eps = a["x"].contiguous(), float(a["eps"])
    if a.get("is_rms_norm", False):
        return rmsnorm.rmsnorm_fwd(x, a.get("weight"), a.get("bias"), eps=eps)[0]
    return rmsnorm.layernorm_fwd(x, a["weight"], a.get("bias"), eps=eps)


def liger_norm_applies(a: Args) -> str | None:
    if a.get("is_rms_norm", False):
        return _why_not(a, bias="none", who="Liger rms_norm_forward")
    return _why_not(a, weight="required", bias="required", who="Liger layer_norm_forward")


def liger_norm(ops: ModuleType, a: Args) -> torch.Tensor:
    x, eps = a["x"].contiguous(), float(a["eps"])
    if a.get("is_rms_norm", False):
        # casting_mode "gemma": x and w in fp32, one rounding on the store, as SGLang's norm_infer
        return part(ops, "rms_norm").rms_norm_forward(x, a.get("weight"), eps, 0.0, "gemma", None)[0]
    return part(ops, "layer_norm").layer_norm_forward(x, a["weight"], a["bias"], eps)[0]


def flashinfer_norm_applies(a: Args) -> str | None:
    if a.get("is_rms_norm", False):
        why = _why_not(a, x_dtypes=HALF, weight="like_x", bias="none", out=True, who="FlashInfer rmsnorm")
        out = a.get("out")
        if why is None and out is not None and (out.dtype != a["x"].dtype or out.stride(-1) != 1):
            return "FlashInfer rmsnorm writes out= only in x's dtype with last stride 1"
        return why
    return _why_not(a, x_dtypes=(torch.bfloat16,), weight="fp32", bias="fp32", who="FlashInfer layernorm")


def flashinfer_norm(norm: ModuleType, a: Args) -> torch.Tensor:
    x, eps = a["x"].contiguous(), float(a["eps"])
    if a.get("is_rms_norm", False):
        return norm.rmsnorm(x, a["weight"], eps, out=a.get("out"))
    return norm.layernorm(x, a["weight"], a["bias"], eps)


def _rows(x: torch.Tensor) -> torch.Tensor:
    return x.reshape(-1, x.shape[-1]).contiguous()


def one_pass_applies_quack(a: Args) -> str | None:
    return _why_not(a, two_d=False, who="QuACK rmsnorm_fwd")


def one_pass_quack(rmsnorm: ModuleType, a: Args) -> torch.Tensor:
    x = a["x"]
    return rmsnorm.rmsnorm_fwd(_rows(x), a["w"], eps=float(a.get("eps", 1e-6)))[0].view(x.shape)


def one_pass_liger(ops: ModuleType, a: Args) -> torch.Tensor:
    x = a["x"]
    y = part(ops, "rms_norm").rms_norm_forward(_rows(x), a["w"], float(a.get("eps", 1e-6)), 0.0, "gemma", None)[0]
    return y.view(x.shape)


def one_pass_applies_flashinfer(a: Args) -> str | None:
    return _why_not(a, x_dtypes=HALF, weight="like_x", two_d=False, who="FlashInfer rmsnorm")


def one_pass_flashinfer(norm: ModuleType, a: Args) -> torch.Tensor:
    x = a["x"]
    return norm.rmsnorm(_rows(x), a["w"], float(a.get("eps", 1e-6))).view(x.shape)


PEERS = {
    "norm_infer": (
        Peer(*QUACK, module="quack.rmsnorm", adapt=quack_norm, applies=quack_norm_applies,
             mapping="RMS: rmsnorm_fwd(x, weight, bias, eps)[0] (y = x*rstd*w + b, bias too, as SGLang); "
                     "LayerNorm: layernorm_fwd(x, weight, bias, eps), which takes only fp32 weight/bias and "
                     "needs a weight. Both allocate their output, so rows with out= are n/a."),
        Peer(*LIGER, module="liger_kernel.ops", adapt=liger_norm, applies=liger_norm_applies,
             mapping="RMS: rms_norm_forward(x, weight, eps, offset=0, casting_mode='gemma') (all fp32, one "
                     "rounding; it has no bias); LayerNorm: layer_norm_forward(x, weight, bias, eps), which "
                     "needs both weight and bias. No out=."),
        Peer(*FLASHINFER, module="flashinfer.norm", adapt=flashinfer_norm, applies=flashinfer_norm_applies,
             mapping="RMS: rmsnorm(x, weight, eps, out=out) (fp16/bf16 x, weight in x's dtype, no bias; out= "
                     "written in place); LayerNorm: layernorm(x, gamma=weight, beta=bias, eps): bf16 x, fp32 "
                     "weight and bias only."),
    ),
    "triton_one_pass_rms_norm": (
        Peer(*QUACK, module="quack.rmsnorm", adapt=one_pass_quack, applies=one_pass_applies_quack,
             mapping="rmsnorm_fwd(x viewed as [rows, D], w, eps=eps)[0] viewed back to x's shape."),
        Peer(*LIGER, module="liger_kernel.ops", adapt=one_pass_liger,
             applies=lambda a: _why_not(a, two_d=False, who="Liger rms_norm_forward"),
             mapping="rms_norm_forward(x as [rows, D], w, eps, offset=0, casting_mode='gemma'): fp32 math, "
                     "one rounding, like SGLang's one-pass kernel."),
        Peer(*FLASHINFER, module="flashinfer.norm", adapt=one_pass_flashinfer, applies=one_pass_applies_flashinfer,
             mapping="rmsnorm(x as [rows, D], w, eps): fp16/bf16 only, w in x's dtype."),
    ),
}


# Byte models the stamper writes into task.toml: (reads, writes-like). A given `out` is written, not read.
BYTE_MODELS = {
    "norm_infer": (("x", "weight", "bias"), ("x",)),
    "triton_one_pass_rms_norm": (("x", "w"), ("x",)),
}
