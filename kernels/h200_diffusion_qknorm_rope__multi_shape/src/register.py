"""Candidate c000: SGLang 0.5.23's own kernels, through the public facade (the baseline as a candidate).

Replace EXPORTS' values with the new implementation, keep the keys (SGLang function names) and signatures.
Importing this module must not need a GPU.
"""

import sglang.kernels.ops.diffusion as _facade

BASELINE = True  # this candidate is the SGLang baseline itself (lineage status "baseline")

EXPORTS = {
    "fused_inplace_qknorm_rope": _facade.fused_inplace_qknorm_rope,
}
