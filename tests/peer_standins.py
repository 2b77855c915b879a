"""Stand-ins for the pinned public peers (tests/test_peers.py): each peer function's documented semantics in torch,
with every call recorded so the test can bind it against the real signature in the pinned wheel.

Where a peer ships a torch reference it is used, read from the installed wheel's source without importing the
package (QuACK needs the CuTe DSL and CUDA to import): ``quack.rmsnorm.rmsnorm_ref``. The others follow the
peers' docstrings and kernels (cited per function); each also refuses what the real function asserts on, so an
adapter whose ``applies`` lets a row through that the peer would reject fails here too.
"""

from __future__ import annotations

import ast
import inspect
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from importlib import metadata
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import torch
import torch.nn.functional as F

PEER_DISTRIBUTIONS = {"quack": "quack-kernels", "liger_kernel": "liger-kernel", "flashinfer": "flashinfer-python"}


# ------------------------------------------------------------------------------------------------ pinned source

def source_file(module: str) -> Path:
    """The installed file of a peer's module (``quack.rotary`` -> .../quack/rotary.py), found without importing."""
    dist = metadata.distribution(PEER_DISTRIBUTIONS[module.split(".")[0]])
    rel = module.replace(".", "/")
    for candidate in (f"{rel}.py", f"{rel}/__init__.py"):
        path = Path(str(dist.locate_file(candidate)))
        if path.is_file():
            return path
    raise FileNotFoundError(f"{module} is not in the installed {dist.metadata['Name']} {dist.version}")


def _module_level_defs(body: list[ast.stmt]):
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield node
        elif isinstance(node, (ast.If, ast.Try)):  # conditional definitions stay module-level
            yield from _module_level_defs(node.body + node.orelse + getattr(node, "finalbody", []))


@cache
def _tree(module: str) -> tuple[str, ast.Module]:
    text = source_file(module).read_text()
    return text, ast.parse(text)


def find_function(module: str, name: str) -> ast.FunctionDef:
    for node in _module_level_defs(_tree(module)[1].body):
        if node.name == name:
            return node  # type: ignore[return-value]
    raise LookupError(f"{module}.{name} is not defined in {source_file(module)}")


def pinned_signature(dotted: str) -> inspect.Signature:
    """The signature of ``dotted`` (``quack.rotary.apply_rotary``) as written in the installed pinned wheel."""
    module, name = dotted.rsplit(".", 1)
    a = find_function(module, name).args
    P = inspect.Parameter
    params: list[inspect.Parameter] = []
    positional = a.posonlyargs + a.args
    defaults: list[ast.expr | None] = [None] * (len(positional) - len(a.defaults)) + list(a.defaults)
    for i, (arg, default) in enumerate(zip(positional, defaults, strict=True)):
        kind = P.POSITIONAL_ONLY if i < len(a.posonlyargs) else P.POSITIONAL_OR_KEYWORD
        params.append(P(arg.arg, kind, default=P.empty if default is None else ast.unparse(default)))
    if a.vararg:
        params.append(P(a.vararg.arg, P.VAR_POSITIONAL))
    for arg, default in zip(a.kwonlyargs, a.kw_defaults, strict=True):
        params.append(P(arg.arg, P.KEYWORD_ONLY, default=P.empty if default is None else ast.unparse(default)))
    if a.kwarg:
        params.append(P(a.kwarg.arg, P.VAR_KEYWORD))
    return inspect.Signature(params)


def load_reference(dotted: str) -> Callable[..., Any]:
    """A pure-torch function from a peer's source (its own reference), executed alone: the package is not imported."""
    module, name = dotted.rsplit(".", 1)
    text, _ = _tree(module)
    code = ast.get_source_segment(text, find_function(module, name))
    namespace: dict[str, Any] = {"torch": torch, "Tensor": torch.Tensor, "F": F}
    exec(compile(code, f"{source_file(module)}:{name}", "exec"), namespace)  # noqa: S102 - the pinned wheel's own code
    return namespace[name]


# ------------------------------------------------------------------------------------------------ recording stand-in

@dataclass
class Call:
    name: str  # dotted, e.g. quack.rotary.apply_rotary
    args: tuple[Any, ...]
    kwargs: dict[str, Any]


@dataclass
class StandIn:
    """What an adapter receives in place of ``import_module(peer.module)``: the functions below, recorded."""

    calls: list[Call] = field(default_factory=list)

    def module(self, root: str, overrides: dict[str, Callable[..., Any]] | None = None) -> SimpleNamespace:
        impls = {**SEMANTICS, **(overrides or {})}
        top = SimpleNamespace()
        for dotted, fn in impls.items():
            if not dotted.startswith(root + "."):
                continue
            *parts, name = dotted[len(root) + 1:].split(".")
            node = top
            for p in parts:
                if not hasattr(node, p):
                    setattr(node, p, SimpleNamespace())
                node = getattr(node, p)
            setattr(node, name, self._recorded(dotted, fn))
        return top

    def _recorded(self, dotted: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            self.calls.append(Call(dotted, args, kwargs))
            return fn(*args, **kwargs)

        return call


# ------------------------------------------------------------------------------------------------ QuACK 0.6.5

def quack_apply_rotary(x, cos, sin, seqlen_offsets=None, cu_seqlens=None, max_seqlen=None, interleaved=False,
                       inplace=False, conjugate=False):
    """quack/rotary.py apply_rotary: x [B,S,H,D], cos/sin [S_ro, rotary_dim/2] in their own dtype (the kernel
    loads them and computes in fp32), the first rotary_dim lanes rotated (GPT-J pairs if interleaved, else NeoX
    halves), one rounding to x's dtype; out of place unless inplace. Asserts as QuACK does."""
    assert x.dtype in (torch.float16, torch.bfloat16, torch.float32) and cos.dtype == sin.dtype
    assert cu_seqlens is None and seqlen_offsets is None and not conjugate
    _b, s, _h, d = x.shape
    s_ro, half = cos.shape
    r = 2 * half
    assert r <= d and d <= 512 and d % 8 == 0 and r % 8 == 0 and s_ro >= s
    assert x.stride(-1) == 1
    c, sn = cos[:s].float()[None, :, None, :], sin[:s].float()[None, :, None, :]
    xf = x[..., :r].float()
    if interleaved:
        x0, x1 = xf[..., 0::2], xf[..., 1::2]
        rot = torch.stack((x0 * c - x1 * sn, x1 * c + x0 * sn), dim=-1).flatten(-2)
    else:
        x0, x1 = xf[..., :half], xf[..., half:]
        rot = torch.cat((x0 * c - x1 * sn, x1 * c + x0 * sn), dim=-1)
    out = x if inplace else x.clone()
    out[..., :r] = rot.to(x.dtype)
    return out


def _quack_rows(x: torch.Tensor) -> None:
    assert x.dim() == 2, "QuACK's RMSNorm kernel is compiled for [M, N] rows"  # (batch_sym, N) fake tensors
    assert x.dtype in (torch.float16, torch.bfloat16, torch.float32)


def quack_rmsnorm_fwd(x, weight=None, bias=None, residual=None, out_dtype=None, residual_dtype=None, eps=1e-6,
                      store_rstd=False, weight_offset=0.0):
    _quack_rows(x)
    assert residual is None and out_dtype in (None, x.dtype)
    return _rmsnorm_ref()(x, weight, bias, eps=eps, weight_offset=weight_offset), x, None


def quack_private_rmsnorm_fwd(x, weight, out, bias=None, rstd=None, mean=None, residual=None, residual_out=None,
                              eps=1e-6, is_layernorm=False, weight_offset=0.0):
    _quack_rows(x)
    assert not is_layernorm and residual is None and out.shape == x.shape
    out.copy_(_rmsnorm_ref()(x, weight, bias, eps=eps, weight_offset=weight_offset))


def quack_layernorm_fwd(x, weight, bias=None, eps=1e-6, return_rstd=False, return_mean=False):
    """quack/rmsnorm.py layernorm_fwd (its asserts); math: its layernorm_ref (fp32 F.layer_norm) plus the bias."""
    assert x.dim() == 2 and weight.dim() == 1 and weight.dtype == torch.float32
    assert bias is None or (bias.dim() == 1 and bias.dtype == torch.float32)
    assert not return_rstd and not return_mean
    return F.layer_norm(x.float(), weight.shape, weight, bias, eps).to(x.dtype)


@cache
def _rmsnorm_ref() -> Callable[..., Any]:
    return load_reference("quack.rmsnorm.rmsnorm_ref")


# ------------------------------------------------------------------------------------------------ Liger 0.8.5
# In-process semantics of Liger's forward kernels (ops/*.py); tests/test_peers.py also runs the real kernels in
# the Triton interpreter (kda_lab/interpret/shims/liger.py).

def liger_rms_norm_forward(X, W, eps, offset, casting_mode, row_mode):
    assert casting_mode == "gemma", "the adapters use Liger's all-fp32 'gemma' casting mode"
    shape = X.shape
    x = X.view(-1, shape[-1]).float()
    y = x * torch.rsqrt(x.square().mean(-1, keepdim=True) + eps)
    if W is not None:
        y = y * (offset + W.float())
    return y.to(X.dtype).view(shape), X, None, None, None, casting_mode


def liger_layer_norm_forward(X, W, B, eps):
    shape = X.shape
    y = F.layer_norm(X.view(-1, shape[-1]).float(), shape[-1:], W.float(), B.float(), eps)
    return y.to(X.dtype).view(shape), X, None, None, None, None


def liger_group_norm_forward(X, num_channels, num_groups, W, B, eps):
    y = F.group_norm(X.float(), num_groups, W.float(), B.float(), eps)
    return y.to(X.dtype), X, None, None, None


def liger_modulated_rms_norm_forward(X, W, scale, shift, eps, offset, casting_mode):
    assert casting_mode == "gemma"
    d = X.shape[-1]
    rows = scale.numel() // d
    x = X.view(-1, d).float()
    assert x.shape[0] % rows == 0 and (shift is None or shift.numel() == scale.numel())
    per = x.shape[0] // rows
    n = x * torch.rsqrt(x.square().mean(-1, keepdim=True) + eps)
    if W is not None:
        n = n * (offset + W.float())
    n = n.to(X.dtype).float()  # gemma: Y cast back to X's dtype before the modulation
    idx = torch.arange(x.shape[0]) // per
    y = n * (1.0 + scale.view(rows, d).float()[idx])
    if shift is not None:
        y = y + shift.view(rows, d).float()[idx]
    return y.to(X.dtype).view(X.shape), None, None, None, None, per


# ------------------------------------------------------------------------------------------------ FlashInfer 0.7.2

def flashinfer_rmsnorm(input, weight, eps=1e-6, out=None, enable_pdl=None):
    """flashinfer/norm rmsnorm: fp16/bf16 (DISPATCH_DLPACK_DTYPE_TO_CTYPE_FP16), weight read as the input's
    c_type (so it must have that dtype), 2-D or 3-D, last dim contiguous; fp32 math, one rounding."""
    assert input.dtype in (torch.float16, torch.bfloat16) and weight.dtype == input.dtype
    assert input.dim() in (2, 3) and input.stride(-1) == 1
    xf = input.float()
    y = (xf * torch.rsqrt(xf.square().mean(-1, keepdim=True) + eps) * weight.float()).to(input.dtype)
    if out is None:
        return y
    assert out.dtype == input.dtype and out.shape == input.shape and out.stride(-1) == 1
    out.copy_(y)
    return out


def flashinfer_layernorm(input, gemma, beta, eps=1e-6):
    """flashinfer/norm layernorm: bf16 [batch, hidden] input, fp32 gamma and beta (its docstring)."""
    assert input.dtype == torch.bfloat16 and input.dim() == 2
    assert gemma.dtype == torch.float32 and beta.dtype == torch.float32
    return F.layer_norm(input.float(), gemma.shape, gemma, beta, eps).to(input.dtype)


def _dit_checks(x, residual, mods) -> None:
    """_dit_ln_check_common_inputs / _dit_ln_check_strided_tensor (flashinfer/norm/__init__.py)."""
    assert x.dtype == torch.bfloat16 and x.is_contiguous() and x.dim() == 3 and x.shape[2] == 3072
    if residual is not None:
        assert residual.shape == x.shape and residual.dtype == torch.bfloat16 and residual.is_contiguous()
    for t in mods:
        assert t.dim() in (2, 3) and t.shape[-1] == 3072 and t.dtype == torch.bfloat16 and t.stride(-1) == 1
        assert (t.stride(1) if t.dim() == 3 else t.stride(0)) == 6 * 3072


def _dit(x, residual, gate, scale, shift, eps):
    """The docstring formula: r = residual + x*gate (or + x); y = LayerNorm(r)*(1 + scale) + shift; the kernel
    keeps r in fp32 for the statistics and stores r and y in bf16 (fused_dit_layernorm.cuh)."""
    b, s, d = x.shape

    def rows(t):  # per-token [B, S, D] (a [S, D] view at B = 1)
        return t.float().reshape(b, s, d)

    r = x.float() * rows(gate) if gate is not None else x.float()
    if residual is not None:
        r = r + residual.float()
    y = F.layer_norm(r, (d,), None, None, eps) * (1.0 + rows(scale)) + rows(shift)
    return r.to(torch.bfloat16), y.to(torch.bfloat16)


def flashinfer_dit_residual(input, scale, shift, *, residual=None, scale_bias=None, shift_bias=None, epsilon=1e-6,
                            use_nvfp4=False, use_mxfp8=False, global_scaling_factor=None,
                            input_global_scaling_factor=None, residual_out=None, norm_out=None, sf_out=None):
    assert scale_bias is None and shift_bias is None and not use_nvfp4 and not use_mxfp8
    _dit_checks(input, residual, (scale, shift))
    return _dit(input, residual, None, scale, shift, epsilon)


def flashinfer_dit_gate_residual(input, residual, gate, scale, shift, *, gate_bias=None, scale_bias=None,
                                 shift_bias=None, epsilon=1e-6, use_nvfp4=False, use_mxfp8=False,
                                 global_scaling_factor=None, input_global_scaling_factor=None, residual_out=None,
                                 norm_out=None, sf_out=None):
    assert gate_bias is None and scale_bias is None and shift_bias is None
    _dit_checks(input, residual, (gate, scale, shift))
    return _dit(input, residual, gate, scale, shift, epsilon)


def flashinfer_rope_cos_sin_cache_inplace(positions, query, key, head_size, cos_sin_cache, is_neox=True):
    """flashinfer/rope.py: query/key [nnz, heads*head_size], cache [max_pos, rotary_dim] fp32 (cos half | sin
    half), RoPE on the first rotary_dim lanes of every head, NeoX halves or (is_neox=False) GPT-J pairs."""
    assert cos_sin_cache.dtype == torch.float32
    rot = cos_sin_cache.shape[1]
    rows = cos_sin_cache[positions.long()]
    c, sn = rows[:, None, : rot // 2], rows[:, None, rot // 2:]
    for t in (query, key):
        v = t.view(t.shape[0], -1, head_size)
        xf = v[..., :rot].float()
        if is_neox:
            x0, x1 = xf[..., : rot // 2], xf[..., rot // 2:]
            out = torch.cat((x0 * c - x1 * sn, x1 * c + x0 * sn), dim=-1)
        else:
            x0, x1 = xf[..., 0::2], xf[..., 1::2]
            out = torch.stack((x0 * c - x1 * sn, x1 * c + x0 * sn), dim=-1).flatten(-2)
        v[..., :rot] = out.to(t.dtype)


SEMANTICS: dict[str, Callable[..., Any]] = {
    "quack.rotary.apply_rotary": quack_apply_rotary,
    "quack.rmsnorm.rmsnorm_fwd": quack_rmsnorm_fwd,
    "quack.rmsnorm._rmsnorm_fwd": quack_private_rmsnorm_fwd,
    "quack.rmsnorm.layernorm_fwd": quack_layernorm_fwd,
    "liger_kernel.ops.rms_norm.rms_norm_forward": liger_rms_norm_forward,
    "liger_kernel.ops.layer_norm.layer_norm_forward": liger_layer_norm_forward,
    "liger_kernel.ops.group_norm.group_norm_forward": liger_group_norm_forward,
    "liger_kernel.ops.modulated_rms_norm.modulated_rms_norm_forward": liger_modulated_rms_norm_forward,
    "flashinfer.norm.rmsnorm": flashinfer_rmsnorm,
    "flashinfer.norm.layernorm": flashinfer_layernorm,
    "flashinfer.norm.fused_dit_residual_layernorm_scale_shift": flashinfer_dit_residual,
    "flashinfer.norm.fused_dit_gate_residual_layernorm_scale_shift": flashinfer_dit_gate_residual,
    "flashinfer.rope.apply_rope_with_cos_sin_cache_inplace": flashinfer_rope_cos_sin_cache_inplace,
}
