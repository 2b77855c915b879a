"""Interpreter shims for the rotary_embedding family, on top of kda_lab/interpret/interpreter.py.

Two gaps between Triton 3.6's CPU interpreter and the GPU, each closed for one SGLang kernel only (SGLang's
source and the kernels' arithmetic are untouched):

- ``rope/rotary_triton.py``: ``_rotary_embedding_kernel`` is ``@triton.autotune``d over five configs; the
  interpreter's autotuner benchmark asks for a GPU driver and fails ("0 active drivers"). The shim keeps one
  config (the autotuner then skips benchmarking), the one that exercises the most code paths on the tiny
  rows: ``BLOCK_HEADS=4`` (a masked head tail whenever H % 4 != 0) and ``BLOCK_HS_HALF=32`` (more than one trip
  of the head-dim loop at head_dim 128/256).
- ``rope/ltx2_rotary_triton.py``: the kernel rounds ``x*cos`` with ``.to(tl.bfloat16)`` on purpose. On the GPU an
  fp32 -> bf16 cast rounds to nearest even; the interpreter truncates (``_convert_float`` without a rounding
  mode), which moves results by one bf16 ulp. While this one kernel runs, fp32 -> bf16 casts round to nearest
  even, as on the GPU (fp16 -> bf16 goes through fp32 in Triton's semantics, so it is covered too).

:func:`install` is a no-op unless ``TRITON_INTERPRET=1`` (a GPU run keeps SGLang's autotuning and casts as they
are); it is idempotent. The rotary task folders' tests call it before the shared tests run.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

ROTARY_MODULE = "sglang.kernels.ops.diffusion.rope.rotary_triton"
ROTARY_KERNEL = "_rotary_embedding_kernel"
KEEP = {"BLOCK_HEADS": 4, "BLOCK_HS_HALF": 32}
LTX2_MODULE = "sglang.kernels.ops.diffusion.rope.ltx2_rotary_triton"
LTX2_KERNEL = "_ltx2_split_rotary_kernel"


def single_config(autotuned: Any, keep: dict[str, int]) -> None:
    """Leave only the config whose kwargs equal ``keep`` on a ``triton.autotune``d kernel."""
    configs = [c for c in autotuned.configs if c.kwargs == keep]
    if len(configs) != 1:
        raise LookupError(f"{getattr(autotuned, 'fn', autotuned)!r}: no single config {keep} in "
                          f"{[c.kwargs for c in autotuned.configs]}")
    autotuned.configs = configs


def f32_to_bf16_bits(data: np.ndarray) -> np.ndarray:
    """fp32 values -> bf16 bit patterns (uint16), round to nearest even; NaN stays a quiet NaN."""
    bits = np.ascontiguousarray(data, dtype=np.float32).view(np.uint32).astype(np.uint64)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
    rounded = np.where(np.isnan(data), (bits >> 16) | 0x40, rounded)
    return rounded.astype(np.uint16).reshape(np.shape(data))


@contextmanager
def rne_bf16_casts() -> Iterator[None]:
    """Inside: the interpreter's fp32 -> bf16 casts round to nearest even (as the GPU does)."""
    import triton.language as tl
    from triton.runtime import interpreter

    builder = interpreter.InterpreterBuilder
    original = builder.cast_impl

    def cast_impl(self, src, dst_type):
        if src.dtype.scalar == tl.float32 and dst_type.scalar == tl.bfloat16:
            return interpreter.TensorHandle(f32_to_bf16_bits(src.data), tl.bfloat16)
        return original(self, src, dst_type)

    builder.cast_impl = cast_impl
    try:
        yield
    finally:
        builder.cast_impl = original


class RneBf16Kernel:
    """A ``@triton.jit`` kernel whose launches (``kernel[grid](...)``) run under :func:`rne_bf16_casts`."""

    def __init__(self, kernel: Any) -> None:
        self.kernel = kernel

    def __getitem__(self, grid: Any):
        launch = self.kernel[grid]

        def run(*args: Any, **kwargs: Any) -> Any:
            with rne_bf16_casts():
                return launch(*args, **kwargs)

        return run

    def __getattr__(self, name: str) -> Any:
        return getattr(self.kernel, name)


def install() -> bool:
    """Apply the shims when running under the Triton interpreter; returns whether they are in place."""
    if os.environ.get("TRITON_INTERPRET") != "1":
        return False
    from kda_lab.interpret.interpreter import force_cuda_platform

    force_cuda_platform()
    rotary = importlib.import_module(ROTARY_MODULE)
    kernel = getattr(rotary, ROTARY_KERNEL)
    if len(kernel.configs) > 1:
        single_config(kernel, KEEP)
    ltx2 = importlib.import_module(LTX2_MODULE)
    if not isinstance(getattr(ltx2, LTX2_KERNEL), RneBf16Kernel):
        setattr(ltx2, LTX2_KERNEL, RneBf16Kernel(getattr(ltx2, LTX2_KERNEL)))
    return True
