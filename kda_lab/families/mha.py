"""Forward multi-head attention (the reference task ``*_fa4_mha__bf16_head128_total32768``).

Contract: ``mha_forward(q, k, v, causal=False, softmax_scale=None) -> Tensor``
- q ``[B, Sq, H, D]``, k/v ``[B, Sk, H, D]`` (dense batch, the token-major layout SGLang's diffusion attention
  backends pass to FlashAttention; last dimension contiguous), fp16 or bf16, the same H for q, k and v (MHA);
- ``softmax_scale`` None means ``1/sqrt(D)``; ``causal`` masks key j > query i (only with Sq == Sk here, where
  FlashAttention's bottom-right and SDPA's top-left alignments agree);
- ``out[b, i, h] = sum_j softmax_j(scale * q[b,i,h] . k[b,j,h]) * v[b,j,h]``, ``[B, Sq, H, D]`` in q.dtype.

The oracle is fp64, computed per batch element in query blocks (the production row's full score matrix
would be 34 GB in fp64).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from kda_lab.families.base import Args, FunctionContract

_SCORE_BUDGET = 1 << 25  # fp64 score elements per block (256 MB)


def _check(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool) -> None:
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
        raise ValueError(f"q, k, v must be [B, S, H, D]; got {list(q.shape)}, {list(k.shape)}, {list(v.shape)}")
    if k.shape[:3] != v.shape[:3] or (q.shape[0], q.shape[2], q.shape[3]) != (k.shape[0], k.shape[2], k.shape[3]):
        raise ValueError(f"incompatible q {list(q.shape)}, k {list(k.shape)}, v {list(v.shape)} (MHA: same B, H, D)")
    if causal and q.shape[1] != k.shape[1]:
        raise ValueError("causal attention is specified here for Sq == Sk only")


def attention64(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
                softmax_scale: float | None = None) -> torch.Tensor:
    _check(q, k, v, causal)
    b, sq, h, d = q.shape
    sk = k.shape[1]
    scale = float(softmax_scale) if softmax_scale is not None else 1.0 / math.sqrt(d)
    out = torch.empty((b, sq, h, v.shape[3]), dtype=torch.float64, device=q.device)
    block = max(1, min(sq, _SCORE_BUDGET // max(1, h * sk)))
    for bi in range(b):
        kb = k[bi].double().transpose(0, 1)  # [H, Sk, D]
        vb = v[bi].double().transpose(0, 1)
        for s0 in range(0, sq, block):
            qb = q[bi, s0: s0 + block].double().transpose(0, 1)  # [H, blk, D]
            s = torch.matmul(qb, kb.transpose(1, 2)).mul_(scale)  # [H, blk, Sk]
            if causal:
                rows = torch.arange(s0, s0 + qb.shape[1], device=q.device)[:, None]
                cols = torch.arange(sk, device=q.device)[None, :]
                s.masked_fill_(cols > rows, float("-inf"))
            p = torch.softmax(s, dim=-1)
            out[bi, s0: s0 + block] = torch.matmul(p, vb).transpose(0, 1)
    return out


def oracle(a: Args) -> tuple[torch.Tensor, ...]:
    return (attention64(a["q"], a["k"], a["v"], bool(a.get("causal", False)), a.get("softmax_scale")),)


def reference(q, k, v, causal=False, softmax_scale=None):
    """torch SDPA with its default backend choice (cuDNN / flash / efficient / math): the torch peer."""
    o = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=causal,
                                       scale=softmax_scale)
    return o.transpose(1, 2)


FUNCTIONS = {
    "mha_forward": FunctionContract(name="mha_forward", oracle=oracle, torch_reference=reference),
}

BYTE_MODELS = {
    "mha_forward": (("q", "k", "v"), ("q",)),
}
