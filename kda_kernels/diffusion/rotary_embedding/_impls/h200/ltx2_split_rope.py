"""LTX-2 split (rotate-half) RoPE in Triton, bit-exact with SGLang 0.5.23's ``rope/ltx2_rotary_triton.py``.

Math (SGLang's roundings, on purpose): per head, ``x1 = x[..., :D/2]``, ``x2 = x[..., D/2:]``,
``o1 = fp32(bf16(x1*cos)) + (-fp32(x2) * fp32(sin))``, ``o2 = fp32(bf16(x2*cos)) + fp32(x1) * fp32(sin)``,
one rounding to x.dtype on the store. ``x*cos`` is formed in the promoted dtype of x and cos (Triton's ``*``,
SGLang's expression). On the GPU the bf16 rounding is SGLang's own ``.to(tl.bfloat16).to(tl.float32)``
(``cvt.rn.bf16.f32``: the same instructions as SGLang). Triton's CPU interpreter truncates on that cast, so
there (``NATIVE_CVT=False``) it is written out as integer round-to-nearest-even on the fp32 bits
(``_round_to_bf16``): the same value for every non-NaN input, NaN stays NaN.

Byte model (per call; N = B*S*H*D elements of x, e_x / e_c the element sizes of x / cos and sin):

    bytes = N*e_x (x read) + N*e_x (out written) + 2 * N/2 * e_c (cos, sin read once: [B,H,S,D/2] each)
    bound = bytes / 4.29 TB/s, plus ~2 us of launch and DRAM latency on the small rows
            (the issue's size-aware bound: 2 us + bytes / 4.3 TB/s)

    [2, 6144, 4096] bf16: 100.7 + 100.7 + 100.7 = 302.0 MB -> 70.4 us; [1, 126, 2048]: 1.55 MB -> 0.36 us of
    bytes, ~2.4 us with the fixed cost. Measured on the H200 (c002 run, 2026-11-25): SGLang already moves
    3.7-4.2 TB/s on the large rows (its 2/3-read traffic runs above the 1:1 copy yardstick) and 1.95-2.33 us on
    the 1.5/3.1 MB rows, i.e. at or under the size-aware bound on every row.

Why this kernel is shaped like SGLang's: c002 tiled ROWS tokens x HEADS heads per program with runtime shapes
and strides and lost 3-10 % on 9 of 10 rows. The c003 kernel keeps SGLang's geometry (one program per
(token, head block), every shape and stride a ``constexpr``) so the device work is SGLang's, and adds:
unmasked loads/stores when the head block and D/2 divide evenly (no predicates), int64 offsets only when a
launch can pass 2^31 elements (SGLang would overflow there), and a cached launch (``launch_cache.py``) that
makes the host path shorter than SGLang's. ``plan_sglang_tiles`` is SGLang's block/warp choice;
``plan_vec16_tiles`` keeps its tiles but gives each thread 16-byte vectors (SGLang's D=64 rows use 4-byte
accesses with 8 warps: 2-4 % slower per byte than its D=128 rows): the variant to try, one import line in
register.py.
"""

from __future__ import annotations

import os

import triton
import triton.language as tl

from .launch_cache import CachedLaunch, launch_and_keep

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
    SEQ_LEN: tl.constexpr, NUM_HEADS: tl.constexpr, HALF_DIM: tl.constexpr,
    STRIDE_COS_B: tl.constexpr, STRIDE_COS_H: tl.constexpr, STRIDE_COS_T: tl.constexpr,
    STRIDE_SIN_B: tl.constexpr, STRIDE_SIN_H: tl.constexpr, STRIDE_SIN_T: tl.constexpr,
    BLOCK_HEADS: tl.constexpr, BLOCK_HALF: tl.constexpr,
    EVEN: tl.constexpr,  # NUM_HEADS % BLOCK_HEADS == 0 and HALF_DIM == BLOCK_HALF: no masks
    NATIVE_CVT: tl.constexpr,  # False under the CPU interpreter (its fp32 -> bf16 cast truncates)
    WIDE: tl.constexpr,  # int64 offsets
):
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
        x_first = tl.load(x_ptr + x_base + offsets[None, :])
        x_second = tl.load(x_ptr + x_base + HALF_DIM + offsets[None, :])
        cos = tl.load(cos_ptr + cos_base + offsets[None, :])
        sin = tl.load(sin_ptr + sin_base + offsets[None, :])
    else:
        mask = (heads[:, None] < NUM_HEADS) & (offsets[None, :] < HALF_DIM)
        x_first = tl.load(x_ptr + x_base + offsets[None, :], mask=mask, other=0.0)
        x_second = tl.load(x_ptr + x_base + HALF_DIM + offsets[None, :], mask=mask, other=0.0)
        cos = tl.load(cos_ptr + cos_base + offsets[None, :], mask=mask, other=0.0)
        sin = tl.load(sin_ptr + sin_base + offsets[None, :], mask=mask, other=0.0)

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
        tl.store(out_ptr + x_base + offsets[None, :], out_first.to(out_dtype))
        tl.store(out_ptr + x_base + HALF_DIM + offsets[None, :], out_second.to(out_dtype))
    else:
        tl.store(out_ptr + x_base + offsets[None, :], out_first.to(out_dtype), mask=mask)
        tl.store(out_ptr + x_base + HALF_DIM + offsets[None, :], out_second.to(out_dtype), mask=mask)


def plan_sglang_tiles(num_heads: int, half_dim: int, x_itemsize: int) -> tuple[int, int, int]:
    """(BLOCK_HEADS, BLOCK_HALF, num_warps): SGLang's choice (16-head blocks, 8 warps)."""
    block_heads = min(16, triton.next_power_of_2(num_heads))
    return block_heads, triton.next_power_of_2(half_dim), min(8, max(1, block_heads))


def plan_vec16_tiles(num_heads: int, half_dim: int, x_itemsize: int) -> tuple[int, int, int]:
    """SGLang's tiles, warps cut so each thread moves 16 bytes of x per access (bf16 D=64: 2 warps, D=128: 4)."""
    block_heads = min(16, triton.next_power_of_2(num_heads))
    block_half = triton.next_power_of_2(half_dim)
    num_warps = max(1, min(8, block_heads * block_half * x_itemsize // (16 * 32)))
    return block_heads, block_half, num_warps


def launch(out, x, cos, sin, plan=plan_sglang_tiles) -> CachedLaunch | None:
    """out/x [B, S, H*D] contiguous; cos/sin [B, H, S, D/2] with last stride 1 and non-negative strides; ``plan``
    picks the tiles (``plan_sglang_tiles`` or ``plan_vec16_tiles``). Returns the launch to repeat for later
    calls of the same signature (None under the interpreter)."""
    batch, seq_len, _ = x.shape
    _, num_heads, _, half_dim = cos.shape
    native_cvt = x.is_cuda and os.environ.get("TRITON_INTERPRET") != "1"
    block_heads, block_half, num_warps = plan(num_heads, half_dim, x.element_size())
    n_head_blocks = triton.cdiv(num_heads, block_heads)
    padded_heads = n_head_blocks * block_heads  # masked lanes form offsets up to here
    reach = max(
        (batch * seq_len * num_heads + padded_heads) * 2 * half_dim,
        max(cos.stride(0), sin.stride(0)) * batch + max(cos.stride(2), sin.stride(2)) * seq_len
        + max(cos.stride(1), sin.stride(1)) * padded_heads + block_half,
    )
    tail = (seq_len, num_heads, half_dim, cos.stride(0), cos.stride(1), cos.stride(2),
            sin.stride(0), sin.stride(1), sin.stride(2), block_heads, block_half,
            num_heads % block_heads == 0 and half_dim == block_half, native_cvt, reach > INT32_LIMIT)
    return launch_and_keep(_ltx2_split_rope_kernel, (batch * seq_len, n_head_blocks), (out, x, cos, sin), tail,
                           num_warps=num_warps)
