"""Per-signature launch cache: the second and later calls of one shape skip Triton's Python dispatch.

Why: ``kernel[grid](...)`` binds every argument, specializes it (tensor alignment, int divisibility), hashes a
cache key and builds launch metadata on every call: most of the candidate's eager host time (c002 measured
+5..+30 us per call over SGLang's on the H200). A kernel's compiled binary depends only on what Triton
specializes on, which here is a function of the call signature (shapes, strides, dtypes, the current device,
the 16-byte alignment of each tensor): the first call of a signature goes through ``kernel[grid]`` (compile or
Triton's cache), and the CompiledKernel it returns is kept with the grid and the non-tensor arguments. Later
calls hand the C launcher exactly what ``JITFunction.run`` would: grid, stream, function, packed metadata,
launch metadata and hooks, then every parameter in signature order (tensors first, then ints and constexprs).

Two differences from Triton's own dispatch change nothing the kernel sees: while no launch hook is registered
(Triton's hook chains are empty) the launcher gets None for the hooks and the launch metadata, which makes it skip
calling the empty chains (with a hook registered it gets the chains and the metadata, as from the dispatch); and
a caller that has checked every tensor is on the current CUDA device (``runs_here``) may pass pointers as the
integers ``data_ptr()`` returns, which saves the launcher's per-tensor ``cuPointerGetAttribute``.

Nothing is cached under the Triton interpreter (``kernel[grid]`` returns no CompiledKernel there).

Shared by the Triton candidates (``from kda_kernels.launch_cache import ...``), so their exported copies use the
overlay's one copy; it imports Triton, so ``import kda_kernels`` itself never loads it. The H200 rotary task's
c004 carries an older copy in its own ``src/`` (promoted with that source hash; its next candidate imports this).
"""

from __future__ import annotations

import os
from collections.abc import Hashable
from typing import Any

import torch
from triton import knobs
from triton.runtime.driver import driver

MAX_ENTRIES = 256


def _idle(hook: Any) -> bool:
    """No launch hook to call: None, or one of Triton's hook chains with nothing in it."""
    return hook is None or not getattr(hook, "calls", True)


class KeptLaunch:
    """One compiled kernel with its grid and trailing arguments (``tail``, often the non-tensor ones); call it
    with the leading parameters, in signature order."""

    __slots__ = ("kernel", "grid", "tail", "launcher", "function", "packed_metadata", "get_stream", "device")

    def __init__(self, kernel: Any, grid: tuple[int, ...], tail: tuple[Any, ...], device: int) -> None:
        self.kernel = kernel
        self.grid = tuple(grid) + (1,) * (3 - len(grid))
        self.tail = tail
        self.launcher = kernel.run  # property: loads the module and builds the launcher once
        self.function = kernel.function
        self.packed_metadata = kernel.packed_metadata
        self.get_stream = driver.active.get_current_stream
        self.device = device

    def __call__(self, *lead: Any) -> None:
        stream = self.get_stream(self.device)
        grid = self.grid
        runtime = knobs.runtime
        enter, exit_ = runtime.launch_enter_hook, runtime.launch_exit_hook
        if _idle(enter) and _idle(exit_):
            # no hook to call: the launcher skips None hooks, and the launch metadata exists only for them
            self.launcher(grid[0], grid[1], grid[2], stream, self.function, self.packed_metadata, None, None, None,
                          *lead, *self.tail)
            return
        args = lead + self.tail
        self.launcher(grid[0], grid[1], grid[2], stream, self.function, self.packed_metadata,
                      self.kernel.launch_metadata(grid, stream, *args), enter, exit_, *args)


def keep(kernel: Any, grid: tuple[int, ...], tail: tuple[Any, ...] = ()) -> KeptLaunch | None:
    """The launch to repeat for later calls of the signature ``kernel`` (what ``jit_fn[grid](...)`` returned) was
    compiled for; None under the interpreter, where ``kernel[grid]`` returns no CompiledKernel."""
    if not all(hasattr(kernel, a) for a in ("run", "function", "packed_metadata", "launch_metadata")):
        return None
    return KeptLaunch(kernel, grid, tail, driver.active.get_current_device())


def launch_and_keep(jit_fn: Any, grid: tuple[int, ...], tensors: tuple[torch.Tensor, ...], tail: tuple[Any, ...],
                    **options: Any) -> KeptLaunch | None:
    """``jit_fn[grid](*tensors, *tail, **options)``, returning the launch to repeat for later calls of the same
    signature (None under the interpreter). ``tensors`` are the leading pointer parameters, ``tail`` every later
    parameter in signature order, constexprs included (what ``JITFunction.run`` hands the launcher)."""
    return keep(jit_fn[grid](*tensors, *tail, **options), grid, tail)


class LaunchCache:
    """signature -> entry (a KeptLaunch, or a tuple holding one with what the caller needs beside it), bounded:
    a model has a handful of signatures; a sweep past MAX_ENTRIES starts a fresh dict."""

    def __init__(self) -> None:
        self.entries: dict[Hashable, Any] = {}

    def get(self, key: Hashable) -> Any:
        return self.entries.get(key)

    def keep(self, key: Hashable, entry: Any) -> None:
        """Store ``entry`` (nothing when it is None: the interpreter keeps no launch)."""
        if entry is None:
            return
        if len(self.entries) >= MAX_ENTRIES:
            self.entries = {}
        self.entries[key] = entry

    def clear(self) -> None:
        self.entries = {}


def current_device() -> int:
    """The device Triton launches on (its compiled binaries are loaded per device)."""
    return driver.active.get_current_device()


def aligned16(*tensors: torch.Tensor | None) -> bool:
    """Every tensor's address is a multiple of 16 bytes (None entries, absent optional arguments, are skipped).
    Triton specializes pointer arguments on it; entries are made and used only for all-aligned calls, so the key
    need not carry the alignment."""
    return all(t.data_ptr() & 15 == 0 for t in tensors if t is not None)


def may_repeat(*tensors: torch.Tensor | None) -> bool:
    """The per-call conditions a signature does not decide, for keeping or repeating a launch: nothing records
    autograd, torch.compile is not tracing, and every pointer is 16-byte aligned (what the kept binary assumes)."""
    if torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in tensors):
        return False
    return not torch.compiler.is_compiling() and aligned16(*tensors)


def runs_here(*tensors: torch.Tensor | None) -> bool:
    """Whether a Triton candidate's own kernels may take these tensors (None entries, absent optional arguments,
    are skipped): all on one CUDA device that is the current one (Triton launches on the current device, with
    binaries loaded per device), or all on the CPU under the Triton interpreter; none recording autograd (the
    kernels have no backward); not while torch.compile traces. Anything else goes to SGLang."""
    tensors = tuple(t for t in tensors if t is not None)
    if torch.compiler.is_compiling():
        return False
    device = tensors[0].device
    if any(t.device != device for t in tensors):
        return False
    if device.type == "cuda":
        if device.index != current_device():
            return False
    elif not (device.type == "cpu" and os.environ.get("TRITON_INTERPRET") == "1"):
        return False
    return not (torch.is_grad_enabled() and any(t.requires_grad for t in tensors))
