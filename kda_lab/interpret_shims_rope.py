"""Interpreter shims for the rotary_embedding family, on top of kda_lab/interpret.py.

``rope/rotary_triton.py``'s ``_rotary_embedding_kernel`` is ``@triton.autotune``d over five configs; in the
CPU interpreter the autotuner's benchmark asks for a GPU driver and fails ("0 active drivers"). The shim keeps
exactly one config (the autotuner then skips benchmarking), the one that exercises the most code paths on the
tiny rows: ``BLOCK_HEADS=4`` (a masked head tail whenever H % 4 != 0) and ``BLOCK_HS_HALF=32`` (more than one
trip of the head-dim loop at head_dim 128/256). The kernel's arithmetic is untouched.

``rope/ltx2_rotary_triton.py`` needs nothing beyond kda_lab/interpret.py.

:func:`install` is a no-op unless ``TRITON_INTERPRET=1`` (a GPU run keeps SGLang's autotuning as it is);
it is idempotent. The rotary task folders' tests call it before the shared tests run.
"""

from __future__ import annotations

import importlib
import os

ROTARY_MODULE = "sglang.kernels.ops.diffusion.rope.rotary_triton"
ROTARY_KERNEL = "_rotary_embedding_kernel"
KEEP = {"BLOCK_HEADS": 4, "BLOCK_HS_HALF": 32}


def single_config(autotuned, keep: dict[str, int]) -> None:
    """Leave only the config whose kwargs equal ``keep`` on a ``triton.autotune``d kernel."""
    configs = [c for c in autotuned.configs if c.kwargs == keep]
    if len(configs) != 1:
        raise LookupError(f"{getattr(autotuned, 'fn', autotuned)!r}: no single config {keep} in "
                          f"{[c.kwargs for c in autotuned.configs]}")
    autotuned.configs = configs


def install() -> bool:
    """Apply the shims when running under the Triton interpreter; returns whether anything was applied."""
    if os.environ.get("TRITON_INTERPRET") != "1":
        return False
    from kda_lab.interpret import force_cuda_platform

    force_cuda_platform()
    module = importlib.import_module(ROTARY_MODULE)
    kernel = getattr(module, ROTARY_KERNEL)
    if len(kernel.configs) > 1:
        single_config(kernel, KEEP)
    return True
