"""Kernel names -> swap-target families (kda_kernels.registry) or GEMM / attention / conv / other.

A family's kernels are the Triton kernels defined in its SGLang modules (found by reading SGLang's source:
``@triton.jit`` functions) plus the name stems of the family's CUDA/CuTe kernels (``FAMILY_STEMS``: KDA's own
exported kernels and SGLang's JIT ones, whose names are not ``def``s).
"""

from __future__ import annotations

import ast
import functools
from importlib.util import find_spec
from pathlib import Path

from kda_kernels.registry import TARGETS

FAMILY_STEMS: dict[str, tuple[str, ...]] = {
    "group_norm_silu": ("gns_", "group_norm_silu"),
    "qknorm_rope": ("qknorm_rope", "qk_norm_rope"),
    "norm_scale_shift": ("norm_scale_shift", "scale_residual_norm"),
    "fuse_scale_shift": ("fuse_scale_shift", "scale_shift_gate"),
    "norm_tanh_mul_add": ("rmsnorm_tanh", "rmsnorm_scale"),
    "rotary_embedding": ("rotary_embedding_kernel", "ltx2_split_rotary"),
    "norm_infer": ("norm_infer", "rms_norm_tiled_onepass", "layer_norm_fwd_1pass"),
}
CATEGORIES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("attention", ("flash", "fmha", "attention", "attn", "sdpa", "softmax")),
    ("conv", ("conv", "_convolution", "implicit_gemm", "implicit_convolve", "nchwtonhwc", "nhwctonchw", "cudnn", "winograd", "fft")),
    ("gemm", ("gemm", "addmm", "aten::mm", "aten::bmm", "aten::linear", "nvjet", "xmma", "cutlass", "cublas", "matmul", "sm90_", "splitk")),
)


def _jit_functions(module: str) -> list[str]:
    spec = find_spec(module)
    if spec is None or spec.origin is None:
        return []
    names = []
    for node in ast.walk(ast.parse(Path(spec.origin).read_text())):
        if isinstance(node, ast.FunctionDef) and any("jit" in ast.unparse(d) or "kernel" in ast.unparse(d)
                                                      for d in node.decorator_list):
            names.append(node.name.lower())
    return names


@functools.cache
def family_patterns() -> dict[str, tuple[str, ...]]:
    out: dict[str, set[str]] = {}
    for t in TARGETS:
        pats = out.setdefault(t.family, set(FAMILY_STEMS.get(t.family, ())))
        # 'kernel' and '_tanh' alone would match everything
        pats.update(n for n in _jit_functions(t.module) if len(n.strip("_")) > 6 and n not in ("kernel",))
    return {f: tuple(sorted(p)) for f, p in out.items()}


def classify(kernel_name: str) -> str:
    """'family:<name>' for a swap target's kernel, else 'attention' | 'conv' | 'gemm' | 'other'."""
    low = kernel_name.lower()
    for family, pats in family_patterns().items():
        if any(p in low for p in pats):
            return f"family:{family}"
    for cat, pats in CATEGORIES:
        if any(p in low for p in pats):
            return cat
    return "other"


def shares(kernel_times: dict[str, float]) -> dict[str, float]:
    """{class: share of total device time} from {kernel name: device time}."""
    total = sum(kernel_times.values())
    out: dict[str, float] = {}
    if total <= 0:
        return out
    for name, t in kernel_times.items():
        c = classify(name)
        out[c] = out.get(c, 0.0) + t / total
    return dict(sorted(out.items()))
