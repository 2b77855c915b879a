"""Candidate c000: SGLang 0.5.23's own kernels (the baseline as a candidate).

Each value forwards to SGLang's function, resolved on its first call (``kda_kernels.lazy_baseline``) from the
module that defines it, never from the ``sglang.kernels.ops.diffusion`` facade: once the overlay is installed the
facade holds the promoted candidate, and a fallback taken from it would call itself. Importing this module needs
no GPU and imports none of SGLang's kernel modules. Replace EXPORTS' values with the new implementation; keep the
keys (SGLang function names), the signatures and the return conventions (prompt.md K); fall back with
``lazy_baseline(name)`` or ``kda_kernels.baseline(name)``. Import siblings relatively (``from .kernel import
...``): the exporter copies ``src/`` into ``kda_kernels``.
"""

from kda_kernels import lazy_baseline

BASELINE = True  # this candidate is the SGLang baseline itself (lineage status "baseline")

EXPORTS = {
    "fuse_scale_shift_kernel": lazy_baseline("fuse_scale_shift_kernel"),
    "fuse_layernorm_scale_shift_gate_select01_kernel": lazy_baseline("fuse_layernorm_scale_shift_gate_select01_kernel"),
    "fuse_residual_layernorm_scale_shift_gate_select01_kernel": lazy_baseline("fuse_residual_layernorm_scale_shift_gate_select01_kernel"),
}
