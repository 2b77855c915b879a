"""Candidate c000: SGLang 0.5.23's own kernels (the baseline as a candidate).

Each value forwards to SGLang's function, resolved on its first call (``kda_kernels.lazy_baseline``), so importing this module
needs no GPU and imports none of SGLang's kernel modules. Replace EXPORTS' values with the new implementation;
keep the keys (SGLang function names), the signatures and the return conventions (prompt.md K). Import siblings
relatively (``from .kernel import ...``): the exporter copies ``src/`` into ``kda_kernels``.
"""

from kda_kernels import lazy_baseline

BASELINE = True  # this candidate is the SGLang baseline itself (lineage status "baseline")

EXPORTS = {
    "fused_norm_scale_shift": lazy_baseline("fused_norm_scale_shift"),
    "fused_scale_residual_norm_scale_shift": lazy_baseline("fused_scale_residual_norm_scale_shift"),
}
