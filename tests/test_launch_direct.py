"""kda_kernels.launch_direct: a kept launch that calls Triton's C launcher itself must hand it exactly what Triton
3.6's own ``CudaLauncher.__call__`` hands it (checked against that code, run on a launcher whose C function
records), and must not take kernels or launchers it cannot repeat that way."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from triton import knobs
from triton.backends.nvidia.driver import CudaLauncher

from kda_kernels import launch_cache as lc
from kda_kernels import launch_direct as ld
from kda_lab.interpret.offline_launch import cuda_launcher

STREAM, DEVICE = 0x5150, 0


def _launcher(calls: list[tuple[Any, ...]], **fields: Any) -> CudaLauncher:
    """A CudaLauncher whose compiled C ``launch`` records its arguments (nothing is compiled or loaded)."""
    return cuda_launcher(lambda *a: calls.append(a), **fields)


def _kept(launcher: Any, monkeypatch: pytest.MonkeyPatch) -> lc.KeptLaunch:
    active = SimpleNamespace(get_current_stream=lambda device=None: STREAM, get_current_device=lambda: DEVICE)
    monkeypatch.setattr(lc, "driver", SimpleNamespace(active=active))
    kernel = SimpleNamespace(run=launcher, function=0xF00, packed_metadata=(4, 1, 0),
                             launch_metadata=lambda grid, stream, *args: ("metadata", grid, stream))
    kept = lc.keep(kernel, (37,), (3072, 1e-6, True))
    assert kept is not None
    return kept


def _tritons_own(launcher: CudaLauncher, kept: lc.KeptLaunch, lead: tuple[Any, ...]) -> tuple[Any, ...]:
    """What Triton's CudaLauncher.__call__ passes to the C launch for KeptLaunch's arguments (hook-free call)."""
    calls: list[tuple[Any, ...]] = []
    saved = launcher.launch
    launcher.launch = lambda *a: calls.append(a)
    try:
        CudaLauncher.__call__(launcher, *kept.grid, STREAM, kept.function, kept.packed_metadata, None, None, None,
                              *lead, *kept.tail)
    finally:
        launcher.launch = saved
    return calls[0]


@pytest.mark.parametrize("pdl", [False, True])
def test_direct_launch_passes_what_cudalauncher_passes(pdl: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[Any, ...]] = []
    launcher = _launcher(calls, launch_pdl=pdl)
    kept = _kept(launcher, monkeypatch)
    direct = ld.direct(kept)
    assert isinstance(direct, ld.DirectLaunch)
    lead = (0x1000, 0x2000, 0x3000)
    direct(*lead)
    assert calls == [_tritons_own(launcher, kept, lead)]
    calls.clear()
    kept(*lead)  # the KeptLaunch it came from, through CudaLauncher.__call__: the same call
    assert calls == [_tritons_own(launcher, kept, lead)]


def test_a_wrong_direct_launch_is_told_apart(monkeypatch: pytest.MonkeyPatch) -> None:
    """The comparison above rejects a direct call that drops the launcher's PDL flag."""
    calls: list[tuple[Any, ...]] = []
    launcher = _launcher(calls, launch_pdl=True)
    kept = _kept(launcher, monkeypatch)
    direct = ld.direct(kept)
    direct.flags = (False, False)  # the mutation: PDL lost
    direct(7, 8)
    assert calls != [_tritons_own(launcher, kept, (7, 8))]


def test_with_a_hook_it_goes_through_tritons_launcher(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[Any, ...]] = []
    launcher = _launcher(calls)
    direct = ld.direct(_kept(launcher, monkeypatch))
    seen: list[Any] = []
    monkeypatch.setattr(knobs.runtime, "launch_enter_hook", lambda meta: seen.append(meta))
    direct(1, 2)
    (args,) = calls
    assert args[10] == ("metadata", direct.grid, STREAM)  # the launch metadata the hook needs
    assert callable(args[11])


@pytest.mark.parametrize("fields", [{"global_scratch_size": 64}, {"profile_scratch_size": 8}])
def test_scratch_using_kernels_stay_on_tritons_launcher(fields: dict[str, int],
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    kept = _kept(_launcher([], **fields), monkeypatch)
    assert ld.direct(kept) is kept


def test_other_launchers_stay_as_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    kept = _kept(lambda *a: None, monkeypatch)  # the offline stand-in's shape: a plain callable
    assert ld.direct(kept) is kept
    assert ld.direct(None) is None


def test_a_candidate_importing_it_hashes_it() -> None:
    from kda_lab.task.schema import HASHED_HELPERS, hashed_helpers

    assert "launch_direct" in HASHED_HELPERS
    got = dict(hashed_helpers([b"from kda_kernels.launch_direct import launch_and_keep_direct"]))
    # its DirectLaunch runs launch_cache's KeptLaunch: both helpers are in the hash
    assert sorted(got) == ["kda_kernels/launch_cache.py", "kda_kernels/launch_direct.py"]
    assert b"class DirectLaunch" in got["kda_kernels/launch_direct.py"]
    assert hashed_helpers([b"import torch"]) == []
