"""LTX-2 split (rotate-half) RoPE in Triton, bit-exact with SGLang 0.5.23's ``rope/ltx2_rotary_triton.py``.

Math (SGLang's roundings, on purpose): per head, ``x1 = x[..., :D/2]``, ``x2 = x[..., D/2:]``,
``o1 = fp32(bf16(x1*cos)) + (-fp32(x2) * fp32(sin))``, ``o2 = fp32(bf16(x2*cos)) + fp32(x1) * fp32(sin)``,
one rounding to x.dtype on the store. ``x*cos`` is formed in the promoted dtype of x and cos (Triton's ``*``,
SGLang's expression). On the GPU the bf16 rounding is SGLang's own ``.to(tl.bfloat16).to(tl.float32)``
(``cvt.rn.bf16.f32``: the same instructions as SGLang). Triton's CPU interpreter truncates on that cast, so
there (``NATIVE_CVT=False``) it is written out as integer round-to-nearest-even on the fp32 bits
(``_round_to_bf16``): the same value for every non-NaN input, NaN stays NaN. The per-element expression is the
same in every tile plan (only which program handles which element changes), so every plan is bit-exact.

Byte model (per call; N = B*S*H*D elements of x, e_x / e_c the element sizes of x / cos and sin):

    bytes = N*e_x (x read) + N*e_x (out written) + 2 * N/2 * e_c (cos, sin read once: [B,H,S,D/2] each)
    bound = bytes / 4.29 TB/s (1:1 copy ceiling; this stream is 2/3 reads, which HBM serves faster: the
            torch.compile peer reaches 4.27 TB/s on the 302 MB rows), plus ~2 us of launch and DRAM latency on
            the small rows (the issue's size-aware bound: 2 us + bytes / 4.3 TB/s)

    [2, 6144, 4096] bf16: 100.7 + 100.7 + 100.7 = 302.0 MB -> 70.4 us at 4.29 TB/s; [1, 126, 2048]: 1.55 MB ->
    0.36 us of bytes, ~2.4 us with the fixed cost. H200, run 20261125-060233-095f12: SGLang / c004 / compile
    72.8 / 72.9 / 70.8 us on [2, 6144, 4096] and 74.5 / 74.3 / 70.8 us on [1, 24576, 2048].

Tile plans (``Ltx2Plan``, picked per call by a plan function; docs/notes.md, c005):

* ``plan_sglang_tiles`` (c004): SGLang's geometry, one program per (token, 16-head block), 8 warps, and SGLang's
  grid order ``(B*S, head blocks)``: the launch walks every token of head block 0 before any of head block 1,
  so at any moment the resident programs read every other 4 KB (D=128) / 2 KB (D=64) chunk of x and every
  other half of each token's cos/sin row, and come back for the other halves later (the second pass).
* ``plan_stream`` (c005): a 1-D grid in memory order (head block fastest, the order torch.compile's flat
  pointwise kernel walks the tensors in): the resident programs cover one contiguous window of x, out, cos and
  sin; warps cut so every thread moves 16-byte vectors (D=128, 16 heads: 4 warps; D=64: 2 warps), which doubles
  the resident programs per SM (16 / 32 instead of 8) and the bytes in flight per SM (128 KB instead of 64 KB);
  optional ``evict_first`` on every load and store (x, cos, sin and out are each touched once).
* ``plan_auto`` (the registered default): ``plan_stream`` from ``STREAM_MIN_ELEMS`` elements of x (the six
  large LTX-2 rows), c004's plan below it (the small and mid rows, where c004 already beats SGLang and compile
  and the time is latency, not bytes).

Unmasked loads/stores when the head block and D/2 divide evenly (every production row), int64 offsets only
when a launch can pass 2^31 elements (SGLang would overflow there), a kept launch for repeated signatures
(``kda_kernels.launch_cache``).
"""

from __future__ import annotations

import os
from typing import NamedTuple

import triton
import triton.language as tl

from kda_kernels.launch_cache import KeptLaunch, launch_and_keep

INT32_LIMIT = 2**31 - 1
STREAM_MIN_ELEMS = 1 << 23  # elements of x from which plan_auto streams (8.4M: S6144 D64 B1 is 12.6M)


@triton.jit
def _round_to_bf16(v):
    """fp32 -> nearest-even bf16 value, kept in fp32 (bits of the low half cleared); NaN passes through."""
    bits = v.to(tl.uint32, bitcast=True)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    return tl.where(v != v, v, rounded.to(tl.float32, bitcast=True))


@triton.jit
def _ltx2_split_rope_kernel(
    out_ptr, x_ptr, cos_ptr, sin_ptr,
    SEQ_LEN: tl.constexpr, NUM_HEADS: tl.constexpr, HALF_DIM: tl.constexpr,
    STRIDE_COS_B: tl.constexpr, STRIDE_COS_H: tl.constexpr, STRIDE_COS_T: tl.constexpr,
    STRIDE_SIN_B: tl.constexpr, STRIDE_SIN_H: tl.constexpr, STRIDE_SIN_T: tl.constexpr,
    BLOCK_HEADS: tl.constexpr, BLOCK_HALF: tl.constexpr,
    EVEN: tl.constexpr,  # NUM_HEADS % BLOCK_HEADS == 0 and HALF_DIM == BLOCK_HALF: no masks
    NATIVE_CVT: tl.constexpr,  # False under the CPU interpreter (its fp32 -> bf16 cast truncates)
    WIDE: tl.constexpr,  # int64 offsets
    LINEAR: tl.constexpr,  # 1-D grid, head block fastest (memory order); False: SGLang's (B*S, head blocks) grid
    N_HEAD_BLOCKS: tl.constexpr,
    EVICT: tl.constexpr,  # eviction policy of every load and store ("" or "evict_first")
):
    if LINEAR:
        pid = tl.program_id(0)
        if WIDE:
            pid = pid.to(tl.int64)
        pid_bt = pid // N_HEAD_BLOCKS
        head_block = pid - pid_bt * N_HEAD_BLOCKS
    else:
        pid_bt = tl.program_id(0)
        if WIDE:
            pid_bt = pid_bt.to(tl.int64)
        head_block = tl.program_id(1)
    batch = pid_bt // SEQ_LEN
    token = pid_bt - batch * SEQ_LEN
    heads = head_block * BLOCK_HEADS + tl.arange(0, BLOCK_HEADS)
    offsets = tl.arange(0, BLOCK_HALF)

    x_base = (pid_bt * NUM_HEADS + heads[:, None]) * (2 * HALF_DIM)
    cos_base = batch * STRIDE_COS_B + heads[:, None] * STRIDE_COS_H + token * STRIDE_COS_T
    sin_base = batch * STRIDE_SIN_B + heads[:, None] * STRIDE_SIN_H + token * STRIDE_SIN_T
    if EVEN:
        x_first = tl.load(x_ptr + x_base + offsets[None, :], eviction_policy=EVICT)
        x_second = tl.load(x_ptr + x_base + HALF_DIM + offsets[None, :], eviction_policy=EVICT)
        cos = tl.load(cos_ptr + cos_base + offsets[None, :], eviction_policy=EVICT)
        sin = tl.load(sin_ptr + sin_base + offsets[None, :], eviction_policy=EVICT)
    else:
        mask = (heads[:, None] < NUM_HEADS) & (offsets[None, :] < HALF_DIM)
        x_first = tl.load(x_ptr + x_base + offsets[None, :], mask=mask, other=0.0, eviction_policy=EVICT)
        x_second = tl.load(x_ptr + x_base + HALF_DIM + offsets[None, :], mask=mask, other=0.0,
                           eviction_policy=EVICT)
        cos = tl.load(cos_ptr + cos_base + offsets[None, :], mask=mask, other=0.0, eviction_policy=EVICT)
        sin = tl.load(sin_ptr + sin_base + offsets[None, :], mask=mask, other=0.0, eviction_policy=EVICT)

    # SGLang: (x*cos).to(bf16).to(fp32) + (-x2.f32 * sin.f32), then the store rounds to x.dtype.
    if NATIVE_CVT:
        first_cos = (x_first * cos).to(tl.bfloat16).to(tl.float32)
        second_cos = (x_second * cos).to(tl.bfloat16).to(tl.float32)
    else:
        first_cos = _round_to_bf16((x_first * cos).to(tl.float32))
        second_cos = _round_to_bf16((x_second * cos).to(tl.float32))
    out_first = first_cos + (-x_second.to(tl.float32) * sin.to(tl.float32))
    out_second = second_cos + (x_first.to(tl.float32) * sin.to(tl.float32))
    out_dtype = out_ptr.dtype.element_ty
    if EVEN:
        tl.store(out_ptr + x_base + offsets[None, :], out_first.to(out_dtype), eviction_policy=EVICT)
        tl.store(out_ptr + x_base + HALF_DIM + offsets[None, :], out_second.to(out_dtype), eviction_policy=EVICT)
    else:
        tl.store(out_ptr + x_base + offsets[None, :], out_first.to(out_dtype), mask=mask, eviction_policy=EVICT)
        tl.store(out_ptr + x_base + HALF_DIM + offsets[None, :], out_second.to(out_dtype), mask=mask,
                 eviction_policy=EVICT)


class Ltx2Plan(NamedTuple):
    """One launch geometry (the per-element math is the same in all of them)."""

    block_heads: int  # heads per program (a power of two)
    block_half: int  # next_power_of_2(D/2)
    num_warps: int
    linear: bool  # 1-D grid, head block fastest; False: SGLang's 2-D (B*S, head blocks) grid
    evict: bool  # evict_first on every load and store
    maxnreg: int = 0  # register cap per thread (0: ptxas decides); 32 fits 2048 threads per SM


def _vec16_warps(block_heads: int, block_half: int, x_itemsize: int) -> int:
    """Warps that give each thread 16 bytes of x per access (one x half-tile: block_heads x block_half)."""
    return max(1, min(8, block_heads * block_half * x_itemsize // (16 * 32)))


def plan_sglang_tiles(num_heads: int, half_dim: int, x_itemsize: int, n_elems: int = 0) -> Ltx2Plan:
    """c004: SGLang's choice (16-head blocks, 8 warps) in SGLang's grid order."""
    block_heads = min(16, triton.next_power_of_2(num_heads))
    return Ltx2Plan(block_heads, triton.next_power_of_2(half_dim), min(8, max(1, block_heads)), False, False)


def plan_vec16_tiles(num_heads: int, half_dim: int, x_itemsize: int, n_elems: int = 0) -> Ltx2Plan:
    """c003's variant: SGLang's tiles and grid order, warps cut to 16-byte vectors (bf16 D=64: 2, D=128: 4)."""
    block_heads = min(16, triton.next_power_of_2(num_heads))
    block_half = triton.next_power_of_2(half_dim)
    return Ltx2Plan(block_heads, block_half, _vec16_warps(block_heads, block_half, x_itemsize), False, False)


def plan_stream(num_heads: int, half_dim: int, x_itemsize: int, n_elems: int = 0, *, max_heads: int = 16,
                vec16: bool = True, evict: bool = False, maxnreg: int = 0) -> Ltx2Plan:
    """c005: memory-order 1-D grid; up to ``max_heads`` heads per program; 16-byte vectors per thread
    (``vec16``) or SGLang's warps (min(8, heads)); ``evict_first`` hints (``evict``); a register cap."""
    block_heads = min(max_heads, triton.next_power_of_2(num_heads))
    block_half = triton.next_power_of_2(half_dim)
    warps = _vec16_warps(block_heads, block_half, x_itemsize) if vec16 else min(8, max(1, block_heads))
    return Ltx2Plan(block_heads, block_half, warps, True, evict, maxnreg)


def plan_auto(num_heads: int, half_dim: int, x_itemsize: int, n_elems: int = 0) -> Ltx2Plan:
    """The registered default: plan_stream on large calls (bytes-bound), c004's plan on small ones."""
    if n_elems >= STREAM_MIN_ELEMS:
        return plan_stream(num_heads, half_dim, x_itemsize, n_elems)
    return plan_sglang_tiles(num_heads, half_dim, x_itemsize, n_elems)


def plan_stream_w8(num_heads: int, half_dim: int, x_itemsize: int, n_elems: int = 0) -> Ltx2Plan:
    """Sweep variant: memory order with c004's tiles and warps (isolates the grid order)."""
    return plan_stream(num_heads, half_dim, x_itemsize, n_elems, vec16=False)


def plan_stream_row(num_heads: int, half_dim: int, x_itemsize: int, n_elems: int = 0) -> Ltx2Plan:
    """Sweep variant: memory order, up to 32 heads (a whole LTX-2 token row) per program, 16-byte vectors."""
    return plan_stream(num_heads, half_dim, x_itemsize, n_elems, max_heads=32)


def plan_stream_h8(num_heads: int, half_dim: int, x_itemsize: int, n_elems: int = 0) -> Ltx2Plan:
    """Sweep variant: memory order, 8 heads per program (torch.compile's 1024-element blocks at D=128)."""
    return plan_stream(num_heads, half_dim, x_itemsize, n_elems, max_heads=8)


def plan_stream_evict(num_heads: int, half_dim: int, x_itemsize: int, n_elems: int = 0) -> Ltx2Plan:
    """Sweep variant: plan_stream with evict_first on every load and store."""
    return plan_stream(num_heads, half_dim, x_itemsize, n_elems, evict=True)


def plan_stream_r32(num_heads: int, half_dim: int, x_itemsize: int, n_elems: int = 0) -> Ltx2Plan:
    """Sweep variant: plan_stream capped at 32 registers (34 uncapped: 12 of 16 four-warp programs fit an SM)."""
    return plan_stream(num_heads, half_dim, x_itemsize, n_elems, maxnreg=32)


def launch(out, x, cos, sin, plan=plan_auto) -> KeptLaunch | None:
    """out/x [B, S, H*D] contiguous; cos/sin [B, H, S, D/2] with last stride 1 and non-negative strides; ``plan``
    (a plan function above) picks the geometry. Returns the launch to repeat for later calls of the same
    signature (None under the interpreter)."""
    batch, seq_len, _ = x.shape
    _, num_heads, _, half_dim = cos.shape
    native_cvt = x.is_cuda and os.environ.get("TRITON_INTERPRET") != "1"
    p = plan(num_heads, half_dim, x.element_size(), x.numel())
    n_head_blocks = triton.cdiv(num_heads, p.block_heads)
    padded_heads = n_head_blocks * p.block_heads  # masked lanes form offsets up to here
    reach = max(
        (batch * seq_len * num_heads + padded_heads) * 2 * half_dim,
        max(cos.stride(0), sin.stride(0)) * batch + max(cos.stride(2), sin.stride(2)) * seq_len
        + max(cos.stride(1), sin.stride(1)) * padded_heads + p.block_half,
        batch * seq_len * n_head_blocks,  # the linear program id
    )
    tail = (seq_len, num_heads, half_dim, cos.stride(0), cos.stride(1), cos.stride(2),
            sin.stride(0), sin.stride(1), sin.stride(2), p.block_heads, p.block_half,
            num_heads % p.block_heads == 0 and half_dim == p.block_half, native_cvt, reach > INT32_LIMIT,
            p.linear, n_head_blocks, "evict_first" if p.evict else "")
    grid = (batch * seq_len * n_head_blocks,) if p.linear else (batch * seq_len, n_head_blocks)
    options = {"maxnreg": p.maxnreg} if p.maxnreg else {}
    return launch_and_keep(_ltx2_split_rope_kernel, grid, (out, x, cos, sin), tail, num_warps=p.num_warps,
                           **options)
