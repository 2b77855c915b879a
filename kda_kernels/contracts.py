"""Per-function call contracts of the SGLang 0.5.23 baselines, as the ``kda::`` custom ops need them.

For every swap target: the exact Python signature (the custom-op schema is inferred from it), the arguments
mutated in place, a fake (meta) implementation whose outputs have the shapes, dtypes and layouts the SGLang
baseline returns, and for the special kinds the extra pieces (see ``kda_kernels.registry``).
An exported impl must return what the fake describes (the same layout as SGLang's ``torch.empty_like``).

The signature stubs below are copied from SGLang 0.5.23 (``sglang/kernels/ops/diffusion/...``); a test checks
them against the installed package.
"""

# No `from __future__ import annotations`: torch.library infers each schema from these annotations.
import inspect
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

# ----------------------------------------------------------------------------------------------- signatures


def fused_inplace_qknorm_rope(
    q: Tensor, k: Tensor, q_weight: Tensor, k_weight: Tensor, cos_sin_cache: Tensor, positions: Tensor, *,
    is_neox: bool, eps: float = 1e-6, head_dim: int = 0, rope_dim: int = 0, round_norm_before_rope: bool = False,
    cache_has_full_width: bool = False,
) -> None: ...


def norm_infer(
    x: Tensor, weight: Tensor | None, bias: Tensor | None, eps: float, is_rms_norm: bool = False,
    out: Tensor | None = None,
) -> Tensor: ...


def _norm_infer_noout(
    x: Tensor, weight: Tensor | None, bias: Tensor | None, eps: float, is_rms_norm: bool = False,
) -> Tensor: ...


def _norm_infer_out(
    x: Tensor, weight: Tensor | None, bias: Tensor | None, eps: float, is_rms_norm: bool, out: Tensor,
) -> None: ...


def triton_one_pass_rms_norm(x: Tensor, w: Tensor, eps: float = 1e-6) -> Tensor: ...


def triton_group_norm_silu(x: Tensor, weight: Tensor, bias: Tensor, num_groups: int, eps: float = 1e-5) -> Tensor: ...


def apply_group_norm_silu(x: Tensor, norm: torch.nn.Module, activation: torch.nn.Module) -> Tensor: ...


def apply_rotary_embedding(x: Tensor, cos: Tensor, sin: Tensor, interleaved: bool = False) -> Tensor: ...


def apply_ltx2_split_rotary_emb(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor: ...


def fuse_scale_shift_kernel(
    x: Tensor, scale: Tensor, shift: Tensor, scale_constant: float = 1.0, block_l: int = 128, block_c: int = 128,
) -> Tensor: ...


def fuse_layernorm_scale_shift_gate_select01_kernel(
    x: Tensor, weight: Tensor | None, bias: Tensor | None, scale0: Tensor, shift0: Tensor, gate0: Tensor,
    scale1: Tensor, shift1: Tensor, gate1: Tensor, index: Tensor, eps: float,
) -> tuple[Tensor, Tensor]: ...


def fuse_residual_layernorm_scale_shift_gate_select01_kernel(
    x: Tensor, residual: Tensor, residual_gate: Tensor, weight: Tensor | None, bias: Tensor | None,
    scale0: Tensor, shift0: Tensor, gate0: Tensor, scale1: Tensor, shift1: Tensor, gate1: Tensor, index: Tensor,
    eps: float,
) -> tuple[Tensor, Tensor, Tensor]: ...


def rmsnorm_scale(x: Tensor, weight: Tensor, scale: Tensor, eps: float) -> Tensor: ...


def rmsnorm_tanh_residual(x: Tensor, gate: Tensor, residual: Tensor, weight: Tensor, eps: float) -> Tensor: ...


def fused_norm_scale_shift(
    x: Tensor, weight: Tensor | None, bias: Tensor | None, scale: Tensor, shift: Tensor, norm_type: str,
    eps: float = 1e-5,
) -> Tensor: ...


def fused_scale_residual_norm_scale_shift(
    residual: Tensor, x: Tensor, gate: Tensor | None, weight: Tensor | None, bias: Tensor | None,
    scale: Tensor, shift: Tensor, norm_type: str, eps: float = 1e-5,
) -> tuple[Tensor, Tensor]: ...


# ----------------------------------------------------------------------------------------------------- fakes

def _like(x: Tensor) -> Tensor:
    """SGLang's ``torch.empty_like(x)``: same shape, dtype, device; dense layouts kept."""
    return torch.empty_like(x)


def _contig(x: Tensor) -> Tensor:
    """SGLang's ``x.contiguous()`` then ``empty_like``: a contiguous tensor of x's shape and dtype."""
    return torch.empty_like(x, memory_format=torch.contiguous_format)


def _sglang_gns_triton_path(x: Tensor, weight: Tensor, bias: Tensor, num_groups: int) -> bool:
    """Mirror of SGLang 0.5.23 ``_can_use_triton_group_norm_silu`` (the Triton path returns a contiguous tensor;
    otherwise SGLang returns ``F.silu(F.group_norm(x))``, whose layout follows torch's group_norm)."""
    return (
        x.is_cuda and not torch.is_grad_enabled() and not x.requires_grad
        and x.dtype in (torch.float16, torch.bfloat16, torch.float32) and x.dim() in (2, 3, 4, 5)
        and x.shape[1] % num_groups == 0 and weight.is_cuda and bias.is_cuda
        and weight.dtype == x.dtype and bias.dtype == x.dtype and weight.dim() == 1 and bias.dim() == 1
        and weight.shape == bias.shape == (x.shape[1],)
    )


def _fake_group_norm_silu(x: Tensor, weight: Tensor, bias: Tensor, num_groups: int, eps: float = 1e-5) -> Tensor:
    """Exactly what ``triton_group_norm_silu`` returns, strides included: contiguous from SGLang's Triton path
    (and from the KDA impls, which take only contiguous x), else the eager path's own layout (on CPU a
    channels_last x stays channels_last), obtained by running that path on the fake tensors."""
    if _sglang_gns_triton_path(x, weight, bias, num_groups):
        return _contig(x)
    return torch.nn.functional.silu(torch.nn.functional.group_norm(x, num_groups, weight, bias, eps))


Rewrite = Callable[[Any], Any]  # an operand -> the same object when it is fine, else its replacement


def _rewrite_args(args: tuple[Any, ...], kwargs: dict[str, Any],
                  params: Iterable[tuple[int, str, Rewrite]]) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """``(args, kwargs)`` with each (position, name) operand passed through its rewrite; a rewrite that returns its
    operand unchanged copies nothing (the common path)."""
    pos: list[Any] | None = None
    kw = kwargs
    for i, name, rewrite in params:
        positional = i < len(args)
        t = args[i] if positional else kwargs.get(name)
        u = rewrite(t)
        if u is t:
            continue
        if positional:
            pos = list(args) if pos is None else pos
            pos[i] = u
        else:
            kw = {**kw, name: u}
    return (args if pos is None else tuple(pos)), kw


def _rewriting(*params: tuple[int, str, Rewrite]) -> Callable[..., tuple[tuple[Any, ...], dict[str, Any]]]:
    """A canonicalization: these (position, name) operands through their rewrites, for every path."""
    def canonical(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[tuple[Any, ...], dict[str, Any]]:
        return _rewrite_args(args, kwargs, params)
    return canonical


def _contiguous(t: Any) -> Any:
    return t.contiguous() if isinstance(t, Tensor) and not t.is_contiguous() else t


def _unit_last_stride(t: Any) -> Any:
    return t.contiguous() if isinstance(t, Tensor) and t.dim() and t.stride(-1) != 1 and t.size(-1) > 1 else t


QKNORM_ALIGN_BYTES = 16  # the widest vector SGLang's qknorm_rope.cuh loads and stores (16-byte accesses)


def _aligned_copy(t: Any) -> Any:
    """``t`` itself when it is not a tensor or its address is a multiple of QKNORM_ALIGN_BYTES; else the same values
    at an aligned address with the same sizes and strides (``empty_strided`` allocations are aligned)."""
    if not isinstance(t, Tensor) or t.data_ptr() % QKNORM_ALIGN_BYTES == 0 or t.numel() == 0:
        return t
    u = torch.empty_strided(t.size(), t.stride(), dtype=t.dtype, device=t.device)
    u.copy_(t)
    return u


# SGLang 0.5.23's ``fused_inplace_qknorm_rope`` (JIT CUDA, ``qknorm_rope.cuh``) assumes 16-byte-aligned q, k,
# weights and cache: a view a few elements into its storage makes it fault with ``CUDA error: misaligned address``
# (H200 GPU fuzz, 2026-11-27: the ``offset`` variant of a T = 129 row), a sticky error that ends the process. Its
# callers pass aligned tensors; a direct call need not. Every path gets aligned copies (same sizes and strides, so
# SGLang still refuses what it refuses), and the in-place results are copied back into the caller's q and k.
_QKNORM_OPERANDS = ((0, "q"), (1, "k"), (2, "q_weight"), (3, "k_weight"), (4, "cos_sin_cache"), (5, "positions"))


def _canonical_qknorm(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, ...]:
    """(args, kwargs) with misaligned operands replaced by aligned copies, plus a finish callback that writes the
    copies of q and k back (None when nothing was copied: the common path costs six address checks)."""
    new_args, new_kwargs = _rewrite_args(args, kwargs, ((i, n, _aligned_copy) for i, n in _QKNORM_OPERANDS))
    if new_args is args and new_kwargs is kwargs:
        return args, kwargs, None
    pairs = []
    for i, name in _QKNORM_OPERANDS[:2]:
        before = args[i] if i < len(args) else kwargs.get(name)
        after = new_args[i] if i < len(new_args) else new_kwargs.get(name)
        if after is not before:
            pairs.append((before, after))

    def finish() -> None:
        for caller, copy in pairs:
            caller.copy_(copy)
    return new_args, new_kwargs, finish


# SGLang 0.5.23's Triton kernels index weight/bias as if contiguous (they read ``weight_ptr + c``): a strided or
# broadcast [C] view (``torch.randn(2*C)[::2]``, ``w.expand(C)``) gives wrong values. The [C] vectors are tiny, so
# the overlay hands every path (KDA impl or SGLang) contiguous copies.
_canonical_group_norm_silu = _rewriting((1, "weight", _contiguous), (2, "bias", _contiguous))
# The same in SGLang 0.5.23's one-pass RMSNorm (``rms_norm_tiled_onepass`` reads ``w_ptr + d_offset``): a strided
# [D] weight gives wrong values (overlay fuzz, 2026-11-27); the KDA impls hand such a weight to SGLang.
_canonical_one_pass_rms_norm = _rewriting((1, "w", _contiguous))
# SGLang 0.5.23's ``apply_rotary_embedding`` kernel reads x[2i] and x[2i+1] at offsets 2i, 2i+1 whatever x's last
# stride (its wrapper only checks that x.view(B*T, H, D) succeeds, and makes cos/sin contiguous itself): an x whose
# last dim is not unit-stride (a dense permuted x, a ``[..., ::2]`` view) gives wrong values. Every path gets an x
# with a unit last stride (the promoted h200 impl does the same on its own path; this covers SGLang's fallback and
# other arches).
_canonical_rotary = _rewriting((0, "x", _unit_last_stride))
# SGLang 0.5.23's ``apply_ltx2_split_rotary_emb`` kernel indexes x (and its ``empty_like(x)`` output) as a
# contiguous [B,S,H*D] tensor whatever x's strides, and cos/sin as unit-stride in their last dim (it honours their
# other strides: LTX-2 passes transposed [B,H,S,D/2] views). Every path gets a contiguous x, and cos/sin with a unit
# last stride (LTX-2's own calls: nothing copied).
_canonical_ltx2 = _rewriting((0, "x", _contiguous), (1, "cos", _unit_last_stride), (2, "sin", _unit_last_stride))


def _select01_operand(t: Any, rows: int) -> Any:
    """``t`` ([B|1, C] modulation or [B|1, L] index) as SGLang 0.5.23's select01 wrappers read it right.

    They pass ``t.contiguous()`` to the kernel with the strides of ``t`` itself (``scale0.contiguous(), ...,
    scale0.stride(0), scale0.stride(1)``), for batch rows 0..rows-1. Right when t is contiguous with ``rows`` rows
    (or rows == 1), or a broadcast view with batch stride 0 and last stride 1 (``t[:1].expand(B, -1)``). Otherwise
    (a transposed or chunk view, a last-dim stride, a [1, C] row meant to broadcast over B > 1) SGLang reads wrong
    elements, some past the end of its copy. Rewritten: a [1, *] row broadcast over B > 1 becomes a contiguous row
    expanded (batch stride 0: SGLang reads row 0 for every b; the promoted impl reads batch stride 0), anything
    else a contiguous copy."""
    if not isinstance(t, Tensor) or t.dim() != 2:
        return t  # SGLang raises its ValueError
    if t.is_contiguous() and (rows <= 1 or t.shape[0] == rows):
        return t  # the common path: one check
    if (t.stride(1) == 1 or t.shape[1] <= 1) and (rows <= 1 or t.stride(0) == 0):
        return t
    if t.shape[0] == 1 and rows > 1:
        return t.contiguous().expand(rows, t.shape[1])
    return t.contiguous()


def _canonical_select01(first_mod: int, names: tuple[str, ...]) -> Callable[..., tuple[tuple[Any, ...], dict[str, Any]]]:
    """The select01 canonicalization: ``names`` (scale0 .. gate1, index) from position ``first_mod`` on, each
    through :func:`_select01_operand` with x's batch size (SGLang's layer: contiguous [B, *] tensors, nothing
    copied)."""
    slots = tuple(enumerate(names, start=first_mod))

    def canonical(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[tuple[Any, ...], dict[str, Any]]:
        x = args[0] if args else kwargs.get("x")
        if not isinstance(x, Tensor) or x.dim() != 3:
            return args, kwargs  # SGLang raises
        rows = x.shape[0]
        return _rewrite_args(args, kwargs, ((i, name, lambda t: _select01_operand(t, rows)) for i, name in slots))
    return canonical


_SELECT01_OPERANDS = ("scale0", "shift0", "gate0", "scale1", "shift1", "gate1", "index")
_canonical_select01_ln = _canonical_select01(3, _SELECT01_OPERANDS)
_canonical_select01_residual = _canonical_select01(5, _SELECT01_OPERANDS)


def _canonical_fake(fake: Callable[..., Any], canonical: Callable[..., Any]) -> Callable[..., Any]:
    """A fake of what a canonicalized call returns: ``fake`` on the rewritten inputs (the layout follows the
    rewritten x, e.g. contiguous where a permuted x was copied; SGLang's own layout there came with wrong values)."""
    def run(*args: Any, **kwargs: Any) -> Any:
        a, k = canonical(args, kwargs)
        return fake(*a, **k)
    return run


def _fake_none(*args: Any, **kwargs: Any) -> None:
    return None


def _fake_like0(x: Tensor, *args: Any, **kwargs: Any) -> Tensor:
    return _like(x)


def _fake_contig0(x: Tensor, *args: Any, **kwargs: Any) -> Tensor:
    return _contig(x)


def _fake_select01(x: Tensor, *args: Any, **kwargs: Any) -> tuple[Tensor, Tensor]:
    return _like(x), _like(x)


def _fake_residual_select01(x: Tensor, *args: Any, **kwargs: Any) -> tuple[Tensor, Tensor, Tensor]:
    return _like(x), _like(x), _like(x)


def _fake_norm_scale_shift(x: Tensor, *args: Any, **kwargs: Any) -> Tensor:
    return x.new_empty(x.shape)


def _fake_residual_norm_scale_shift(residual: Tensor, x: Tensor, *args: Any, **kwargs: Any) -> tuple[Tensor, Tensor]:
    return x.new_empty(x.shape), x.new_empty(x.shape)


# ------------------------------------------------------------- optional kind: SGLang's "return None" contract

_MAX_HIDDEN_SIZE = 8192  # sglang.kernels.ops.diffusion.norm.native_bf16_rmsnorm_triton.MAX_HIDDEN_SIZE


def flat_row_stride(x: Tensor) -> int | None:
    """SGLang 0.5.23's ``_flat_row_stride`` (Z-Image's bf16 norms): the row stride when the leading dims flatten
    onto rows, else None. Shared with the lab's oracle module and the norm_tanh_mul_add candidates."""
    if x.dim() < 2 or x.stride(-1) != 1:
        return None
    row_stride = x.stride(-2)
    expected = row_stride * x.shape[-2]
    for dim in range(x.dim() - 3, -1, -1):
        if x.stride(dim) != expected:
            return None
        expected *= x.shape[dim]
    return row_stride


def _can_use_operand(x: Tensor, weight: Tensor, other: Tensor) -> bool:
    return (
        x.is_cuda and weight.is_cuda and other.is_cuda
        and x.device == weight.device == other.device
        and x.dtype == weight.dtype == other.dtype == torch.bfloat16
        and x.dim() >= 2 and 0 < x.shape[-1] <= _MAX_HIDDEN_SIZE and x.numel() > 0
        and weight.shape == (x.shape[-1],) and weight.is_contiguous()
        and other.dim() >= 2 and other.shape[-1] == x.shape[-1] and other.numel() > 0
        and flat_row_stride(x) is not None and flat_row_stride(other) is not None
    )


def accepts_rmsnorm_scale(x: Tensor, weight: Tensor, scale: Tensor, eps: float) -> bool:
    """Mirror of SGLang 0.5.23 ``rmsnorm_scale``'s conditions for returning a tensor (else ``None``)."""
    if not _can_use_operand(x, weight, scale):
        return False
    dim = x.shape[-1]
    return (x.numel() // dim) % (scale.numel() // dim) == 0


def accepts_rmsnorm_tanh_residual(x: Tensor, gate: Tensor, residual: Tensor, weight: Tensor, eps: float) -> bool:
    """Mirror of SGLang 0.5.23 ``rmsnorm_tanh_residual``'s conditions for returning a tensor (else ``None``)."""
    if not _can_use_operand(x, weight, gate):
        return False
    if (residual.device != x.device or residual.dtype != x.dtype or residual.shape != x.shape
            or flat_row_stride(residual) is None):
        return False
    dim = x.shape[-1]
    return (x.numel() // dim) % (gate.numel() // dim) == 0


# ---------------------------------------------------------------------------------------------------- table

@dataclass(frozen=True)
class Contract:
    function: str
    signature: inspect.Signature  # the SGLang call signature (what call sites pass)
    op_signature: inspect.Signature  # what the kda:: custom op takes (differs for the out/wrapper kinds)
    mutates_args: tuple[str, ...]
    fake: Callable[..., Any] | None
    accepts: Callable[..., bool] | None = None  # optional kind: SGLang returns a tensor iff this holds
    out_signature: inspect.Signature | None = None  # out kind: the mutating variant kda::<name>_out
    first_tensor: str = "x"
    # (args, kwargs) -> (args, kwargs) or (args, kwargs, finish): inputs SGLang accepts but computes wrong (or
    # faults on), rewritten for every path; ``finish`` (or None), called after the call, writes in-place results
    # computed on copies back into the caller's tensors
    canonical: Callable[..., Any] | None = None

    @property
    def n_outputs(self) -> int:
        ann = self.op_signature.return_annotation
        if ann is None or ann is type(None):
            return 0
        return len(getattr(ann, "__args__", ())) or 1


def _sig(fn: Callable[..., Any]) -> inspect.Signature:
    return inspect.signature(fn)


def _c(fn: Callable[..., Any], fake: Callable[..., Any] | None, mutates: tuple[str, ...] = (), **kw: Any) -> Contract:
    sig = _sig(fn)
    return Contract(function=fn.__name__, signature=sig, op_signature=kw.pop("op_signature", sig),
                    mutates_args=mutates, fake=fake, first_tensor=next(iter(sig.parameters)), **kw)


CONTRACTS: dict[str, Contract] = {c.function: c for c in (
    _c(fused_inplace_qknorm_rope, _fake_none, ("q", "k"), canonical=_canonical_qknorm),
    _c(norm_infer, _fake_contig0, op_signature=_sig(_norm_infer_noout), out_signature=_sig(_norm_infer_out)),
    _c(triton_one_pass_rms_norm, _fake_contig0, canonical=_canonical_one_pass_rms_norm),
    _c(triton_group_norm_silu, _fake_group_norm_silu, canonical=_canonical_group_norm_silu),
    _c(apply_group_norm_silu, None),
    _c(apply_rotary_embedding, _canonical_fake(_fake_like0, _canonical_rotary), canonical=_canonical_rotary),
    _c(apply_ltx2_split_rotary_emb, _canonical_fake(_fake_like0, _canonical_ltx2), canonical=_canonical_ltx2),
    _c(fuse_scale_shift_kernel, _fake_like0),
    _c(fuse_layernorm_scale_shift_gate_select01_kernel, _fake_select01, canonical=_canonical_select01_ln),
    _c(fuse_residual_layernorm_scale_shift_gate_select01_kernel, _fake_residual_select01,
       canonical=_canonical_select01_residual),
    _c(rmsnorm_scale, _fake_contig0, accepts=accepts_rmsnorm_scale),
    _c(rmsnorm_tanh_residual, _fake_contig0, accepts=accepts_rmsnorm_tanh_residual),
    _c(fused_norm_scale_shift, _fake_norm_scale_shift),
    _c(fused_scale_residual_norm_scale_shift, _fake_residual_norm_scale_shift),
)}


def group_norm_silu_eligible(x: Tensor, norm: Any, activation: Any, allow_non_cuda: bool = False) -> bool:
    """SGLang 0.5.23 ``apply_group_norm_silu``'s condition for taking the fused tensor-level path."""
    nn = torch.nn
    return (
        (x.is_cuda or allow_non_cuda)
        and not torch.is_grad_enabled()
        and not x.requires_grad
        and isinstance(norm, nn.GroupNorm)
        and isinstance(activation, nn.SiLU)
        and not activation.inplace
        and norm.affine
        and norm.weight is not None
        and norm.bias is not None
    )
