"""Kernel names -> swap-target families (kda_kernels.registry) or GEMM / attention / conv / other.

A family's kernels are the Triton kernels defined in its SGLang modules (found by reading SGLang's source:
``@triton.jit`` functions), the kernels of KDA's exported impls of the family (read from
``kda_kernels/diffusion/<family>/_impls``: ``@triton.jit`` functions and CUDA ``__global__`` functions, so a new
promotion is classified without a list to keep up to date), plus the name stems of SGLang's CUDA/CuTe JIT kernels
(``FAMILY_STEMS``), whose names are not ``def``s.
"""

from __future__ import annotations

import ast
import functools
import re
from importlib.util import find_spec
from pathlib import Path

import kda_kernels
from kda_kernels.registry import TARGETS

_CUDA_GLOBAL = re.compile(r"__global__\s+void\s+(?:__launch_bounds__\s*\([^)]*\)\s*)?(\w+)\s*\(")

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
    return _jit_functions_in(Path(spec.origin))


def _jit_functions_in(path: Path) -> list[str]:
    names = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.FunctionDef) and any("jit" in ast.unparse(d) or "kernel" in ast.unparse(d)
                                                      for d in node.decorator_list):
            names.append(node.name.lower())
    return names


def exported_kernel_names(family: str) -> list[str]:
    """The kernels of KDA's exported impls of ``family`` (every arch): Triton ``@jit`` defs and CUDA ``__global__``s."""
    impls = Path(kda_kernels.__file__).parent / "diffusion" / family / "_impls"
    files = sorted(impls.rglob("*")) if impls.is_dir() else []
    py = [p for p in files if p.suffix == ".py"]
    launched = "\n".join(p.read_text() for p in py)
    names: list[str] = []
    for path in py:
        # A @jit def is a kernel when it is launched (`name[grid](...)`) or handed to a launcher (`launch(name, ...)`):
        # used other than by a call. Called ones are inlined helpers whose names never reach the profiler and, as
        # substrings, would claim other families' kernels.
        names += [n for n in _jit_functions_in(path) if re.search(rf"\b{re.escape(n)}\b(?!\s*\()", launched)]
    for path in files:
        if path.suffix in (".cu", ".cuh"):
            names += [n.lower() for n in _CUDA_GLOBAL.findall(path.read_text())]
    return names


@functools.cache
def family_patterns() -> dict[str, tuple[str, ...]]:
    out: dict[str, set[str]] = {}
    for t in TARGETS:
        pats = out.setdefault(t.family, set(FAMILY_STEMS.get(t.family, ())))
        # 'kernel' and '_tanh' alone would match everything
        pats.update(n for n in _jit_functions(t.module) if len(n.strip("_")) > 6 and n not in ("kernel",))
    return {f: tuple(sorted(p)) for f, p in out.items()}


@functools.cache
def exported_kernels() -> dict[str, str]:
    """{kernel name: family} for KDA's exported impls, matched as whole names (they can be generic, e.g. `_apply`)."""
    return {n: t.family for t in TARGETS for n in exported_kernel_names(t.family)}


def classify(kernel_name: str, idle: frozenset[str] = frozenset()) -> str:
    """'family:<name>' for a swap target's kernel, else 'attention' | 'conv' | 'gemm' | 'other'.

    ``idle``: families whose swap targets the profiled forward never called (``idle_families``). A kernel that
    matches only such a family's SGLang names is another SGLang kernel of the same name (SGLang defines
    ``_rmsnorm_scale_shift_kernel`` both in norm_tanh_mul_add's module and in LTX-2's fused RMSNorm + modulate)."""
    low = kernel_name.lower()
    for token in re.findall(r"[a-z0-9_]+", low):
        if token in exported_kernels():
            return f"family:{exported_kernels()[token]}"
    for family, pats in family_patterns().items():
        if family not in idle and any(p in low for p in pats):
            return f"family:{family}"
    for cat, pats in CATEGORIES:
        if any(p in low for p in pats):
            return cat
    return "other"


def idle_families(calls: dict[str, dict[str, int]], installed: dict[str, str]) -> frozenset[str]:
    """The families of ``installed`` ({swap target: family}, the overlay's KDA objects) none of whose targets a
    forward called (``calls``: a trace's per-target counts, KDA or SGLang): with the overlay on every call of
    an installed target passes its KDA object, so no kernel of that forward is theirs."""
    called = {fam for fn, fam in installed.items() if sum((calls.get(fn) or {}).values())}
    return frozenset(set(installed.values()) - called)


def shares(kernel_times: dict[str, float], idle: frozenset[str] = frozenset()) -> dict[str, float]:
    """{class: share of total device time} from {kernel name: device time}."""
    total = sum(kernel_times.values())
    out: dict[str, float] = {}
    if total <= 0:
        return out
    for name, t in kernel_times.items():
        c = classify(name, idle)
        out[c] = out.get(c, 0.0) + t / total
    return dict(sorted(out.items()))


def top_kernels(kernel_times: dict[str, float], n: int = 15,
                idle: frozenset[str] = frozenset()) -> list[dict[str, object]]:
    """The ``n`` kernels outside GEMM and attention with the most device time: name (cut to 120 characters),
    class, ms and share of the stage's total (kernel_times in µs, as the profiler gives them)."""
    total = sum(kernel_times.values())
    classes = {k: classify(k, idle) for k in kernel_times}
    rest = [(k, v, classes[k]) for k, v in kernel_times.items() if classes[k] not in ("gemm", "attention")]
    rest.sort(key=lambda kv: -kv[1])
    return [{"kernel": k[:120], "class": c, "ms": round(v / 1e3, 4), "share": round(v / total, 4) if total else 0.0}
            for k, v, c in rest[:n]]


# The decode split of a VAE's device time (issue #36): convolutions, their norm+activation glue, pads and concats,
# layout copies, upsampling, attention, GEMM and the rest, from kernel names as the profiler gives them.
VAE_BUCKETS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("layout", ("nchwtonhwc", "nhwctonchw", "direct_copy_kernel", "copy_kernel", "transpose", "permute")),
    ("pad_cat", ("pad", "catarraybatchedcopy", "cat_", "_cat")),
    ("upsample", ("upsample", "interp")),
    ("norm_act", ("group_norm", "groupnorm", "rms_norm", "rmsnorm", "layer_norm", "silu", "gelu", "gns_",
                  "norm_kernel", "welford")),
)


def vae_bucket(kernel_name: str, idle: frozenset[str] = frozenset()) -> str:
    """One of conv / layout / pad_cat / upsample / norm_act / attention / gemm / other."""
    low = kernel_name.lower()
    c = classify(kernel_name, idle)
    if c.startswith("family:"):
        return "pad_cat" if c == "family:replicate_pad3d" else "norm_act"
    if c in ("attention", "gemm"):
        return c
    for bucket, pats in VAE_BUCKETS:
        if any(p in low for p in pats):
            return bucket
    return "conv" if c == "conv" else "other"


def vae_split(kernel_times: dict[str, float], idle: frozenset[str] = frozenset()) -> dict[str, float]:
    """{bucket: device ms} of a decode (kernel_times in µs)."""
    out: dict[str, float] = {}
    for name, t in kernel_times.items():
        b = vae_bucket(name, idle)
        out[b] = out.get(b, 0.0) + t / 1e3
    return {k: round(v, 4) for k, v in sorted(out.items())}
