"""W8A8 int8 GEMM with a dequantizing epilogue (the reference task ``*_int8_scaled_mm__m64_n2048_k2048_bias``).

Contract (what SGLang 0.5.23 calls: ``sgl_kernel.int8_scaled_mm`` from ``srt/layers/quantization/w8a8_int8.py``,
``W8A8Int8LinearMethod.apply``):
``int8_scaled_mm(mat_a, mat_b, scales_a, scales_b, out_dtype, bias=None) -> Tensor [M, N]``
- ``mat_a`` int8 ``[M, K]`` row-major (the per-token quantized activation), ``mat_b`` int8 ``[K, N]``
  column-major (the ``[N, K]`` weight, transposed as a view: ``layer.weight.t()``), K % 16 == 0, N % 8 == 0;
- ``scales_a`` fp32 ``[M, 1]`` (per token), ``scales_b`` fp32 ``[N, 1]`` (per output channel), contiguous;
- ``bias`` ``[N]`` in ``out_dtype`` or None; ``out_dtype`` fp16 or bf16;
- ``out = round_to_out_dtype(scales_a[m] * (scales_b[n] * float(sum_k a[m,k]*b[k,n])) + bias[n])``: exact int32
  accumulation, fp32 epilogue, one rounding.

Row encoding. The harness's tensor specs have no int8 dtype, so a row stores each int8 matrix as int32 words
holding four int8 values each (little-endian bytes): ``mat_a`` int32 ``[M, K/4]`` and ``mat_b`` int32
``[N, K/4]`` (the weight as stored, ``[N, K]``), drawn uniformly over the whole int32 range so every byte is a
uniform int8 in [-128, 127]. The row's ``out_like`` spec (``[M, N]`` in the output dtype) names the output for
the byte model and gives ``out_dtype``. :func:`prepare` turns them into the call's arguments: int8 views (no
copy) with ``mat_b`` transposed to the column-major ``[K, N]`` view, ``out_dtype``, and drops ``out_like``. The
byte model therefore counts exactly the int8 bytes (4 per int32 word).
"""

from __future__ import annotations

import torch

from kda_lab.families.base import Args, FunctionContract

ROW_ONLY = ("out_like",)


def as_int8(t: torch.Tensor) -> torch.Tensor:
    """An int32 ``[R, K/4]`` row encoding as the int8 ``[R, K]`` it packs (a view); int8 passes through."""
    if t.dtype == torch.int8:
        return t
    if t.dtype != torch.int32:
        raise TypeError(f"int8 operands are given as int8 or packed int32, got {t.dtype}")
    return t.view(torch.int8)


def prepare(args: Args) -> Args:
    if "out_like" not in args:  # already prepared
        return args
    a = dict(args)
    out_like = a.pop("out_like")
    a["mat_a"] = as_int8(a["mat_a"])
    a["mat_b"] = as_int8(a["mat_b"]).t()  # weight [N, K] -> the column-major [K, N] view SGLang passes
    a["out_dtype"] = out_like.dtype
    return a


def oracle(a: Args) -> tuple[torch.Tensor, ...]:
    """fp64: int8 products and their sums are integers below 2^53, so the fp64 matmul is the exact int32 sum."""
    mat_a, mat_b = a["mat_a"], a["mat_b"]
    k = mat_a.shape[1]
    if mat_b.shape[0] != k:
        raise ValueError(f"mat_a {list(mat_a.shape)} and mat_b {list(mat_b.shape)} do not multiply")
    if k * 128 * 128 >= 2**31:
        raise ValueError(f"K={k} can overflow the int32 accumulator the contract specifies")
    acc = mat_a.double() @ mat_b.double()
    y = acc * a["scales_a"].double().reshape(-1, 1) * a["scales_b"].double().reshape(1, -1)
    if a.get("bias") is not None:
        y = y + a["bias"].double().reshape(1, -1)
    return (y,)


def reference(mat_a, mat_b, scales_a, scales_b, out_dtype, bias=None):
    """Eager torch (the torch.compile peer): the same as the H200 baseline in kda_lab/baselines.py."""
    from kda_lab.baselines import torch_int8_scaled_mm

    return torch_int8_scaled_mm(mat_a, mat_b, scales_a, scales_b, out_dtype, bias)


FUNCTIONS = {
    "int8_scaled_mm": FunctionContract(name="int8_scaled_mm", oracle=oracle, torch_reference=reference, prepare=prepare),
}

BYTE_MODELS = {
    "int8_scaled_mm": (("mat_a", "mat_b", "scales_a", "scales_b", "bias"), ("out_like",)),
}

# No facade entry: `kda new-task --family int8_scaled_mm` stamps SGLang's own W8A8 GEMM as the baseline.
BASELINES = {
    "int8_scaled_mm": "kda_lab.baselines:sgl_int8_scaled_mm",
}
