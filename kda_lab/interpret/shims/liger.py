"""Liger's real Triton norm kernels in Triton's CPU interpreter (``TRITON_INTERPRET=1``), for the peers' CPU tests.

Two shims, neither touching a kernel body:
- Liger binds ``rsqrt`` from ``triton.language.extra.libdevice``, a declaration stub that compiled Triton lowers
  to libdevice; the interpreter patches only ``triton.language`` (and ``tl.math``), so the stub would return
  None. The kernel modules' global ``rsqrt`` is rebound to a jitted ``tl.rsqrt``.
- Liger's kernels call ``eps.to(tl.float32)`` on scalar arguments, which compiled Triton passes as fp32 scalars
  and the interpreter as Python floats: the wrappers below pass :class:`Scalar32` (a float with ``.to``).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from importlib import import_module
from types import SimpleNamespace
from typing import Any

import triton
import triton.language as tl

# Liger's op modules and, per forward function, the positions of its scalar float arguments
FORWARDS: dict[str, tuple[str, tuple[int, ...]]] = {
    "rms_norm": ("rms_norm_forward", (2, 3)),  # (X, W, eps, offset, casting_mode, row_mode)
    "layer_norm": ("layer_norm_forward", (3,)),  # (X, W, B, eps)
    "group_norm": ("group_norm_forward", (5,)),  # (X, num_channels, num_groups, W, B, eps)
    "modulated_rms_norm": ("modulated_rms_norm_forward", (4, 5)),  # (X, W, scale, shift, eps, offset, mode)
}


@triton.jit
def rsqrt(x):
    return tl.rsqrt(x)


class Scalar32(float):
    """A Python float that answers ``.to(dtype)`` as the fp32 scalar of compiled Triton does."""

    def to(self, dtype: Any, *args: Any, **kwargs: Any) -> float:
        return float(self)


def _scalars_wrapped(fn: Callable[..., Any], positions: tuple[int, ...]) -> Callable[..., Any]:
    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        args = tuple(Scalar32(a) if i in positions and isinstance(a, float) else a for i, a in enumerate(args))
        return fn(*args, **kwargs)

    return call


def interpretable_liger_ops() -> SimpleNamespace:
    """A stand-in for ``liger_kernel.ops`` whose submodules' forwards run Liger's kernels in the interpreter."""
    if os.environ.get("TRITON_INTERPRET") != "1":
        raise RuntimeError("set TRITON_INTERPRET=1 before triton is imported")
    ops = SimpleNamespace()
    for name, (forward, positions) in FORWARDS.items():
        module = import_module(f"liger_kernel.ops.{name}")
        module.rsqrt = rsqrt  # type: ignore[attr-defined]
        setattr(ops, name, SimpleNamespace(**{forward: _scalars_wrapped(getattr(module, forward), positions)}))
    return ops
