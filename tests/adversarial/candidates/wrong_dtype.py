"""Adversarial candidate (tests/adversarial): returns bfloat16 whatever the input dtype (right values, within
bf16's own tolerance). Known bad: the check must reject it.
"""

import torch

from kda_kernels import lazy_baseline
from kda_lab.families.fuse_scale_shift import fuse_scale_shift_reference as _right


def fuse_scale_shift_kernel(x, scale, shift, *args, **kwargs):
    return _right(x, scale, shift, *args, **kwargs).to(torch.bfloat16)


EXPORTS = {
    "fuse_scale_shift_kernel": fuse_scale_shift_kernel,
    "fuse_layernorm_scale_shift_gate_select01_kernel": lazy_baseline(
        "fuse_layernorm_scale_shift_gate_select01_kernel"
    ),
    "fuse_residual_layernorm_scale_shift_gate_select01_kernel": lazy_baseline(
        "fuse_residual_layernorm_scale_shift_gate_select01_kernel"
    ),
}
