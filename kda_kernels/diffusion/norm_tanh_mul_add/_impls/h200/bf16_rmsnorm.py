"""Z-Image's bf16-native RMSNorm fusions in Triton, bit-exact with SGLang 0.5.23's
``norm/native_bf16_rmsnorm_triton.py`` (``rmsnorm_scale``, ``rmsnorm_tanh_residual``).

Math (SGLang's, rounding for rounding; every line below is SGLang's expression, unchanged)::

    sq   = bf16(x * x)                         # in bf16
    ms   = bf16(tl.sum(sq) / D)                # tl.sum of a bf16 tensor accumulates in bf16 (no upcast)
    rstd = bf16(rsqrt(fp32(bf16(ms + eps))))   # eps a bf16 constant (Triton's scalar promotion)
    n    = bf16(bf16(x * rstd) * w)
    rmsnorm_scale:         y = bf16(n * scale)
    rmsnorm_tanh_residual: y = bf16(residual + bf16(bf16(2 / (1 + exp(-2 g)) - 1) * n))   # tanh in fp32

Reduction order (what "bit-exact" rests on). On the GPU ``tl.sum`` is lowered by Triton from the layout of its
operand, and LLVM contracts the square into the per-thread accumulation. SGLang's kernel at ``block_dim =
next_pow2(D)``, 8 warps, 16-byte-aligned rows (offline sm_90a compile of SGLang's kernel, Triton 3.6, D = 3840):
the operand layout is ``#blocked<sizePerThread = [8], threadsPerWarp = [32], warpsPerCTA = [8]>``; thread t
holds the 8-element vectors at ``t*8 + 2048*k`` (k = 0, 1 for block 4096) in register order e0..e15, and sums
them as ``acc = fma(e0, e0, bf16(e1*e1)); acc = fma(e_i, e_i, acc)`` for i = 2..15 (``fma.rn.bf16``: the square
of e0 and e2..e15 is NOT rounded separately on the GPU), then a butterfly over the warp (``shfl.bfly`` 16, 8, 4,
2, 1, ``add.bf16`` each), then the 8 warp sums through shared memory with a second butterfly (4, 2, 1). ``/ D``
is ``div.full.f32`` and the rsqrt is ``rsqrt.approx.ftz.f32``. This kernel does not re-implement any of that: it
applies the same Triton expressions to a tensor of the same shape, layout and warps, so Triton emits the same
instruction sequence for the arithmetic (``tests/test_ptx_matches_sglang.py`` compiles both for sm_90a offline
and compares the arithmetic instructions one by one). What it changes is only where the loads are issued and
their cache hints, and the host path:

* every load of the program (x, the weight, the modulation row, the residual) is issued before the reduction.
  SGLang loads the weight, scale / gate and residual after ``tl.sum``, whose cross-warp step has a
  ``bar.sync``, so each of its programs waits on two dependent global-memory round trips (x, then the
  residual for ``rmsnorm_tanh_residual``); here both are in flight at once;
* x and residual are read once (``evict_first``), the weight and the modulation row are re-read by every row
  (``evict_last``): the 60 MB L2 keeps the shared rows and, in the model, the freshly written y.

The layout argument holds where Triton specializes the row pointers the same way for both kernels; ``plan``
(register.py) runs this kernel only there (D a multiple of 8, every row stride a multiple of 16 elements and
every pointer 16-byte aligned: 16-byte vectors in both kernels, whatever the row index arithmetic) and with
int32 offsets, and hands every other input to SGLang's own function.

Byte model (per call; N = x_rows * D elements, M = modulation rows, bf16 = 2 bytes):

    rmsnorm_scale:          bytes = 2N (x) + 2N (y) + 2D (weight) + 2*M*D (scale)
    rmsnorm_tanh_residual:  bytes = 2N (x) + 2N (residual) + 2N (y) + 2D (weight) + 2*M*D (gate)
    bound = bytes / 4.29 TB/s (the H200's measured streaming-copy ceiling)

    Z-Image L4096 (N = 4096 * 3840): tanh_residual 94.4 MB -> 22.0 us; rmsnorm_scale 62.9 MB -> 14.7 us
    Z-Image L4128 (N = 4128 * 3840): tanh_residual 95.1 MB -> 22.2 us; rmsnorm_scale 63.4 MB -> 14.8 us

The copy ceiling is reached by copies of gigabytes; a same-size copy of these tensors takes longer (the lab's
A/A run, benchmark.csv: 25.8 us for 94.4 MB, 17.7 us for 62.9 MB: 3.56-3.66 TB/s), and SGLang already runs
at 0.95 (tanh_residual) and 1.00 (scale) of that same-size copy: docs/notes.md.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kda_kernels.launch_cache import KeptLaunch, launch_and_keep

NUM_WARPS = 8  # SGLang's: the reduction tree depends on it


@triton.jit
def _tanh(x):
    return 2.0 / (1.0 + tl.exp(-2.0 * x)) - 1.0


@triton.jit
def rmsnorm_scale_kernel(
    y_ptr,
    x_ptr,
    weight_ptr,
    scale_ptr,
    x_row_stride,
    scale_row_stride,
    seq_len,
    dim: tl.constexpr,
    eps: tl.constexpr,
    block_dim: tl.constexpr,
):
    row = tl.program_id(0)
    offsets = tl.arange(0, block_dim)
    mask = offsets < dim
    batch = row // seq_len

    # Every load first (SGLang issues the weight and scale loads after the reduction).
    x = tl.load(x_ptr + row * x_row_stride + offsets, mask=mask, other=0.0, eviction_policy="evict_first")
    weight = tl.load(weight_ptr + offsets, mask=mask, other=0.0, eviction_policy="evict_last")
    scale = tl.load(scale_ptr + batch * scale_row_stride + offsets, mask=mask, other=0.0,
                    eviction_policy="evict_last")

    # SGLang's arithmetic, expression for expression.
    square = (x * x).to(tl.bfloat16)
    mean_square = (tl.sum(square, axis=0) / dim).to(tl.bfloat16)
    rstd = tl.rsqrt((mean_square + eps).to(tl.bfloat16).to(tl.float32)).to(tl.bfloat16)
    y = (((x * rstd).to(tl.bfloat16) * weight).to(tl.bfloat16) * scale).to(tl.bfloat16)
    tl.store(y_ptr + row * dim + offsets, y, mask=mask)


@triton.jit
def rmsnorm_tanh_residual_kernel(
    y_ptr,
    x_ptr,
    gate_ptr,
    residual_ptr,
    weight_ptr,
    x_row_stride,
    gate_row_stride,
    residual_row_stride,
    seq_len,
    dim: tl.constexpr,
    eps: tl.constexpr,
    block_dim: tl.constexpr,
):
    row = tl.program_id(0)
    offsets = tl.arange(0, block_dim)
    mask = offsets < dim
    batch = row // seq_len

    # Every load first: x and the residual (both from HBM) are in flight together.
    x = tl.load(x_ptr + row * x_row_stride + offsets, mask=mask, other=0.0, eviction_policy="evict_first")
    residual = tl.load(residual_ptr + row * residual_row_stride + offsets, mask=mask, other=0.0,
                       eviction_policy="evict_first")
    gate = tl.load(gate_ptr + batch * gate_row_stride + offsets, mask=mask, other=0.0,
                   eviction_policy="evict_last")
    weight = tl.load(weight_ptr + offsets, mask=mask, other=0.0, eviction_policy="evict_last")

    # SGLang's arithmetic, expression for expression.
    square = (x * x).to(tl.bfloat16)
    mean_square = (tl.sum(square, axis=0) / dim).to(tl.bfloat16)
    rstd = tl.rsqrt((mean_square + eps).to(tl.bfloat16).to(tl.float32)).to(tl.bfloat16)
    norm = ((x * rstd).to(tl.bfloat16) * weight).to(tl.bfloat16)
    gated = (_tanh(gate.to(tl.float32)).to(tl.bfloat16) * norm).to(tl.bfloat16)
    y = (residual + gated).to(tl.bfloat16)
    tl.store(y_ptr + row * dim + offsets, y, mask=mask)


def launch_scale(out2: torch.Tensor, x: torch.Tensor, weight: torch.Tensor, scale: torch.Tensor,
                 x_rows: int, x_row_stride: int, scale_rows: int, scale_row_stride: int,
                 eps: float) -> KeptLaunch | None:
    """One program per row (SGLang's grid); ``out2`` is y viewed as [x_rows, D]. Returns the launch to repeat
    for later calls of the same signature (None under the interpreter)."""
    dim = x.shape[-1]
    tail = (x_row_stride, scale_row_stride, x_rows // scale_rows, dim, eps, triton.next_power_of_2(dim))
    return launch_and_keep(rmsnorm_scale_kernel, (x_rows,), (out2, x, weight, scale), tail, num_warps=NUM_WARPS)


def launch_tanh_residual(out2: torch.Tensor, x: torch.Tensor, gate: torch.Tensor, residual: torch.Tensor,
                         weight: torch.Tensor, x_rows: int, x_row_stride: int, gate_rows: int,
                         gate_row_stride: int, residual_row_stride: int, eps: float) -> KeptLaunch | None:
    """One program per row (SGLang's grid); ``out2`` is y viewed as [x_rows, D]."""
    dim = x.shape[-1]
    tail = (x_row_stride, gate_row_stride, residual_row_stride, x_rows // gate_rows, dim, eps,
            triton.next_power_of_2(dim))
    return launch_and_keep(rmsnorm_tanh_residual_kernel, (x_rows,), (out2, x, gate, residual, weight), tail,
                           num_warps=NUM_WARPS)
