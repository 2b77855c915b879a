"""One Triton kernel for both functions: ``y = norm(r)·(1 + scale) + shift`` with ``r = x`` or
``r = residual + gate·x`` (``residual_out = r``), LayerNorm or RMSNorm, fp32 statistics, every modulation layout.

Geometry (``plan``): a program takes ROWS token rows (1, or 2 on large grids of light rows), each held whole in
registers as NCH chunks of C columns, a tuple of NCH [ROWS, C] tensors; a chunk is one 16-byte vector per thread
across the CTA (C = 1024 bf16 columns at 4 warps), so D = 3072 is 3 chunks and 5120 is 5: every load and store is a
full 16-byte vector and no lane is padded. (A masked power-of-two block keeps its dead vectors: ptxas gave 161
registers instead of 72 for Wan's fp32-modulation D = 5120 row in the offline sm_90a build, and a quarter to three
eighths of the lanes idle.) Only D = 256·odd with odd > 8, none in production, takes one masked block.

Memory order: what a row reads once (x, residual, gate, per-token or per-batch modulation rows: DRAM-cold) is
loaded before the statistics, so the row pays one memory latency for all of it; on grids of several waves the
operands every row shares (``[1]``, ``[D]``, ``[1, D]``, ``[1, 1, D]`` modulation, weight, bias: L1/L2 hits after
the first rows) are loaded after the statistics, so their registers are not held across the two reductions; on
small grids they are as cold as x and load first too. SGLang's CuTe DSL kernel loads scale/shift only after its
statistics on every row, which costs its small rows (and its per-token rows) a second DRAM round trip.

Statistics: fp32, two passes over the registers (mean, then the centered variance), each one ``tl.sum`` over a
per-thread partial of all chunks (two block reductions per program, five barriers in the offline build).

Rounding points (prompt.md K): r is rounded to x's dtype (stored as ``residual_out``; the statistics read the
rounded value); a gate of x's 16-bit dtype rounds ``gate·x`` to that dtype before ``+ residual`` (SGLang's
same-dtype CuTe arithmetic); the normalized value ``norm(r)·w + b`` is rounded to x's dtype; the modulation
``n·(1 + scale) + shift`` runs in fp32 with one rounding at the store (allowed by the task's tolerance, and closer
to the fp64 oracle than SGLang's three bf16 roundings).

Modulation operands (gate, scale, shift), one mode each: 0 absent (gate None), 1 scalar ``[1]``, 2 one D-row for
every token (``[D]``, ``[1, D]``, ``[1, 1, D]``, any ``[1|B, ...]`` layout at B = 1: loaded as [1, C] chunks and
broadcast in registers), 3 a row per token at ``b·sb + (s // L)·ss`` (``[B, D]``, ``[1|B, S, D]``, per frame
``[B, F, 1, D]`` with L = S / F). Strides are runtime ints; Triton specializes their divisibility by 16, which
keeps the 16-byte vectors on every layout the contract allows (strides are multiples of D).

Byte model (task.toml): x (and residual) read once, y (and residual_out) written once, every modulation tensor and
weight/bias read once per distinct row. Bound at the H200's copy ceiling (4.29 TB/s; up to 4.43 TB/s where reads
dominate), per 1000 tokens:

| row class | bytes per token | bound |
|---|---|---|
| nss, bf16 x, broadcast modulation, D = 3072 / 5120 | 4·D B (x, y) | 2.86 / 4.77 us |
| nss, bf16 x, per-token fp32 scale/shift, D = 3072 / 5120 | 12·D B | 8.6 / 14.3 us |
| residual form, bf16, broadcast gate and modulation, D = 3072 / 5120 | 8·D B (residual, x, y, residual_out) | 5.73 / 9.55 us |
| residual form, per-token fp32 gate, D = 3072 | 12·D B | 8.6 us |

Rows under about 8 MB are latency bound instead: about 1 us of launch as a graph node + one DRAM round trip + the
two reductions + the store (SGLang: 2.7-3.8 us there, with its second round trip for scale/shift).
"""

from __future__ import annotations

import triton
import triton.language as tl

MODE_NONE, MODE_SCALAR, MODE_VEC, MODE_ROWS = 0, 1, 2, 3
MAX_ELEMS_PER_THREAD = 64  # x elements per thread and row in the chunked layout; beyond it, one masked block


@triton.jit
def _load_chunks(ptr, offset, cols, mask, NCH: tl.constexpr, C: tl.constexpr, USE_MASK: tl.constexpr,
                 STREAM: tl.constexpr):
    """NCH chunks of C columns at ``ptr + offset`` (offset [ROWS, 1] or a scalar; cols [1, C]) as a tuple.
    16-byte vectors: the offset and every stride behind it are multiples of 16 elements. STREAM: read-once data,
    first to leave the caches."""
    vs = ()
    for i in tl.static_range(NCH):
        p = ptr + offset + i * C + cols
        if STREAM:
            if USE_MASK:
                v = tl.load(p, mask=mask, other=0.0, eviction_policy="evict_first")
            else:
                v = tl.load(p, eviction_policy="evict_first")
        else:
            if USE_MASK:
                v = tl.load(p, mask=mask, other=0.0)
            else:
                v = tl.load(p)
        vs = vs + (v,)
    return vs


@triton.jit
def _load_mod(ptr, bi, si, sb, ss, seg, cols, row_mask, col_mask, MODE: tl.constexpr, NCH: tl.constexpr,
              C: tl.constexpr, MASK_ROWS: tl.constexpr, MASK_COLS: tl.constexpr):
    """A modulation operand: a scalar (MODE_SCALAR), one D-row shared by every row of the program (MODE_VEC:
    [1, C] chunks, broadcast in registers), or per-row D-rows at bi·sb + (si // seg)·ss (MODE_ROWS: [ROWS, C])."""
    if MODE == 1:
        return tl.load(ptr)
    elif MODE == 2:
        return _load_chunks(ptr, 0, cols, col_mask, NCH, C, MASK_COLS, False)
    else:
        off = (bi * sb + (si // seg).to(tl.int64) * ss)[:, None]
        return _load_chunks(ptr, off, cols, row_mask & col_mask, NCH, C, MASK_ROWS or MASK_COLS, False)


@triton.jit
def _pick(t, i: tl.constexpr, MODE: tl.constexpr):
    """Chunk i of a modulation operand in fp32 (a scalar is every chunk)."""
    if MODE == 1:
        return t.to(tl.float32)
    else:
        return t[i].to(tl.float32)


@triton.jit
def _store_chunk(ptr, offset, cols, mask, v, USE_MASK: tl.constexpr):
    if USE_MASK:
        tl.store(ptr + offset + cols, v, mask=mask)
    else:
        tl.store(ptr + offset + cols, v)


@triton.jit(do_not_specialize=["n_rows", "S"])
def norm_scale_shift_kernel(
    Y, ROUT, X, RES, GATE, W, BIAS, SCALE, SHIFT,
    n_rows, S, x_sb, x_ss, r_sb, r_ss,
    g_sb, g_ss, g_seg, c_sb, c_ss, c_seg, h_sb, h_ss, h_seg,
    eps,
    D: tl.constexpr, NCH: tl.constexpr, C: tl.constexpr, ROWS: tl.constexpr, MASK_ROWS: tl.constexpr,
    LATE: tl.constexpr, IS_RMS: tl.constexpr, HAS_RES: tl.constexpr, GATE_MODE: tl.constexpr,
    ROUND_GATE: tl.constexpr, HAS_W: tl.constexpr, HAS_B: tl.constexpr, SCALE_MODE: tl.constexpr,
    SHIFT_MODE: tl.constexpr,
):
    pid = tl.program_id(0)
    rows = pid * ROWS + tl.arange(0, ROWS)
    b32 = rows // S
    bi = b32.to(tl.int64)
    si = rows - b32 * S
    out_off = (rows.to(tl.int64) * D)[:, None]
    MASK_COLS: tl.constexpr = NCH * C != D  # only the single power-of-two block (NCH == 1) is ever masked
    USE_MASK: tl.constexpr = MASK_ROWS or MASK_COLS
    cols = tl.arange(0, C)[None, :]
    col_mask = cols < D
    row_mask = (rows < n_rows)[:, None]
    mask = row_mask & col_mask
    xdt = X.dtype.element_ty

    # early loads: everything read once per row, so a row pays one memory latency for them
    xs = _load_chunks(X, (bi * x_sb + si.to(tl.int64) * x_ss)[:, None], cols, mask, NCH, C, USE_MASK, True)
    if HAS_RES:
        rs = _load_chunks(RES, (bi * r_sb + si.to(tl.int64) * r_ss)[:, None], cols, mask, NCH, C, USE_MASK,
                          True)
        if GATE_MODE != 0:
            gs = _load_mod(GATE, bi, si, g_sb, g_ss, g_seg, cols, row_mask, col_mask, GATE_MODE, NCH, C,
                           MASK_ROWS, MASK_COLS)
    if SCALE_MODE == 3 or not LATE:
        sc = _load_mod(SCALE, bi, si, c_sb, c_ss, c_seg, cols, row_mask, col_mask, SCALE_MODE, NCH, C, MASK_ROWS,
                       MASK_COLS)
    if SHIFT_MODE == 3 or not LATE:
        sh = _load_mod(SHIFT, bi, si, h_sb, h_ss, h_seg, cols, row_mask, col_mask, SHIFT_MODE, NCH, C, MASK_ROWS,
                       MASK_COLS)
    if not LATE:
        if HAS_W:
            ws = _load_chunks(W, 0, cols, col_mask, NCH, C, MASK_COLS, False)
        if HAS_B:
            bs = _load_chunks(BIAS, 0, cols, col_mask, NCH, C, MASK_COLS, False)

    vs = ()
    for i in tl.static_range(NCH):
        v = xs[i].to(tl.float32)
        if HAS_RES:
            if GATE_MODE != 0:
                v = v * _pick(gs, i, GATE_MODE)
                if ROUND_GATE:  # SGLang's same-dtype product: gate·x rounded to x's 16-bit dtype
                    v = v.to(xdt).to(tl.float32)
            r = (v + rs[i].to(tl.float32)).to(xdt)
            _store_chunk(ROUT, out_off + i * C, cols, mask, r, USE_MASK)
            v = r.to(tl.float32)
        vs = vs + (v,)

    # fp32 statistics over the rows in registers: one tl.sum per statistic over a per-thread partial of all chunks
    if IS_RMS:
        acc = vs[0] * vs[0]
        for i in tl.static_range(1, NCH):
            acc += vs[i] * vs[i]
        rstd = tl.math.rsqrt(tl.sum(acc, axis=1) / D + eps)[:, None]
        mean = rstd * 0.0
    else:
        acc = vs[0]
        for i in tl.static_range(1, NCH):
            acc += vs[i]
        mean = (tl.sum(acc, axis=1) / D)[:, None]
        d = vs[0] - mean
        if MASK_COLS:
            d = tl.where(col_mask, d, 0.0)
        acc = d * d
        for i in tl.static_range(1, NCH):
            d = vs[i] - mean
            acc += d * d
        rstd = tl.math.rsqrt(tl.sum(acc, axis=1) / D + eps)[:, None]

    # late loads: operands shared by many rows (L1/L2 hits), not held in registers across the reductions
    if LATE:
        if SCALE_MODE != 3:
            sc = _load_mod(SCALE, bi, si, c_sb, c_ss, c_seg, cols, row_mask, col_mask, SCALE_MODE, NCH, C,
                           MASK_ROWS, MASK_COLS)
        if SHIFT_MODE != 3:
            sh = _load_mod(SHIFT, bi, si, h_sb, h_ss, h_seg, cols, row_mask, col_mask, SHIFT_MODE, NCH, C,
                           MASK_ROWS, MASK_COLS)
        if HAS_W:
            ws = _load_chunks(W, 0, cols, col_mask, NCH, C, MASK_COLS, False)
        if HAS_B:
            bs = _load_chunks(BIAS, 0, cols, col_mask, NCH, C, MASK_COLS, False)

    for i in tl.static_range(NCH):
        if IS_RMS:
            n = vs[i] * rstd
        else:
            n = (vs[i] - mean) * rstd
        if HAS_W:
            n = n * ws[i].to(tl.float32)
        if HAS_B:
            n = n + bs[i].to(tl.float32)
        n = n.to(xdt).to(tl.float32)  # the normalized value, stored in x's dtype
        yv = n * (1.0 + _pick(sc, i, SCALE_MODE)) + _pick(sh, i, SHIFT_MODE)
        _store_chunk(Y, out_off + i * C, cols, mask, yv.to(Y.dtype.element_ty), USE_MASK)


# ------------------------------------------------------------------------------------------------ launch plan

# Overrides for a sweep (dev/sweep.py): {(D, elem_size): warps}, {(D, elem_size): rows per program}.
WARPS_OVERRIDE: dict[tuple[int, int], int] = {}
ROWS_OVERRIDE: dict[tuple[int, int], int] = {}
LATE_OVERRIDE: list[bool] = []
MIN_BYTES_PER_THREAD = 48  # at least three 16-byte vectors of x per thread and row: bytes in flight per SM
MAX_WARPS = 8
SMS = 132
LATE_MIN_ROWS = 8 * SMS  # below about one full wave the broadcast operands are as cold as x: load them early
MULTI_ROW_MIN_ROWS = 16 * SMS  # rows per program > 1 only where every SM still gets many programs
MULTI_ROW_MAX_BYTES = 6144  # ... and only for rows that load little before their statistics


def plan(d: int, elem_size: int, n_rows: int, early_bytes: int, uniform: bool) -> tuple[int, int, int, int, bool]:
    """``(num_warps, NCH, C, ROWS, LATE)`` for n_rows rows of D elements of ``elem_size`` bytes, where each row
    loads ``early_bytes`` before its statistics (x, residual, gate and per-token modulation rows) and ``uniform``
    says whether every tensor has x's element size.

    A chunk is one 16-byte vector per thread across the CTA (C = 32·warps·16/elem_size columns), so every load and
    store is a full 16-byte vector and no lane is masked. The warp count is the largest power of two up to
    MAX_WARPS that divides D into whole chunks and leaves each thread at least MIN_BYTES_PER_THREAD of x per row.
    bf16: D = 1536 -> 2 warps x 3 chunks, 3072 -> 4 x 3, 5120 -> 4 x 5, 8192 -> 8 x 4. Where whole chunks would
    leave a thread more than MAX_ELEMS_PER_THREAD elements (D = 256·odd with odd > 8 has one warp only): one
    masked power-of-two block over more warps instead.

    ROWS: rows per program. Two where a row loads at most MULTI_ROW_MAX_BYTES first and there are rows enough
    (bf16 D = 3072 without residual: the per-row fixed cost of a program, its index math, two block reductions and
    its launch, is shared by 12 KB of x instead of 6 KB, and more bytes are in flight per SM; rows that load more
    already have them in flight, and two of them would only cost registers). Only where every operand has x's
    element size: a [1, C] fp32 operand broadcast over a [2, C] bf16 tile makes Triton convert layouts through
    shared memory (offline sm_90a build: 17-29 barriers instead of 5). LATE: row-broadcast operands loaded after the
    statistics, once the grid is several waves deep (they are L1/L2 hits there); on small grids everything loads
    first (the broadcast rows are as cold as x, and registers are plentiful)."""
    vec = 16 // elem_size
    override = WARPS_OVERRIDE.get((d, elem_size))
    warps = override
    if not warps:
        warps = 1
        while (warps * 2 <= MAX_WARPS and d % (32 * vec * warps * 2) == 0
               and d * elem_size // (32 * warps * 2) >= MIN_BYTES_PER_THREAD):
            warps *= 2
    rows = ROWS_OVERRIDE.get((d, elem_size))
    if not rows:
        rows = 2 if uniform and early_bytes <= MULTI_ROW_MAX_BYTES and n_rows >= MULTI_ROW_MIN_ROWS else 1
    late = LATE_OVERRIDE[0] if LATE_OVERRIDE else n_rows >= LATE_MIN_ROWS
    c = 32 * vec * warps
    if d % c == 0 and d // (32 * warps) <= MAX_ELEMS_PER_THREAD:
        return warps, d // c, c, rows, late
    block = triton.next_power_of_2(d)
    return override or max(1, min(MAX_WARPS, block // (32 * vec * 4))), 1, block, rows, late
