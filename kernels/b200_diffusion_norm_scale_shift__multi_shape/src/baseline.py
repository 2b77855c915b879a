"""SGLang 0.5.23's own functions for this task, resolved on first call, never at import.

Why lazily: the CuTe DSL module needs ``nvidia-cutlass-dsl`` and ``cuda-bindings``, which the CPU
environment does not install.
`kda validate` and the CPU tests import ``register.py`` on machines without a GPU.

``sglang_function(name)`` returns a callable that, on its first call, imports the SGLang module defining
``name`` (the ``sglang`` field of task.toml) and binds the function there. When the KDA overlay is installed the
defining module holds a KDA object instead; its ``__kda_baseline__`` (SGLang's original) is used, so a
candidate's fallback can never call the overlay, and so itself, back. Candidates use ``resolve(name)`` for
their fallback path. No harness imports here: this file ships with an exported candidate.
"""

from __future__ import annotations

import importlib
import types
from collections.abc import Callable
from typing import Any

DEFINING_MODULES = {
    "fused_norm_scale_shift": "sglang.kernels.ops.diffusion.norm.scale_residual_norm_cutedsl",
    "fused_scale_residual_norm_scale_shift": "sglang.kernels.ops.diffusion.norm.scale_residual_norm_cutedsl",
}


def resolve(name: str) -> Callable[..., Any]:
    """SGLang's own ``name`` from its defining module (a KDA overlay object is unwrapped to its baseline)."""
    fn = getattr(importlib.import_module(DEFINING_MODULES[name]), name)
    if isinstance(fn, types.FunctionType) and fn.__dict__.get("__kda_kernel__") is True:
        fn = fn.__dict__["__kda_baseline__"]
    return fn


def sglang_function(name: str) -> Callable[..., Any]:
    """A callable that forwards to SGLang's ``name``, resolved and cached on the first call."""
    if name not in DEFINING_MODULES:
        raise KeyError(f"{name!r} is not a function of this task: {sorted(DEFINING_MODULES)}")
    target: list[Callable[..., Any]] = []

    def call(*args: Any, **kwargs: Any) -> Any:
        if not target:
            target.append(resolve(name))
        return target[0](*args, **kwargs)

    call.__name__ = call.__qualname__ = name
    call.__doc__ = f"SGLang 0.5.23's {name} ({DEFINING_MODULES[name]}), resolved on first call."
    return call
