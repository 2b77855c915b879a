"""Adversarial candidate (tests/adversarial): computes once per shape and dtype, then returns that result for
any input. Known bad: the check must reject it.
"""

from kda_kernels import lazy_baseline
from kda_lab.families.fuse_scale_shift import fuse_scale_shift_reference as _right

_CACHE = {}


def fuse_scale_shift_kernel(x, scale, shift, *args, **kwargs):
    key = (tuple(x.shape), x.dtype, tuple(scale.shape))
    if key not in _CACHE:
        _CACHE[key] = _right(x, scale, shift, *args, **kwargs)
    return _CACHE[key]


EXPORTS = {
    "fuse_scale_shift_kernel": fuse_scale_shift_kernel,
    "fuse_layernorm_scale_shift_gate_select01_kernel": lazy_baseline(
        "fuse_layernorm_scale_shift_gate_select01_kernel"
    ),
    "fuse_residual_layernorm_scale_shift_gate_select01_kernel": lazy_baseline(
        "fuse_residual_layernorm_scale_shift_gate_select01_kernel"
    ),
}
