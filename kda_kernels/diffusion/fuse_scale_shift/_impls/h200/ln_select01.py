"""c005: one Triton kernel for both select01 LayerNorm modulation functions (plain and residual form).

Semantics (SGLang 0.5.23, ``modulate/scale_shift_triton.py``), per token row ``(b, l)`` of ``x [B,L,C]``:

- residual form only: ``r = residual + residual_gate * x`` in fp32 (the same expression as SGLang's, so the
  same FMA contraction), stored in x.dtype as ``residual_out``; the row that is normalized is the fp32 ``r``.
- LayerNorm over C: fp32 mean, then the centered (two-pass) biased variance on the register-resident row,
  ``rstd = rsqrt(var + eps)`` (SGLang's ``tl.rsqrt``), ``xhat = (v - mean) * rstd``, times ``weight``, plus
  ``bias`` when given.
- ``idx = index[b, l] != 0`` (SGLang's ``.to(tl.int1)``) selects row b of (scale1, shift1, gate1) or of
  (scale0, shift0, gate0): ``y = xhat * (1 + scale) + shift`` in fp32, stored in x.dtype; ``gate_out`` is the
  selected gate converted to x.dtype (a copy when the dtypes agree): bit for bit what SGLang stores.

Why c005 (c004, measured on the H200 at 0.725x / 0.909x of SGLang on the two production rows; the offline sm_90a
compile in ../dev/offline_sm90.py and ../docs/notes.md give the evidence):

- c004 loaded the row's tail segment (columns 2048..3071 at C = 3072) only after the head segment's block
  reduction (two ``bar.sync`` after the head's loads in its PTX): two DRAM round trips per row in series;
- c004 held both modulation sets in flight (masked loads of all six vectors, issued before the statistics):
  125 / 120 registers, 4 resident 128-thread programs per SM against SGLang's 8 / 7 (64 / 70 registers) with the
  same grid (one row per program, 4 warps): half the rows in flight on a kernel ncu shows latency bound.

c005 keeps SGLang's launch geometry (one row per program at production widths, 4 warps at C = 3072, grid B*L)
and SGLang's dependency chain per row (row -> statistics -> index -> selected modulation -> stores), and changes
only what lowers registers or removes dead work:

- every load of the row (both segments; x, residual, residual_gate) is issued before the first reduction;
- the row lives in registers as a power-of-two head plus a power-of-two tail (3072 = 2048 + 1024) instead of
  SGLang's 4096-wide tile with 25 % masked lanes; the head is folded onto the tail's width in registers before
  each block reduction (``tl.reshape`` then a per-thread sum), so a statistic costs one block reduction, as in
  SGLang (5 ``bar.sync`` per program), not one per segment;
- the selected modulation row is one pointer per vector (``tl.where`` on the base pointers), so 3 loads per
  segment move and hold registers, not 6; issued after the statistics, as SGLang does: issuing them (or the
  index) earlier lets ptxas hoist the base-pointer arithmetic over the reductions (plain form: +8 registers,
  one resident program per SM fewer);
- sm_90a (offline): 48 registers plain / 52 residual, no spills, every row, modulation and output access a
  16-byte vector: 10 / 9 resident programs per SM against SGLang's 8 / 7.

Narrow rows (next_pow2(C) < ``TILE_ELEMS``) take several rows per program as a 2-D tile (per-row selection).
C is passed as a plain int, which Triton specializes as divisible by 16 when it is, so row offsets are provably
16-byte aligned; modulation vectors whose batch dim is 1 are read with batch stride 0 (broadcast).

Byte model (task.toml: each input once, broadcast dims once, each output once), element size e = 2 (bf16):

- plain:    reads x (B*L*C*e) + index (B*L*4) + six [B,C] modulation vectors (+ weight/bias [C]);
            writes y and gate_out (2*B*L*C*e).
- residual: reads x, residual, residual_gate (3*B*L*C*e) + index + modulation; writes y, residual_out,
            gate_out (3*B*L*C*e).

Production rows (Qwen-Image-Edit, [1, 8424, 3072] bf16, [1, C] modulation, int32 index), at the lab's
measured copy ceiling of 4.29 TB/s:

- qwen_edit_ln_select01_L8424:     3 * 51.76 MB + 37 KB + 34 KB = 155.3 MB -> bound 36.2 us; same-size copy
  40.6 us; SGLang 42.30 us (3.67 TB/s, sol 0.95; H200 run 20261127-072010-b81fb4).
- qwen_edit_res_ln_select01_L8424: 6 * 51.76 MB + 71 KB = 310.6 MB -> bound 72.4 us; same-size copy 78.6 us;
  SGLang 77.64 us (4.00 TB/s, sol 1.01): at the copy already, parity is the ceiling.

Rows of a few hundred tokens or fewer are launch bound: bound = bytes / 4.29 TB/s + ~2 us fixed.
Not yet measured on the H200 (../docs/notes.md: prediction per row and what to run).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kda_kernels.launch_cache import KeptLaunch, launch_and_keep

# Launch policy: SGLang's geometry at production widths (one row per program, 4 warps at C = 3072).
TILE_ELEMS = 4096  # rows narrower than this share a program: ROWS = TILE_ELEMS // next_pow2(C) (max MAX_ROWS)
MAX_ROWS = 16
ELEMS_PER_WARP = 1024  # num_warps = next_pow2(elements per program) // ELEMS_PER_WARP, clamped to [1, 16]
SPLIT_MIN_C = 512  # split a non-power-of-two row into head + tail segments from this width up
MAX_C = 16384  # wider rows go to SGLang (register-resident rows stop making sense)


@triton.jit
def _row_segment(x_ptr, res_ptr, rg_ptr, res_out_ptr, row_off, cols, mask, HAS_RESIDUAL: tl.constexpr):
    """The fp32 row values of one segment (for the residual form: r, also stored as residual_out)."""
    v = tl.load(x_ptr + row_off + cols, mask=mask, other=0.0).to(tl.float32)
    if HAS_RESIDUAL:
        res = tl.load(res_ptr + row_off + cols, mask=mask, other=0.0).to(tl.float32)
        rg = tl.load(rg_ptr + row_off + cols, mask=mask, other=0.0).to(tl.float32)
        v = res + rg * v  # SGLang's expression: residual + residual_gate * x
        tl.store(res_out_ptr + row_off + cols, v, mask=mask)
    return v


@triton.jit
def _row_sum(a, b, ROWS: tl.constexpr, BLOCK_A: tl.constexpr, BLOCK_B: tl.constexpr, HAS_TAIL: tl.constexpr):
    """Per-row sum of the head ``a`` [ROWS, BLOCK_A] (and the tail ``b`` [ROWS, BLOCK_B]): the head is folded onto
    the tail's width first (a per-thread sum at production widths), so the row costs one block reduction."""
    if HAS_TAIL:
        folded = tl.sum(tl.reshape(a, (ROWS, BLOCK_A // BLOCK_B, BLOCK_B)), axis=1)
        return tl.sum(folded + b, axis=1)
    else:
        return tl.sum(a, axis=1)


@triton.jit
def _modulate(v, mean, rstd, w_ptr, b_ptr, sp, hp, gp, y_ptr, gate_out_ptr, row_off, cols, cols1d, mask, mask1d,
              HAS_WEIGHT: tl.constexpr, HAS_BIAS: tl.constexpr):
    """y = LN(v) * (1 + scale) + shift and the gate copy for one segment, from the selected modulation rows."""
    scale = tl.load(sp + cols, mask=mask, other=0.0).to(tl.float32)
    shift = tl.load(hp + cols, mask=mask, other=0.0).to(tl.float32)
    gate = tl.load(gp + cols, mask=mask, other=0.0)
    xhat = (v - mean) * rstd
    if HAS_WEIGHT:
        w = tl.load(w_ptr + cols1d, mask=mask1d, other=1.0).to(tl.float32)
        xhat = xhat * w[None, :]
    if HAS_BIAS:
        b = tl.load(b_ptr + cols1d, mask=mask1d, other=0.0).to(tl.float32)
        xhat = xhat + b[None, :]
    y = xhat * (1.0 + scale) + shift
    tl.store(y_ptr + row_off + cols, y, mask=mask)
    tl.store(gate_out_ptr + row_off + cols, gate.to(gate_out_ptr.dtype.element_ty), mask=mask)


@triton.jit(do_not_specialize=["n_rows", "seq_len", "eps"])
def _ln_select01_kernel(
    y_ptr, res_out_ptr, gate_out_ptr,
    x_ptr, res_ptr, rg_ptr, w_ptr, b_ptr,
    s0_ptr, sh0_ptr, g0_ptr, s1_ptr, sh1_ptr, g1_ptr, idx_ptr,
    n_rows, seq_len, C,
    ss0_b, ssh0_b, sg0_b, ss1_b, ssh1_b, sg1_b,  # [B,C] batch strides (0 when broadcast), C stride is 1
    si_b, si_l,
    eps,
    HAS_RESIDUAL: tl.constexpr, HAS_WEIGHT: tl.constexpr, HAS_BIAS: tl.constexpr,
    ROWS: tl.constexpr, BLOCK_A: tl.constexpr, BLOCK_B: tl.constexpr, HAS_TAIL: tl.constexpr,
):
    pid = tl.program_id(0)
    rows = pid * ROWS + tl.arange(0, ROWS)
    row_ok = rows < n_rows
    row_off = rows.to(tl.int64)[:, None] * C

    # 1. the whole row (head and tail segments) before the first reduction: one DRAM round trip per row
    ca = tl.arange(0, BLOCK_A)
    ma1 = ca < C
    ma = row_ok[:, None] & ma1[None, :]
    cola = ca[None, :]
    va = _row_segment(x_ptr, res_ptr, rg_ptr, res_out_ptr, row_off, cola, ma, HAS_RESIDUAL)
    if HAS_TAIL:  # tail segment [BLOCK_A, C), C - BLOCK_A <= BLOCK_B
        cb = BLOCK_A + tl.arange(0, BLOCK_B)
        mb1 = cb < C
        mb = row_ok[:, None] & mb1[None, :]
        colb = cb[None, :]
        vb = _row_segment(x_ptr, res_ptr, rg_ptr, res_out_ptr, row_off, colb, mb, HAS_RESIDUAL)
    else:
        cb, mb1, mb, colb, vb = ca, ma1, ma, cola, va  # unused

    # 2. fp32 statistics: mean, then the centered sum of squares on the register-resident row
    mean = (_row_sum(va, vb, ROWS, BLOCK_A, BLOCK_B, HAS_TAIL) / C)[:, None]
    da = tl.where(ma, va - mean, 0.0)
    db = tl.where(mb, vb - mean, 0.0)
    rstd = tl.rsqrt(_row_sum(da * da, db * db, ROWS, BLOCK_A, BLOCK_B, HAS_TAIL) / C + eps)[:, None]

    # 3. the index, then one pointer per modulation vector: only the selected set is loaded (SGLang's order)
    bidx = rows // seq_len
    lidx = rows - bidx * seq_len
    idx = tl.load(idx_ptr + bidx * si_b + lidx * si_l, mask=row_ok, other=0)
    sel = (idx != 0)[:, None]
    bcol = bidx.to(tl.int64)[:, None]
    sp = tl.where(sel, s1_ptr + bcol * ss1_b, s0_ptr + bcol * ss0_b)
    hp = tl.where(sel, sh1_ptr + bcol * ssh1_b, sh0_ptr + bcol * ssh0_b)
    gp = tl.where(sel, g1_ptr + bcol * sg1_b, g0_ptr + bcol * sg0_b)

    # 4. y and gate_out, segment by segment
    _modulate(va, mean, rstd, w_ptr, b_ptr, sp, hp, gp, y_ptr, gate_out_ptr, row_off, cola, ca, ma, ma1,
              HAS_WEIGHT, HAS_BIAS)
    if HAS_TAIL:
        _modulate(vb, mean, rstd, w_ptr, b_ptr, sp, hp, gp, y_ptr, gate_out_ptr, row_off, colb, cb, mb, mb1,
                  HAS_WEIGHT, HAS_BIAS)


def plan(c: int, elem_size: int) -> tuple[int, int, bool, int, int]:
    """Launch plan for row width ``c`` of ``elem_size``-byte elements: (BLOCK_A, BLOCK_B, HAS_TAIL, ROWS,
    num_warps). With a tail segment, num_warps is capped so that every thread's share of the tail is at least one
    16-byte vector (C = 5120 bf16: 4 warps, not 8, which would load the 1024-wide tail in 8-byte pieces)."""
    full = triton.next_power_of_2(c)
    if c >= SPLIT_MIN_C and full != c:
        block_a = full // 2  # largest power of two below c
        block_b = max(16, triton.next_power_of_2(c - block_a))
        has_tail = True
    else:
        block_a, block_b, has_tail = full, 16, False
    rows = max(1, min(MAX_ROWS, TILE_ELEMS // full))
    elems = rows * (block_a + (block_b if has_tail else 0))
    num_warps = max(1, min(16, triton.next_power_of_2(elems) // ELEMS_PER_WARP))
    if has_tail:
        num_warps = max(1, min(num_warps, rows * block_b * elem_size // (16 * 32)))
    return block_a, block_b, has_tail, rows, num_warps


def batch_stride(t: torch.Tensor) -> int:
    """Batch stride of a [B|1, C] modulation vector: 0 when its batch dim broadcasts."""
    return 0 if t.shape[0] == 1 else t.stride(0)


def launch(x: torch.Tensor, residual: torch.Tensor | None, residual_gate: torch.Tensor | None,
           weight: torch.Tensor | None, bias: torch.Tensor | None, mods: tuple[torch.Tensor, ...],
           index: torch.Tensor, eps: float) -> tuple[tuple[torch.Tensor, ...], KeptLaunch | None]:
    """Run the kernel on checked inputs (register.py decides what is inside the contract): x, residual and
    residual_gate dense [B,L,C]; mods = (scale0, shift0, gate0, scale1, shift1, gate1), each [B|1, C] with unit
    C stride, scale0/scale1 (and shift0/shift1, gate0/gate1) of one dtype (the kernel selects between their base
    pointers); index [B|1, L]. Returns ((y, gate_out) or (y, residual_out, gate_out), the launch to repeat for
    later calls of the same signature with ``lead_tensors(...)``; None under the interpreter)."""
    batch, seq_len, c = x.shape
    n_rows = batch * seq_len
    y = torch.empty_like(x)
    gate_out = torch.empty_like(x)
    has_res = residual is not None
    res_out = torch.empty_like(x) if has_res else y
    block_a, block_b, has_tail, rows, num_warps = plan(c, x.element_size())
    s0, sh0, g0, s1, sh1, g1 = mods
    si_b = 0 if index.shape[0] == 1 else index.stride(0)
    tail = (n_rows, seq_len, c,
            batch_stride(s0), batch_stride(sh0), batch_stride(g0), batch_stride(s1), batch_stride(sh1),
            batch_stride(g1),
            si_b, index.stride(1),
            eps,
            has_res, weight is not None, bias is not None,
            rows, block_a, block_b, has_tail)
    lead = lead_tensors(y, res_out, gate_out, x, residual, residual_gate, weight, bias, mods, index)
    kept = launch_and_keep(_ln_select01_kernel, (triton.cdiv(n_rows, rows),), lead, tail, num_warps=num_warps)
    return ((y, res_out, gate_out) if has_res else (y, gate_out)), kept


def lead_tensors(y: torch.Tensor, res_out: torch.Tensor, gate_out: torch.Tensor, x: torch.Tensor,
                 residual: torch.Tensor | None, residual_gate: torch.Tensor | None, weight: torch.Tensor | None,
                 bias: torch.Tensor | None, mods: tuple[torch.Tensor, ...], index: torch.Tensor,
                 ) -> tuple[torch.Tensor, ...]:
    """The kernel's pointer parameters in signature order (x in the slots of absent optional operands)."""
    return (y, res_out, gate_out,
            x, residual if residual is not None else x, residual_gate if residual_gate is not None else x,
            weight if weight is not None else x, bias if bias is not None else x,
            *mods, index)
