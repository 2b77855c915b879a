"""adaLN modulation: ``y = x*(k+scale)+shift`` and the select01 LayerNorm modulation kernels.

Contract (SGLang 0.5.23, modulate/scale_shift_triton.py):
- ``fuse_scale_shift_kernel(x[B,L,C], scale, shift, scale_constant=1.0)``: scale/shift are a scalar (0-D or
  one element), ``[B|1,C]`` (broadcast over L), ``[B|1,L|1,C]``, or for scale ``[B,F,1,C]`` per frame with a
  per-token shift. Computed in the promoted operand dtype, stored in x.dtype.
- ``fuse_layernorm_scale_shift_gate_select01_kernel``: LayerNorm of x (fp32 stats, optional weight/bias),
  then per token ``idx = index[b,l] != 0`` selects row b of (scale1, shift1, gate1) or (scale0, ...):
  ``y = xhat*(1+scale)+shift``, ``gate_out = gate`` (both [B,L,C] in x.dtype).
- the residual variant first forms ``r = residual + residual_gate*x`` in fp32 (returned in x.dtype as
  residual_out) and normalizes r; returns ``(y, residual_out, gate_out)``.
"""

from __future__ import annotations

import torch

from kda_lab.families.base import Args, FunctionContract


def _modulation(t: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """SGLang's broadcast rules for scale/shift, as a [B,L,C] view."""
    b, length, c = x.shape
    if t.dim() == 0 or t.numel() == 1:
        return t.reshape(1, 1, 1).expand(b, length, c)
    if t.dim() == 2:
        return t[:, None, :].expand(b, length, c)
    if t.dim() == 3:
        return t.expand(b, length, c)
    if t.dim() == 4:
        frames = t.shape[1]
        if t.shape[2] != 1 or length % frames:
            raise ValueError(f"4-D modulation must be [B,F,1,C] with L % F == 0, got {list(t.shape)} for L={length}")
        return t.expand(t.shape[0], frames, length // frames, c).reshape(t.shape[0], length, c).expand(b, length, c)
    raise ValueError(f"modulation tensor must be 0-D..4-D, got {t.dim()}-D")


def _shift(t: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    # A 4-D shift only appears with a 4-D scale; on CUDA it is per token ([B,L,C] reshaped), else per frame.
    if t.dim() == 4 and t.shape[1] * t.shape[2] == x.shape[1]:
        return t.reshape(x.shape)
    return _modulation(t, x)


def fuse_scale_shift_oracle(a: Args) -> tuple[torch.Tensor, ...]:
    x = a["x"].double()
    k = float(a.get("scale_constant", 1.0))
    scale = _modulation(a["scale"].double(), x)
    shift = _shift(a["shift"].double(), x)
    return (x * (k + scale) + shift,)


def fuse_scale_shift_reference(x, scale, shift, scale_constant=1.0, block_l=128, block_c=128):
    y = x * (scale_constant + _modulation(scale, x)) + _shift(shift, x)
    return y.to(x.dtype)


def _layernorm64(r: torch.Tensor, weight, bias, eps: float) -> torch.Tensor:
    mean = r.mean(-1, keepdim=True)
    var = (r - mean).square().mean(-1, keepdim=True)
    y = (r - mean) / torch.sqrt(var + eps)
    if weight is not None:
        y = y * weight.double()
    if bias is not None:
        y = y + bias.double()
    return y


def _select(index: torch.Tensor, t0: torch.Tensor, t1: torch.Tensor) -> torch.Tensor:
    idx = (index != 0)[..., None]  # [B,L,1]
    return torch.where(idx, t1[:, None, :], t0[:, None, :])


def _select01_tail(xhat: torch.Tensor, a: Args) -> tuple[torch.Tensor, torch.Tensor]:
    scale = _select(a["index"], a["scale0"].double(), a["scale1"].double())
    shift = _select(a["index"], a["shift0"].double(), a["shift1"].double())
    gate = _select(a["index"], a["gate0"].double(), a["gate1"].double()).expand_as(xhat)
    return xhat * (1 + scale) + shift, gate


def select01_oracle(a: Args) -> tuple[torch.Tensor, ...]:
    xhat = _layernorm64(a["x"].double(), a["weight"], a["bias"], float(a["eps"]))
    return _select01_tail(xhat, a)


def residual_select01_oracle(a: Args) -> tuple[torch.Tensor, ...]:
    r = a["residual"].double() + a["residual_gate"].double() * a["x"].double()
    xhat = _layernorm64(r, a["weight"], a["bias"], float(a["eps"]))
    y, gate = _select01_tail(xhat, a)
    return y, r, gate


def _ln_ref(r, weight, bias, eps):
    w = weight.float() if weight is not None else None
    b = bias.float() if bias is not None else None
    return torch.nn.functional.layer_norm(r.float(), r.shape[-1:], w, b, eps)


def select01_reference(x, weight, bias, scale0, shift0, gate0, scale1, shift1, gate1, index, eps):
    xhat = _ln_ref(x, weight, bias, eps)
    idx = (index != 0)[..., None]
    scale = torch.where(idx, scale1[:, None, :], scale0[:, None, :])
    shift = torch.where(idx, shift1[:, None, :], shift0[:, None, :])
    gate = torch.where(idx, gate1[:, None, :], gate0[:, None, :]).expand_as(x)
    return (xhat * (1 + scale) + shift).to(x.dtype), gate.to(x.dtype).contiguous()


def residual_select01_reference(x, residual, residual_gate, weight, bias, scale0, shift0, gate0, scale1,
                                shift1, gate1, index, eps):
    r = residual.float() + residual_gate.float() * x.float()
    y, gate = select01_reference(r, weight, bias, scale0, shift0, gate0, scale1, shift1, gate1, index, eps)
    return y.to(x.dtype), r.to(x.dtype), gate.to(x.dtype)


FUNCTIONS = {
    "fuse_scale_shift_kernel": FunctionContract(
        name="fuse_scale_shift_kernel", oracle=fuse_scale_shift_oracle, torch_reference=fuse_scale_shift_reference,
    ),
    "fuse_layernorm_scale_shift_gate_select01_kernel": FunctionContract(
        name="fuse_layernorm_scale_shift_gate_select01_kernel", oracle=select01_oracle,
        torch_reference=select01_reference, output_names=("y", "gate_out"),
    ),
    "fuse_residual_layernorm_scale_shift_gate_select01_kernel": FunctionContract(
        name="fuse_residual_layernorm_scale_shift_gate_select01_kernel", oracle=residual_select01_oracle,
        torch_reference=residual_select01_reference, output_names=("y", "residual_out", "gate_out"),
    ),
}

# Byte models the stamper writes into task.toml: (reads, writes-like).
BYTE_MODELS = {
    "fuse_scale_shift_kernel": (("x", "scale", "shift"), ("x",)),
    "fuse_layernorm_scale_shift_gate_select01_kernel": (
        ("x", "weight", "bias", "scale0", "shift0", "gate0", "scale1", "shift1", "gate1", "index"), ("x", "x")),
    "fuse_residual_layernorm_scale_shift_gate_select01_kernel": (
        ("x", "residual", "residual_gate", "weight", "bias", "scale0", "shift0", "gate0", "scale1", "shift1", "gate1",
         "index"), ("x", "x", "x")),
}

# Public peers: none. No pinned library has a standalone x*(k + scale) + shift modulation or the select01
# LayerNorm kernels (FlashInfer's DiT fusions include the LayerNorm and read per-token modulation only; see
# norm_scale_shift.PEERS); torch.compile remains the only peer here.
PEERS: dict = {}
