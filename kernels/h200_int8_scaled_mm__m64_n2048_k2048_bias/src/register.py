"""Candidate c000: the task's baseline itself (kda_lab/baselines.py:sgl_int8_scaled_mm, SGLang's sgl_kernel GEMM), as a
passthrough candidate.

Replace EXPORTS' value with the new implementation; keep the key and the signature
int8_scaled_mm(mat_a, mat_b, scales_a, scales_b, out_dtype, bias=None) -> Tensor (prompt.md K).
Importing this module must not need a GPU or any optional package (the baseline resolves lazily).
"""

from kda_lab import baselines as _baselines

BASELINE = True  # this candidate is the baseline itself (lineage status "baseline")

EXPORTS = {
    "int8_scaled_mm": _baselines.sgl_int8_scaled_mm,
}
