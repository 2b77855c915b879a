"""Adversarial candidate (tests/adversarial): returns its output buffer at once and writes it from a
background thread afterwards. Known bad: the check must reject it.
"""

import threading
import time

import torch

from kda_kernels import lazy_baseline
from kda_lab.families.fuse_scale_shift import fuse_scale_shift_reference as _right


def fuse_scale_shift_kernel(x, scale, shift, *args, **kwargs):
    out = torch.empty_like(x)
    result = _right(x, scale, shift, *args, **kwargs)

    def late():
        time.sleep(0.01)
        out.copy_(result)

    threading.Thread(target=late, daemon=True).start()
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
