"""LTX-2 split (rotate-half) RoPE in Triton, bit-exact with SGLang 0.5.23's ``rope/ltx2_rotary_triton.py``.

Math (SGLang's roundings, on purpose): per head, ``x1 = x[..., :D/2]``, ``x2 = x[..., D/2:]``,
``o1 = fp32(bf16(x1*cos)) + (-fp32(x2) * fp32(sin))``, ``o2 = fp32(bf16(x2*cos)) + fp32(x1) * fp32(sin)``,
one rounding to x.dtype on the store. ``x*cos`` is formed in the promoted dtype of x and cos (Triton's ``*``,
the same expression as SGLang's) and then rounded to bf16 precision. That rounding is written out as integer
round-to-nearest-even on the fp32 bits (``_round_to_bf16``): identical to the GPU's ``cvt.rn.bf16.f32`` for
every non-NaN value (NaN stays NaN), and identical in Triton's CPU interpreter, whose fp32 -> bf16 cast
truncates; one code path runs on both.

Byte model (per call; N = B*S*H*D elements of x, e_x / e_c the element sizes of x / cos and sin):

    bytes = N*e_x (x read) + N*e_x (out written) + 2 * N/2 * e_c (cos, sin read once: [B,H,S,D/2] each)
    bound = bytes / 4.29 TB/s, plus ~2 us of launch and DRAM latency on the small rows
            (the issue's size-aware bound: 2 us + bytes / 4.3 TB/s)

    [2, 6144, 4096] bf16: 100.7 + 100.7 + 100.7 = 302.0 MB -> 70.4 us (SGLang 72.4 us, 4.17 TB/s: parity is the
    honest target); [1, 126, 2048]: 1.55 MB -> 0.36 us of bytes, ~2.4 us with the fixed cost.

SGLang's kernel runs one program per (token, 16-head block) with seq_len, heads and the cos/sin strides as
``constexpr`` (a compile per new shape, a larger host key). This kernel takes them as runtime arguments, tiles
ROWS tokens x HEADS heads x D/2 per program (so the large rows keep 16 KB-class tiles and the small rows are cut
into enough programs to reach every SM), and walks x in address order (1-D grid, head block fastest).
"""

from __future__ import annotations

import triton
import triton.language as tl

INT32_LIMIT = 2**31 - 1


@triton.jit
def _round_to_bf16(v):
    """fp32 -> nearest-even bf16 value, kept in fp32 (bits of the low half cleared); NaN passes through."""
    bits = v.to(tl.uint32, bitcast=True)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    return tl.where(v != v, v, rounded.to(tl.float32, bitcast=True))


@triton.jit
def _ltx2_split_rope_kernel(
    out_ptr, x_ptr, cos_ptr, sin_ptr,
    n_rows, seq_len, num_heads, half_dim, n_head_blocks,
    stride_cos_b, stride_cos_h, stride_cos_t, stride_sin_b, stride_sin_h, stride_sin_t,
    ROWS: tl.constexpr, HEADS: tl.constexpr, BLOCK_HALF: tl.constexpr, WIDE: tl.constexpr,
):
    pid = tl.program_id(0)
    row_block = pid // n_head_blocks
    head_block = pid - row_block * n_head_blocks
    rows = row_block * ROWS + tl.arange(0, ROWS)  # flat (batch, token) rows of x
    heads = head_block * HEADS + tl.arange(0, HEADS)
    if WIDE:
        rows = rows.to(tl.int64)
        heads = heads.to(tl.int64)
    batch = rows // seq_len
    token = rows - batch * seq_len
    j = tl.arange(0, BLOCK_HALF)
    mask = (rows < n_rows)[:, None, None] & (heads < num_heads)[None, :, None] & (j < half_dim)[None, None, :]

    head_dim = 2 * half_dim
    x_off = rows[:, None, None] * (num_heads * head_dim) + heads[None, :, None] * head_dim + j[None, None, :]
    cos_off = (batch * stride_cos_b + token * stride_cos_t)[:, None, None] + heads[None, :, None] * stride_cos_h \
        + j[None, None, :]
    sin_off = (batch * stride_sin_b + token * stride_sin_t)[:, None, None] + heads[None, :, None] * stride_sin_h \
        + j[None, None, :]
    x_first = tl.load(x_ptr + x_off, mask=mask, other=0.0, eviction_policy="evict_first")
    x_second = tl.load(x_ptr + x_off + half_dim, mask=mask, other=0.0, eviction_policy="evict_first")
    cos = tl.load(cos_ptr + cos_off, mask=mask, other=0.0, eviction_policy="evict_first")
    sin = tl.load(sin_ptr + sin_off, mask=mask, other=0.0, eviction_policy="evict_first")

    # SGLang: (x*cos).to(bf16).to(fp32) + (-x2.f32 * sin.f32); the same products, the bf16 rounding in bits.
    out_first = _round_to_bf16((x_first * cos).to(tl.float32)) + (-x_second.to(tl.float32) * sin.to(tl.float32))
    out_second = _round_to_bf16((x_second * cos).to(tl.float32)) + (x_first.to(tl.float32) * sin.to(tl.float32))
    tl.store(out_ptr + x_off, out_first.to(x_first.dtype), mask=mask)
    tl.store(out_ptr + x_off + half_dim, out_second.to(x_first.dtype), mask=mask)


def plan(n_rows: int, num_heads: int, half_dim: int,
         tile_elems: int = 8192, min_programs: int = 528) -> tuple[int, int, int, int]:
    """(ROWS, HEADS, BLOCK_HALF, num_warps): tiles of about ``tile_elems`` x elements (both halves), all heads
    of a token in one tile when they fit (HEADS a power of two, masked above H), halved while the grid has
    fewer than ``min_programs`` programs (4 per SM)."""
    block_half = triton.next_power_of_2(half_dim)
    per_head = 2 * block_half
    heads = min(triton.next_power_of_2(num_heads), max(1, tile_elems // per_head))
    rows = max(1, tile_elems // (heads * per_head))
    n_head_blocks = triton.cdiv(num_heads, heads)
    while triton.cdiv(n_rows, rows) * n_head_blocks < min_programs and (rows > 1 or heads > 4):
        if rows > 1:
            rows //= 2
        else:
            heads //= 2
            n_head_blocks = triton.cdiv(num_heads, heads)
    elems = rows * heads * per_head
    num_warps = max(1, min(8, elems // 1024))
    return rows, heads, block_half, num_warps


def launch(out, x, cos, sin, tile_elems: int = 8192, min_programs: int = 528) -> None:
    """out/x [B, S, H*D] contiguous; cos/sin [B, H, S, D/2] with last stride 1 (any other strides)."""
    batch, seq_len, _ = x.shape
    _, num_heads, _, half_dim = cos.shape
    n_rows = batch * seq_len
    rows, heads, block_half, num_warps = plan(n_rows, num_heads, half_dim, tile_elems, min_programs)
    n_head_blocks = triton.cdiv(num_heads, heads)
    n_programs = triton.cdiv(n_rows, rows) * n_head_blocks
    padded_rows = n_programs // n_head_blocks * rows
    reach = max(
        padded_rows * num_heads * 2 * half_dim + n_head_blocks * heads * 2 * half_dim,
        max(cos.stride(0), sin.stride(0)) * (triton.cdiv(padded_rows, seq_len) + 1)
        + max(cos.stride(2), sin.stride(2)) * seq_len + max(cos.stride(1), sin.stride(1)) * n_head_blocks * heads
        + block_half,
    )
    _ltx2_split_rope_kernel[(n_programs,)](
        out, x, cos, sin,
        n_rows, seq_len, num_heads, half_dim, n_head_blocks,
        cos.stride(0), cos.stride(1), cos.stride(2), sin.stride(0), sin.stride(1), sin.stride(2),
        ROWS=rows, HEADS=heads, BLOCK_HALF=block_half, WIDE=reach > INT32_LIMIT,
        num_warps=num_warps,
    )
