"""The bandwidth yardstick: a plain Triton streaming copy (imported only on GPU hosts)."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

BLOCK = 8192


@triton.jit
def _copy_kernel(src, dst, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(dst + offs, tl.load(src + offs, mask=mask), mask=mask)


def copy_kernel_call(src: torch.Tensor, dst: torch.Tensor) -> None:
    n = src.numel()
    _copy_kernel[(triton.cdiv(n, BLOCK),)](src, dst, n, BLOCK=BLOCK, num_warps=8)
