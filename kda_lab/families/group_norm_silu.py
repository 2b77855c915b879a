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

# Test rows the stamper writes into every group_norm_silu task (kda new-task): tails and odd sizes, 2-D..5-D,
# one element per group, constant input, channels-last x, SGLang's one-pass and chunked paths, fp32 offset rows.
TEST_ROWS = """
[[workloads]]
name = "test_2d_one_element_per_group"
fn = "triton_group_norm_silu"
kind = "test"
source = "test: 2-D x [B,C] with C == num_groups: every group is one element, var 0, y = silu(bias)"
tags = ["tiny"]
[workloads.args]
x = { shape = [3, 32], dtype = "float32" }
weight = { shape = [32], dtype = "float32" }
bias = { shape = [32], dtype = "float32" }
num_groups = 32
eps = 1e-6

[[workloads]]
name = "test_2d_sglang_shape"
fn = "triton_group_norm_silu"
kind = "test"
source = "test: SGLang's own 2-D test shape (4,128), G=32"
tags = ["tiny"]
[workloads.args]
x = { shape = [4, 128], dtype = "float16" }
weight = { shape = [128], dtype = "float16" }
bias = { shape = [128], dtype = "float16" }
num_groups = 32
eps = 1e-5

[[workloads]]
name = "test_3d_odd_tail"
fn = "triton_group_norm_silu"
kind = "test"
source = "test: 3-D, odd length 37, 4 channels per group (group size 148: a masked tail)"
tags = ["tiny"]
[workloads.args]
x = { shape = [2, 96, 37], dtype = "float32" }
weight = { shape = [96], dtype = "float32" }
bias = { shape = [96], dtype = "float32" }
num_groups = 24
eps = 1e-6

[[workloads]]
name = "test_4d_tail_eps1e5"
fn = "triton_group_norm_silu"
kind = "test"
source = "test: 4-D odd spatial 7x9, eps 1e-5 (the nn.GroupNorm default the LTX-2 latent upsampler uses)"
tags = ["tiny"]
[workloads.args]
x = { shape = [2, 64, 7, 9], dtype = "float16" }
weight = { shape = [64], dtype = "float16" }
bias = { shape = [64], dtype = "float16" }
num_groups = 32
eps = 1e-5

[[workloads]]
name = "test_5d_odd"
fn = "triton_group_norm_silu"
kind = "test"
source = "test: 5-D [B,C,T,H,W] with odd T, H, W"
tags = ["tiny"]
[workloads.args]
x = { shape = [1, 64, 3, 5, 7], dtype = "float32" }
weight = { shape = [64], dtype = "float32" }
bias = { shape = [64], dtype = "float32" }
num_groups = 32
eps = 1e-6

[[workloads]]
name = "test_5d_channels_last"
fn = "triton_group_norm_silu"
kind = "test"
source = "test: 5-D channels-last view (stride 1 over C), the layout of the strided VAE captures"
tags = ["tiny"]
[workloads.args]
x = { shape = [1, 64, 3, 4, 5], dtype = "float16", strides = [3840, 1, 1280, 320, 64] }
weight = { shape = [64], dtype = "float16" }
bias = { shape = [64], dtype = "float16" }
num_groups = 32
eps = 1e-6

[[workloads]]
name = "test_constant_input"
fn = "triton_group_norm_silu"
kind = "test"
source = "test: constant x (0.3, not a binary fraction): var 0, y = silu(bias) up to rounding of the mean"
tags = ["tiny"]
[workloads.args]
x = { shape = [2, 64, 4, 4], dtype = "float32", dist = "const", mean = 0.3 }
weight = { shape = [64], dtype = "float32" }
bias = { shape = [64], dtype = "float32" }
num_groups = 32
eps = 1e-6

[[workloads]]
name = "test_groups_of_one_channel"
fn = "triton_group_norm_silu"
kind = "test"
source = "test: num_groups == C (instance norm), 81 elements per group"
tags = ["tiny"]
[workloads.args]
x = { shape = [2, 16, 9, 9], dtype = "float32" }
weight = { shape = [16], dtype = "float32" }
bias = { shape = [16], dtype = "float32" }
num_groups = 16
eps = 1e-6

[[workloads]]
name = "test_one_group"
fn = "triton_group_norm_silu"
kind = "test"
source = "test: num_groups 1 (layer norm over C and space), odd spatial"
tags = ["tiny"]
[workloads.args]
x = { shape = [2, 8, 5, 13], dtype = "float16" }
weight = { shape = [8], dtype = "float16" }
bias = { shape = [8], dtype = "float16" }
num_groups = 1
eps = 1e-6

[[workloads]]
name = "test_chunked_scalar_affine"
fn = "triton_group_norm_silu"
kind = "test"
source = "test: group size 2^19 >= 2^18 with spatial % 8192 == 0 and 64 chunks: SGLang's chunked path, scalar-affine apply"
tags = ["tiny"]
[workloads.args]
x = { shape = [1, 2, 262144], dtype = "float32" }
weight = { shape = [2], dtype = "float32" }
bias = { shape = [2], dtype = "float32" }
num_groups = 1
eps = 1e-6

[[workloads]]
name = "test_chunked_tail"
fn = "triton_group_norm_silu"
kind = "test"
source = "test: group size 300006 (chunked path, general apply, a ragged last chunk), 4-D"
tags = ["tiny"]
[workloads.args]
x = { shape = [1, 2, 3, 50001], dtype = "float16" }
weight = { shape = [2], dtype = "float16" }
bias = { shape = [2], dtype = "float16" }
num_groups = 1
eps = 1e-6

[[workloads]]
name = "test_offset_fp32"
fn = "triton_group_norm_silu"
kind = "test"
source = "test: fp32 x = 1e4 + 100*N(0,1): a single-pass E[x^2]-mean^2 variance fails here (SGLang's Triton kernel does)"
note = "not tagged tiny: SGLang 0.5.23's kernels compute var = E[x^2] - mean^2 in fp32 and miss this row by ~1e-2"
[workloads.args]
x = { shape = [2, 64, 6, 7], dtype = "float32", mean = 10000.0, std = 100.0 }
weight = { shape = [64], dtype = "float32" }
bias = { shape = [64], dtype = "float32" }
num_groups = 32
eps = 1e-6

[[workloads]]
name = "test_offset_fp32_large_group"
fn = "triton_group_norm_silu"
kind = "test"
source = "test: offset 1e4 with a 1% spread on a 2^18-element group (the split-statistics path of a candidate)"
[workloads.args]
x = { shape = [1, 32, 16, 128, 128], dtype = "float32", mean = 10000.0, std = 100.0 }
weight = { shape = [32], dtype = "float32" }
bias = { shape = [32], dtype = "float32" }
num_groups = 32
eps = 1e-6

[[workloads]]
name = "test_bf16_5d"
fn = "triton_group_norm_silu"
kind = "test"
source = "test: bf16 5-D (GPU only: the interpreter's bf16 arithmetic is broken)"
[workloads.args]
x = { shape = [1, 128, 3, 20, 24], dtype = "bfloat16" }
weight = { shape = [128], dtype = "bfloat16" }
bias = { shape = [128], dtype = "bfloat16" }
num_groups = 32
eps = 1e-6

[[workloads]]
name = "test_bf16_chunked_tail"
fn = "triton_group_norm_silu"
kind = "test"
source = "test: bf16, batch 2, group size 270900 (chunked path) with odd H and W"
[workloads.args]
x = { shape = [2, 32, 3, 300, 301], dtype = "bfloat16" }
weight = { shape = [32], dtype = "bfloat16" }
bias = { shape = [32], dtype = "bfloat16" }
num_groups = 32
eps = 1e-6

[[workloads]]
name = "test_fp16_batch3"
fn = "triton_group_norm_silu"
kind = "test"
source = "test: fp16, batch 3, odd H and W, 8 channels per group"
[workloads.args]
x = { shape = [3, 256, 2, 17, 19], dtype = "float16" }
weight = { shape = [256], dtype = "float16" }
bias = { shape = [256], dtype = "float16" }
num_groups = 32
eps = 1e-6

[[workloads]]
name = "test_apply_4d_tail"
fn = "apply_group_norm_silu"
kind = "test"
source = "test: apply_group_norm_silu, 4-D odd spatial"
tags = ["tiny"]
[workloads.args]
x = { shape = [2, 64, 7, 9], dtype = "float32" }
weight = { shape = [64], dtype = "float32" }
bias = { shape = [64], dtype = "float32" }
num_groups = 32
eps = 1e-6

[[workloads]]
name = "test_apply_5d_eps1e5"
fn = "apply_group_norm_silu"
kind = "test"
source = "test: apply_group_norm_silu, 5-D, eps 1e-5 (nn.GroupNorm default, LTX-2 latent upsampler)"
tags = ["tiny"]
[workloads.args]
x = { shape = [1, 64, 3, 5, 7], dtype = "float16" }
weight = { shape = [64], dtype = "float16" }
bias = { shape = [64], dtype = "float16" }
num_groups = 32
eps = 1e-5

[[workloads]]
name = "test_apply_2d_one_element_per_group"
fn = "apply_group_norm_silu"
kind = "test"
source = "test: apply_group_norm_silu, 2-D [B,C] with C == num_groups: y = silu(bias)"
tags = ["tiny"]
[workloads.args]
x = { shape = [5, 32], dtype = "float32" }
weight = { shape = [32], dtype = "float32" }
bias = { shape = [32], dtype = "float32" }
num_groups = 32
eps = 1e-6

[[workloads]]
name = "test_apply_constant_input"
fn = "apply_group_norm_silu"
kind = "test"
source = "test: apply_group_norm_silu, constant x = -1.3: y = silu(bias)"
tags = ["tiny"]
[workloads.args]
x = { shape = [1, 32, 3, 3], dtype = "float32", dist = "const", mean = -1.3 }
weight = { shape = [32], dtype = "float32" }
bias = { shape = [32], dtype = "float32" }
num_groups = 32
eps = 1e-6

[[workloads]]
name = "test_apply_channels_last"
fn = "apply_group_norm_silu"
kind = "test"
source = "test: apply_group_norm_silu on a 5-D channels-last view"
tags = ["tiny"]
[workloads.args]
x = { shape = [1, 64, 3, 4, 5], dtype = "float16", strides = [3840, 1, 1280, 320, 64] }
weight = { shape = [64], dtype = "float16" }
bias = { shape = [64], dtype = "float16" }
num_groups = 32
eps = 1e-6

[[workloads]]
name = "test_apply_offset_fp32"
fn = "apply_group_norm_silu"
kind = "test"
source = "test: apply_group_norm_silu, fp32 offset 1e4 with a 1% spread (E[x^2]-mean^2 fails it)"
note = "not tagged tiny: SGLang 0.5.23's single-pass variance misses this row"
[workloads.args]
x = { shape = [2, 64, 6, 7], dtype = "float32", mean = 10000.0, std = 100.0 }
weight = { shape = [64], dtype = "float32" }
bias = { shape = [64], dtype = "float32" }
num_groups = 32
eps = 1e-6

[[workloads]]
name = "test_apply_bf16_5d"
fn = "apply_group_norm_silu"
kind = "test"
source = "test: apply_group_norm_silu, bf16 5-D (GPU only)"
[workloads.args]
x = { shape = [1, 128, 3, 20, 24], dtype = "bfloat16" }
weight = { shape = [128], dtype = "bfloat16" }
bias = { shape = [128], dtype = "bfloat16" }
num_groups = 32
eps = 1e-6
"""
