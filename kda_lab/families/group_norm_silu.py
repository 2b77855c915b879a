"""GroupNorm + SiLU over NC... activations (the VAE / latent-upsampler norm).

Contract (SGLang 0.5.23, ``norm/group_norm_silu_triton.py`` and ``norm/group_norm_silu.py``):
- ``triton_group_norm_silu(x, weight, bias, num_groups, eps=1e-5)``: x ``[B, C, *spatial]`` (2-D to 5-D, NC...
  layout; a non-contiguous x is made contiguous first), weight/bias ``[C]`` in x.dtype. Group g of batch b
  holds channels ``[g*C/G, (g+1)*C/G)`` and all their spatial positions. Statistics in fp32 (biased
  variance), ``y = silu((x - mean) * rsqrt(var + eps) * w_c + b_c)``, one rounding to x.dtype on store.
- ``apply_group_norm_silu(x, norm, activation)``: the model-side helper; ``norm`` is an affine
  ``nn.GroupNorm`` and ``activation`` an ``nn.SiLU`` (the fused path needs exactly these, grad disabled and
  x on CUDA; anything else runs ``activation(norm(x))`` eagerly).

Rows of ``apply_group_norm_silu`` describe the GroupNorm by its parts: tensors ``weight``/``bias`` and scalars
``num_groups``/``eps``; :func:`prepare_apply` builds the ``nn.GroupNorm`` (affine, holding exactly those
tensors) and the ``nn.SiLU`` the function takes. The byte model therefore reads x, weight and bias and writes
one tensor like x, for both functions.

The oracle is fp64 throughout (two-pass, centered variance): it is stricter than the fp32 statistics the
contract allows, and the task tolerances absorb fp32 statistics and one output rounding.
"""

from __future__ import annotations

from types import ModuleType

import torch
import torch.nn.functional as F
from torch import nn

from kda_lab.families.base import Args, FunctionContract
from kda_lab.families.peers import LIGER, Peer, part


def group_norm_silu64(x: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None, num_groups: int,
                      eps: float) -> torch.Tensor:
    """fp64 ``silu(group_norm(x))`` for x ``[B, C, *spatial]`` in any layout (the oracle's core)."""
    if x.dim() < 2:
        raise ValueError(f"x must be [B, C, *spatial], got {list(x.shape)}")
    b, c = x.shape[:2]
    if c % num_groups:
        raise ValueError(f"C={c} is not divisible by num_groups={num_groups}")
    out = torch.empty(x.shape, dtype=torch.float64, device=x.device)
    bshape = (1, c) + (1,) * (x.dim() - 2)
    w = weight.double().reshape(bshape) if weight is not None else None
    bi = bias.double().reshape(bshape) if bias is not None else None
    for i in range(b):  # one batch element at a time: the largest production rows are ~285M elements
        # a private contiguous fp64 copy, whatever x's strides and dtype (in-place ops below)
        xi = x[i: i + 1].to(dtype=torch.float64, memory_format=torch.contiguous_format, copy=True)
        g = xi.view(1, num_groups, -1)
        mean = g.mean(-1, keepdim=True)
        g.sub_(mean)
        var = g.square().mean(-1, keepdim=True)
        g.mul_(torch.rsqrt(var + eps))
        if w is not None:
            xi.mul_(w)
        if bi is not None:
            xi.add_(bi)
        out[i: i + 1] = xi * torch.sigmoid(xi)
    return out


def prepare_apply(args: Args) -> Args:
    """Row args (x, weight, bias, num_groups, eps) -> the function's args (x, norm, activation)."""
    if "norm" in args:  # already prepared
        return args
    a = dict(args)
    x = a.pop("x")
    weight, bias = a.pop("weight"), a.pop("bias")
    num_groups, eps = int(a.pop("num_groups")), float(a.pop("eps"))
    if a:
        raise ValueError(f"apply_group_norm_silu rows take x, weight, bias, num_groups, eps; also got {sorted(a)}")
    affine = weight is not None and bias is not None
    norm = nn.GroupNorm(num_groups, x.shape[1], eps=eps, affine=affine, device=x.device,
                        dtype=weight.dtype if weight is not None else x.dtype)
    if affine:
        # Inference weights: the module holds the row's own tensors (no copy), frozen as a loaded model's are.
        norm.weight = nn.Parameter(weight, requires_grad=False)
        norm.bias = nn.Parameter(bias, requires_grad=False)
    return {"x": x, "norm": norm, "activation": nn.SiLU()}


def triton_oracle(a: Args) -> tuple[torch.Tensor, ...]:
    return (group_norm_silu64(a["x"], a["weight"], a["bias"], int(a["num_groups"]), float(a["eps"])),)


def apply_oracle(a: Args) -> tuple[torch.Tensor, ...]:
    norm, act = a["norm"], a["activation"]
    if not isinstance(norm, nn.GroupNorm) or not isinstance(act, nn.SiLU):
        raise TypeError(f"oracle covers GroupNorm + SiLU, got {type(norm).__name__} + {type(act).__name__}")
    return (group_norm_silu64(a["x"], norm.weight, norm.bias, norm.num_groups, norm.eps),)


def triton_reference(x, weight, bias, num_groups, eps=1e-5):
    """Eager torch in x.dtype: SGLang's own fallback ``_group_norm_silu_native`` (the torch.compile peer)."""
    return F.silu(F.group_norm(x, num_groups, weight=weight, bias=bias, eps=eps))


def apply_reference(x, norm, activation):
    return F.silu(F.group_norm(x, norm.num_groups, weight=norm.weight, bias=norm.bias, eps=norm.eps))


FUNCTIONS = {
    "triton_group_norm_silu": FunctionContract(
        name="triton_group_norm_silu", oracle=triton_oracle, torch_reference=triton_reference,
    ),
    "apply_group_norm_silu": FunctionContract(
        name="apply_group_norm_silu", oracle=apply_oracle, torch_reference=apply_reference, prepare=prepare_apply,
    ),
}

# ------------------------------------------------------------------------------------------------ public peers

def _gn_parts(a: Args) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None, int, float]:
    """x, weight, bias, num_groups, eps from either function's (raw or prepared) arguments."""
    norm = a.get("norm")
    if isinstance(norm, nn.GroupNorm):
        return a["x"], norm.weight, norm.bias, norm.num_groups, norm.eps
    return a["x"], a.get("weight"), a.get("bias"), int(a["num_groups"]), float(a.get("eps", 1e-5))


def liger_gn_applies(a: Args) -> str | None:
    if "activation" in a and not isinstance(a["activation"], nn.SiLU):
        return "the composed peer is GroupNorm + SiLU"
    x, w, b, _g, _eps = _gn_parts(a)
    if w is None or b is None:
        return "Liger group_norm_forward needs both weight and bias"
    if x.dtype not in (torch.float16, torch.bfloat16, torch.float32):
        return f"Liger group_norm_forward takes a float x, not {x.dtype}"
    return None


def liger_gn_silu(ops: ModuleType, a: Args) -> torch.Tensor:
    x, w, b, groups, eps = _gn_parts(a)
    x = x.contiguous()  # Liger views x as [B, G, -1]; SGLang's wrapper makes x contiguous too
    y = part(ops, "group_norm").group_norm_forward(x, x.shape[1], groups, w, b, eps)[0]
    return F.silu(y, inplace=True)


_LIGER_GN = Peer(*LIGER, module="liger_kernel.ops", adapt=liger_gn_silu, applies=liger_gn_applies,
                 mapping="composed: group_norm_forward(x, C, num_groups, weight, bias, eps)[0] (Liger's training "
                         "GroupNorm: one program per (batch, group)), then torch silu in place on its output "
                         "(two roundings to x's dtype where SGLang has one).")

PEERS = {"triton_group_norm_silu": (_LIGER_GN,), "apply_group_norm_silu": (_LIGER_GN,)}


# Byte models the stamper writes into task.toml: (reads, writes-like).
BYTE_MODELS = {
    "triton_group_norm_silu": (("x", "weight", "bias"), ("x",)),
    "apply_group_norm_silu": (("x", "weight", "bias"), ("x",)),
}
