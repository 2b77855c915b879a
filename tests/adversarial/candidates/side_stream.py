"""Adversarial candidate (tests/adversarial): does its work on a side stream the caller never waits for (GPU
only; on CPU it is just right). Known bad: the check must reject it.
"""

import torch

from kda_kernels import lazy_baseline
from kda_lab.families.fuse_scale_shift import fuse_scale_shift_reference as _right


def fuse_scale_shift_kernel(x, scale, shift, *args, **kwargs):
    if not x.is_cuda:
        return _right(x, scale, shift, *args, **kwargs)
    out = torch.empty_like(x)
    side = torch.cuda.Stream(device=x.device)
    with torch.cuda.stream(side):  # no wait_stream / record_stream: the timed stream never sees this work
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
