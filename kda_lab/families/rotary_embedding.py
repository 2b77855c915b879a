"""Rotary position embeddings: the standard GPT-J kernel and LTX-2's split (rotate-half) kernel.

Contract (SGLang 0.5.23):
- ``apply_rotary_embedding(x, cos, sin, interleaved=False) -> Tensor`` (``rope/rotary_triton.py``):
  x ``[B,T,H,D]`` or ``[T,H,D]`` (viewable as ``[B·T,H,D]``), cos/sin ``[T, D/2]`` shared across the batch
  (row ``t`` serves token t of every batch entry). Pairs are always the interleaved GPT-J pairs
  ``(x[2i], x[2i+1])``: ``o[2i] = x[2i]·c[i] − x[2i+1]·s[i]``, ``o[2i+1] = x[2i+1]·c[i] + x[2i]·s[i]``, in fp32
  (the kernel uses fma), one rounding to x.dtype on the store, out of place. ``interleaved`` only describes
  the cos/sin layout: with ``interleaved=True`` and cos ``[T, D]`` (each value repeated for both lanes of a
  pair) the wrapper takes ``cos[:, ::2]``; otherwise the kernel reads the first D/2 columns of each row.
- ``apply_ltx2_split_rotary_emb(x, cos, sin) -> Tensor`` (``rope/ltx2_rotary_triton.py``): x ``[B,S,H·D]``
  contiguous, cos/sin ``[B,H,S,D/2]`` with any strides (last stride 1; LTX-2 passes transposed views).
  Per head, rotate-half: ``x1 = x[..., :D/2]``, ``x2 = x[..., D/2:]``,
  ``o1 = fp32(bf16(x1·cos) − fp32(x2·sin))``, ``o2 = fp32(bf16(x2·cos) + fp32(x1·sin))``, stored in x.dtype.
  ``x·cos`` is computed in the promoted dtype of x and cos and **rounded to bf16 on purpose** (the eager
  chain ``out = x*cos`` in bf16, then ``addcmul_`` in fp32): SGLang's roundings are the contract (``exact``).
  The oracle reproduces every rounding, so for this function it equals SGLang's output bit for bit.
"""

from __future__ import annotations

from types import ModuleType

import torch

from kda_lab.families.base import Args, FunctionContract
from kda_lab.families.peers import FLOATS, QUACK, Peer


def rounded(t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``t`` (fp64) rounded to ``dtype`` (round to nearest even), back in fp64.

    torch converts fp64 to 16-bit floats through fp32; every call below passes values that are exact in fp32
    when ``dtype`` is 16-bit (products of two 16-bit values), so that is a single rounding.
    """
    return t.to(dtype).double()


def _half_width(t: torch.Tensor, head_size: int, interleaved: bool) -> torch.Tensor:
    """The ``[rows, D/2]`` table the kernel reads (what the wrapper passes it)."""
    if t.dim() != 2:
        raise ValueError(f"cos/sin must be 2-D [T, D/2] (or [T, D] with interleaved=True), got {list(t.shape)}")
    if interleaved and t.shape[-1] == head_size:
        return t[:, ::2]
    if t.shape[-1] < head_size // 2:
        raise ValueError(f"cos/sin width {t.shape[-1]} < head_size/2 = {head_size // 2}")
    return t[:, : head_size // 2]


def _rotate_pairs(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, interleaved: bool) -> torch.Tensor:
    d, t = x.shape[-1], x.shape[-3]
    if d % 2:
        raise ValueError(f"head_size {d} must be even")
    c = _half_width(cos, d, interleaved)[:t, None, :].to(x.dtype)  # [T,1,D/2], broadcast over batch and heads
    s = _half_width(sin, d, interleaved)[:t, None, :].to(x.dtype)
    if c.shape[0] != t:
        raise ValueError(f"cos/sin have {c.shape[0]} rows for {t} tokens")
    x0, x1 = x[..., 0::2], x[..., 1::2]
    out = torch.empty_like(x)
    out[..., 0::2] = x0 * c - x1 * s
    out[..., 1::2] = x1 * c + x0 * s
    return out


def rotary_oracle(a: Args) -> tuple[torch.Tensor, ...]:
    return (_rotate_pairs(a["x"].double(), a["cos"], a["sin"], bool(a.get("interleaved", False))),)


def rotary_reference(x, cos, sin, interleaved=False):
    return _rotate_pairs(x.float(), cos, sin, interleaved).to(x.dtype)


def _ltx2_layout(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> tuple[int, int, int, int, int]:
    if x.dim() != 3 or cos.dim() != 4 or sin.shape != cos.shape:
        raise ValueError(f"expected x [B,S,H*D], cos/sin [B,H,S,D/2]; got {list(x.shape)}, {list(cos.shape)}, "
                         f"{list(sin.shape)}")
    b, s, inner = x.shape
    cb, h, cs, half = cos.shape
    if cb != b or cs != s or inner != h * 2 * half:
        raise ValueError(f"LTX2 split RoPE shape mismatch: x={list(x.shape)}, cos={list(cos.shape)}")
    return b, s, h, 2 * half, half


def ltx2_split_oracle(a: Args) -> tuple[torch.Tensor, ...]:
    x, cos, sin = a["x"], a["cos"], a["sin"]
    b, s, h, d, half = _ltx2_layout(x, cos, sin)
    op = torch.promote_types(x.dtype, cos.dtype)  # the dtype Triton multiplies x*cos in
    xv = x.double().reshape(b, s, h, d)
    c = cos.double().permute(0, 2, 1, 3)  # [B,S,H,D/2]
    sn = sin.double().permute(0, 2, 1, 3)
    x1, x2 = xv[..., :half], xv[..., half:]
    f32, bf16 = torch.float32, torch.bfloat16
    o1 = rounded(rounded(rounded(x1 * c, op), bf16) - rounded(x2 * sn, f32), f32)
    o2 = rounded(rounded(rounded(x2 * c, op), bf16) + rounded(x1 * sn, f32), f32)
    return (rounded(torch.cat([o1, o2], dim=-1), x.dtype).reshape(b, s, h * d),)


def ltx2_split_reference(x, cos, sin):
    """Eager torch with the same roundings (the torch.compile peer)."""
    b, s, h, d, half = _ltx2_layout(x, cos, sin)
    xv = x.reshape(b, s, h, d)
    c, sn = cos.permute(0, 2, 1, 3), sin.permute(0, 2, 1, 3)
    x1, x2 = xv[..., :half], xv[..., half:]
    o1 = (x1 * c).to(torch.bfloat16).float() - x2.float() * sn.float()
    o2 = (x2 * c).to(torch.bfloat16).float() + x1.float() * sn.float()
    return torch.cat([o1, o2], dim=-1).to(x.dtype).reshape(b, s, h * d)


FUNCTIONS = {
    "apply_rotary_embedding": FunctionContract(
        name="apply_rotary_embedding", oracle=rotary_oracle, torch_reference=rotary_reference,
    ),
    "apply_ltx2_split_rotary_emb": FunctionContract(
        name="apply_ltx2_split_rotary_emb", oracle=ltx2_split_oracle, torch_reference=ltx2_split_reference,
    ),
}

# ------------------------------------------------------------------------------------------------ public peers

def quack_rotary_applies(a: Args) -> str | None:
    x = a.get("x")
    if not isinstance(x, torch.Tensor) or x.dim() not in (3, 4):
        return "QuACK's apply_rotary takes x [B,T,H,D] (3-D [T,H,D] is unsqueezed)"
    if x.dtype not in FLOATS:
        return f"QuACK's apply_rotary takes fp16/bf16/fp32 x, not {x.dtype}"
    d = x.shape[-1]
    if d % 8 or d > 512:
        return f"QuACK's apply_rotary needs head_dim % 8 == 0 and <= 512 (head_dim {d})"
    if x.stride(-1) != 1:
        return "QuACK's apply_rotary needs x's last stride 1"
    cos, sin = a.get("cos"), a.get("sin")
    if not isinstance(cos, torch.Tensor) or not isinstance(sin, torch.Tensor) or cos.dtype != sin.dtype \
            or cos.dtype not in FLOATS:
        return "QuACK's apply_rotary needs cos and sin in one fp16/bf16/fp32 dtype"
    return None


def quack_rotary(rotary: ModuleType, a: Args) -> torch.Tensor:
    """SGLang's ``apply_rotary_embedding`` through ``quack.rotary.apply_rotary``."""
    x, interleaved = a["x"], bool(a.get("interleaved", False))
    d, t = x.shape[-1], x.shape[-3]
    # The same [T, D/2] slice SGLang's wrapper hands its kernel, in the table's own dtype: SGLang's kernel
    # (rope/rotary_triton.py) and QuACK's both load cos/sin as stored and multiply in fp32; casting an fp32
    # table to bf16 x's dtype first would round cos/sin, which the oracle rejects where products cancel.
    cos = _half_width(a["cos"], d, interleaved)[:t]
    sin = _half_width(a["sin"], d, interleaved)[:t]
    x4 = x if x.dim() == 4 else x.unsqueeze(0)
    out = rotary.apply_rotary(x4, cos, sin, interleaved=True)  # GPT-J pairs, whatever SGLang's flag says
    return out if x.dim() == 4 else out.squeeze(0)


PEERS = {
    "apply_rotary_embedding": (
        Peer(*QUACK, module="quack.rotary", adapt=quack_rotary, applies=quack_rotary_applies,
             mapping="apply_rotary(x[B,T,H,D] (3-D x unsqueezed), cos, sin, interleaved=True): SGLang always "
                     "rotates GPT-J pairs and only slices cos/sin ([T, D/2], or every other column of a "
                     "full-width [T, D] table when interleaved=True), passed in its own dtype: both kernels "
                     "multiply in fp32 with cos/sin as stored, one rounding to x's dtype."),
        # No FlashInfer peer: flashinfer.rope's cache API (apply_rope_with_cos_sin_cache[_inplace]) rotates a query
        # *and* a key from one fp32 [max_pos, rotary_dim] cos|sin cache by positions, and apply_rope[_pos_ids]
        # computes cos/sin from rope_theta. Mapping SGLang's single x with separate [T, D/2] tables onto it needs a
        # torch.cat of cos and sin, a positions tensor per batch and a dummy key on every call: glue kernels that
        # would be timed as FlashInfer. (qknorm_rope.PEERS uses that API where it fits: SGLang's cache layout.)
    ),
    # apply_ltx2_split_rotary_emb: no public peer. Its cos/sin are per batch *and per head* ([B,H,S,D/2]) and
    # x*cos is rounded to bf16 on purpose (the exact contract); QuACK's and FlashInfer's rotary take one
    # [S, D/2] table shared by all heads and keep fp32 products.
}


# Byte models the stamper writes into task.toml: (reads, writes-like). cos/sin are read once per token
# (the kernels re-read them per batch entry / head from cache).
BYTE_MODELS = {
    "apply_rotary_embedding": (("x", "cos", "sin"), ("x",)),
    "apply_ltx2_split_rotary_emb": (("x", "cos", "sin"), ("x",)),
}
