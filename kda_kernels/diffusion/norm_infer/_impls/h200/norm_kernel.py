"""One Triton kernel for both functions: ROWS register-resident rows per program, LayerNorm or RMSNorm, an
optional weight and bias, any x / out strides, one rounding on the store.

Byte model (task.toml ``reads`` / ``writes``; H200, measured copy ceiling 4.29 TB/s):

- ``norm_infer``: reads x (M·N·x.element_size()) once, weight and bias once per program (L2 hits after the first
  wave: counted once per call), writes y (M·N·out.element_size()) once.
  Helios LayerNorm [8640, 5120] fp32 + fp32 w/b: 176.9 MB + 176.9 MB + 41 KB = 353.9 MB -> bound 82.5 us
  (SGLang: ~107 us, 3.3 TB/s). The bf16 test row of the same width: 177.0 MB -> 41.3 us (+ ~2 us launch
  and ramp; SGLang 54.2 us).
- ``triton_one_pass_rms_norm``: reads x and w once, writes y once: 2·S·D·x.element_size() + D·w.element_size().
  HunyuanVideo [648720, 128] bf16: 332.1 MB -> 77.4 us (SGLang at 4.2 TB/s: parity is the target there).
  Rows under ~40 MB are bound by about 2 us (launch, ramp, one DRAM round trip) + bytes / 4.29 TB/s:
  Z-Image [16384, 128] 8.4 MB -> ~4.0 us by that rule (SGLang measures 2.7 us: below the rule, the data sit in
  the 60 MB L2 under graph replay), [4096, 128] 2.1 MB and HunyuanVideo [1320, 128] 0.68 MB -> one DRAM
  round trip, ~1.7 us of device time; their eager cost is the host path (register.py), not the kernel.

Design (why it should beat SGLang's ``_norm_infer_kernel`` on wide rows):

- SGLang pads the row to one power-of-two block: 5120 -> 8192 lanes, 37.5 % of each thread's registers hold
  masked lanes (32 fp32 values per thread at 8 warps where 20 are live), which caps resident CTAs per SM and so
  the bytes in flight. Here a row is two power-of-two segments (``BLOCK_A`` + ``BLOCK_B``: 5120 = 4096 + 1024,
  3072 = 2048 + 1024), so a 5120-wide row costs 20 values per thread at 8 warps, with no masked lanes.
- Narrow rows (N <= 1024 elements) pack ROWS rows per program (one CTA moves >= 2-4 KB), weight/bias loaded once
  per program and broadcast over its rows.
- 16-byte vector accesses: contiguous rows (unit column stride, which Triton specializes to the constant 1)
  with N a multiple of 16 elements (specialized too) load and store in 16-byte vectors; the row mask is uniform
  along a row, so it does not break vectorization.
- Numerics: fp32 accumulation; LayerNorm variance is centered over the register-resident row (two passes over
  registers, never E[x^2] - mean^2); rstd = rsqrt(var + eps) (as SGLang's one-pass kernel; a few ulp, far inside
  the tolerance; 1 / sqrt_rn costs 8 more registers per thread on the one-pass tile in the sm_90a build, 40 vs
  32, which would cut resident CTAs per SM from 16 to 12 on the huge HunyuanVideo rows); y = (x - mean)·rstd·w + b,
  or x·rstd·w (+ b) for RMSNorm; one rounding to the output dtype on the store.
- Runtime M (``do_not_specialize``): one compiled kernel serves every row count of a width/dtype/plan
  (SGLang's one-pass kernel takes SEQ as a constexpr: a new row count compiles a new kernel).
- Row offsets in int32 unless a row offset of x or y can reach 2^31 elements (``ROW64``, int64 offsets).
- sm_90a build (offline, Triton 3.6, ptxas): Helios fp32 [8640, 5120] 48 registers (SGLang's kernel: 64), i.e.
  5 resident 256-thread CTAs per SM instead of 4; one-pass [650040, 128] bf16 32 registers (SGLang: 32).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl

MAX_ROW_BYTES = 65536  # SGLang's norm_infer limit (rows must fit 64 KiB); wider rows go to SGLang


@triton.jit
def _load_vec(P, cols, N, MASK_N: tl.constexpr):
    """A weight / bias segment in fp32 (masked lanes read 0: their products are never stored)."""
    if MASK_N:
        v = tl.load(P + cols, mask=cols < N, other=0.0)
    else:
        v = tl.load(P + cols)
    return v.to(tl.float32)


@triton.jit(do_not_specialize=["M"])
def _norm_rows_kernel(
    X, Y, W, B,
    M, N,
    stride_xm, stride_xn, stride_ym, stride_yn,
    eps,
    IS_RMS: tl.constexpr,
    HAS_W: tl.constexpr,
    HAS_B: tl.constexpr,
    ROWS: tl.constexpr,
    BLOCK_A: tl.constexpr,
    BLOCK_B: tl.constexpr,
    MASK_N: tl.constexpr,
    ROW64: tl.constexpr,
):
    pid = tl.program_id(0)
    rows = pid * ROWS + tl.arange(0, ROWS)
    rmask = (rows < M)[:, None]
    if ROW64:  # offsets past 2^31 elements: int64 row offsets (more registers: only where needed)
        r = rows.to(tl.int64)[:, None]
    else:
        r = rows[:, None]
    x_row = X + r * stride_xm
    y_row = Y + r * stride_ym

    # segment A: columns [0, BLOCK_A)
    ca = tl.arange(0, BLOCK_A)[None, :]
    if MASK_N:
        ma = rmask & (ca < N)
    else:
        ma = rmask  # uniform along the row: 16-byte vectors stay possible
    xa = tl.load(x_row + ca * stride_xn, mask=ma, other=0.0).to(tl.float32)
    # segment B: columns [BLOCK_A, BLOCK_A + BLOCK_B) (BLOCK_B == 0: the row is one power-of-two block)
    if BLOCK_B > 0:
        cb = BLOCK_A + tl.arange(0, BLOCK_B)[None, :]
        if MASK_N:
            mb = rmask & (cb < N)
        else:
            mb = rmask
        xb = tl.load(x_row + cb * stride_xn, mask=mb, other=0.0).to(tl.float32)

    if IS_RMS:
        ss = tl.sum(xa * xa, axis=1)
        if BLOCK_B > 0:
            ss += tl.sum(xb * xb, axis=1)
        rstd = tl.math.rsqrt(ss / N + eps)
        ya = xa * rstd[:, None]
        if BLOCK_B > 0:
            yb = xb * rstd[:, None]
    else:
        s = tl.sum(xa, axis=1)
        if BLOCK_B > 0:
            s += tl.sum(xb, axis=1)
        mean = (s / N)[:, None]
        # centered variance over the register-resident row; masked lanes must not count
        if MASK_N:
            da = tl.where(ma, xa - mean, 0.0)
        else:
            da = xa - mean
        ss = tl.sum(da * da, axis=1)
        if BLOCK_B > 0:
            if MASK_N:
                db = tl.where(mb, xb - mean, 0.0)
            else:
                db = xb - mean
            ss += tl.sum(db * db, axis=1)
        rstd = tl.math.rsqrt(ss / N + eps)
        ya = da * rstd[:, None]
        if BLOCK_B > 0:
            yb = db * rstd[:, None]

    if HAS_W:
        ya = ya * _load_vec(W, ca, N, MASK_N)
    if HAS_B:
        ya = ya + _load_vec(B, ca, N, MASK_N)
    tl.store(y_row + ca * stride_yn, ya.to(Y.dtype.element_ty), mask=ma)
    if BLOCK_B > 0:
        if HAS_W:
            yb = yb * _load_vec(W, cb, N, MASK_N)
        if HAS_B:
            yb = yb + _load_vec(B, cb, N, MASK_N)
        tl.store(y_row + cb * stride_yn, yb.to(Y.dtype.element_ty), mask=mb)


@dataclass(frozen=True)
class Plan:
    """The launch geometry of one call: rows per program, the two column segments, warps."""

    rows: int
    block_a: int
    block_b: int
    mask_n: bool
    num_warps: int
    row64: bool = False


def _prev_pow2(v: int) -> int:
    return 1 << (max(1, v).bit_length() - 1)


def segments(n: int) -> tuple[int, int]:
    """N as BLOCK_A + BLOCK_B, both powers of two (BLOCK_B may be 0), covering N: BLOCK_A = the largest power of
    two <= N, BLOCK_B = the next power of two of the rest. Exact for N = 2^a + 2^b (5120, 3072, 1536, 2560, 6144,
    ...); otherwise no more padding than SGLang's single next_pow2(N) block."""
    a = _prev_pow2(n)
    rest = n - a
    b = triton.next_power_of_2(rest) if rest > 0 else 0
    if a + b >= 2 * a:  # the rest pads to a full second A block: one block of 2A is the same lanes, simpler
        return 2 * a, 0
    return a, b


def plan_norm_infer(m: int, n: int, elem_bytes: int) -> Plan:
    """``norm_infer``: wide rows one per program; narrow rows packed so a program holds >= 2048 elements,
    without dropping under ~2 programs per SM (264) while rows allow it. Warps: about 16-20 row values per
    thread (5120 -> 8 warps, 16384 -> 16, 3072 -> 4), at least one 16-byte vector per thread."""
    a, b = segments(n)
    width = a + b
    rows = 1
    while rows < 16 and rows * width < 2048 and triton.cdiv(m, rows * 2) >= 264:
        rows *= 2
    vec = max(1, 16 // elem_bytes)
    warps = _prev_pow2(max(1, rows * width // (16 * 32)))
    warps = max(1, min(16, warps, _prev_pow2(max(1, rows * a // (vec * 32)))))
    return Plan(rows, a, b, a + b != n, warps)


def plan_one_pass(s: int, d: int, elem_bytes: int) -> Plan:
    """``triton_one_pass_rms_norm``: SGLang's geometry (min(16, next_pow2(S // 512)) rows per program, 4 warps;
    it runs at 4.2 TB/s on the huge rows), with fewer warps where the tile has fewer 16-byte vectors than the
    threads of 4 warps (so each thread moves whole vectors)."""
    a, b = segments(d)
    rows = min(16, triton.next_power_of_2(max(1, s // 512)))
    vec = max(1, 16 // elem_bytes)
    warps = max(1, min(4, _prev_pow2(max(1, rows * a // (vec * 32)))))
    return Plan(rows, a, b, a + b != d, warps)


def launch(plan: Plan, y: torch.Tensor, x: torch.Tensor, w: torch.Tensor | None, b: torch.Tensor | None,
           m: int, n: int, eps: float, is_rms: bool) -> object:
    """Launch through Triton's dispatch; returns what ``kernel[grid]`` returns (the CompiledKernel on a GPU)."""
    grid = (triton.cdiv(m, plan.rows),)
    return _norm_rows_kernel[grid](
        x, y, w if w is not None else x, b if b is not None else x,
        m, n, x.stride(0), x.stride(1), y.stride(0), y.stride(1), eps,
        IS_RMS=is_rms, HAS_W=w is not None, HAS_B=b is not None, ROWS=plan.rows,
        BLOCK_A=plan.block_a, BLOCK_B=plan.block_b, MASK_N=plan.mask_n, ROW64=plan.row64,
        num_warps=plan.num_warps,
    )


def needs_row64(m: int, rows: int, *tensors: torch.Tensor) -> bool:
    """Whether a row offset (row index of the last program's last row x row stride, plus the row's column
    span) can reach 2^31 elements for any of the [M, N] tensors (rows past M are masked, but their offsets are
    still computed)."""
    last = triton.cdiv(m, rows) * rows - 1
    return any(last * abs(t.stride(0)) + (t.shape[1] - 1) * abs(t.stride(1)) >= 2**31 - 1 for t in tensors)
