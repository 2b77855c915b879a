"""Every task's candidate takes its fallback from SGLang's defining module, never from the facade: with the
overlay installed (kda_kernels.install(force=True)) and the facade holding the candidate's EXPORTS, as once it
is promoted, every exported function is driven through its fallback path and reaches SGLang's function.

SGLang's functions in their defining modules are replaced by recorders (same signature) before anything
resolves them, so the fallback path is proven without running a kernel on CPU. The recursing fallback of the
old template is the deliberately wrong input: it never reaches SGLang.
"""

from __future__ import annotations

import functools
import importlib
from pathlib import Path
from typing import Any

import pytest
import torch

import kda_kernels
from kda_kernels.registry import TARGETS
from kda_lab.families import contract
from kda_lab.measure.correctness import as_installed
from kda_lab.measure.inputs import make_inputs
from kda_lab.task import load_candidate, load_task

REPO = Path(__file__).resolve().parents[1]
OVERLAY_FUNCTIONS = {t.function for t in TARGETS}
TASKS = sorted(p.parent.name for p in (REPO / "kernels").glob("*/task.toml")
               if set(load_task(p.parent).functions) <= OVERLAY_FUNCTIONS)


class ReachedSGLang(Exception):
    """Raised by a recorder: the call arrived at SGLang's function in its defining module."""


def recorder(name: str, original: Any) -> Any:
    @functools.wraps(original)
    def reached(*args: Any, **kwargs: Any) -> Any:
        raise ReachedSGLang(name)

    return reached


def smallest_row(task: Any, fn: str) -> Any:
    rows = [w for w in task.workloads if w.fn == fn]
    return min(rows, key=lambda w: task.functions[fn].byte_model.bytes(w))


@pytest.mark.parametrize("slug", TASKS)
def test_every_export_falls_back_to_sglangs_defining_module(slug: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from kda_lab.interpret import force_cuda_platform

    force_cuda_platform()  # SGLang's norm modules read device properties at import; a CPU torch lacks them
    task = load_task(slug)
    for name, spec in task.functions.items():
        module_name, _, attr = spec.sglang.partition(":")
        try:
            module = importlib.import_module(module_name)
        except ImportError as e:  # the CuTe DSL family: SGLang's module needs the CuTe DSL (GPU machines)
            pytest.skip(f"{module_name} does not import here ({e}); the GPU tests cover this task")
        monkeypatch.setattr(module, attr, recorder(name, getattr(module, attr)))
    kda_kernels.install(force=True)
    try:
        module = load_candidate(task)
        exports, passthrough = module.EXPORTS, bool(getattr(module, "BASELINE", False))
        with as_installed(task, exports):
            for name in task.functions:
                # fp32: a promoted candidate may run CPU tensors in Triton's interpreter, which cannot do bf16
                # arithmetic (no get_bf16 constants); the fallback paths do not depend on the dtype
                w = smallest_row(task, name).with_dtype("float32")
                args = contract(task.family, name).prepared(make_inputs(w, torch.device("cpu"), 0))
                try:
                    exports[name](**args)
                except ReachedSGLang as reached:
                    assert str(reached) == name
                except RecursionError:
                    pytest.fail(f"{slug}: {name}'s fallback calls itself once installed")
                else:  # a promoted candidate may answer CPU tensors itself; a passthrough must reach SGLang
                    if passthrough:
                        pytest.fail(f"{slug}: {name} on CPU did not reach SGLang's {task.functions[name].sglang}")
    finally:
        kda_kernels.uninstall()


def test_a_fallback_through_the_facade_recurses(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.test_interpret_candidate import FSS, RECURSING_FALLBACK, task_copy

    task_copy(tmp_path / "lab", FSS, RECURSING_FALLBACK, monkeypatch)
    task = load_task(FSS)
    exports = load_candidate(task).EXPORTS
    w = smallest_row(task, "fuse_scale_shift_kernel")
    args = contract(task.family, "fuse_scale_shift_kernel").prepared(make_inputs(w, torch.device("cpu"), 0))
    with as_installed(task, exports), pytest.raises(RecursionError):
        exports["fuse_scale_shift_kernel"](**args)
