"""Fused per-head QK RMSNorm + RoPE, in place on q and k.

Contract (SGLang 0.5.23, ``rope/qknorm_rope_jit.py`` + ``jit/csrc/diffusion/qknorm_rope.cuh``):
``fused_inplace_qknorm_rope(q, k, q_weight, k_weight, cos_sin_cache, positions, *, is_neox, eps=1e-6,
head_dim=0, rope_dim=0, round_norm_before_rope=False, cache_has_full_width=False) -> None``

- q ``[N,Hq,D]``, k ``[N,Hk,D]`` (fp16/bf16, last stride 1, q and k share the head stride; the token
  stride is free, so views of a fused qkv buffer are allowed); weights ``[D]`` in the activation dtype;
  ``positions`` ``[N]`` int32 or int64; ``cos_sin_cache`` ``[P, W]`` (fp32, fp16 or bf16), row
  ``positions[n]`` serves token n.
- ``head_dim = head_dim or D``; ``rope_dim = rope_dim or (W // 2 if cache_has_full_width else W)``.
  A half-width row is ``[cos(rope_dim/2) | sin(rope_dim/2)]`` (one entry per rotation pair); a full-width
  row is ``[cos(rope_dim) | sin(rope_dim)]`` (one entry per element).
- Per (token, head) row: ``r = rsqrt(mean(x²) + eps)`` in fp32, ``e = x·r·w`` kept in fp32; RoPE on the first
  ``rope_dim`` lanes, lanes beyond are only normalized:
    interleaved (GPT-J) pairs ``(e0,e1) -> (e0·c0 − e1·s0, e1·c1 + e0·s1)`` where c0 = c1 = cos[p] for pair
    p on a half-width cache, cos[2p] / cos[2p+1] on a full-width one;
    NeoX halves ``h = rope_dim/2``: ``o[i] = e[i]·c − e[i+h]·s`` (i < h), ``o[i] = e[i]·c + e[i−h]·s``
    (h ≤ i < rope_dim), with cos/sin index ``i mod h`` (half width) or ``i`` (full width).
  One rounding, on the store.
- ``round_norm_before_rope=True`` (ERNIE-Image, MiniMax-H3): ``e`` is rounded to the activation dtype before
  RoPE (the eager chain's rounding); the RoPE products then round to fp32 (fp32 cache) or to the activation
  dtype (16-bit cache) before the sum. The oracle models the norm rounding and keeps RoPE exact: the product
  roundings are within the declared tolerance.
"""

from __future__ import annotations

from types import ModuleType

import torch

from kda_lab.families.base import Args, FunctionContract
from kda_lab.families.peers import FLASHINFER, QUACK, Peer, part


def rope_widths(head_dim: int, cache_width: int, rope_dim: int, cache_has_full_width: bool) -> int:
    """The rotary width SGLang's wrapper derives when ``rope_dim`` is 0, validated like the kernel does."""
    rope = rope_dim or (cache_width // 2 if cache_has_full_width else cache_width)
    if rope <= 0 or rope > head_dim or rope % 2:
        raise ValueError(f"rope_dim {rope} must be even and in (0, head_dim={head_dim}]")
    expected = 2 * rope if cache_has_full_width else rope
    if cache_width != expected:
        raise ValueError(f"cos_sin_cache width {cache_width} != {expected} for rope_dim {rope} "
                         f"(cache_has_full_width={cache_has_full_width})")
    return rope


def apply_qk_rope(e: torch.Tensor, rows: torch.Tensor, rope_dim: int, is_neox: bool,
                  full_width: bool) -> torch.Tensor:
    """RoPE on the first ``rope_dim`` lanes of ``e [N,H,D]`` with the cache rows ``[N, W]`` of each token.

    Works in the dtype of ``e`` (fp64 for the oracle, fp32 for the eager reference); ``rows`` is cast to it.
    """
    rows = rows.to(e.dtype)[:, None, :]  # [N,1,W], broadcast over heads
    half = rope_dim // 2
    if full_width:
        cos, sin = rows[..., :rope_dim], rows[..., rope_dim:2 * rope_dim]  # one entry per element
    else:
        cos, sin = rows[..., :half], rows[..., half:rope_dim]  # one entry per pair
    out = e.clone()
    if is_neox:
        lo, hi = e[..., :half], e[..., half:rope_dim]
        c_lo, s_lo = (cos[..., :half], sin[..., :half]) if full_width else (cos, sin)
        c_hi, s_hi = (cos[..., half:], sin[..., half:]) if full_width else (cos, sin)
        out[..., :half] = lo * c_lo - hi * s_lo
        out[..., half:rope_dim] = hi * c_hi + lo * s_hi
    else:
        x0, x1 = e[..., 0:rope_dim:2], e[..., 1:rope_dim:2]
        c0, s0 = (cos[..., 0::2], sin[..., 0::2]) if full_width else (cos, sin)
        c1, s1 = (cos[..., 1::2], sin[..., 1::2]) if full_width else (cos, sin)
        out[..., 0:rope_dim:2] = x0 * c0 - x1 * s0
        out[..., 1:rope_dim:2] = x1 * c1 + x0 * s1
    return out


def _check_shapes(q: torch.Tensor, k: torch.Tensor, head_dim: int) -> int:
    if q.dim() != 3 or k.dim() != 3 or q.shape[0] != k.shape[0] or q.shape[-1] != k.shape[-1]:
        raise ValueError(f"q [N,Hq,D] and k [N,Hk,D] must share N and D, got {list(q.shape)} / {list(k.shape)}")
    d = head_dim or q.shape[-1]
    if d != q.shape[-1]:
        raise ValueError(f"head_dim {d} != q.size(-1) {q.shape[-1]}")
    return d


def qknorm_rope_oracle(a: Args) -> tuple[torch.Tensor, ...]:
    q, k = a["q"], a["k"]
    d = _check_shapes(q, k, int(a.get("head_dim", 0) or 0))
    cache = a["cos_sin_cache"]
    full = bool(a.get("cache_has_full_width", False))
    rope = rope_widths(d, cache.shape[-1], int(a.get("rope_dim", 0) or 0), full)
    eps = float(a.get("eps", 1e-6))
    rows = cache.double()[a["positions"].long()]
    outs = []
    for t, w in ((q, a["q_weight"]), (k, a["k_weight"])):
        x = t.double()
        e = x * torch.rsqrt(x.square().mean(-1, keepdim=True) + eps) * w.double()
        if a.get("round_norm_before_rope", False):
            e = e.to(t.dtype).double()
        outs.append(apply_qk_rope(e, rows, rope, bool(a["is_neox"]), full))
    return tuple(outs)


def qknorm_rope_reference(q, k, q_weight, k_weight, cos_sin_cache, positions, *, is_neox, eps=1e-6, head_dim=0,
                          rope_dim=0, round_norm_before_rope=False, cache_has_full_width=False):
    """Eager torch in fp32 (the torch.compile peer), in place on q and k like SGLang."""
    rope = rope_widths(head_dim or q.shape[-1], cos_sin_cache.shape[-1], rope_dim, cache_has_full_width)
    rows = cos_sin_cache.float()[positions.long()]
    for t, w in ((q, q_weight), (k, k_weight)):
        x = t.float()
        e = x * torch.rsqrt(x.square().mean(-1, keepdim=True) + eps) * w.float()
        if round_norm_before_rope:
            e = e.to(t.dtype).float()
        t.copy_(apply_qk_rope(e, rows, rope, is_neox, cache_has_full_width))


FUNCTIONS = {
    "fused_inplace_qknorm_rope": FunctionContract(
        name="fused_inplace_qknorm_rope", oracle=qknorm_rope_oracle, torch_reference=qknorm_rope_reference,
        mutates=("q", "k"), output_names=("q", "k"),
    ),
}

# ------------------------------------------------------------------------------------------------ public peers
# Composed peers: a per-head RMSNorm written back into q / k, then an in-place RoPE on them (SGLang mutates q
# and k too). Two roundings to the activation dtype where SGLang has one (the norm's, then RoPE's).

def _rope_layout(a: Args) -> tuple[int, int] | str:
    """(head_dim, rope_dim) of a half-width-cache row, or why the composed peers do not take the row."""
    q, k, cache = a.get("q"), a.get("k"), a.get("cos_sin_cache")
    if not all(isinstance(t, torch.Tensor) for t in (q, k, cache)):
        return "q, k and cos_sin_cache must be tensors"
    if a.get("cache_has_full_width", False):
        return "a full-width cache has one cos per element; the peers take one per rotation pair"
    d = q.shape[-1]
    try:
        rope = rope_widths(d, cache.shape[-1], int(a.get("rope_dim", 0) or 0), False)
    except ValueError as e:
        return str(e)
    return d, rope


def _rows_view(t: torch.Tensor) -> torch.Tensor | None:
    """t [N, H, D] as [N*H, D] without a copy (the norm writes back through it), or None."""
    try:
        return t.view(-1, t.shape[-1])
    except RuntimeError:
        return None


def quack_qknorm_rope_applies(a: Args) -> str | None:
    layout = _rope_layout(a)
    if isinstance(layout, str):
        return layout
    d, rope = layout
    if d % 8 or rope % 8 or d > 512:
        return f"QuACK's rotary needs head_dim and rope_dim % 8 == 0, head_dim <= 512 ({d}, {rope})"
    if _rows_view(a["q"]) is None or _rows_view(a["k"]) is None:
        return "QuACK's RMSNorm writes q/k back as [N*H, D] rows: q and k must be viewable so"
    return None


def quack_qknorm_rope(quack: ModuleType, a: Args) -> None:
    rmsnorm, rotary = part(quack, "rmsnorm"), part(quack, "rotary")
    d, rope = _rope_layout(a)  # type: ignore[misc]  # applies() has vetted the row
    rows = a["cos_sin_cache"].index_select(0, a["positions"])  # [N, rope]: cos | sin, one entry per pair
    cos, sin = rows[:, : rope // 2], rows[:, rope // 2: rope]
    eps = float(a.get("eps", 1e-6))
    for t, w in ((a["q"], a["q_weight"]), (a["k"], a["k_weight"])):
        flat = _rows_view(t)
        # _rmsnorm_fwd(x, weight, out, bias, rstd, mean, residual, residual_out, eps, is_layernorm): in place
        rmsnorm._rmsnorm_fwd(flat, w, flat, None, None, None, None, None, eps, False)
        rotary.apply_rotary(t.unsqueeze(0), cos, sin, interleaved=not bool(a["is_neox"]), inplace=True)


def flashinfer_qknorm_rope_applies(a: Args) -> str | None:
    layout = _rope_layout(a)
    if isinstance(layout, str):
        return layout
    q, k, cache = a["q"], a["k"], a["cos_sin_cache"]
    if cache.dtype != torch.float32:
        return "FlashInfer's apply_rope_with_cos_sin_cache takes an fp32 cache only"
    if q.dtype not in (torch.float16, torch.bfloat16) or a["q_weight"].dtype != q.dtype \
            or a["k_weight"].dtype != k.dtype:
        return "FlashInfer's rmsnorm takes fp16/bf16 with the weight in the activation dtype"
    return None


def flashinfer_qknorm_rope(flashinfer: ModuleType, a: Args) -> None:
    norm, rope = part(flashinfer, "norm"), part(flashinfer, "rope")
    q, k, eps = a["q"], a["k"], float(a.get("eps", 1e-6))
    norm.rmsnorm(q, a["q_weight"], eps, out=q)  # 3-D [N, H, D] per-head RMSNorm, written in place
    norm.rmsnorm(k, a["k_weight"], eps, out=k)
    rope.apply_rope_with_cos_sin_cache_inplace(a["positions"], q.view(q.shape[0], -1), k.view(k.shape[0], -1),
                                               q.shape[-1], a["cos_sin_cache"], is_neox=bool(a["is_neox"]))


PEERS = {
    "fused_inplace_qknorm_rope": (
        Peer(*QUACK, module="quack", adapt=quack_qknorm_rope, applies=quack_qknorm_rope_applies,
             mapping="composed, in place: rmsnorm._rmsnorm_fwd(q as [N*H, D], q_weight, out=itself, eps) (same "
                     "for k), then rotary.apply_rotary(q[None], cos, sin, interleaved=not is_neox, inplace=True) "
                     "with cos/sin = the two halves of cos_sin_cache[positions] (half-width caches only; "
                     "rope_dim < head_dim rotates the first rope_dim lanes, as SGLang)."),
        Peer(*FLASHINFER, module="flashinfer", adapt=flashinfer_qknorm_rope, applies=flashinfer_qknorm_rope_applies,
             mapping="composed, in place: norm.rmsnorm(q [N,H,D], q_weight, eps, out=q) (same for k), then "
                     "rope.apply_rope_with_cos_sin_cache_inplace(positions, q, k, head_dim, cache, is_neox): "
                     "SGLang's [P, rope_dim] cos|sin cache layout; fp32 cache only."),
        # fused_qk_rmsnorm_rope (FlashInfer) is no peer: it computes a 3-D (frame/height/width) RoPE from `base`
        # on a packed qkv buffer, not from a cos_sin_cache and positions as SGLang's function does.
    ),
}


# Byte models the stamper writes into task.toml: (reads, writes-like). The cache counts whole (production
# rows use one cache row per token); positions and the two weight vectors are read once.
BYTE_MODELS = {
    "fused_inplace_qknorm_rope": (("q", "k", "q_weight", "k_weight", "cos_sin_cache", "positions"), ("q", "k")),
}
