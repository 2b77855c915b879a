"""Candidate c000: the task's baseline itself (kda_lab/baselines.py:sglang_fa3_mha, SGLang 0.5.23's default H200
diffusion attention: FlashAttention-3 from sgl_kernel through SGLang's own wrapper), as a passthrough candidate.

Replace EXPORTS' value with the new implementation; keep the key and the signature
mha_forward(q, k, v, causal=False, softmax_scale=None, key_lens=None) -> Tensor (prompt.md K).
Importing this module must not need a GPU or any optional package (the baseline resolves lazily).
"""

from kda_lab import baselines as _baselines

BASELINE = True  # this candidate is the baseline itself (lineage status "baseline")

EXPORTS = {
    "mha_forward": _baselines.sglang_fa3_mha,
}
