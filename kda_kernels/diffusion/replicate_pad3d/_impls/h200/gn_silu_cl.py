"""GroupNorm + SiLU on a channels_last_3d tensor, in Triton: the decoder's norms without leaving NDHWC.

SGLang's GroupNorm+SiLU (and the promoted KDA kernel) read NCDHW; on a channels_last_3d activation they first
pay a full ``.contiguous()`` copy, and the next conv pays cuDNN's copy back. This kernel reads and writes NDHWC.

Viewed as ``[B, S, C]`` (S = T*H*W, C contiguous), group g of sample b is the CPG = C/G consecutive channels
``g*CPG .. g*CPG+CPG-1`` of every position s.

- ``_stats``: program = (b, chunk of positions). Each [BLOCK_S, C] tile is one contiguous run of memory; the
  program folds every tile into running per-group (count, mean, M2) with Chan's merge (a tile's own mean and
  squared deviations from it first, in fp32), so no sum-of-squares cancellation.
- ``_finalize``: program = b; merges the chunks' (count, mean, M2) exactly (mean of means weighted by count, then
  M2 + count * (mean_chunk - mean)^2) and writes mean and rstd = 1/sqrt(M2/N + eps) per (b, g).
- ``_apply``: program = (run of positions, b): y = (x - mean) * rstd * gamma + beta, then y * sigmoid(y), stored
  in x's dtype, NDHWC.

Byte model (s = element size, N = B*C*S): bytes = 3*s*N (x read by stats and by apply, y written once); the
partial statistics are B*chunks*G*3 floats (negligible). Bound = bytes / 4.29 TB/s, e.g. [1,128,33,480,848] fp16:
10.3 GB -> 2.4 ms.

Contract of :func:`group_norm_silu_cl`: x 5-D channels_last_3d, fp16/bf16/fp32, C = G * CPG with G and CPG powers
of two (the tile reshape needs them), gamma/beta of C elements. Callers check :func:`supports` first.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
_TARGET_CHUNKS = 1024  # stats programs per sample: ~8 per SM on 132 SMs


@triton.jit
def _stats(x_ptr, part_ptr, S, rows_per_prog, n_chunks,
           C: tl.constexpr, G: tl.constexpr, CPG: tl.constexpr, BLOCK_S: tl.constexpr):
    b = tl.program_id(0)
    chunk = tl.program_id(1)
    cols = tl.arange(0, C)
    n = 0.0
    mean = tl.zeros([G], dtype=tl.float32)
    m2 = tl.zeros([G], dtype=tl.float32)
    base = x_ptr + b.to(tl.int64) * S * C
    s_begin = chunk.to(tl.int64) * rows_per_prog
    for i in range(0, rows_per_prog, BLOCK_S):
        rows = s_begin + i + tl.arange(0, BLOCK_S).to(tl.int64)
        valid = rows < S
        x = tl.load(base + rows[:, None] * C + cols[None, :], mask=valid[:, None], other=0.0).to(tl.float32)
        n_t = tl.sum(valid.to(tl.float32), axis=0) * CPG
        x3 = tl.reshape(x, [BLOCK_S, G, CPG])
        mean_t = tl.sum(tl.sum(x3, axis=2), axis=0) / tl.maximum(n_t, 1.0)
        d = tl.reshape(x3 - mean_t[None, :, None], [BLOCK_S, C])
        d = tl.where(valid[:, None], d, 0.0)
        d3 = tl.reshape(d * d, [BLOCK_S, G, CPG])
        m2_t = tl.sum(tl.sum(d3, axis=2), axis=0)
        tot = n + n_t
        frac = n_t / tl.maximum(tot, 1.0)
        delta = mean_t - mean
        mean = mean + delta * frac
        m2 = m2 + m2_t + delta * delta * n * frac
        n = tot
    g = tl.arange(0, G)
    out = part_ptr + ((b * n_chunks + chunk) * 3).to(tl.int64) * G
    tl.store(out + g, mean)
    tl.store(out + G + g, m2)
    tl.store(out + 2 * G + g, tl.zeros([G], dtype=tl.float32) + n)


@triton.jit
def _finalize(part_ptr, stat_ptr, n_chunks, eps, G: tl.constexpr, BLOCK_K: tl.constexpr):
    b = tl.program_id(0)
    g = tl.arange(0, G)
    base = part_ptr + (b * n_chunks * 3).to(tl.int64) * G
    tot = tl.zeros([G], dtype=tl.float32)
    wsum = tl.zeros([G], dtype=tl.float32)
    for k0 in range(0, n_chunks, BLOCK_K):
        k = k0 + tl.arange(0, BLOCK_K)
        ok = (k < n_chunks)[:, None]
        off = (k * 3)[:, None] * G + g[None, :]
        mk = tl.load(base + off, mask=ok, other=0.0)
        nk = tl.load(base + off + 2 * G, mask=ok, other=0.0)
        tot += tl.sum(nk, axis=0)
        wsum += tl.sum(nk * mk, axis=0)
    mean = wsum / tot
    m2 = tl.zeros([G], dtype=tl.float32)
    for k0 in range(0, n_chunks, BLOCK_K):
        k = k0 + tl.arange(0, BLOCK_K)
        ok = (k < n_chunks)[:, None]
        off = (k * 3)[:, None] * G + g[None, :]
        mk = tl.load(base + off, mask=ok, other=0.0)
        m2k = tl.load(base + off + G, mask=ok, other=0.0)
        nk = tl.load(base + off + 2 * G, mask=ok, other=0.0)
        dk = mk - mean[None, :]
        m2 += tl.sum(m2k + nk * dk * dk, axis=0)
    rstd = 1.0 / tl.sqrt(m2 / tot + eps)
    tl.store(stat_ptr + b * 2 * G + g, mean)
    tl.store(stat_ptr + b * 2 * G + G + g, rstd)


@triton.jit
def _apply(x_ptr, y_ptr, w_ptr, b_ptr, stat_ptr, S,
           C: tl.constexpr, G: tl.constexpr, CPG: tl.constexpr, BLOCK_S: tl.constexpr):
    b = tl.program_id(1)  # runs of positions on axis 0: the grid's other axes stop at 65535
    cols = tl.arange(0, C)
    grp = cols // CPG
    mean = tl.load(stat_ptr + b * 2 * G + grp)
    rstd = tl.load(stat_ptr + b * 2 * G + G + grp)
    scale = rstd * tl.load(w_ptr + cols).to(tl.float32)
    shift = tl.load(b_ptr + cols).to(tl.float32)
    rows = tl.program_id(0).to(tl.int64) * BLOCK_S + tl.arange(0, BLOCK_S).to(tl.int64)
    valid = (rows < S)[:, None]
    off = b.to(tl.int64) * S * C + rows[:, None] * C + cols[None, :]
    x = tl.load(x_ptr + off, mask=valid, other=0.0).to(tl.float32)
    y = (x - mean[None, :]) * scale[None, :] + shift[None, :]
    y = y / (1.0 + tl.exp(-y))
    tl.store(y_ptr + off, y.to(y_ptr.dtype.element_ty), mask=valid)


def _pow2(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


def supports(x: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None, num_groups: int) -> bool:
    """Whether :func:`group_norm_silu_cl` takes (x, weight, bias, num_groups); else the caller's own path runs."""
    if x.dim() != 5 or x.dtype not in _DTYPES or x.numel() == 0:
        return False
    c = x.shape[1]
    if num_groups <= 0 or c % num_groups or not _pow2(num_groups) or not _pow2(c // num_groups) or c > 1024:
        return False
    if not x.is_contiguous(memory_format=torch.channels_last_3d):
        return False
    return all(isinstance(t, torch.Tensor) and t.shape == (c,) and t.device == x.device and t.is_contiguous()
               for t in (weight, bias))


def group_norm_silu_cl(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, num_groups: int,
                       eps: float) -> torch.Tensor:
    """silu(group_norm(x, num_groups, weight, bias, eps)) for a channels_last_3d x, returned channels_last_3d."""
    B, C = x.shape[:2]
    S = x.numel() // (B * C)
    cpg = C // num_groups
    block_s = max(1, min(64, 8192 // C))
    rows_per_prog = max(block_s, triton.cdiv(triton.cdiv(S, _TARGET_CHUNKS), block_s) * block_s)
    n_chunks = triton.cdiv(S, rows_per_prog)
    part = torch.empty((B, n_chunks, 3, num_groups), dtype=torch.float32, device=x.device)
    stats = torch.empty((B, 2, num_groups), dtype=torch.float32, device=x.device)
    y = torch.empty_like(x, memory_format=torch.channels_last_3d)
    _stats[(B, n_chunks)](x, part, S, rows_per_prog, n_chunks, C=C, G=num_groups, CPG=cpg, BLOCK_S=block_s,
                          num_warps=8)
    _finalize[(B,)](part, stats, n_chunks, float(eps), G=num_groups,
                    BLOCK_K=min(64, triton.next_power_of_2(n_chunks)), num_warps=4)
    _apply[(triton.cdiv(S, block_s), B)](x, y, weight, bias, stats, S, C=C, G=num_groups, CPG=cpg,
                                         BLOCK_S=block_s, num_warps=8)
    return y
