"""c006: ``fuse_scale_shift_kernel`` (adaLN MulAdd, ``y = x * (scale_constant + scale) + shift``) in memory order.

Semantics (SGLang 0.5.23, ``modulate/scale_shift_triton.py``, the ``fuse_scale_shift_kernel_blc_opt`` path every
NVIDIA call with a 0-D/1-element, 2-D or 3-D scale takes): x ``[B,L,C]`` contiguous; scale and shift each a scalar
(0-D or one element), ``[B|1, C]`` (broadcast over L) or ``[B|1, L|1, C]`` with any strides, expanded to
``[B,L,C]``; per element ``y = x * (scale_constant + scale) + shift`` with Triton's own type promotion, stored in
x.dtype. The kernel below keeps that expression token for token (same operand dtypes, same order), so it
compiles to the same arithmetic and rounds where SGLang rounds: the outputs are SGLang's bits.

Why a new kernel (H200 bench run 20261127-101911-cc4b00, ledger rows of c005, which ran SGLang's own kernel):
torch.compile of the same math is 3-4 % faster on every large row (hunyuanvideo L27030: 115.6 vs 119.4 us;
wan_t2v L37800: 265.4 vs 277.0 us) and 34 % faster on the rows of a few dozen tokens (qwen L19: 1.81 vs 2.76 us).
Two things in SGLang's launch explain it; c006 changes exactly those and nothing in the per-element code:

- grid order. SGLang's grid is ``(cdiv(L, BLOCK_L), cdiv(C, BLOCK_C), B)`` with axis 0 fastest: with
  BLOCK_C = 1024 and BLOCK_L = 4 at C = 3072 the launch walks column block 0 of every token group, then column
  block 1, then 2. The resident programs read one 2 KB piece of every 6 KB row group, so the whole address range
  of x, shift and y is streamed three times at a third of its density (each DRAM page opened three times). The
  rotary task measured the same pattern costing 1-4 % on this GPU (its notes, c005: memory order). c006 runs a
  1-D grid with the column block fastest: consecutive programs cover consecutive addresses, as Inductor's flat
  pointwise loop does.
- programs on small calls. SGLang's tile is always 4096 elements: 42 programs at L = 55 (C = 3072), 15 at
  L = 19, on 132 SMs, so each SM runs at most one 128-thread program with 32 elements per thread in series.
  c006 halved the tile (down to 1024 elements, 8 per thread: one 16-byte bf16 vector of each stream) until the
  launch had 528 programs; c007 took 1024-element tiles whenever 4096-element ones would make a launch of fewer
  than 8 waves; c008 takes 1024-element tiles everywhere but on launches of a few hundred programs (``plan``: what
  the H200 tile sweep measured).

Everything else is SGLang's: 4 warps, BLOCK_C = min(1024, next_pow2(C)), masks on both axes, scalar scale/shift
broadcast with ``tl.full`` in their own dtype, strides as given (a unit C stride is specialized by Triton and
vectorized, a zero stride broadcasts), int32 offsets unless an offset can pass 2^31 - 1 (then int64: SGLang
would overflow there; it is outside every production row).

Byte model (task.toml: each input once, broadcast dims once, each output once), e = x.element_size():

    bytes = B*L*C*e (x) + |shift| + |scale| + B*L*C*e (y),

where |t| is the element count of the distinct elements a broadcast tensor holds times its element size (per-token
shift [1,L,C] bf16: B*L*C*2; [1,1,C] scale: C*e). Every production row is per-token shift with a broadcast or
per-token scale: 3 (or 3 + fp32 scale: 5 bytes per element more) streams of the row.

Bound: bytes / 4.29 TB/s (the lab's copy ceiling) on the large rows; ~2 us + bytes / 4.3 TB/s on the calls of a
few hundred tokens or fewer (launch and one DRAM round trip). Per row (bytes from task.toml, H200 run
20261127-101911-cc4b00): hunyuanvideo L27030 498.2 MB -> 116.1 us (SGLang 119.4, compile 115.6, same-size copy
124.3); wan_t2v L37800 1161.2 MB -> 270.7 us (SGLang 277.0, compile 265.4); qwen L4096 75.5 MB -> 17.6 us
(SGLang 20.5, compile 19.0); qwen L19 0.36 MB -> ~2.1 us (SGLang 2.76, compile 1.81).
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import triton
import triton.language as tl

from kda_kernels.launch_cache import KeptLaunch, launch_and_keep

TILE_ELEMS = 4096  # SGLang's program size on NVIDIA (BLOCK_L * BLOCK_C)
MIN_TILE_ELEMS = 1024  # 8 elements per thread at 4 warps: one 16-byte bf16 vector per stream
MID_MIN_PROGRAMS = 2 * 132  # 2048-element tiles only while they still give every SM two programs ...
MID_BELOW_PROGRAMS = 4 * 132 * 16  # ... on launches under 4 waves of 1024-element programs (16 resident per SM)
NUM_WARPS = 4
INT32_MAX = 2**31 - 1


@triton.jit(do_not_specialize=["n_rows", "seq_len"])
def _muladd_kernel(
    x_ptr,
    shift_ptr,
    scale_ptr,
    y_ptr,
    n_rows,
    seq_len,
    C,
    stride_s_b,
    stride_s_l,
    stride_s_c,
    stride_sc_b,
    stride_sc_l,
    stride_sc_c,
    scale_constant: tl.constexpr,
    SCALE_IS_SCALAR: tl.constexpr,
    SHIFT_IS_SCALAR: tl.constexpr,
    N_COL_BLOCKS: tl.constexpr,
    BLOCK_L: tl.constexpr,
    BLOCK_C: tl.constexpr,
    WIDE: tl.constexpr,
):
    # memory order: the column block is the fastest axis of the 1-D grid
    pid = tl.program_id(0)
    pid_c = pid % N_COL_BLOCKS
    pid_r = pid // N_COL_BLOCKS
    if WIDE:
        pid_r = pid_r.to(tl.int64)
    rows = pid_r * BLOCK_L + tl.arange(0, BLOCK_L)
    cols = pid_c * BLOCK_C + tl.arange(0, BLOCK_C)
    mask = (rows < n_rows)[:, None] & (cols < C)[None, :]
    b = rows // seq_len
    l_idx = rows - b * seq_len

    x_off = rows[:, None] * C + cols[None, :]
    x = tl.load(x_ptr + x_off, mask=mask, other=0)

    if SHIFT_IS_SCALAR:
        shift_val = tl.load(shift_ptr)
        shift = tl.full((BLOCK_L, BLOCK_C), shift_val, dtype=shift_val.dtype)
    else:
        s_off = (b * stride_s_b + l_idx * stride_s_l)[:, None] + cols[None, :] * stride_s_c
        shift = tl.load(shift_ptr + s_off, mask=mask, other=0)

    if SCALE_IS_SCALAR:
        scale_val = tl.load(scale_ptr)
        scale = tl.full((BLOCK_L, BLOCK_C), scale_val, dtype=scale_val.dtype)
    else:
        sc_off = (b * stride_sc_b + l_idx * stride_sc_l)[:, None] + cols[None, :] * stride_sc_c
        scale = tl.load(scale_ptr + sc_off, mask=mask, other=0)

    # SGLang's expression, operand for operand: the same promotion, contraction and rounding
    y = x * (scale_constant + scale) + shift
    tl.store(y_ptr + x_off, y, mask=mask)


@triton.jit  # n_elems specialized (divisible by 16): the mask is uniform over 16-byte vectors, so loads vectorize
def _muladd_flat_kernel(x_ptr, shift_ptr, scale_ptr, y_ptr, n_elems, C, scale_constant: tl.constexpr,
                        XBLOCK: tl.constexpr):
    # Inductor's shape for the production layout (x and shift dense, one broadcast scale row): one index per
    # element, the scale column idx % C; no per-row division on the shift's address path
    idx = tl.program_id(0) * XBLOCK + tl.arange(0, XBLOCK)
    mask = idx < n_elems
    x = tl.load(x_ptr + idx, mask=mask, other=0)
    shift = tl.load(shift_ptr + idx, mask=mask, other=0)
    scale = tl.load(scale_ptr + idx % C, mask=mask, other=0)
    # SGLang's expression, operand for operand: the same promotion, contraction and rounding
    y = x * (scale_constant + scale) + shift
    tl.store(y_ptr + idx, y, mask=mask)


def flat_layout(x: torch.Tensor, scale: torch.Tensor, shift: torch.Tensor) -> bool:
    """The layout of every production row but the per-token-scale ones: dense x and shift of one shape, the scale
    one dense row of C elements broadcast over B and L ([1,C] or [1,1,C]), int32 offsets."""
    c = x.shape[-1]
    return (shift.shape == x.shape and shift.is_contiguous() and scale.dim() in (2, 3) and scale.numel() == c
            and scale.shape[-1] == c and scale.stride(-1) == 1 and x.numel() <= INT32_MAX)


def flat_xblock(n_elems: int) -> int:
    """1024 elements per program, or 2048 on launches of a few hundred programs (``plan``'s rule in elements)."""
    fine = triton.cdiv(n_elems, MIN_TILE_ELEMS)
    mid = triton.cdiv(n_elems, 2 * MIN_TILE_ELEMS)
    return 2 * MIN_TILE_ELEMS if mid >= MID_MIN_PROGRAMS and fine < MID_BELOW_PROGRAMS else MIN_TILE_ELEMS


def launch_flat(x: torch.Tensor, scale: torch.Tensor, shift: torch.Tensor, scale_constant: float,
                xblock: int = 0) -> tuple[torch.Tensor, KeptLaunch | None]:
    """The flat kernel on a ``flat_layout`` call; returns y and the launch to repeat with ``(x, shift, scale, y)``.
    ``xblock``: dev sweeps only (0: ``flat_xblock``)."""
    y = torch.empty_like(x)
    n = x.numel()
    xb = xblock or flat_xblock(n)
    kept = launch_and_keep(_muladd_flat_kernel, (triton.cdiv(n, xb),), (x, shift, scale, y),
                           (n, x.shape[-1], scale_constant, xb), num_warps=NUM_WARPS)
    return y, kept


class MulAddPlan(NamedTuple):
    block_l: int
    block_c: int
    n_col_blocks: int
    grid: int


def tile_plan(n_rows: int, c: int, tile_elems: int) -> MulAddPlan:
    """Tiles of BLOCK_C = min(1024, next_pow2(C)) columns and ``tile_elems // BLOCK_C`` rows (at least one)."""
    block_c = min(1024, triton.next_power_of_2(c))
    n_col_blocks = triton.cdiv(c, block_c)
    block_l = max(1, tile_elems // block_c)
    return MulAddPlan(block_l, block_c, n_col_blocks, triton.cdiv(n_rows, block_l) * n_col_blocks)


def plan(n_rows: int, c: int) -> MulAddPlan:
    """1024-element tiles (26 registers, 16 programs per SM), or 2048-element ones for launches of a few hundred
    programs (the ~190-token rows: 294 programs instead of 585).

    Measured on the H200 (dev/muladd_sweep.py, 2026-11-27; compile us / impl us over the 13 MulAdd rows):
    4096-element tiles (SGLang's size; c006/c007's choice on launches of 8+ waves) read 0.990-0.996 on the long
    rows where 1024-element ones read 0.998-1.000, and 0.948 on qwen L4096 (2.1 waves: a 12 %-full last wave)
    against 0.989; 2048-element tiles won the 189/195-token rows (1.041 / 0.966 against 1.026 / 0.944) and lost or
    tied everywhere else. The 19-55-token rows read 0.95-0.98 with every tile size (launch-latency bound)."""
    fine = tile_plan(n_rows, c, MIN_TILE_ELEMS)
    mid = tile_plan(n_rows, c, 2 * MIN_TILE_ELEMS)
    if mid.grid >= MID_MIN_PROGRAMS and fine.grid < MID_BELOW_PROGRAMS:
        return mid
    return fine


def _reach(shape: tuple[int, ...], strides: tuple[int, ...]) -> int:
    """The largest element offset an expanded view reads (strides are non-negative: expand and views of dense
    tensors never make them negative)."""
    return sum((n - 1) * s for n, s in zip(shape, strides, strict=True) if n > 0)


def launch(x: torch.Tensor, scale_arg: torch.Tensor, scale_strides: tuple[int, int, int], scale_is_scalar: bool,
           shift_arg: torch.Tensor, shift_strides: tuple[int, int, int], shift_is_scalar: bool,
           scale_constant: float, plan_override: MulAddPlan | None = None) -> tuple[torch.Tensor, KeptLaunch | None]:
    """Run the kernel on checked inputs (register.py mirrors SGLang's wrapper: x contiguous [B,L,C] with
    B*L*C > 0; scale/shift either a one-element tensor (``*_is_scalar``, strides zero) or a tensor whose expanded
    [B,L,C] view has the given strides). Returns y and the launch to repeat for later calls of the same signature
    with ``(x, shift, scale, y)`` (None under the interpreter). ``plan_override``: dev sweeps only."""
    batch, seq_len, c = x.shape
    n_rows = batch * seq_len
    y = torch.empty_like(x)
    p = plan(n_rows, c) if plan_override is None else plan_override
    shape = (batch, seq_len, c)
    wide = max(x.numel(), _reach(shape, scale_strides) + 1, _reach(shape, shift_strides) + 1,
               (p.grid // p.n_col_blocks) * p.block_l * c) > INT32_MAX
    tail = (n_rows, seq_len, c, *shift_strides, *scale_strides, scale_constant, scale_is_scalar, shift_is_scalar,
            p.n_col_blocks, p.block_l, p.block_c, wide)
    kept = launch_and_keep(_muladd_kernel, (p.grid,), (x, shift_arg, scale_arg, y), tail, num_warps=NUM_WARPS)
    return y, kept
