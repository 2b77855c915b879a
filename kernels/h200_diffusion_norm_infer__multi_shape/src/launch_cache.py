"""Kept launches: the second and later calls of one call signature skip Triton's Python dispatch.

Why: ``kernel[grid](...)`` binds every argument, specializes it, hashes a cache key and builds launch metadata on
every call (tens of microseconds of host time: SGLang's eager one-pass call costs 46 us for a 1.7 us kernel). The
compiled binary depends only on what Triton specializes on, which for these kernels is a function of the call
signature (shapes, strides, dtypes, flags, the current device, each pointer's 16-byte alignment): the first call of
a signature goes through ``kernel[grid]`` (compile or Triton's cache) and the CompiledKernel it returns is kept.
Later calls hand Triton's C launcher exactly what ``JITFunction.run`` would: grid, stream, function, packed
metadata, launch metadata and hooks, then every parameter in signature order (constexprs included).

Nothing is kept under the Triton interpreter (``kernel[grid]`` returns no CompiledKernel there).
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

import torch
from triton import knobs
from triton.runtime.driver import driver

MAX_ENTRIES = 256


class KeptLaunch:
    """One compiled kernel and its grid; call it with every kernel parameter in signature order."""

    __slots__ = ("kernel", "grid", "launcher", "function", "packed_metadata", "get_stream", "device")

    def __init__(self, kernel: Any, grid: tuple[int, ...], device: int) -> None:
        self.kernel = kernel
        self.grid = tuple(grid) + (1,) * (3 - len(grid))
        self.launcher = kernel.run  # property: loads the module and builds the launcher once
        self.function = kernel.function
        self.packed_metadata = kernel.packed_metadata
        self.get_stream = driver.active.get_current_stream
        self.device = device

    def __call__(self, *args: Any) -> None:
        stream = self.get_stream(self.device)
        grid = self.grid
        runtime = knobs.runtime
        self.launcher(grid[0], grid[1], grid[2], stream, self.function, self.packed_metadata,
                      self.kernel.launch_metadata(grid, stream, *args),
                      runtime.launch_enter_hook, runtime.launch_exit_hook, *args)


def keep(kernel: Any, grid: tuple[int, ...]) -> KeptLaunch | None:
    """The launch to repeat for later calls of the signature ``kernel`` was compiled for (None under the
    interpreter, where ``kernel[grid]`` returns no CompiledKernel)."""
    if not all(hasattr(kernel, a) for a in ("run", "function", "packed_metadata", "launch_metadata")):
        return None
    return KeptLaunch(kernel, grid, driver.active.get_current_device())


class LaunchCache:
    """signature -> (KeptLaunch, payload), bounded (a model has a handful of signatures)."""

    def __init__(self) -> None:
        self.entries: dict[Hashable, tuple[KeptLaunch, Any]] = {}

    def get(self, key: Hashable) -> tuple[KeptLaunch, Any] | None:
        return self.entries.get(key)

    def put(self, key: Hashable, launch: KeptLaunch | None, payload: Any) -> None:
        if launch is None:
            return
        if len(self.entries) >= MAX_ENTRIES:
            self.entries = {}
        self.entries[key] = (launch, payload)

    def clear(self) -> None:
        self.entries = {}


def current_device() -> int:
    """The device Triton launches on (its compiled binaries are loaded per device)."""
    return driver.active.get_current_device()


def aligned16(*tensors: torch.Tensor) -> bool:
    """Every tensor's address is a multiple of 16 bytes. Triton specializes pointer arguments on it; entries are
    made and used only for all-aligned calls, so the key need not carry the alignment."""
    return all(t.data_ptr() & 15 == 0 for t in tensors)
