"""Adversarial candidate (tests/adversarial): one output buffer per shape, overwritten by every call (earlier
results change under the caller). Known bad: the check must reject it.
"""

import torch

from kda_kernels import lazy_baseline
from kda_lab.families.fuse_scale_shift import fuse_scale_shift_reference as _right

_BUFFERS = {}


def fuse_scale_shift_kernel(x, scale, shift, *args, **kwargs):
    key = (tuple(x.shape), x.dtype)
    if key not in _BUFFERS:
        _BUFFERS[key] = torch.zeros_like(x)
    out = _BUFFERS[key]
    out.copy_(_right(x, scale, shift, *args, **kwargs))
    return out


EXPORTS = {
    "fuse_scale_shift_kernel": fuse_scale_shift_kernel,
    "fuse_layernorm_scale_shift_gate_select01_kernel": lazy_baseline(
        "fuse_layernorm_scale_shift_gate_select01_kernel"
    ),
    "fuse_residual_layernorm_scale_shift_gate_select01_kernel": lazy_baseline(
        "fuse_residual_layernorm_scale_shift_gate_select01_kernel"
    ),
}
