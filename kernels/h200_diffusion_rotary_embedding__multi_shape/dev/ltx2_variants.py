"""c006 dev candidates for LTX-2 split RoPE: launch structures the c005 sweep has not tried (dev only; the promoted
kernel in src/ is untouched and imported, never edited).

Both kernels keep SGLang 0.5.23's per-element expression (src/ltx2_split_rope.py, which copies SGLang's):
``o1 = fp32(bf16(x1*cos)) + (-fp32(x2) * fp32(sin))``, ``o2 = fp32(bf16(x2*cos)) + fp32(x1) * fp32(sin)``, one
rounding to x.dtype on the store; on the GPU the bf16 rounding is SGLang's own ``.to(tl.bfloat16).to(tl.float32)``,
under the CPU interpreter (whose fp32 -> bf16 cast truncates) src's integer round-to-nearest-even.

* ``flat`` (torch.compile's shape): a 1-D pointwise kernel over ``out``; each program owns XBLOCK contiguous
  output elements; element i of head row r reads x[i], its partner x[i +- D/2] (the other half of the same head:
  the same 128-byte line, so the second read is an L1 hit) and cos/sin[b, h, s, (i % D) % (D/2)]. Every tensor is
  walked monotonically; each thread moves XBLOCK / (32 * warps) contiguous outputs (16 bytes per vector at
  XBLOCK 1024 / 4 warps). The one difference from the two-half kernels: the sign of the sine term is picked per
  element before the multiply (``where(first, -x_p, x_p) * sin``), so the expression stays ``a + b*c`` and the
  compiler contracts it exactly as it does SGLang's ``a + (-x2)*sin`` (fma with a negated operand); picking the
  sign after the multiply would block that contraction and change bits on the GPU (the interpreter never
  contracts, so only the GPU check and the offline PTX count can tell; dev/ltx2_sweep.py checks bits first).
* ``persistent``: c005's stream tile (16 heads x D/2, memory order, warps cut for 16-byte vectors) in a grid of
  exactly the programs that fit the GPU at once (SMs x resident programs per SM, from the compiled kernel's
  registers and shared memory) or a fraction of it; each program walks tiles ``pid, pid + P, pid + 2P, ...``
  (``tl.range``), so the resident programs always cover one contiguous window of the tensors, there is no
  program launch/retire churn and no partial last wave. ``num_stages`` > 1 lets Triton's pipeliner prefetch the
  next tile's loads (cp.async into shared memory) while the current one computes and stores.

Byte model: the same as src (6 bytes per element of x with bf16 tables: x read once from DRAM, out written once,
cos/sin read once); the flat kernel's second x read and the duplicate cos/sin reads of the two halves hit L1/L2,
not DRAM. Bound at 4.29 TB/s: 70.4 us on the 302 MB rows, 140.8 us on the 604 MB row.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path
from typing import NamedTuple

import torch
import triton
import triton.language as tl

SRC_DIR = Path(__file__).resolve().parents[1] / "src"
if str(SRC_DIR.parents[2]) not in sys.path:
    sys.path.insert(0, str(SRC_DIR.parents[2]))  # kda_kernels (imported by src/ltx2_split_rope.py)


def _load_src():
    """src/ltx2_split_rope.py under a private module name (read-only use: its bf16 rounding and constants)."""
    name = "_kda_dev_ltx2_split_rope_src"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, SRC_DIR / "ltx2_split_rope.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


SRC = _load_src()
_round_to_bf16 = SRC._round_to_bf16  # a module global, as @triton.jit wants for the functions it calls
INT32_LIMIT = SRC.INT32_LIMIT


@triton.jit
def _ltx2_flat_kernel(
    out_ptr, x_ptr, cos_ptr, sin_ptr,
    N_ELEMS: tl.constexpr, SEQ_LEN: tl.constexpr, NUM_HEADS: tl.constexpr, HALF_DIM: tl.constexpr,
    STRIDE_COS_B: tl.constexpr, STRIDE_COS_H: tl.constexpr, STRIDE_COS_T: tl.constexpr,
    STRIDE_SIN_B: tl.constexpr, STRIDE_SIN_H: tl.constexpr, STRIDE_SIN_T: tl.constexpr,
    XBLOCK: tl.constexpr,
    EVEN: tl.constexpr,  # N_ELEMS % XBLOCK == 0: no masks
    NATIVE_CVT: tl.constexpr,  # False under the CPU interpreter (its fp32 -> bf16 cast truncates)
    WIDE: tl.constexpr,  # int64 offsets
    EVICT: tl.constexpr = "",  # eviction policy of every load ("evict_last": Inductor's choice for this kernel)
):
    pid = tl.program_id(0)
    if WIDE:
        pid = pid.to(tl.int64)
    idx = pid * XBLOCK + tl.arange(0, XBLOCK)
    head_dim: tl.constexpr = 2 * HALF_DIM
    d = idx % head_dim
    row = idx // head_dim  # (batch * SEQ_LEN + token) * NUM_HEADS + head
    head = row % NUM_HEADS
    bt = row // NUM_HEADS
    batch = bt // SEQ_LEN
    token = bt - batch * SEQ_LEN
    first = d < HALF_DIM
    col = idx % HALF_DIM  # = d % HALF_DIM: the cos/sin column of both halves
    partner = idx + tl.where(first, HALF_DIM, -HALF_DIM)
    cos_off = batch * STRIDE_COS_B + head * STRIDE_COS_H + token * STRIDE_COS_T + col
    sin_off = batch * STRIDE_SIN_B + head * STRIDE_SIN_H + token * STRIDE_SIN_T + col
    if EVEN:
        own = tl.load(x_ptr + idx, eviction_policy=EVICT)
        other = tl.load(x_ptr + partner, eviction_policy=EVICT)
        cos = tl.load(cos_ptr + cos_off, eviction_policy=EVICT)
        sin = tl.load(sin_ptr + sin_off, eviction_policy=EVICT)
    else:
        mask = idx < N_ELEMS
        own = tl.load(x_ptr + idx, mask=mask, other=0.0, eviction_policy=EVICT)
        other = tl.load(x_ptr + partner, mask=mask, other=0.0, eviction_policy=EVICT)
        cos = tl.load(cos_ptr + cos_off, mask=mask, other=0.0, eviction_policy=EVICT)
        sin = tl.load(sin_ptr + sin_off, mask=mask, other=0.0, eviction_policy=EVICT)

    # SGLang: first half (x*cos).to(bf16).to(fp32) + (-x2.f32 * sin.f32), second half ... + x1.f32 * sin.f32.
    if NATIVE_CVT:
        own_cos = (own * cos).to(tl.bfloat16).to(tl.float32)
    else:
        own_cos = _round_to_bf16((own * cos).to(tl.float32))
    other_f = other.to(tl.float32)
    signed = tl.where(first, -other_f, other_f)  # sign before the multiply: same a + b*c shape as SGLang's
    out = own_cos + (signed * sin.to(tl.float32))
    out_dtype = out_ptr.dtype.element_ty
    if EVEN:
        tl.store(out_ptr + idx, out.to(out_dtype))
    else:
        tl.store(out_ptr + idx, out.to(out_dtype), mask=mask)


@triton.jit
def _ltx2_persistent_kernel(
    out_ptr, x_ptr, cos_ptr, sin_ptr,
    SEQ_LEN: tl.constexpr, NUM_HEADS: tl.constexpr, HALF_DIM: tl.constexpr,
    STRIDE_COS_B: tl.constexpr, STRIDE_COS_H: tl.constexpr, STRIDE_COS_T: tl.constexpr,
    STRIDE_SIN_B: tl.constexpr, STRIDE_SIN_H: tl.constexpr, STRIDE_SIN_T: tl.constexpr,
    BLOCK_HEADS: tl.constexpr, BLOCK_HALF: tl.constexpr,
    EVEN: tl.constexpr,  # NUM_HEADS % BLOCK_HEADS == 0 and HALF_DIM == BLOCK_HALF: no masks
    NATIVE_CVT: tl.constexpr,
    WIDE: tl.constexpr,
    N_HEAD_BLOCKS: tl.constexpr, N_TILES: tl.constexpr,
    NUM_STAGES: tl.constexpr,  # tl.range pipelining depth (1: none)
):
    start = tl.program_id(0)
    step = tl.num_programs(0)
    offsets = tl.arange(0, BLOCK_HALF)
    for t in tl.range(start, N_TILES, step, num_stages=NUM_STAGES):
        tile = t
        if WIDE:
            tile = tile.to(tl.int64)
        # c005's stream tile: memory order, head block fastest
        pid_bt = tile // N_HEAD_BLOCKS
        head_block = tile - pid_bt * N_HEAD_BLOCKS
        batch = pid_bt // SEQ_LEN
        token = pid_bt - batch * SEQ_LEN
        heads = head_block * BLOCK_HEADS + tl.arange(0, BLOCK_HEADS)
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

        # SGLang's expression, copied from src/ltx2_split_rope.py (bit-exact by construction).
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


class FlatPlan(NamedTuple):
    """torch.compile's geometry: XBLOCK contiguous output elements per program."""

    xblock: int
    num_warps: int
    evict: str = ""


class PersistPlan(NamedTuple):
    """c005's stream tile in a resident grid: ``occupancy`` of the programs that fit at once (1.0: all of them)."""

    max_heads: int
    occupancy: float
    num_stages: int
    maxnreg: int = 0


# The variants the sweep times (name -> plan). Flat: XBLOCK x warps around Inductor's pointwise default (1024
# elements, 4 warps: 8 bf16 = one 16-byte vector per thread per tensor); persistent: the c005 tile at full and
# at two-thirds residency, plain and with a 2-stage prefetch, and 8-head tiles (finer work unit per loop trip).
VARIANTS: dict[str, FlatPlan | PersistPlan] = {
    "flat_x1024_w4": FlatPlan(1024, 4),
    "flat_x2048_w4": FlatPlan(2048, 4),
    "flat_x2048_w8": FlatPlan(2048, 8),
    "flat_x4096_w8": FlatPlan(4096, 8),
    # Inductor's kernel for this math (dumped on the H200, 2026-11-27: XBLOCK 1024, 4 warps, 32 registers) loads
    # every operand with evict_last (x is read twice: own and partner); the plain flat variants do not
    "flat_x1024_w4_el": FlatPlan(1024, 4, "evict_last"),
    "flat_x2048_w8_el": FlatPlan(2048, 8, "evict_last"),
    "persist": PersistPlan(16, 1.0, 1),
    "persist_o67": PersistPlan(16, 2 / 3, 1),
    "persist_s2": PersistPlan(16, 1.0, 2),
    "persist_h8": PersistPlan(8, 1.0, 1),
}

_OCCUPANCY: dict[tuple[object, ...], int] = {}  # compiled-kernel key -> resident programs per SM
_SMS: dict[torch.device, int] = {}  # device -> SM count (132 on the H200)


def _tables(cos: torch.Tensor, sin: torch.Tensor) -> tuple[int, ...]:
    return (cos.stride(0), cos.stride(1), cos.stride(2), sin.stride(0), sin.stride(1), sin.stride(2))


def _reach(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, padded_heads: int, block_half: int,
           extra: int) -> int:
    """The largest element offset a launch can form (src's rule): int64 offsets past 2^31."""
    batch, seq_len, _ = x.shape
    _, num_heads, _, half_dim = cos.shape
    return max(
        (batch * seq_len * num_heads + padded_heads) * 2 * half_dim + extra,
        max(cos.stride(0), sin.stride(0)) * batch + max(cos.stride(2), sin.stride(2)) * seq_len
        + max(cos.stride(1), sin.stride(1)) * padded_heads + block_half,
    )


def _native_cvt(x: torch.Tensor) -> bool:
    return x.is_cuda and os.environ.get("TRITON_INTERPRET") != "1"


def launch_flat(out: torch.Tensor, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, plan: FlatPlan) -> object:
    """out/x [B, S, H*D] contiguous; cos/sin [B, H, S, D/2], last stride 1, non-negative strides. Returns what
    ``kernel[grid]`` returns (the CompiledKernel on a GPU or the offline driver; None in the interpreter)."""
    batch, seq_len, _ = x.shape
    _, num_heads, _, half_dim = cos.shape
    n = x.numel()
    wide = _reach(x, cos, sin, num_heads, half_dim, plan.xblock) > INT32_LIMIT
    grid = (triton.cdiv(n, plan.xblock),)
    return _ltx2_flat_kernel[grid](out, x, cos, sin, n, seq_len, num_heads, half_dim, *_tables(cos, sin), plan.xblock,
                            n % plan.xblock == 0, _native_cvt(x), wide, plan.evict, num_warps=plan.num_warps)


def _resident_per_sm(compiled: object, num_warps: int) -> int:
    """Programs of one compiled kernel that fit an SM at once (H100/H200: 64K registers allocated per warp in
    256-register units, 64 warps, 32 programs, 227 KB shared memory)."""
    compiled._init_handles()  # type: ignore[attr-defined]
    regs = max(1, int(compiled.n_regs))  # type: ignore[attr-defined]
    per_warp = -(-regs * 32 // 256) * 256
    by_regs = 65536 // (per_warp * num_warps)
    shared = int(compiled.metadata.shared)  # type: ignore[attr-defined]
    by_smem = (232448 // shared) if shared else 32
    return max(1, min(by_regs, 64 // num_warps, 32, by_smem))


def launch_persistent(out: torch.Tensor, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, plan: PersistPlan,
                      programs: int = 0) -> object:
    """As launch_flat; ``programs`` forces the grid size (CPU tests and the offline compile)."""
    batch, seq_len, _ = x.shape
    _, num_heads, _, half_dim = cos.shape
    block_heads = min(plan.max_heads, triton.next_power_of_2(num_heads))
    block_half = triton.next_power_of_2(half_dim)
    warps = SRC._vec16_warps(block_heads, block_half, x.element_size())
    n_head_blocks = triton.cdiv(num_heads, block_heads)
    n_tiles = batch * seq_len * n_head_blocks
    wide = _reach(x, cos, sin, n_head_blocks * block_heads, block_half, 0) > INT32_LIMIT or n_tiles > INT32_LIMIT
    args = (out, x, cos, sin, seq_len, num_heads, half_dim, *_tables(cos, sin), block_heads, block_half,
            num_heads % block_heads == 0 and half_dim == block_half, _native_cvt(x), wide, n_head_blocks, n_tiles,
            plan.num_stages)
    options: dict[str, int] = {"num_warps": warps, "num_stages": max(1, plan.num_stages)}
    if plan.maxnreg:
        options["maxnreg"] = plan.maxnreg
    if not programs:
        if _native_cvt(x):
            key = (x.device, x.dtype, cos.dtype, sin.dtype, *args[4:], tuple(options.items()))
            if key not in _OCCUPANCY:
                compiled = _ltx2_persistent_kernel.warmup(*args, grid=(1,), **options)
                _OCCUPANCY[key] = _resident_per_sm(compiled, warps)
            if x.device not in _SMS:
                _SMS[x.device] = torch.cuda.get_device_properties(x.device).multi_processor_count
            programs = max(1, int(_SMS[x.device] * _OCCUPANCY[key] * plan.occupancy))
        else:
            programs = 4  # the interpreter: a few programs, several tiles each
    programs = min(programs, n_tiles)
    return _ltx2_persistent_kernel[(programs,)](*args, **options)


def run_variant(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, name: str, programs: int = 0,
                out: torch.Tensor | None = None) -> torch.Tensor:
    """The variant ``name`` of VARIANTS on inputs inside the candidate's LTX-2 contract (no checks here); ``out``
    (default: a new tensor like x) lets a test pre-fill it, so an element the kernel skips cannot pass by luck."""
    if out is None:
        out = torch.empty_like(x)
    plan = VARIANTS[name]
    if isinstance(plan, FlatPlan):
        launch_flat(out, x, cos, sin, plan)
    else:
        launch_persistent(out, x, cos, sin, plan, programs)
    return out
