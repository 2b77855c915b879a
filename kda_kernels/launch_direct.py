"""A kept launch that calls Triton's C launcher itself, without the Python frame of Triton 3.6's ``CudaLauncher``.

Why: ``CompiledKernel.run`` is a ``CudaLauncher`` object whose ``__call__`` builds a closure and calls it twice to
allocate the global and profile scratch buffers, then calls the compiled C function ``launch`` with the launcher's
fixed flags (cooperative grid, PDL) and those two buffers. For a kernel that needs neither buffer (both sizes 0:
every candidate kernel of the lab so far) that frame always passes ``None, None`` and the same two flags, so the
kept launch can hand the C function its arguments directly: one Python frame and two calls less per launch, on
host paths where the whole eager call is ~10-15 us on the H200 box.

``DirectLaunch`` is a ``launch_cache.KeptLaunch`` (same grid, tail, stream and hook handling); it exists only
where the launcher is Triton's ``CudaLauncher`` shape (a C ``launch`` plus the flags and scratch sizes) and both
scratch sizes are 0. Anything else (another Triton, a scratch-using kernel, the lab's offline stand-in driver)
keeps ``KeptLaunch``'s call through ``kernel.run``. With a launch hook registered it also goes through
``kernel.run`` (the hook needs the launch metadata). ``tests/test_launch_direct.py`` checks the arguments against
what Triton's own ``CudaLauncher.__call__`` passes.

A candidate that imports this module has its bytes in its source hash (``kda_lab.task.schema.HASHED_HELPERS``).
"""

from __future__ import annotations

from typing import Any

import torch
from triton import knobs

from kda_kernels.launch_cache import KeptLaunch, _idle, keep

_LAUNCHER_FIELDS = ("launch", "launch_cooperative_grid", "launch_pdl", "global_scratch_size",
                    "profile_scratch_size")


class DirectLaunch(KeptLaunch):
    """``KeptLaunch`` whose hook-free call goes straight to the C ``launch`` of Triton's CudaLauncher."""

    __slots__ = ("c_launch", "flags")

    def __init__(self, kept: KeptLaunch) -> None:
        for name in KeptLaunch.__slots__:
            setattr(self, name, getattr(kept, name))
        self.c_launch = self.launcher.launch
        self.flags = (self.launcher.launch_cooperative_grid, self.launcher.launch_pdl)

    def __call__(self, *lead: Any) -> None:
        runtime = knobs.runtime
        if not (_idle(runtime.launch_enter_hook) and _idle(runtime.launch_exit_hook)):
            KeptLaunch.__call__(self, *lead)  # hooks want the launch metadata: Triton's own path
            return
        grid = self.grid
        # CudaLauncher.__call__'s arguments with both scratch buffers None (their sizes are 0), then what
        # KeptLaunch passes: packed metadata, no launch metadata, no hooks, the parameters in signature order
        self.c_launch(grid[0], grid[1], grid[2], self.get_stream(self.device), self.function, self.flags[0],
                      self.flags[1], None, None, self.packed_metadata, None, None, None, *lead, *self.tail)


def direct(kept: KeptLaunch | None) -> KeptLaunch | None:
    """``kept`` as a DirectLaunch where its launcher allows it (see the module text), else unchanged."""
    if kept is None:
        return None
    launcher = kept.launcher
    if not all(hasattr(launcher, f) for f in _LAUNCHER_FIELDS):
        return kept
    if launcher.global_scratch_size > 0 or launcher.profile_scratch_size > 0:
        return kept
    return DirectLaunch(kept)


def launch_and_keep_direct(jit_fn: Any, grid: tuple[int, ...], tensors: tuple[torch.Tensor, ...],
                           tail: tuple[Any, ...], **options: Any) -> KeptLaunch | None:
    """``launch_cache.launch_and_keep`` returning a DirectLaunch where the launcher allows it."""
    return direct(keep(jit_fn[grid](*tensors, *tail, **options), grid, tail))
