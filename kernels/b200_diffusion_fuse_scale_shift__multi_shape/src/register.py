"""Candidate c000: SGLang 0.5.23's own kernels, through the public facade (the baseline as a candidate).

Replace EXPORTS' values with the new implementation, keep the keys (SGLang function names) and signatures.
Importing this module must not need a GPU.
"""

import sglang.kernels.ops.diffusion as _facade

BASELINE = True  # this candidate is the SGLang baseline itself (lineage status "baseline")

EXPORTS = {
    "fuse_scale_shift_kernel": _facade.fuse_scale_shift_kernel,
    "fuse_layernorm_scale_shift_gate_select01_kernel": _facade.fuse_layernorm_scale_shift_gate_select01_kernel,
    "fuse_residual_layernorm_scale_shift_gate_select01_kernel": _facade.fuse_residual_layernorm_scale_shift_gate_select01_kernel,
}
