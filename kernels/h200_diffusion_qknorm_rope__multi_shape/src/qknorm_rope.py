"""Fused per-head QK RMSNorm + RoPE, in place on q and k, in Triton (candidate c002's kernel).

Math (prompt.md K, SGLang 0.5.23's fp32 path): per (token, head) row x of length D,
``r = rsqrt(sum(x²) / D + eps)`` in fp32, ``e = x * (r * w)`` kept in fp32 (SGLang's association), RoPE on lanes
``[0, rope_dim)`` in fp32, lanes beyond only normalized, one rounding to the activation dtype on the store:

- interleaved (GPT-J) pairs: ``o[2p] = e[2p]·c0 − e[2p+1]·s0``, ``o[2p+1] = e[2p+1]·c1 + e[2p]·s1`` with
  c0 = c1 = cos[p] on a half-width cache row ``[cos(rope/2) | sin(rope/2)]``, cos[2p] / cos[2p+1] on a full-width
  row ``[cos(rope) | sin(rope)]`` (same for sin);
- NeoX halves (h = rope/2): ``o[i] = e[i]·c − e[i+h]·s`` (i < h), ``o[i] = e[i]·c + e[i−h]·s`` (h ≤ i < rope),
  cos/sin index ``i mod h`` (half width) or ``i`` (full width).

``round_norm_before_rope=True`` is not run here (register.py hands it to SGLang: its bits are the contract).

Byte model (per call; Nq = N·Hq·D and Nk = N·Hk·D elements, e_x the activation size, e_c the cache entry size,
P×W the cache, e_p the position size):

    bytes = 2·(Nq + Nk)·e_x        q and k read once and written once, in place
          + 2·D·e_x                the two weight vectors
          + P·W·e_c                the whole cache (production rows: one row per token, every row read)
          + N·e_p                  positions
    bound = bytes / 4.29 TB/s      (the H200's measured copy ceiling); rows under ~40 MB are latency bound:
                                   about 2 us + bytes / 4.29 TB/s (the issue's size-aware bound)

    qwen T4096 H24 D128 bf16, fp32 cache [4096,128], int64 positions:
        2·2·4096·24·128·2 = 100.66 MB + 2.10 MB + 0.03 MB = 102.8 MB -> 24.0 us at 4.29 TB/s (SGLang 29.2 us)
    zimage T4128 H30: 129.0 MB -> 30.1 us (SGLang 36.3 us); qwen-edit T8424 H24: 211.4 MB -> 49.3 us (60.1 us)
    qwen T47 H24: 1.18 MB -> 0.27 us of bytes; latency bound (~2.3 us size-aware bound; SGLang 1.5 us)

Design: a program owns a tile of TOK tokens x HB heads x the whole head dim of q *or* k. The 1-D grid is token
block major, head block minor, q's head blocks then k's: the programs that share a token block (and so its
cache rows) run next to each other, so the cache is read from HBM once and from L2 by the other head blocks.
The tile is loaded as [TOK, HB, D] with 16-byte vectors along D (q/k token and head strides are runtime values;
Triton's divisibility specialization proves the 16-byte alignment when they are multiples of 16 elements), the
sum of squares is a per-row reduction inside a warp, and:

- interleaved: ``e`` is split into its even/odd lanes in registers (``tl.split`` of a [..., D/2, 2] reshape), the
  cache row is loaded once per token as [TOK, D/2] (half width) or [TOK, D] split the same way (full width) and
  broadcast over the HB heads; the result is joined back and stored as one contiguous tile;
- NeoX: the partner lane (i ± h) is loaded a second time from the same row (an L1 hit: the row was just read)
  with its weight, normalized with the row's r, and combined with SGLang's sign convention; cache index ``i mod
  h`` or ``i``.

The q/k choice is a uniform branch on the program id that calls one inlined tile function per tensor, so each
copy keeps the divisibility facts of its own pointer and strides (a merged pointer would lose the 16-byte
vectors). HB is the power of two that minimizes padded head lanes plus a small charge for re-reading the cache
row from L2 per head block (H24 -> 8, H30 -> 32 with 2 masked heads); TOK fills ~TILE_ELEMS elements and
shrinks (then HB halves, down to one 16-byte vector per thread of a warp) until the grid has MIN_PROGRAMS_PER_SM
programs per SM. Offsets are int32 unless the launch can form one past 2^31 (WIDE). On sm_90 the launch uses
programmatic dependent launch (``griddepcontrol.wait`` before the first load, ``launch_dependents`` once the
loads are issued), as SGLang's kernel does.
"""

from __future__ import annotations

import os

import torch
import triton
import triton.language as tl
from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait

from kda_kernels.launch_cache import KeptLaunch, launch_and_keep

INT32_LIMIT = 2**31 - 1
TILE_ELEMS = 4096  # elements of q/k per program on large rows (8 KB of bf16)
VECS_PER_THREAD = 2  # 16-byte vectors each thread moves per program (sets num_warps)
MIN_PROGRAMS_PER_SM = 4
MIN_TILE_BYTES = 512  # the smallest tile: one 16-byte vector per thread of one warp
CACHE_REREAD_WEIGHT = 0.25  # cost of an L2 cache-row re-read per head block, relative to a padded head lane
USE_PDL = True  # programmatic dependent launch on sm_90+ (variant: False)


@triton.jit
def _norm_rope_tile(base, w_ptr, n_heads, stride_t, stride_h, h0, tokens, tok_ok, c0, c1, s0, s1, eps,
                    HEAD_DIM: tl.constexpr, ROPE: tl.constexpr, IS_NEOX: tl.constexpr, TOK: tl.constexpr,
                    HB: tl.constexpr, WIDE: tl.constexpr):
    heads = h0 + tl.arange(0, HB)
    if WIDE:
        heads = heads.to(tl.int64)
    cols = tl.arange(0, HEAD_DIM)
    row_off = tokens[:, None] * stride_t + heads[None, :] * stride_h  # [TOK, HB]
    mask = (tok_ok[:, None] & (heads < n_heads)[None, :])[:, :, None]
    ptrs = base + row_off[:, :, None] + cols[None, None, :]
    x = tl.load(ptrs, mask=mask, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + cols).to(tl.float32)
    r = tl.math.rsqrt(tl.sum(x * x, axis=2) / HEAD_DIM + eps)  # fp32 sum of squares, fp32 rsqrt
    rw = r[:, :, None] * w[None, None, :]  # SGLang's x * (r * w)
    e = x * rw
    if IS_NEOX:
        HALF: tl.constexpr = ROPE // 2
        partner = tl.where(cols < HALF, cols + HALF, tl.where(cols < ROPE, cols - HALF, cols))
        xp = tl.load(base + row_off[:, :, None] + partner[None, None, :], mask=mask, other=0.0).to(tl.float32)
        wp = tl.load(w_ptr + partner).to(tl.float32)
        ep = xp * (r[:, :, None] * wp[None, None, :])
        sign = tl.where(cols < HALF, -1.0, 1.0)
        out = e * c0[:, None, :] + (ep * sign[None, None, :]) * s0[:, None, :]
        if ROPE < HEAD_DIM:
            out = tl.where((cols < ROPE)[None, None, :], out, e)
    else:
        e0, e1 = tl.split(tl.reshape(e, [TOK, HB, HEAD_DIM // 2, 2]))
        o0 = e0 * c0[:, None, :] - e1 * s0[:, None, :]
        o1 = e1 * c1[:, None, :] + e0 * s1[:, None, :]
        if ROPE < HEAD_DIM:
            pair_in = (tl.arange(0, HEAD_DIM // 2) < ROPE // 2)[None, None, :]
            o0 = tl.where(pair_in, o0, e0)
            o1 = tl.where(pair_in, o1, e1)
        out = tl.reshape(tl.join(o0, o1), [TOK, HB, HEAD_DIM])
    tl.store(ptrs, out.to(base.dtype.element_ty), mask=mask)


@triton.jit
def _qknorm_rope_kernel(
    q_ptr, k_ptr, qw_ptr, kw_ptr, cache_ptr, pos_ptr,
    n_tokens, n_q_heads, n_k_heads, n_q_blocks, n_blocks,
    stride_qt, stride_qh, stride_kt, stride_kh, stride_cache, eps,
    HEAD_DIM: tl.constexpr, ROPE: tl.constexpr, IS_NEOX: tl.constexpr, FULL_WIDTH: tl.constexpr,
    TOK: tl.constexpr, HB: tl.constexpr, WIDE: tl.constexpr, USE_PDL: tl.constexpr,
):
    pid = tl.program_id(0)
    tb = pid // n_blocks
    hb = pid - tb * n_blocks
    tokens = tb * TOK + tl.arange(0, TOK)
    tok_ok = tokens < n_tokens
    if WIDE:
        tokens = tokens.to(tl.int64)
    if USE_PDL:
        gdc_wait()  # q, k, the cache and positions may come from the previous kernel
    pos = tl.load(pos_ptr + tokens, mask=tok_ok, other=0)
    if WIDE:
        pos = pos.to(tl.int64)
    crow = pos * stride_cache  # [TOK]
    if IS_NEOX:
        cols = tl.arange(0, HEAD_DIM)
        cmask = tok_ok[:, None] & (cols < ROPE)[None, :]
        if FULL_WIDTH:
            cidx = cols
            SIN_AT: tl.constexpr = ROPE
        else:
            cidx = tl.where(cols < ROPE // 2, cols, cols - ROPE // 2)
            SIN_AT: tl.constexpr = ROPE // 2
        c0 = tl.load(cache_ptr + crow[:, None] + cidx[None, :], mask=cmask, other=0.0).to(tl.float32)
        s0 = tl.load(cache_ptr + crow[:, None] + SIN_AT + cidx[None, :], mask=cmask, other=0.0).to(tl.float32)
        c1 = c0
        s1 = s0
    else:
        if FULL_WIDTH:
            cols = tl.arange(0, HEAD_DIM)
            cmask = tok_ok[:, None] & (cols < ROPE)[None, :]
            cf = tl.load(cache_ptr + crow[:, None] + cols[None, :], mask=cmask, other=0.0).to(tl.float32)
            sf = tl.load(cache_ptr + crow[:, None] + ROPE + cols[None, :], mask=cmask, other=0.0).to(tl.float32)
            c0, c1 = tl.split(tl.reshape(cf, [TOK, HEAD_DIM // 2, 2]))
            s0, s1 = tl.split(tl.reshape(sf, [TOK, HEAD_DIM // 2, 2]))
        else:
            pairs = tl.arange(0, HEAD_DIM // 2)
            cmask = tok_ok[:, None] & (pairs < ROPE // 2)[None, :]
            c0 = tl.load(cache_ptr + crow[:, None] + pairs[None, :], mask=cmask, other=0.0).to(tl.float32)
            s0 = tl.load(cache_ptr + crow[:, None] + ROPE // 2 + pairs[None, :], mask=cmask,
                         other=0.0).to(tl.float32)
            c1 = c0
            s1 = s0
    if hb < n_q_blocks:
        _norm_rope_tile(q_ptr, qw_ptr, n_q_heads, stride_qt, stride_qh, hb * HB, tokens, tok_ok,
                        c0, c1, s0, s1, eps, HEAD_DIM, ROPE, IS_NEOX, TOK, HB, WIDE)
    else:
        _norm_rope_tile(k_ptr, kw_ptr, n_k_heads, stride_kt, stride_kh, (hb - n_q_blocks) * HB, tokens, tok_ok,
                        c0, c1, s0, s1, eps, HEAD_DIM, ROPE, IS_NEOX, TOK, HB, WIDE)
    if USE_PDL:
        gdc_launch_dependents()


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _floor_pow2(n: int) -> int:
    return 1 << (max(1, n).bit_length() - 1)


def choose_head_block(n_q_heads: int, n_k_heads: int, head_dim: int, x_bytes: int, cache_row_bytes: int,
                      tile_elems: int = TILE_ELEMS) -> int:
    """The power-of-two head block minimizing padded head lanes + CACHE_REREAD_WEIGHT x (cache-row bytes re-read
    from L2 per head block / q-k bytes of the block). Ties go to the larger block."""
    heads = n_q_heads + n_k_heads
    cap = min(_floor_pow2(max(1, tile_elems // head_dim)), triton.next_power_of_2(max(n_q_heads, n_k_heads, 1)))
    best_score, best = float("inf"), 1
    hb = 1
    while hb <= cap:
        padded = (_cdiv(n_q_heads, hb) + _cdiv(n_k_heads, hb)) * hb
        score = padded / heads + CACHE_REREAD_WEIGHT * cache_row_bytes / (hb * head_dim * x_bytes)
        if score <= best_score + 1e-12:
            best_score, best = score, hb
        hb *= 2
    return best


def plan(n_tokens: int, n_q_heads: int, n_k_heads: int, head_dim: int, x_bytes: int, cache_row_bytes: int,
         n_sms: int) -> tuple[int, int, int]:
    """(TOK, HB, num_warps) of a launch (see the module docstring)."""
    hb = choose_head_block(n_q_heads, n_k_heads, head_dim, x_bytes, cache_row_bytes)
    tok = _floor_pow2(max(1, TILE_ELEMS // (hb * head_dim)))
    min_programs = MIN_PROGRAMS_PER_SM * n_sms

    def programs(t: int, h: int) -> int:
        return _cdiv(n_tokens, t) * (_cdiv(n_q_heads, h) + _cdiv(n_k_heads, h))

    while tok > 1 and programs(tok, hb) < min_programs:
        tok //= 2
    while hb > 1 and hb * head_dim * x_bytes > MIN_TILE_BYTES and programs(tok, hb) < min_programs:
        hb //= 2
    elems = tok * hb * head_dim
    threads = max(1, elems * x_bytes // (16 * VECS_PER_THREAD))
    num_warps = min(8, max(1, _floor_pow2(threads // 32)))
    return tok, hb, num_warps


_SM_COUNT: dict[int, int] = {}


def sm_count(device: torch.device) -> int:
    """Multiprocessors of a CUDA device (cached); 4 under the CPU interpreter (only the tiling depends on it)."""
    if device.type != "cuda":
        return 4
    index = device.index if device.index is not None else torch.cuda.current_device()
    if index not in _SM_COUNT:
        _SM_COUNT[index] = torch.cuda.get_device_properties(index).multi_processor_count
    return _SM_COUNT[index]


def _pdl(device: torch.device) -> bool:
    if not USE_PDL or device.type != "cuda" or os.environ.get("TRITON_INTERPRET") == "1":
        return False
    return torch.cuda.get_device_capability(device)[0] >= 9


def launch(q: torch.Tensor, k: torch.Tensor, q_weight: torch.Tensor, k_weight: torch.Tensor,
           cache: torch.Tensor, positions: torch.Tensor, eps: float, rope_dim: int, is_neox: bool,
           full_width: bool) -> KeptLaunch | None:
    """Normalize and rotate q [N,Hq,D] and k [N,Hk,D] in place (the caller has checked the contract and that
    there is work). Returns the launch to repeat for later calls of the same signature (None under the
    interpreter)."""
    n_tokens, n_q_heads, head_dim = q.shape
    n_k_heads = k.shape[1]
    x_bytes = q.element_size()
    tok, hb, num_warps = plan(n_tokens, n_q_heads, n_k_heads, head_dim, x_bytes,
                              cache.shape[1] * cache.element_size(), sm_count(q.device))
    n_q_blocks = _cdiv(n_q_heads, hb)
    n_blocks = n_q_blocks + _cdiv(n_k_heads, hb)
    n_programs = _cdiv(n_tokens, tok) * n_blocks
    padded_tokens = _cdiv(n_tokens, tok) * tok
    padded_heads = max(n_q_blocks, n_blocks - n_q_blocks) * hb
    reach = max(
        padded_tokens * max(q.stride(0), k.stride(0)) + padded_heads * max(q.stride(1), k.stride(1)) + head_dim,
        cache.shape[0] * cache.stride(0) + cache.shape[1],
    )
    pdl = _pdl(q.device)
    tail = (n_tokens, n_q_heads, n_k_heads, n_q_blocks, n_blocks,
            q.stride(0), q.stride(1), k.stride(0), k.stride(1), cache.stride(0), float(eps),
            head_dim, rope_dim, bool(is_neox), bool(full_width), tok, hb, reach > INT32_LIMIT, pdl)
    options = {"num_warps": num_warps}
    if pdl:
        options["launch_pdl"] = True
    return launch_and_keep(_qknorm_rope_kernel, (n_programs,), (q, k, q_weight, k_weight, cache, positions),
                           tail, **options)
