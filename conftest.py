"""Repository-wide pytest setup.

On a host without a CUDA GPU, SGLang's Triton kernels run in Triton's CPU interpreter: the variable must be
set before triton is first imported, so it is set here, before any test module is collected.

Parallel runs (pytest-xdist, ``scripts/test.sh``: ``-n auto --dist loadgroup``): every test module that has
a module- or class-scoped fixture (a fresh clone, a built lab, a launched worktree) is one ``xdist_group``, so
the fixture is built once, on one worker (``GroupSuffix`` below keeps that true under pytest 9.2); the other
modules' tests are spread one by one. Tests marked ``slow`` are collected first, so the long ones start at
once and the short ones fill in around them.
"""

from __future__ import annotations

import os

import pytest

try:
    import torch

    _has_cuda = torch.cuda.is_available()
except ImportError:
    _has_cuda = False

if not _has_cuda:
    os.environ.setdefault("TRITON_INTERPRET", "1")
    from kda_lab.interpret import rescan

    rescan.install()  # the interpreter without its per-call rescan of triton.language (its docstring)

pytest_plugins = ["kda_lab.pytest_plugin"]  # a task's tests/test_correctness.py: TaskTests over its task.toml

SHARED_SCOPES = ("module", "class", "package")
# A task folder's test module that builds C++/CUDA (nvcc, g++ through kda_lab.testing's helpers, torch's
# cpp_extension) is slow: marked so here, for every task to come, rather than in each agent-written file.
COMPILES = ("nvcc", "compile_host_cpp", "assert_binding_compiles", "cpp_extension")
_compiling: dict[str, bool] = {}


def compiles(item: pytest.Item) -> bool:
    path = str(item.path)
    if "/kernels/" not in path or "/tests/" not in path:
        return False
    if path not in _compiling:
        text = item.path.read_text(errors="replace")
        _compiling[path] = any(word in text for word in COMPILES)
    return _compiling[path]


def shares_module_state(item: pytest.Item) -> bool:
    """Whether the test uses a fixture that lives longer than the test but not longer than its module."""
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return False
    return any(d.scope in SHARED_SCOPES for defs in info.name2fixturedefs.values() for d in defs)


@pytest.hookimpl(tryfirst=True)  # before xdist's worker hook reads the xdist_group marks
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    shared = {item.nodeid.split("::", 1)[0] for item in items if shares_module_state(item)}
    for item in items:
        module = item.nodeid.split("::", 1)[0]
        if module in shared and not item.get_closest_marker("xdist_group"):
            item.add_marker(pytest.mark.xdist_group(module))
        if compiles(item) and not item.get_closest_marker("slow"):
            item.add_marker(pytest.mark.slow)
    # stable: slow first, the rest as collected
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


class GroupSuffix:
    """pytest-xdist 3.8 routes a test to its group's worker by a suffix on the test's id, ``<id>@<group>``,
    which its worker hook writes into ``Item._nodeid``; pytest 9.2 keeps the id in ``Item._id`` (a structured
    NodeId) and ignores that field, so ``--dist loadgroup`` silently spreads a group's tests over every worker
    (each one then builds the module's fixture again: pytest-xdist issue 1386). After xdist's hook, this
    writes the same suffix where this pytest reads it; where xdist's suffix took (an older pytest, a fixed
    xdist) it does nothing."""

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, config: pytest.Config, items: list[pytest.Item]) -> None:
        if not getattr(config.option, "loadgroup", False):  # set on xdist's workers under --dist loadgroup
            return
        for item in items:
            names = {str(m.args[0] if m.args else m.kwargs.get("name", "default"))
                     for m in item.iter_markers("xdist_group")}
            suffix = "@" + "_".join(sorted(names))
            if not names or item.nodeid.endswith(suffix):
                continue
            if hasattr(item, "_id"):
                item._id = type(item._id).parse(item.nodeid + suffix)
            else:
                item._nodeid = item.nodeid + suffix


def pytest_configure(config: pytest.Config) -> None:
    config.pluginmanager.register(GroupSuffix(), "kda-xdist-group-suffix")
