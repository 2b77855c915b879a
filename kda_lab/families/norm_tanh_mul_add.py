"""Z-Image's bf16-native RMSNorm fusions: ``rmsnorm_scale`` and ``rmsnorm_tanh_residual``.

(Earlier labs: ``cutedsl_norm_tanh_mul_add``; SGLang 0.5.23 replaced the CuTe DSL kernels
``fused_norm_tanh_mul_add`` / ``fused_norm_tanh_mul_add_norm_scale`` by these two Triton kernels,
``norm/native_bf16_rmsnorm_triton.py``.)

Contract (SGLang 0.5.23):

- ``rmsnorm_scale(x, weight, scale, eps) -> Tensor | None``: ``y = RMSNorm(x) * scale``.
- ``rmsnorm_tanh_residual(x, gate, residual, weight, eps) -> Tensor | None``:
  ``y = residual + tanh(gate) * RMSNorm(x)``.

Both keep Z-Image's eager bf16 roundings (``ZImageRMSNorm`` never upcasts hidden states)::

    sq   = bf16(x * x)
    ms   = bf16(sum(sq) / D)                  eager: fp32 accumulation, one rounding
    rstd = bf16(rsqrt(fp32(bf16(ms + eps))))
    n    = bf16(bf16(x * rstd) * w)
    rmsnorm_scale:         y = bf16(n * scale)
    rmsnorm_tanh_residual: y = bf16(residual + bf16(bf16(tanh(gate)) * n))

They return ``None`` (the Z-Image caller then runs its eager path, ``zimage.py``) unless every operand is a
CUDA bf16 tensor on one device, ``0 < D <= 8192``, ``x.dim() >= 2``, weight is a contiguous ``[D]``, the
modulation operand (scale / gate) is at least 2-D with last dim D, every operand has a flat row stride (last
stride 1 and the leading dims flatten onto rows), residual has x's shape and dtype, and x's row count is a
multiple of the modulation's row count. ``accepts`` below is that predicate without the CUDA clauses.

Modulation rows map by blocks, not by broadcasting: x row ``r`` uses modulation row
``r // (x_rows / mod_rows)`` of the modulation viewed as ``[mod_rows, D]``. For Z-Image's layouts ([B,1,D],
[1,1,D], [B,L,D]) that is broadcasting; a [1,L,D] modulation with B > 1 is accepted by SGLang and maps by
blocks (not what eager broadcasting computes). The oracle follows SGLang.

How the lab treats the ``None`` return: every task row is inside the predicate (``accepts`` is asserted by the
oracle), so SGLang returns a tensor there and an implementation that returns ``None`` on a row fails it.
Outside the predicate the contract is SGLang's: return ``None`` (a candidate delegates to SGLang's function
rather than returning ``None`` itself where SGLang would compute).

The oracle reproduces the eager rounding chain exactly (fp64 arithmetic, rounded where eager rounds: exact
sums/products rounded once to fp32 then bf16). It agrees bit for bit with the eager torch chain on CPU
(``tests/families/test_norm_tanh_mul_add.py``). SGLang's Triton kernel is bit-exact with eager only up to
three known deviations, which is why ``exact = true`` compares a candidate with SGLang's own output, while the
oracle is compared with a tolerance:

1. ``tl.sum`` of a bf16 tensor accumulates in bf16 in Triton's reduction order (Triton does not upcast), so
   SGLang's ``ms`` can differ from the eager fp32-accumulated one by an ulp;
2. ``mean_square + eps`` adds a bf16 constant (Triton's scalar promotion rounds eps to bf16 first);
3. ``tanh`` is ``2 / (1 + exp(-2 g)) - 1`` in fp32, which differs from tanh after rounding for |g| < ~1.5e-5.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from kda_kernels.contracts import flat_row_stride
from kda_lab.families.base import Args, FunctionContract, returned

MAX_HIDDEN_SIZE = 8192  # SGLang's native_bf16_rmsnorm_triton.MAX_HIDDEN_SIZE
BF16 = torch.bfloat16


# ------------------------------------------------------------------------------------------ SGLang's predicate



def accepts(x: torch.Tensor, weight: torch.Tensor, other: torch.Tensor,
            residual: torch.Tensor | None = None) -> str | None:
    """None if SGLang's kernel takes these operands (device clauses aside), else why it returns None."""
    d = x.shape[-1] if x.dim() else 0
    checks = [
        (x.dtype == weight.dtype == other.dtype == BF16, "every operand must be bf16"),
        (x.dim() >= 2, "x must be at least 2-D"),
        (0 < d <= MAX_HIDDEN_SIZE, f"D must be in 1..{MAX_HIDDEN_SIZE}"),
        (x.numel() > 0, "x must be non-empty"),
        (tuple(weight.shape) == (d,) and weight.is_contiguous(), "weight must be a contiguous [D]"),
        (other.dim() >= 2 and other.shape[-1] == d and other.numel() > 0, "scale/gate must be [..., D], >= 2-D"),
        (flat_row_stride(x) is not None, "x has no flat row stride"),
        (flat_row_stride(other) is not None, "scale/gate has no flat row stride"),
    ]
    if residual is not None:
        checks.append((residual.dtype == x.dtype and residual.shape == x.shape
                       and flat_row_stride(residual) is not None, "residual must match x with a flat row stride"))
    for ok, why in checks:
        if not ok:
            return why
    if (x.numel() // d) % (other.numel() // d):
        return "x rows must be a multiple of the scale/gate rows"
    return None


def _require(reason: str | None) -> None:
    if reason is not None:
        raise ValueError(f"outside SGLang's contract ({reason}): SGLang returns None there and Z-Image runs eager; "
                         "such a row cannot be a task row")


def modulation_rows(t: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """The modulation as SGLang indexes it: x row r reads row r // (x_rows / t_rows) of t viewed as rows."""
    d = x.shape[-1]
    t_rows = t.numel() // d
    x_rows = x.numel() // d
    rows = torch.as_strided(t, (t_rows, d), (flat_row_stride(t), 1), t.storage_offset())
    idx = torch.arange(x_rows, device=t.device) // (x_rows // t_rows)
    return rows[idx].reshape(x.shape)


# ------------------------------------------------------------------------------------------ oracle

def _bf(t: torch.Tensor) -> torch.Tensor:
    """Eager's rounding of an fp32-opmath result: fp64 value -> fp32 -> bf16, kept in fp64."""
    return t.to(torch.float32).to(BF16).to(torch.float64)


def zimage_rmsnorm64(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """``ZImageRMSNorm`` on bf16 x in eager's roundings, returned as fp64 values (each one a bf16 value)."""
    x64 = x.double()
    sq = _bf(x64 * x64)  # products of two bf16 are exact in fp64/fp32: one rounding
    total = sq.sum(-1, keepdim=True).to(torch.float32)  # exact sum, then eager's fp32 accumulator
    ms = (total / x.shape[-1]).to(BF16)  # fp32 division (CPU eager: sum then div_), one bf16 rounding
    var = (ms.float() + torch.tensor(eps, dtype=torch.float32)).to(BF16)  # bf16 + python float: fp32 opmath
    rstd = _bf(torch.rsqrt(var.double()))  # exact rsqrt -> fp32 -> bf16 (any fp32 rsqrt within 44 ulps agrees)
    n1 = _bf(x64 * rstd)
    return _bf(n1 * weight.double())


def rmsnorm_scale_oracle(a: Args) -> tuple[torch.Tensor, ...]:
    x, weight, scale = a["x"], a["weight"], a["scale"]
    _require(accepts(x, weight, scale))
    n = zimage_rmsnorm64(x, weight, float(a["eps"]))
    return (_bf(n * modulation_rows(scale, x).double()),)


def rmsnorm_tanh_residual_oracle(a: Args) -> tuple[torch.Tensor, ...]:
    x, gate, residual, weight = a["x"], a["gate"], a["residual"], a["weight"]
    _require(accepts(x, weight, gate, residual))
    n = zimage_rmsnorm64(x, weight, float(a["eps"]))
    t = _bf(torch.tanh(modulation_rows(gate, x).double()))  # equals eager bf16 tanh for every bf16 input
    return (_bf(residual.double() + _bf(t * n)),)


# ------------------------------------------------------------------------------------------ eager torch

def zimage_rmsnorm_eager(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """``ZImageRMSNorm.forward`` (zimage.py), verbatim arithmetic."""
    out = x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + eps)
    out = out * weight.to(device=x.device, dtype=x.dtype)
    return out.to(x.dtype)


def rmsnorm_scale_reference(x, weight, scale, eps):
    """Z-Image's eager fallback ``norm(x) * scale`` (the torch.compile peer; bf16 throughout)."""
    return zimage_rmsnorm_eager(x, weight, eps) * scale


def rmsnorm_tanh_residual_reference(x, gate, residual, weight, eps):
    """Z-Image's eager fallback ``residual + torch.tanh(gate) * norm(x)``."""
    return residual + torch.tanh(gate) * zimage_rmsnorm_eager(x, weight, eps)


@dataclass(frozen=True)
class OptionalResultContract(FunctionContract):
    """Functions returning ``Tensor | None``: on a task row (inside SGLang's predicate) None is a failure."""

    def outputs(self, result: Any, args: Args) -> tuple[torch.Tensor, ...]:
        if result is None:
            raise TypeError(f"{self.name} returned None (\"not handled, caller runs eager\") on inputs SGLang "
                            "computes: delegate to SGLang's function instead of returning None")
        return returned(result, args)


FUNCTIONS = {
    "rmsnorm_scale": OptionalResultContract(
        name="rmsnorm_scale", oracle=rmsnorm_scale_oracle, torch_reference=rmsnorm_scale_reference,
    ),
    "rmsnorm_tanh_residual": OptionalResultContract(
        name="rmsnorm_tanh_residual", oracle=rmsnorm_tanh_residual_oracle,
        torch_reference=rmsnorm_tanh_residual_reference,
    ),
}

# Byte models the stamper writes into task.toml: (reads, writes-like).
BYTE_MODELS = {
    "rmsnorm_scale": (("x", "weight", "scale"), ("x",)),
    "rmsnorm_tanh_residual": (("x", "gate", "residual", "weight"), ("x",)),
}

# Public peers: none. Liger's modulated RMSNorm computes RMSNorm(x)*w*(1 + scale) + shift in fp32 after its
# casting mode: rmsnorm_scale multiplies by `scale` itself (no 1 +), and passing `scale - 1` would be an extra
# kernel plus a bf16 rounding of scale - 1 that SGLang does not have; rmsnorm_tanh_residual adds a per-token
# residual times tanh(gate), which Liger's per-modulation-row shift cannot express. Neither QuACK nor FlashInfer
# 0.7.2 has a tanh-gated or scale-only RMSNorm. (Both functions also keep Z-Image's bf16 roundings exactly.)
PEERS: dict = {}
