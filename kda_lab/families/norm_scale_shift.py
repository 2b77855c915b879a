"""adaLN norm + modulation: ``fused_norm_scale_shift`` and ``fused_scale_residual_norm_scale_shift``.

(Earlier labs: ``cutedsl_norm_scale_shift``.) SGLang 0.5.23, ``norm/scale_residual_norm_cutedsl.py``: CuTe DSL
kernels registered as ``torch.library.custom_op("sglang::...")`` with fake impls; on SM100+ a KDA native-CUDA
pre-dispatch (``kda_kernels/norm_scale_shift_jit.py``) takes bf16 LayerNorm rows with D = 3072, B = 1, no
weight/bias and row-broadcast bf16 modulation.

Contract:

- ``fused_norm_scale_shift(x, weight, bias, scale, shift, norm_type, eps=1e-5) -> y``:
  ``y = norm(x) * (1 + scale) + shift``.
- ``fused_scale_residual_norm_scale_shift(residual, x, gate, weight, bias, scale, shift, norm_type, eps=1e-5)
  -> (y, residual_out)``: ``r = residual + gate * x`` (``gate=None``: ``r = residual + x``),
  ``residual_out = r`` and ``y = norm(r) * (1 + scale) + shift``.

``norm_type`` is ``"layer"`` (centered variance, fp32 statistics) or ``"rms"`` (bias ignored);
``norm(v) = (v - mean) * rstd * w + b``, ``rstd = rsqrt(var + eps)``. x / residual are ``[B, S, D]`` with
last stride 1, D % 256 == 0 and D <= 8192; fp16 / bf16 / fp32 per tensor (dtypes may mix: Wan feeds bf16 x
with fp32 modulation and fp32 weight/bias). weight / bias: ``None`` or ``[D]``. scale / shift / gate
broadcast modes (BSFD): ``[1]`` (scalar), ``[D]``, ``[1|B, D]``, ``[1|B, 1|S, D]``, ``[B, F, 1, D]`` (frame f
covers tokens ``f*S/F .. (f+1)*S/F - 1``; S % F == 0). Outputs are new tensors in x's dtype.

Roundings the oracle keeps (SGLang's kernel stores them in x's dtype): ``r`` is rounded to x's dtype before the
statistics (and is ``residual_out``); the normalized value ``norm(r)`` is rounded to x's dtype before the
modulation. Everything else is fp64; the modulation ``n * (1 + scale) + shift`` runs in the kernel in the
operands' dtypes (bf16 operands: ``1 + scale`` and the product are bf16 roundings), which the bf16/fp16
tolerances absorb.

Upstream quirk (not reproduced): for LayerNorm with exactly one of weight / bias, SGLang's CuTe kernel applies
neither (``normalize_chunk`` only uses the affine pair when both are tensors). The SGLang layers never pass
that combination (FP32LayerNorm has both or neither); the oracle applies what is given, and no task row uses
it. A candidate should hand that combination to SGLang.
"""

from __future__ import annotations

from types import ModuleType

import torch

from kda_lab.families.base import Args, FunctionContract
from kda_lab.families.peers import FLASHINFER, LIGER, Peer, part

NORM_TYPES = ("layer", "rms")


def bsfd(t: torch.Tensor | None, x: torch.Tensor) -> torch.Tensor | None:
    """A modulation tensor broadcast to x's ``[B, S, D]`` the way SGLang's kernel indexes it."""
    if t is None:
        return None
    b, s, d = x.shape
    if t.dim() == 1:
        if t.numel() == 1:
            return t.reshape(1, 1, 1).expand(b, s, d)
        if t.shape[0] != d:
            raise ValueError(f"1-D modulation must be [1] or [D={d}], got {list(t.shape)}")
        return t.reshape(1, 1, d).expand(b, s, d)
    if t.dim() == 2:
        if t.shape[0] not in (1, b) or t.shape[1] != d:
            raise ValueError(f"2-D modulation must be [1|B, D], got {list(t.shape)}")
        return t[:, None, :].expand(b, s, d)
    if t.dim() == 3:
        if t.shape[0] not in (1, b) or t.shape[1] not in (1, s) or t.shape[2] != d:
            raise ValueError(f"3-D modulation must be [1|B, 1|S, D], got {list(t.shape)}")
        return t.expand(b, s, d)
    if t.dim() == 4:
        frames = t.shape[1]
        if t.shape[0] != b or t.shape[2] != 1 or t.shape[3] != d or s % frames:
            raise ValueError(f"4-D modulation must be [B, F, 1, D] with S % F == 0, got {list(t.shape)} for S={s}")
        return t.expand(b, frames, s // frames, d).reshape(b, s, d)
    raise ValueError(f"modulation must be 1-D..4-D, got {t.dim()}-D")


def _round_to(v: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """fp64 -> dtype -> fp64 (a stored intermediate; via fp32 like a kernel's fp32 value being stored)."""
    return v.to(torch.float32).to(dtype).to(torch.float64)


def _norm64(v: torch.Tensor, weight, bias, norm_type: str, eps: float) -> torch.Tensor:
    if norm_type == "rms":
        y = v * torch.rsqrt(v.square().mean(-1, keepdim=True) + eps)
        bias = None  # the RMS branch ignores bias
    elif norm_type == "layer":
        mean = v.mean(-1, keepdim=True)
        y = (v - mean) * torch.rsqrt((v - mean).square().mean(-1, keepdim=True) + eps)
    else:
        raise ValueError(f"norm_type must be one of {NORM_TYPES}, got {norm_type!r}")
    if weight is not None:
        y = y * weight.double()
    if bias is not None:
        y = y + bias.double()
    return y


def _check_x(x: torch.Tensor) -> None:
    if x.dim() != 3 or x.shape[-1] % 256 or x.shape[-1] > 8192:
        raise ValueError(f"x must be [B, S, D] with D % 256 == 0 and D <= 8192, got {list(x.shape)}")


CHUNK_ELEMENTS = 1 << 25  # the oracle works on token blocks of at most this many elements (fp64 temporaries)


def _token_blocks(x: torch.Tensor):
    b, s, d = x.shape
    step = max(1, CHUNK_ELEMENTS // max(1, b * d))
    for s0 in range(0, s, step):
        yield slice(s0, min(s, s0 + step))


def norm_scale_shift_oracle(a: Args) -> tuple[torch.Tensor, ...]:
    x = a["x"]
    _check_x(x)
    eps = float(a.get("eps", 1e-5))
    scale, shift = bsfd(a["scale"], x), bsfd(a["shift"], x)
    y = torch.empty(x.shape, dtype=torch.float64, device=x.device)
    for blk in _token_blocks(x):
        n = _round_to(_norm64(x[:, blk].double(), a["weight"], a["bias"], a["norm_type"], eps), x.dtype)
        y[:, blk] = n * (1 + scale[:, blk].double()) + shift[:, blk].double()
    return (y,)


def scale_residual_norm_scale_shift_oracle(a: Args) -> tuple[torch.Tensor, ...]:
    x, residual = a["x"], a["residual"]
    _check_x(x)
    eps = float(a.get("eps", 1e-5))
    gate, scale, shift = bsfd(a.get("gate"), x), bsfd(a["scale"], x), bsfd(a["shift"], x)
    y = torch.empty(x.shape, dtype=torch.float64, device=x.device)
    r_out = torch.empty(x.shape, dtype=torch.float64, device=x.device)
    for blk in _token_blocks(x):
        xb = x[:, blk].double()
        r = residual[:, blk].double() + (xb if gate is None else gate[:, blk].double() * xb)
        r = _round_to(r, x.dtype)  # residual_out, and the value the statistics see
        n = _round_to(_norm64(r, a["weight"], a["bias"], a["norm_type"], eps), x.dtype)
        y[:, blk] = n * (1 + scale[:, blk].double()) + shift[:, blk].double()
        r_out[:, blk] = r
    return y, r_out


# ------------------------------------------------------------------------------------------ eager torch

def _norm_ref(v, weight, bias, norm_type, eps):
    if norm_type == "rms":
        y = v * torch.rsqrt(v.square().mean(-1, keepdim=True) + eps)
        bias = None
    else:
        y = torch.nn.functional.layer_norm(v, v.shape[-1:], None, None, eps)
    if weight is not None:
        y = y * weight.float()
    if bias is not None:
        y = y + bias.float()
    return y


def norm_scale_shift_reference(x, weight, bias, scale, shift, norm_type, eps=1e-5):
    """Eager torch, fp32 math with SGLang's rounding points (the torch.compile peer)."""
    n = _norm_ref(x.float(), weight, bias, norm_type, eps).to(x.dtype).float()
    return (n * (1 + bsfd(scale, x).float()) + bsfd(shift, x).float()).to(x.dtype)


def scale_residual_norm_scale_shift_reference(residual, x, gate, weight, bias, scale, shift, norm_type, eps=1e-5):
    g = bsfd(gate, x)
    r = (residual.float() + (x.float() if g is None else g.float() * x.float())).to(x.dtype)
    n = _norm_ref(r.float(), weight, bias, norm_type, eps).to(x.dtype).float()
    return (n * (1 + bsfd(scale, x).float()) + bsfd(shift, x).float()).to(x.dtype), r


FUNCTIONS = {
    "fused_norm_scale_shift": FunctionContract(
        name="fused_norm_scale_shift", oracle=norm_scale_shift_oracle, torch_reference=norm_scale_shift_reference,
        output_names=("y",),
    ),
    "fused_scale_residual_norm_scale_shift": FunctionContract(
        name="fused_scale_residual_norm_scale_shift", oracle=scale_residual_norm_scale_shift_oracle,
        torch_reference=scale_residual_norm_scale_shift_reference, output_names=("y", "residual_out"),
    ),
}

# ------------------------------------------------------------------------------------------------ public peers

def _liger_rows_match(mod: torch.Tensor, x: torch.Tensor) -> bool:
    """Liger maps x row r to modulation row ``r // (rows / mod_rows)``: equal to SGLang's indexing (:func:`bsfd`)
    for [D], [1|B, D], [1, 1, D], [B, 1, D], [B, S, D] and per-frame [B, F, 1, D]; not for the scalar [1] nor for
    [1, S, D] with B > 1 (whose rows Liger would map by blocks of B)."""
    b, s, d = x.shape
    if mod.shape[-1] != d or mod.numel() % d:
        return False
    if mod.dim() == 4:
        return mod.shape[0] == b and mod.shape[2] == 1 and s % mod.shape[1] == 0
    lead = {1: (1, 1), 2: (mod.shape[0], 1), 3: tuple(mod.shape[:2])}.get(mod.dim())
    return lead in {(1, 1), (b, 1), (b, s)}


def liger_modulated_applies(a: Args) -> str | None:
    if a.get("norm_type") != "rms":
        return "Liger's modulated norm is an RMSNorm (norm_type='layer' has no Liger peer)"
    x, scale, shift = a.get("x"), a.get("scale"), a.get("shift")
    if not isinstance(x, torch.Tensor) or x.dim() != 3:
        return "x must be [B, S, D]"
    for name, t in (("scale", scale), ("shift", shift)):
        if not isinstance(t, torch.Tensor) or not _liger_rows_match(t, x):
            return f"{name} {list(getattr(t, 'shape', []))}: Liger maps modulation rows by blocks, which equals " \
                   "SGLang's broadcasting only for [D], [1|B, D], [1|B, 1|S, D] with matching B/S, [B, F, 1, D]"
    if shift.shape != scale.shape:
        return "Liger needs shift broadcast like scale"
    return None


def liger_modulated(ops: ModuleType, a: Args) -> torch.Tensor:
    x = a["x"].contiguous()
    d = x.shape[-1]
    scale, shift = a["scale"], a["shift"]
    rows = scale.numel() // d
    # casting_mode 'gemma': n = fp32(x * rstd * w) rounded to x's dtype, then n * (1 + scale) + shift in fp32
    return part(ops, "modulated_rms_norm").modulated_rms_norm_forward(
        x, a.get("weight"), scale.reshape(rows, d), shift.reshape(rows, d), float(a.get("eps", 1e-5)), 0.0,
        "gemma")[0]


_DIT_D = 3072  # FlashInfer's fused DiT LayerNorm is built for WAN 2.2 5B's hidden size only


def _wan_chunk_rows(t: torch.Tensor, x: torch.Tensor) -> bool:
    """A per-token bf16 [B, S, D] (or [S, D] at B = 1) view with row stride 6*D: WAN's temb.chunk(6, dim=2)."""
    b, s, d = x.shape
    if t.dtype != torch.bfloat16 or t.stride(-1) != 1:
        return False
    if t.dim() == 3:
        return tuple(t.shape) == (b, s, d) and t.stride(1) == 6 * d and (b == 1 or t.stride(0) == s * 6 * d)
    return t.dim() == 2 and b == 1 and tuple(t.shape) == (s, d) and t.stride(0) == 6 * d


def flashinfer_dit_applies(a: Args) -> str | None:
    if a.get("norm_type") != "layer":
        return "FlashInfer's DiT fusion is a LayerNorm"
    if a.get("weight") is not None or a.get("bias") is not None:
        return "FlashInfer's scale/shift DiT fusions take no LayerNorm weight/bias"
    x, residual = a.get("x"), a.get("residual")
    if not isinstance(x, torch.Tensor) or x.dtype != torch.bfloat16 or x.dim() != 3 or not x.is_contiguous():
        return "FlashInfer's DiT fusion takes a contiguous bf16 x [B, S, D]"
    if x.shape[-1] != _DIT_D:
        return f"FlashInfer's DiT fusion is built for D = {_DIT_D} only (D = {x.shape[-1]})"
    if residual is not None and (residual.dtype != torch.bfloat16 or residual.shape != x.shape
                                 or not residual.is_contiguous()):
        return "FlashInfer's DiT fusion takes a contiguous bf16 residual shaped like x"
    for name in ("scale", "shift", "gate"):
        t = a.get(name)
        if t is None and name == "gate":
            continue
        if not isinstance(t, torch.Tensor) or not _wan_chunk_rows(t, x):
            return f"FlashInfer's DiT fusion reads {name} per token with row stride 6*D (WAN's temb.chunk(6)); " \
                   f"this row's {name} is {list(getattr(t, 'shape', []))} strides " \
                   f"{list(t.stride()) if isinstance(t, torch.Tensor) else None} (no broadcast)"
    return None


def flashinfer_dit_norm(norm: ModuleType, a: Args) -> torch.Tensor:
    _residual_out, y = norm.fused_dit_residual_layernorm_scale_shift(
        a["x"], a["scale"], a["shift"], residual=None, epsilon=float(a.get("eps", 1e-5)))
    return y


def flashinfer_dit_residual(norm: ModuleType, a: Args) -> tuple[torch.Tensor, torch.Tensor]:
    eps = float(a.get("eps", 1e-5))
    if a.get("gate") is None:  # SGLang: r = residual + x
        r, y = norm.fused_dit_residual_layernorm_scale_shift(a["x"], a["scale"], a["shift"],
                                                             residual=a["residual"], epsilon=eps)
    else:  # SGLang: r = residual + gate * x
        r, y = norm.fused_dit_gate_residual_layernorm_scale_shift(a["x"], a["residual"], a["gate"], a["scale"],
                                                                  a["shift"], epsilon=eps)
    return y, r  # FlashInfer returns (residual_out, norm_out); SGLang (y, residual_out)


PEERS = {
    "fused_norm_scale_shift": (
        Peer(*LIGER, module="liger_kernel.ops", adapt=liger_modulated, applies=liger_modulated_applies,
             mapping="norm_type='rms' only: modulated_rms_norm_forward(x, weight, scale, shift, eps, offset=0, "
                     "casting_mode='gemma') computes RMSNorm(x)*w*(1 + scale) + shift, SGLang's formula (bias "
                     "ignored for rms, as SGLang); modulation rows map by blocks, so only layouts where that equals "
                     "SGLang's broadcasting apply."),
        Peer(*FLASHINFER, module="flashinfer.norm", adapt=flashinfer_dit_norm, applies=flashinfer_dit_applies,
             mapping="fused_dit_residual_layernorm_scale_shift(x, scale, shift, residual=None, epsilon=eps)[1]: "
                     "LayerNorm(x)*(1 + scale) + shift with no weight/bias; bf16, D = 3072, and scale/shift per "
                     "token with row stride 6*D (WAN's temb.chunk(6)), no broadcast."),
    ),
    "fused_scale_residual_norm_scale_shift": (
        Peer(*FLASHINFER, module="flashinfer.norm", adapt=flashinfer_dit_residual, applies=flashinfer_dit_applies,
             mapping="gate given: fused_dit_gate_residual_layernorm_scale_shift(x, residual, gate, scale, shift) "
                     "(r = residual + x*gate); gate=None: fused_dit_residual_layernorm_scale_shift(x, scale, "
                     "shift, residual=residual) (r = residual + x); both return (r, LN(r)*(1 + scale) + shift), "
                     "swapped to SGLang's (y, r). Same layout limits as fused_norm_scale_shift's peer."),
        # No Liger peer: Liger's modulated RMSNorm has no residual/gate input.
    ),
}


# Byte models the stamper writes into task.toml: (reads, writes-like).
BYTE_MODELS = {
    "fused_norm_scale_shift": (("x", "weight", "bias", "scale", "shift"), ("x",)),
    "fused_scale_residual_norm_scale_shift": (
        ("residual", "x", "gate", "weight", "bias", "scale", "shift"), ("x", "x")),
}
