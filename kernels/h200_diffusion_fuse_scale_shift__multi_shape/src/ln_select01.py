"""c001: one Triton kernel for both select01 LayerNorm modulation functions (plain and residual form).

Semantics (SGLang 0.5.23, ``modulate/scale_shift_triton.py``), per token row ``(b, l)`` of ``x [B,L,C]``:

- residual form only: ``r = residual + residual_gate * x`` in fp32 (the same expression as SGLang's, so the
  same FMA contraction), stored in x.dtype as ``residual_out``; the row that is normalized is the fp32 ``r``.
- LayerNorm over C: fp32 mean, then the centered (two-pass) biased variance on the register-resident row,
  ``rstd = rsqrt(var + eps)`` (SGLang's ``tl.rsqrt``), ``xhat = (v - mean) * rstd``, times ``weight``, plus
  ``bias`` when given.
- ``idx = index[b, l] != 0`` (SGLang's ``.to(tl.int1)``) selects row b of (scale1, shift1, gate1) or of
  (scale0, shift0, gate0): ``y = xhat * (1 + scale) + shift`` in fp32, stored in x.dtype; ``gate_out`` is the
  selected gate converted to x.dtype (a copy when the dtypes agree): bit for bit what SGLang stores.

Design (what differs from SGLang's kernel, which does load x -> two reductions -> load index -> load the
selected modulation -> store, three memory latencies in series per program):

- every load of a row is issued before the first reduction: index first, x (and residual, residual_gate),
  weight/bias, then the selected modulation vectors (masked loads of both sets, so only the selected row's bytes
  move), so the DRAM latency of x and the L2 latency of the modulation overlap;
- the row lives in registers once, split into a power-of-two head and a power-of-two tail segment
  (C = 3072 -> 2048 + 1024, C = 5120 -> 4096 + 1024) instead of one next-power-of-two tile: no register is spent
  on masked lanes at production widths (SGLang's 4096-wide tile for C = 3072 is 25 % dead lanes), which leaves
  room for more resident programs per SM, i.e. more bytes in flight;
- narrow rows (next_pow2(C) < ``TILE_ELEMS``) take several rows per program as a 2-D tile;
- 16-byte vectors: C is passed as a plain int, which Triton specializes as divisible by 16 when it is, so the
  row offsets are provably aligned and bf16/fp16 rows load 8 elements per instruction;
- modulation vectors whose batch dim is 1 are read with batch stride 0 (broadcast, as the oracle does).

Byte model (task.toml: each input once, broadcast dims once, each output once), element size e = 2 (bf16):

- plain:    reads x (B*L*C*e) + index (B*L*4) + six [B,C] modulation vectors (+ weight/bias [C]);
            writes y and gate_out (2*B*L*C*e).
- residual: reads x, residual, residual_gate (3*B*L*C*e) + index + modulation; writes y, residual_out,
            gate_out (3*B*L*C*e).

Production rows (Qwen-Image-Edit, [1, 8424, 3072] bf16, [1, C] modulation, int32 index), at the lab's
measured copy ceiling of 4.29 TB/s:

- qwen_edit_ln_select01_L8424:     3 * 51.76 MB + 37 KB + 34 KB = 155.3 MB -> bound 36.2 us
  (SGLang 42.67 us = 3.64 TB/s by this model; the 2.49 TB/s of the reference table counts x and y only).
- qwen_edit_res_ln_select01_L8424: 6 * 51.76 MB + 71 KB = 310.6 MB -> bound 72.4 us.

Rows of a few hundred tokens or fewer are launch bound: bound = bytes / 4.29 TB/s + ~2 us fixed.
Not yet measured on the H200 (see ../docs/notes.md for the prediction and the launch sweep to run).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

# Launch policy (defaults chosen from the register budget, not yet swept on the H200):
TILE_ELEMS = 4096  # rows narrower than this share a program: ROWS = TILE_ELEMS // next_pow2(C) (max MAX_ROWS)
MAX_ROWS = 16
ELEMS_PER_WARP = 1024  # num_warps = next_pow2(elements per program) // ELEMS_PER_WARP, clamped to [1, 16]
SPLIT_MIN_C = 512  # split a non-power-of-two row into head + tail segments from this width up
MAX_C = 16384  # wider rows go to SGLang (register-resident rows stop making sense)


@triton.jit
def _row_segment(x_ptr, res_ptr, rg_ptr, res_out_ptr, row_off, cols, mask,
                 HAS_RESIDUAL: tl.constexpr):
    """The fp32 row values of one segment (for the residual form: r, also stored as residual_out)."""
    v = tl.load(x_ptr + row_off + cols, mask=mask, other=0.0).to(tl.float32)
    if HAS_RESIDUAL:
        res = tl.load(res_ptr + row_off + cols, mask=mask, other=0.0).to(tl.float32)
        rg = tl.load(rg_ptr + row_off + cols, mask=mask, other=0.0).to(tl.float32)
        v = res + rg * v  # SGLang's expression: residual + residual_gate * x
        tl.store(res_out_ptr + row_off + cols, v, mask=mask)
    return v


@triton.jit
def _select(p0, p1, off0, off1, cols, mask, sel, nsel):
    """Row b of t1 where sel, of t0 elsewhere: masked loads, so only the selected set's bytes move."""
    v1 = tl.load(p1 + off1 + cols, mask=mask & sel, other=0.0)
    v0 = tl.load(p0 + off0 + cols, mask=mask & nsel, other=0.0)
    return v1, v0


@triton.jit
def _modulate(v, mean, rstd, w_ptr, b_ptr, s0, s1, sh0, sh1, g0, g1, y_ptr, gate_out_ptr, row_off, cols, cols1d, mask, mask1d, sel,
              HAS_WEIGHT: tl.constexpr, HAS_BIAS: tl.constexpr):
    """y = LN(v) * (1 + scale) + shift and the gate copy, for one segment (modulation already loaded)."""
    xhat = (v - mean) * rstd
    if HAS_WEIGHT:
        w = tl.load(w_ptr + cols1d, mask=mask1d, other=1.0).to(tl.float32)
        xhat = xhat * w[None, :]
    if HAS_BIAS:
        b = tl.load(b_ptr + cols1d, mask=mask1d, other=0.0).to(tl.float32)
        xhat = xhat + b[None, :]
    scale = tl.where(sel, s1.to(tl.float32), s0.to(tl.float32))
    shift = tl.where(sel, sh1.to(tl.float32), sh0.to(tl.float32))
    y = xhat * (1.0 + scale) + shift
    out_ty = y_ptr.dtype.element_ty
    gate = tl.where(sel, g1.to(out_ty), g0.to(out_ty))
    tl.store(y_ptr + row_off + cols, y, mask=mask)
    tl.store(gate_out_ptr + row_off + cols, gate, mask=mask)


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
    bidx = rows // seq_len
    lidx = rows - bidx * seq_len
    idx = tl.load(idx_ptr + bidx * si_b + lidx * si_l, mask=row_ok, other=0)
    sel = (idx != 0)[:, None]
    nsel = (idx == 0)[:, None]
    row_off = rows.to(tl.int64)[:, None] * C
    bcol = bidx.to(tl.int64)[:, None]
    mo_s0 = bcol * ss0_b
    mo_sh0 = bcol * ssh0_b
    mo_g0 = bcol * sg0_b
    mo_s1 = bcol * ss1_b
    mo_sh1 = bcol * ssh1_b
    mo_g1 = bcol * sg1_b

    # head segment [0, BLOCK_A): every load issued before the first reduction
    ca = tl.arange(0, BLOCK_A)
    ma1 = ca < C
    ma = row_ok[:, None] & ma1[None, :]
    cola = ca[None, :]
    va = _row_segment(x_ptr, res_ptr, rg_ptr, res_out_ptr, row_off, cola, ma, HAS_RESIDUAL)
    s1a, s0a = _select(s0_ptr, s1_ptr, mo_s0, mo_s1, cola, ma, sel, nsel)
    sh1a, sh0a = _select(sh0_ptr, sh1_ptr, mo_sh0, mo_sh1, cola, ma, sel, nsel)
    g1a, g0a = _select(g0_ptr, g1_ptr, mo_g0, mo_g1, cola, ma, sel, nsel)
    total = tl.sum(va, axis=1)
    if HAS_TAIL:
        # tail segment [BLOCK_A, C), C - BLOCK_A <= BLOCK_B
        cb = BLOCK_A + tl.arange(0, BLOCK_B)
        mb1 = cb < C
        mb = row_ok[:, None] & mb1[None, :]
        colb = cb[None, :]
        vb = _row_segment(x_ptr, res_ptr, rg_ptr, res_out_ptr, row_off, colb, mb, HAS_RESIDUAL)
        s1b, s0b = _select(s0_ptr, s1_ptr, mo_s0, mo_s1, colb, mb, sel, nsel)
        sh1b, sh0b = _select(sh0_ptr, sh1_ptr, mo_sh0, mo_sh1, colb, mb, sel, nsel)
        g1b, g0b = _select(g0_ptr, g1_ptr, mo_g0, mo_g1, colb, mb, sel, nsel)
        total += tl.sum(vb, axis=1)

    # fp32 statistics, centered second pass over the register-resident row (masked lanes contribute 0)
    mean = (total / C)[:, None]
    da = tl.where(ma, va - mean, 0.0)
    sq = tl.sum(da * da, axis=1)
    if HAS_TAIL:
        db = tl.where(mb, vb - mean, 0.0)
        sq += tl.sum(db * db, axis=1)
    rstd = tl.rsqrt(sq / C + eps)[:, None]

    _modulate(va, mean, rstd, w_ptr, b_ptr, s0a, s1a, sh0a, sh1a, g0a, g1a, y_ptr, gate_out_ptr, row_off, cola, ca,
              ma, ma1, sel, HAS_WEIGHT, HAS_BIAS)
    if HAS_TAIL:
        _modulate(vb, mean, rstd, w_ptr, b_ptr, s0b, s1b, sh0b, sh1b, g0b, g1b, y_ptr, gate_out_ptr, row_off, colb,
                  cb, mb, mb1, sel, HAS_WEIGHT, HAS_BIAS)


def plan(c: int) -> tuple[int, int, bool, int, int]:
    """Launch plan for row width ``c``: (BLOCK_A, BLOCK_B, HAS_TAIL, ROWS, num_warps)."""
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
    return block_a, block_b, has_tail, rows, num_warps


def batch_stride(t: torch.Tensor) -> int:
    """Batch stride of a [B|1, C] modulation vector: 0 when its batch dim broadcasts."""
    return 0 if t.shape[0] == 1 else t.stride(0)


def launch(x: torch.Tensor, residual: torch.Tensor | None, residual_gate: torch.Tensor | None,
           weight: torch.Tensor | None, bias: torch.Tensor | None, mods: tuple[torch.Tensor, ...],
           index: torch.Tensor, eps: float) -> tuple[torch.Tensor, ...]:
    """Run the kernel on checked inputs (register.py decides what is inside the contract): x, residual and
    residual_gate dense [B,L,C]; mods = (scale0, shift0, gate0, scale1, shift1, gate1), each [B|1, C] with unit
    C stride; index [B|1, L]. Returns (y, gate_out) or (y, residual_out, gate_out)."""
    batch, seq_len, c = x.shape
    n_rows = batch * seq_len
    y = torch.empty_like(x)
    gate_out = torch.empty_like(x)
    has_res = residual is not None
    res_out = torch.empty_like(x) if has_res else y
    block_a, block_b, has_tail, rows, num_warps = plan(c)
    s0, sh0, g0, s1, sh1, g1 = mods
    si_b = 0 if index.shape[0] == 1 else index.stride(0)
    _ln_select01_kernel[(triton.cdiv(n_rows, rows),)](
        y, res_out, gate_out,
        x, residual if has_res else x, residual_gate if has_res else x,
        weight if weight is not None else x, bias if bias is not None else x,
        s0, sh0, g0, s1, sh1, g1, index,
        n_rows, seq_len, c,
        batch_stride(s0), batch_stride(sh0), batch_stride(g0), batch_stride(s1), batch_stride(sh1),
        batch_stride(g1),
        si_b, index.stride(1),
        eps,
        HAS_RESIDUAL=has_res, HAS_WEIGHT=weight is not None, HAS_BIAS=bias is not None,
        ROWS=rows, BLOCK_A=block_a, BLOCK_B=block_b, HAS_TAIL=has_tail,
        num_warps=num_warps,
    )
    return (y, res_out, gate_out) if has_res else (y, gate_out)
