"""kda_kernels.launch_cache, the Triton candidates' shared runtime helpers: where their kernels may run, and the
bounded store of kept launches. (That a kept launch repeats Triton's dispatch exactly is checked per candidate by
``kernels/*/tests/test_kept_launch.py`` with the offline sm_90a stand-in driver.)"""

from __future__ import annotations

import pytest
import torch

from kda_kernels import launch_cache as lc


def test_runs_here_takes_one_device_without_autograd(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    a, b = torch.ones(4), torch.ones(4)
    assert lc.runs_here(a, b)
    assert not lc.runs_here(a, torch.ones(4, device="meta"))  # two devices
    assert not lc.runs_here(torch.ones(4, device="meta"))  # neither CUDA nor the interpreter's CPU
    g = torch.ones(4, requires_grad=True)
    assert not lc.runs_here(a, g)  # autograd would record nothing: SGLang's path
    with torch.no_grad():
        assert lc.runs_here(a, g)
    monkeypatch.delenv("TRITON_INTERPRET")
    assert not lc.runs_here(a, b)  # CPU tensors outside the interpreter


def test_keep_returns_nothing_for_what_is_not_a_compiled_kernel() -> None:
    assert lc.keep(object(), (1,)) is None  # the interpreter's kernel[grid] returns no CompiledKernel


def test_the_launch_cache_is_bounded_and_keeps_no_none() -> None:
    cache = lc.LaunchCache()
    cache.keep("a", None)
    assert cache.get("a") is None and cache.entries == {}
    for i in range(lc.MAX_ENTRIES):
        cache.keep(i, ("launch", i))
    assert len(cache.entries) == lc.MAX_ENTRIES and cache.get(7) == ("launch", 7)
    cache.keep("one more", ("launch", -1))  # a sweep past the bound starts afresh instead of growing
    assert cache.entries == {"one more": ("launch", -1)}
    cache.clear()
    assert cache.get("one more") is None


def test_aligned16() -> None:
    t = torch.empty(64, dtype=torch.float16)
    base = t.data_ptr() & 15 == 0
    assert lc.aligned16(t) == base
    assert not lc.aligned16(t[1:]) or not base


def test_import_kda_kernels_loads_neither_the_helpers_nor_triton() -> None:
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", "import kda_kernels, sys; print('kda_kernels.launch_cache' in "
                          "sys.modules, 'triton' in sys.modules)"], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]


def test_may_repeat_needs_no_autograd_no_tracing_and_aligned_pointers() -> None:
    t = torch.empty(64, dtype=torch.float16)
    if t.data_ptr() & 15:
        pytest.skip("this allocation is not 16-byte aligned: the aligned case cannot be built here")
    assert lc.may_repeat(t, None) and lc.aligned16(t, None)
    assert not lc.may_repeat(t, t[1:])  # a 2-byte offset: the kept binary assumed aligned pointers
    g = torch.empty(64, requires_grad=True)
    if g.data_ptr() & 15 == 0:
        assert not lc.may_repeat(t, g)
        with torch.no_grad():
            assert lc.may_repeat(t, g)
