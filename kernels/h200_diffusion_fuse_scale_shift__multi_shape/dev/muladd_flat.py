"""Dev variant of the MulAdd kernel in Inductor's shape (not the candidate): a flat 1-D loop over x's elements with
the scale column ``idx % C``, for the production layout only (x and shift dense [B,L,C] of one shape, scale one
dense row of C elements broadcast: [1,C] or [1,1,C]). It exists to test, on the H200, whether the candidate's 2-D tile (its per-row
``rows // seq_len`` on the shift address path) is what leaves the 19-55-token rows 3 % behind torch.compile.

The per-element expression is SGLang's, token for token (``x * (scale_constant + scale) + shift``), so its bits
are SGLang's; dev/muladd_sweep.py checks that on the box before timing it.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import triton
import triton.language as tl


@triton.jit
def _muladd_flat_kernel(x_ptr, shift_ptr, scale_ptr, y_ptr, n_elems, C, scale_constant: tl.constexpr,
                        XBLOCK: tl.constexpr):
    idx = tl.program_id(0) * XBLOCK + tl.arange(0, XBLOCK)
    mask = idx < n_elems
    col = idx % C
    x = tl.load(x_ptr + idx, mask=mask, other=0)
    shift = tl.load(shift_ptr + idx, mask=mask, other=0)
    scale = tl.load(scale_ptr + col, mask=mask, other=0)
    y = x * (scale_constant + scale) + shift
    tl.store(y_ptr + idx, y, mask=mask)


class FlatPlan(NamedTuple):
    xblock: int
    num_warps: int


VARIANTS = {
    "flat_x1024_w4": FlatPlan(1024, 4),
    "flat_x512_w4": FlatPlan(512, 4),
    "flat_x512_w2": FlatPlan(512, 2),
    "flat_x256_w2": FlatPlan(256, 2),
    "flat_x2048_w4": FlatPlan(2048, 4),
}


def takes(x: torch.Tensor, scale: torch.Tensor, shift: torch.Tensor) -> bool:
    """The layout this variant serves: dense x and shift of one shape, scale one dense row of C broadcast."""
    c = x.shape[-1]
    return (x.is_contiguous() and shift.shape == x.shape and shift.is_contiguous() and scale.numel() == c
            and scale.shape[-1] == c and scale.stride(-1) == 1 and x.numel() < 2**31)


def run(name: str, x: torch.Tensor, scale: torch.Tensor, shift: torch.Tensor, scale_constant: float = 1.0
        ) -> torch.Tensor:
    plan = VARIANTS[name]
    y = torch.empty_like(x)
    n = x.numel()
    _muladd_flat_kernel[(triton.cdiv(n, plan.xblock),)](x, shift, scale, y, n, x.shape[-1], scale_constant,
                                                       plan.xblock, num_warps=plan.num_warps)
    return y
