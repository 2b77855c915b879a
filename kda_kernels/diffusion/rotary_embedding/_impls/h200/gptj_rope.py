"""GPT-J (interleaved-pair) rotary embedding in Triton, bit-exact with SGLang 0.5.23's ``rope/rotary_triton.py``.

Math (SGLang's, kept rounding for rounding): per pair ``(x[2i], x[2i+1])`` of every head of every token,
``o[2i] = fma(-x[2i+1], s[i], x[2i]*c[i])``, ``o[2i+1] = fma(x[2i], s[i], x[2i+1]*c[i])`` in fp32 (x, cos and
sin read in their own dtype and widened to fp32; cos/sin are NOT rounded to x's dtype), one rounding to
x.dtype on the store. Row ``t`` of cos/sin serves token ``t`` of every batch entry.

Byte model (per call; N = B*T*H*D elements of x, e_x its element size, e_c the cos/sin element size):

    bytes = N*e_x (x read) + N*e_x (out written) + 2 * T * D/2 * e_c (cos, sin read once)
    bound = bytes / 4.29 TB/s (the H200's measured copy ceiling; 4.43 TB/s for a 3R+1W stream)

    HunyuanVideo [1, 27030, 24, 128] bf16, fp32 tables: 166.1 + 166.1 + 13.8 = 346.0 MB -> 80.7 us at the
    copy ceiling (SGLang: 126.7 us, 2.73 TB/s). Both HunyuanVideo rows (the contiguous x and the token view of
    the joint sequence) move the same bytes: the view only changes the token stride.

Why SGLang sits at 2.7 TB/s: one program per (token, head block) loads x1 = x[..., 0::2] and x2 = x[..., 1::2]
as two stride-2 gathers (2-byte accesses, half of each sector used per instruction) and stores the same way,
and re-reads the token's cos/sin row once per head block and per 32-wide chunk of the head-dim loop.

This kernel: a program owns a tile of ROWS tokens x HEADS heads x the whole head dim. x is loaded as one
contiguous [ROWS, HEADS, D] tile (16-byte vectors along D), split into its (even, odd) lanes in registers
(``tl.split`` of a [..., D/2, 2] reshape: no data movement), rotated, joined back and stored as one
contiguous tile; cos/sin are loaded once per token row of the tile and broadcast over its heads. The grid is
1-D with the head block fastest, so consecutive programs walk x (and out) in address order. Offsets are int32
unless the largest offset the launch can form needs int64 (WIDE).
"""

from __future__ import annotations

import triton
import triton.language as tl

from kda_kernels.launch_cache import KeptLaunch, launch_and_keep

INT32_LIMIT = 2**31 - 1


@triton.jit
def _gptj_rope_kernel(
    out_ptr, x_ptr, cos_ptr, sin_ptr,
    n_rows, num_tokens, num_heads, head_size, n_head_blocks,
    stride_x_row, stride_x_head, stride_out_row, stride_out_head, stride_cos_row, stride_sin_row,
    TABLE_COL_STRIDE: tl.constexpr,  # 1: cos/sin [T, >= D/2]; 2: interleaved [T, D] tables read as [:, ::2]
    ROWS: tl.constexpr, HEADS: tl.constexpr, BLOCK_D: tl.constexpr,
    ONE_BATCH: tl.constexpr,  # n_rows == num_tokens: the table row is the x row (no modulo)
    WIDE: tl.constexpr,
):
    pid = tl.program_id(0)
    row_block = pid // n_head_blocks
    head_block = pid - row_block * n_head_blocks
    rows = row_block * ROWS + tl.arange(0, ROWS)
    heads = head_block * HEADS + tl.arange(0, HEADS)
    if WIDE:
        rows = rows.to(tl.int64)
        heads = heads.to(tl.int64)
    if ONE_BATCH:
        tokens = rows
    else:
        tokens = rows % num_tokens
    cols = tl.arange(0, BLOCK_D)
    half = tl.arange(0, BLOCK_D // 2)
    row_ok = rows < n_rows
    mask = row_ok[:, None, None] & (heads < num_heads)[None, :, None] & (cols < head_size)[None, None, :]
    x_off = rows[:, None, None] * stride_x_row + heads[None, :, None] * stride_x_head + cols[None, None, :]
    x = tl.load(x_ptr + x_off, mask=mask, other=0.0, eviction_policy="evict_first")

    table_mask = row_ok[:, None] & (half < head_size // 2)[None, :]
    cos = tl.load(cos_ptr + tokens[:, None] * stride_cos_row + half[None, :] * TABLE_COL_STRIDE,
                  mask=table_mask, other=0.0, eviction_policy="evict_last")
    sin = tl.load(sin_ptr + tokens[:, None] * stride_sin_row + half[None, :] * TABLE_COL_STRIDE,
                  mask=table_mask, other=0.0, eviction_policy="evict_last")

    x1, x2 = tl.split(tl.reshape(x, [ROWS, HEADS, BLOCK_D // 2, 2]))
    x1f = x1.to(tl.float32)
    x2f = x2.to(tl.float32)
    cf = cos.to(tl.float32)[:, None, :]
    sf = sin.to(tl.float32)[:, None, :]
    # SGLang's order: the fma's addend is the rounded fp32 product x*c.
    o1 = tl.fma(-x2f, sf, x1f * cf)
    o2 = tl.fma(x1f, sf, x2f * cf)
    out = tl.reshape(tl.join(o1.to(x.dtype), o2.to(x.dtype)), [ROWS, HEADS, BLOCK_D])
    out_off = rows[:, None, None] * stride_out_row + heads[None, :, None] * stride_out_head + cols[None, None, :]
    tl.store(out_ptr + out_off, out, mask=mask)


def _largest_pow2_divisor(n: int, cap: int) -> int:
    p = 1
    while p < cap and n % (2 * p) == 0:
        p *= 2
    return p


def plan(n_rows: int, num_heads: int, head_size: int,
         tile_elems: int = 8192, min_programs: int = 528) -> tuple[int, int, int, int]:
    """(ROWS, HEADS, BLOCK_D, num_warps) for a launch: tiles of about ``tile_elems`` x elements (16 KB of
    bf16), the head block the largest power of two dividing H (no masked head lanes on H = 24 or 40), halved
    while the grid has fewer than ``min_programs`` (4 per SM) so small calls still spread over every SM."""
    block_d = max(2, triton.next_power_of_2(head_size))
    heads = _largest_pow2_divisor(num_heads, max(1, tile_elems // block_d))
    if heads == 1 and num_heads <= max(1, tile_elems // block_d):
        heads = triton.next_power_of_2(num_heads)  # few odd heads: one masked block beats one head a program
    rows = max(1, tile_elems // (heads * block_d))
    n_head_blocks = triton.cdiv(num_heads, heads)
    while rows > 1 and triton.cdiv(n_rows, rows) * n_head_blocks < min_programs:
        rows //= 2
    elems = rows * heads * block_d
    num_warps = max(1, min(8, elems // 1024))
    return rows, heads, block_d, num_warps


def launch(out3, x3, cos, sin, num_tokens: int, table_col_stride: int,
           tile_elems: int = 8192, min_programs: int = 528) -> KeptLaunch | None:
    """Rotate x3 [B*T, H, D] into out3 (same shape, last stride 1 on both) with cos/sin rows [T, .].
    Returns the launch to repeat for later calls of the same signature (None under the interpreter)."""
    n_rows, num_heads, head_size = x3.shape
    rows, heads, block_d, num_warps = plan(n_rows, num_heads, head_size, tile_elems, min_programs)
    n_head_blocks = triton.cdiv(num_heads, heads)
    n_programs = triton.cdiv(n_rows, rows) * n_head_blocks
    padded_rows = n_programs // n_head_blocks * rows  # masked lanes form offsets up to here
    padded_heads = n_head_blocks * heads
    reach = max(
        padded_rows * max(x3.stride(0), out3.stride(0)) + padded_heads * max(x3.stride(1), out3.stride(1)) + block_d,
        num_tokens * max(cos.stride(0), sin.stride(0)) + block_d,
    )
    tail = (n_rows, num_tokens, num_heads, head_size, n_head_blocks,
            x3.stride(0), x3.stride(1), out3.stride(0), out3.stride(1), cos.stride(0), sin.stride(0),
            table_col_stride, rows, heads, block_d, n_rows == num_tokens, reach > INT32_LIMIT)
    return launch_and_keep(_gptj_rope_kernel, (n_programs,), (out3, x3, cos, sin), tail, num_warps=num_warps)
