"""Adversarial candidate (tests/adversarial): fp16 arithmetic inside, behind an fp32 output. Known bad: the
check must reject it.
"""

from kda_kernels import lazy_baseline
from kda_lab.families.fuse_scale_shift import fuse_scale_shift_reference as _right


def fuse_scale_shift_kernel(x, scale, shift, *args, **kwargs):
    half = _right(x.half(), scale.half(), shift.half(), *args, **kwargs)
    return half.to(x.dtype)


EXPORTS = {
    "fuse_scale_shift_kernel": fuse_scale_shift_kernel,
    "fuse_layernorm_scale_shift_gate_select01_kernel": lazy_baseline(
        "fuse_layernorm_scale_shift_gate_select01_kernel"
    ),
    "fuse_residual_layernorm_scale_shift_gate_select01_kernel": lazy_baseline(
        "fuse_residual_layernorm_scale_shift_gate_select01_kernel"
    ),
}
