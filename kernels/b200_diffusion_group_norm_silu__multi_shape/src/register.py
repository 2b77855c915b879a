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
    "triton_group_norm_silu": lazy_baseline("triton_group_norm_silu"),
    "apply_group_norm_silu": lazy_baseline("apply_group_norm_silu"),
}
