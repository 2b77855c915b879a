"""Per-signature launch cache: the second and later calls of one signature skip Triton's Python dispatch.

Why: ``kernel[grid](...)`` binds every argument, specializes it (tensor alignment, int divisibility), hashes a
cache key and builds launch metadata on every call, and its C launcher then calls ``data_ptr()`` and the driver's
``cuPointerGetAttribute`` once per tensor: most of an eager call's host time on the small rows (the rotary
candidate measured +5..+30 us per call over SGLang's before it kept its launches). A kernel's compiled binary
depends only on what Triton specializes on, which here is a function of the call signature (shapes, strides,
dtypes, the current device, the 16-byte alignment of each pointer): the first call of a signature goes through
``kernel[grid]`` (compile or Triton's cache), and the CompiledKernel it returns is kept with the grid and the
non-pointer arguments. Later calls hand the C launcher what ``JITFunction.run`` would, with two differences that
change nothing the kernel sees:

- pointers are passed as the integers ``data_ptr()`` returns (the launcher takes an int as the device pointer
  itself; the caller has already checked that every tensor lives on the current CUDA device, which is what the
  launcher's ``cuPointerGetAttribute`` would check);
- while no launch hook is registered (Triton's hook chains are empty), the launcher gets None for the hooks and
  the launch metadata, which makes it skip calling the empty chains; with a hook registered it gets the chains and
  the metadata, as from Triton's own dispatch.

Nothing is cached under the Triton interpreter (``kernel[grid]`` returns no CompiledKernel there).
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

from triton import knobs
from triton.runtime.driver import driver

MAX_ENTRIES = 256


def _idle(hook: Any) -> bool:
    """No launch hook to call: None, or one of Triton's hook chains with nothing in it."""
    return hook is None or not getattr(hook, "calls", True)


class CachedLaunch:
    """One compiled kernel with its grid and trailing (non-pointer) arguments; call it with the pointers."""

    __slots__ = ("kernel", "grid", "tail", "launcher", "function", "packed_metadata", "get_stream", "device",
                 "dense_like_x")

    def __init__(self, kernel: Any, grid: tuple[int, ...], tail: tuple[Any, ...], device: int) -> None:
        self.kernel = kernel
        self.grid = tuple(grid) + (1,) * (3 - len(grid))
        self.tail = tail
        self.launcher = kernel.run  # property: loads the module and builds the launcher once
        self.function = kernel.function
        self.packed_metadata = kernel.packed_metadata
        self.get_stream = driver.active.get_current_stream
        self.device = device
        self.dense_like_x = False  # the caller's note: torch.empty_like(x) gives the dense layout the kernel writes

    def __call__(self, *pointers: int) -> None:
        stream = self.get_stream(self.device)
        grid = self.grid
        runtime = knobs.runtime
        enter, exit_ = runtime.launch_enter_hook, runtime.launch_exit_hook
        if _idle(enter) and _idle(exit_):
            self.launcher(grid[0], grid[1], grid[2], stream, self.function, self.packed_metadata, None, None, None,
                          *pointers, *self.tail)
        else:
            args = pointers + self.tail
            self.launcher(grid[0], grid[1], grid[2], stream, self.function, self.packed_metadata,
                          self.kernel.launch_metadata(grid, stream, *args), enter, exit_, *args)


def launch_and_keep(jit_fn: Any, grid: tuple[int, ...], tensors: tuple[Any, ...], tail: tuple[Any, ...],
                    **options: Any) -> CachedLaunch | None:
    """``jit_fn[grid](*tensors, *tail, **options)``, returning the launch to repeat for later calls of the same
    signature (None under the interpreter). ``tensors`` are the leading pointer parameters, ``tail`` every later
    parameter in signature order, constexprs included (what ``JITFunction.run`` hands the launcher)."""
    kernel = jit_fn[grid](*tensors, *tail, **options)
    if not _is_compiled_kernel(kernel):
        return None
    return CachedLaunch(kernel, grid, tail, driver.active.get_current_device())


class LaunchCache:
    """signature -> CachedLaunch, bounded (a model has a handful of signatures; a sweep starts a fresh dict)."""

    def __init__(self) -> None:
        self.entries: dict[Hashable, CachedLaunch] = {}

    def get(self, key: Hashable) -> CachedLaunch | None:
        return self.entries.get(key)

    def keep(self, key: Hashable, entry: CachedLaunch | None) -> None:
        if entry is None:
            return
        if len(self.entries) >= MAX_ENTRIES:
            self.entries = {}
        self.entries[key] = entry


def _is_compiled_kernel(kernel: Any) -> bool:
    return all(hasattr(kernel, a) for a in ("run", "function", "packed_metadata", "launch_metadata"))


def current_device() -> int:
    """The device Triton launches on (its compiled binaries are loaded per device)."""
    return driver.active.get_current_device()
