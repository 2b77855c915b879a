"""kda_lab/interpret/rescan.py: Triton's interpreter with its scan of triton.language cached gives the same
results, wraps the same builtins and restores them, and no longer rescans inside a launch."""

from __future__ import annotations

import inspect
import os

import pytest
import torch

pytestmark = pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1",
                                reason="the interpreter runs on a CPU host (conftest.py)")


def packages():
    return [tl, tl.core, tl.tensor, tl.math, tl.core.tensor_descriptor_base]


import triton  # noqa: E402  (after conftest.py chose the interpreter)
import triton.language as tl  # noqa: E402


@triton.jit
def scaled(v, s):
    return tl.where(v > 0, v * s, tl.exp(v) - 1.0)


@triton.jit
def kernel(x_ptr, y_ptr, n, s, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    v = tl.load(x_ptr + offs, mask=m, other=0.0)
    tl.store(y_ptr + offs, scaled(scaled(v, s), s) + tl.sum(v, axis=0), mask=m)


def run(x: torch.Tensor) -> torch.Tensor:
    y = torch.empty_like(x)
    kernel[(triton_cdiv(x.numel(), 16),)](x, y, x.numel(), 0.5, BLOCK=16)
    return y


def triton_cdiv(a: int, b: int) -> int:
    return -(-a // b)


def builtin_state() -> dict[tuple[int, str], object]:
    """Every Triton builtin of the wrapped packages (found outside a launch), as it is now."""
    from triton.language import core

    if not BUILTINS:
        BUILTINS.extend((p, n) for p in packages() for n, v in inspect.getmembers(p) if core.is_builtin(v))
    return {(id(p), n): getattr(p, n) for p, n in BUILTINS}


BUILTINS: list[tuple[object, str]] = []


def put_back(before: dict[tuple[int, str], object]) -> None:
    by_id = {id(p): p for p in packages()}
    for (pid, name), value in builtin_state().items():
        if before.get((pid, name), value) is not value:
            setattr(by_id[pid], name, before[(pid, name)])


def test_same_output_same_state_and_no_scan_inside_a_launch(monkeypatch: pytest.MonkeyPatch) -> None:
    """Upstream leaves tl.core's builtins wrapped after a launch whose device functions name tl.core (their
    own _patch_lang is never restored): the scoped version must leave exactly that state, not a tidier one."""
    from triton.runtime import interpreter

    from kda_lab.interpret import rescan

    assert rescan.install() and getattr(interpreter._patch_lang, "upstream", None) is not None
    x = torch.randn(77)  # 5 programs of 16, each calling a device function twice
    before = builtin_state()
    scans: list[object] = []
    real = inspect.getmembers
    monkeypatch.setattr(inspect, "getmembers", lambda obj, *a: scans.append(obj) or real(obj, *a))
    scoped = run(x)
    scoped_scans, scans[:] = len(scans), []
    assert rescan._OPEN == [], "the launch's scope stayed open"
    monkeypatch.setattr(inspect, "getmembers", real)
    after_scoped = builtin_state()
    put_back(before)
    monkeypatch.setattr(interpreter, "_patch_lang", interpreter._patch_lang.upstream)
    monkeypatch.setattr(inspect, "getmembers", lambda obj, *a: scans.append(obj) or real(obj, *a))
    upstream = run(x)
    upstream_scans = len(scans)
    monkeypatch.setattr(inspect, "getmembers", real)
    after_upstream = builtin_state()
    put_back(before)
    assert torch.equal(scoped, upstream)
    assert {k: type(v) for k, v in after_scoped.items()} == {k: type(v) for k, v in after_upstream.items()}
    left = [k for k, v in after_scoped.items() if v is not before[k]]
    assert left == [k for k, v in after_upstream.items() if v is not before[k]], "other members left wrapped"
    # the launch's own scans, and tl.core's at tl.sum's first call (upstream never restores it)
    assert 0 < scoped_scans <= 2 * len(packages()), scoped_scans
    assert upstream_scans >= scoped_scans + 5 * 2, upstream_scans  # and one set per device call per program


def test_a_device_function_naming_a_module_the_launch_did_not_wrap_is_upstreams_call() -> None:
    """The wrapper skips only what the open launch wrapped: a device function whose globals name tl.core,
    called from a kernel that names only tl, goes to upstream's _patch_lang."""
    from triton.runtime import interpreter

    from kda_lab.interpret import rescan

    rescan.install()
    calls: list[object] = []
    upstream = interpreter._patch_lang.upstream
    try:
        rescan._OPEN.append(frozenset({id(tl)}))
        wrapper = rescan._scoped(lambda fn: calls.append(fn) or interpreter._LangPatchScope())
        wrapper(type("F", (), {"__globals__": {"tl": tl}})())
        assert calls == [], "a function naming only tl was rescanned inside a launch that wrapped tl"
        wrapper(type("F", (), {"__globals__": {"core": tl.core}})())
        assert len(calls) == 1, "a function naming tl.core was skipped although the launch did not wrap it"
    finally:
        rescan._OPEN.clear()
    assert upstream is interpreter._patch_lang.upstream
