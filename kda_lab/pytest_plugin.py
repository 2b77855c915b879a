"""The lab's pytest plugin (``pytest_plugins = ["kda_lab.pytest_plugin"]`` in the root conftest.py):
parametrizes every :class:`kda_lab.testing.TaskTests` subclass (a task's ``tests/test_correctness.py``) over
its own task.toml.

- ``row`` of ``test_candidate_and_sglang_in_interpreter``: the rows tagged ``tiny`` (a task without any gets
  no interpreter test); ``dtype``: float32 and float16 (the interpreter mishandles bfloat16);
- ``row`` of ``test_candidate_on_gpu``: every row.
"""

from __future__ import annotations

import os

import pytest

from kda_lab.testing import TaskTests

INTERPRETER_DTYPES = ("float32", "float16")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    cls = metafunc.cls
    if cls is None or not issubclass(cls, TaskTests) or "row" not in metafunc.fixturenames:
        return
    if os.environ.get("TRITON_INTERPRET") == "1":  # CPU hosts (conftest.py): SGLang's wrappers made runnable
        from kda_lab.interpret import install_shims  # there, at collection, as the task stubs always did

        install_shims()
    task = cls.task()
    if metafunc.definition.originalname == "test_candidate_and_sglang_in_interpreter":
        rows = [w.name for w in task.workloads if "tiny" in w.tags]
        metafunc.parametrize("dtype", INTERPRETER_DTYPES)
    else:
        rows = [w.name for w in task.workloads]
    metafunc.parametrize("row", rows)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A task without tiny rows has no interpreter test (rather than one skipped for an empty parameter
    set)."""
    def rowless(item: pytest.Item) -> bool:
        cls, spec = getattr(item, "cls", None), getattr(item, "callspec", None)
        task_test = isinstance(cls, type) and issubclass(cls, TaskTests)
        return (task_test and "row" in getattr(item, "fixturenames", ())
                and not isinstance(getattr(spec, "params", {}).get("row"), str))

    items[:] = [i for i in items if not rowless(i)]
