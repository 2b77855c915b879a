"""Variant of gptj_rope.py (same math, same roundings, same byte model and bound; see its docstring): a program
owns ROWS tokens x ALL heads and loops over the head blocks, so each token's cos/sin row is loaded and laid
out once per program and reused for every head, and one program streams ROWS * H * D contiguous elements
(the whole token rows when x is dense). Fewer, longer programs than gptj_rope.py (HunyuanVideo: 3379 programs
of 8 tokens x 24 heads, three trips of 8 heads, instead of 10137 programs of 8 tokens x 8 heads).

Switch to it with one line in register.py: ``from .gptj_rope_headloop import launch as launch_gptj``.
"""

from __future__ import annotations

import triton
import triton.language as tl

from kda_kernels.launch_cache import KeptLaunch, launch_and_keep

from .gptj_rope import INT32_LIMIT, _largest_pow2_divisor


@triton.jit
def _gptj_rope_headloop_kernel(
    out_ptr, x_ptr, cos_ptr, sin_ptr,
    n_rows, num_tokens, num_heads, head_size,
    stride_x_row, stride_x_head, stride_out_row, stride_out_head, stride_cos_row, stride_sin_row,
    TABLE_COL_STRIDE: tl.constexpr, ROWS: tl.constexpr, HEADS: tl.constexpr, BLOCK_D: tl.constexpr,
    ONE_BATCH: tl.constexpr, WIDE: tl.constexpr,
):
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    if WIDE:
        rows = rows.to(tl.int64)
    if ONE_BATCH:
        tokens = rows
    else:
        tokens = rows % num_tokens
    cols = tl.arange(0, BLOCK_D)
    half = tl.arange(0, BLOCK_D // 2)
    row_ok = rows < n_rows
    table_mask = row_ok[:, None] & (half < head_size // 2)[None, :]
    cos = tl.load(cos_ptr + tokens[:, None] * stride_cos_row + half[None, :] * TABLE_COL_STRIDE,
                  mask=table_mask, other=0.0, eviction_policy="evict_last")
    sin = tl.load(sin_ptr + tokens[:, None] * stride_sin_row + half[None, :] * TABLE_COL_STRIDE,
                  mask=table_mask, other=0.0, eviction_policy="evict_last")
    cf = cos.to(tl.float32)[:, None, :]
    sf = sin.to(tl.float32)[:, None, :]
    x_row = rows[:, None, None] * stride_x_row + cols[None, None, :]
    out_row = rows[:, None, None] * stride_out_row + cols[None, None, :]
    col_ok = row_ok[:, None, None] & (cols < head_size)[None, None, :]
    for h0 in range(0, num_heads, HEADS):
        heads = h0 + tl.arange(0, HEADS)
        if WIDE:
            heads = heads.to(tl.int64)
        mask = col_ok & (heads < num_heads)[None, :, None]
        x = tl.load(x_ptr + x_row + heads[None, :, None] * stride_x_head, mask=mask, other=0.0,
                    eviction_policy="evict_first")
        x1, x2 = tl.split(tl.reshape(x, [ROWS, HEADS, BLOCK_D // 2, 2]))
        x1f = x1.to(tl.float32)
        x2f = x2.to(tl.float32)
        o1 = tl.fma(-x2f, sf, x1f * cf)
        o2 = tl.fma(x1f, sf, x2f * cf)
        out = tl.reshape(tl.join(o1.to(x.dtype), o2.to(x.dtype)), [ROWS, HEADS, BLOCK_D])
        tl.store(out_ptr + out_row + heads[None, :, None] * stride_out_head, out, mask=mask)


def plan(n_rows: int, num_heads: int, head_size: int,
         tile_elems: int = 8192, min_programs: int = 264) -> tuple[int, int, int, int]:
    """(ROWS, HEADS, BLOCK_D, num_warps): a head block of about ``tile_elems`` / ROWS elements per loop trip;
    ROWS tokens per program, halved while the grid has fewer than ``min_programs`` (2 per SM)."""
    block_d = max(2, triton.next_power_of_2(head_size))
    heads = _largest_pow2_divisor(num_heads, max(1, tile_elems // (4 * block_d)))
    if heads == 1:
        heads = min(triton.next_power_of_2(num_heads), max(1, tile_elems // (4 * block_d)))
    rows = max(1, tile_elems // (heads * block_d))
    while rows > 1 and triton.cdiv(n_rows, rows) < min_programs:
        rows //= 2
    num_warps = max(1, min(8, rows * heads * block_d // 1024))
    return rows, heads, block_d, num_warps


def launch(out3, x3, cos, sin, num_tokens: int, table_col_stride: int,
           tile_elems: int = 8192, min_programs: int = 264) -> KeptLaunch | None:
    """Same contract as gptj_rope.launch (returns the launch to repeat, or None)."""
    n_rows, num_heads, head_size = x3.shape
    rows, heads, block_d, num_warps = plan(n_rows, num_heads, head_size, tile_elems, min_programs)
    n_programs = triton.cdiv(n_rows, rows)
    padded_heads = triton.cdiv(num_heads, heads) * heads
    reach = max(
        n_programs * rows * max(x3.stride(0), out3.stride(0)) + padded_heads * max(x3.stride(1), out3.stride(1))
        + block_d,
        num_tokens * max(cos.stride(0), sin.stride(0)) + block_d,
    )
    tail = (n_rows, num_tokens, num_heads, head_size,
            x3.stride(0), x3.stride(1), out3.stride(0), out3.stride(1), cos.stride(0), sin.stride(0),
            table_col_stride, rows, heads, block_d, n_rows == num_tokens, reach > INT32_LIMIT)
    return launch_and_keep(_gptj_rope_headloop_kernel, (n_programs,), (out3, x3, cos, sin), tail,
                 num_warps=num_warps)
