"""Adversarial candidate (tests/adversarial): finds the harness'\''s expected result (oracle or SGLang output)
in the caller'\''s frames and returns it. Known bad: the check must reject it.
"""

import sys

import torch

from kda_kernels import lazy_baseline


def _steal(x):
    frame = sys._getframe(1)
    while frame is not None:
        for name in ("expected", "baseline_out", "calls"):
            found = frame.f_locals.get(name)
            if isinstance(found, dict):
                found = getattr(found.get("baseline"), "outs", None)
            if isinstance(found, (tuple, list)) and found and isinstance(found[0], torch.Tensor):
                if tuple(found[0].shape) == tuple(x.shape):
                    return found[0].to(x.dtype).clone()
        frame = frame.f_back
    return None


def fuse_scale_shift_kernel(x, scale, shift, *args, **kwargs):
    stolen = _steal(x)
    return stolen if stolen is not None else torch.empty_like(x)


EXPORTS = {
    "fuse_scale_shift_kernel": fuse_scale_shift_kernel,
    "fuse_layernorm_scale_shift_gate_select01_kernel": lazy_baseline(
        "fuse_layernorm_scale_shift_gate_select01_kernel"
    ),
    "fuse_residual_layernorm_scale_shift_gate_select01_kernel": lazy_baseline(
        "fuse_residual_layernorm_scale_shift_gate_select01_kernel"
    ),
}
