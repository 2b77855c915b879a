"""Adversarial candidate (tests/adversarial): right on small rows; on large rows (>= 1M elements) it skips the
work and returns an unwritten buffer. Known bad: the check must reject it.
"""

import torch

from kda_kernels import lazy_baseline
from kda_lab.families.fuse_scale_shift import fuse_scale_shift_reference as _right


def fuse_scale_shift_kernel(x, scale, shift, *args, **kwargs):
    if x.numel() >= 1 << 20:
        return torch.empty_like(x)  # the timed work vanishes: bench shows a sol far above the copy bound
    return _right(x, scale, shift, *args, **kwargs)


EXPORTS = {
    "fuse_scale_shift_kernel": fuse_scale_shift_kernel,
    "fuse_layernorm_scale_shift_gate_select01_kernel": lazy_baseline(
        "fuse_layernorm_scale_shift_gate_select01_kernel"
    ),
    "fuse_residual_layernorm_scale_shift_gate_select01_kernel": lazy_baseline(
        "fuse_residual_layernorm_scale_shift_gate_select01_kernel"
    ),
}
