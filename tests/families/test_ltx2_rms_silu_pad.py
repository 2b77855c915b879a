"""The ltx2_rms_silu_pad family: SGLang against the fp64 oracle on the tiny rows of the family's
tasks, and a wrong implementation the checker must reject (TODO(stamp): add hand-computed oracle cases and
the family's known wrong implementations)."""

from __future__ import annotations

import pytest

from kda_lab.families import contract
from kda_lab.measure.correctness import check_row
from kda_lab.task import all_task_dirs, load_task

FAMILY = "ltx2_rms_silu_pad"
TASKS = [t for t in map(load_task, all_task_dirs()) if t.family == FAMILY]
ROWS = [(t, w) for t in TASKS for w in t.workloads if "tiny" in w.tags]


def _sglang(task, fn: str):
    from kda_lab.interpret import install_shims, interpretable

    install_shims()
    module, _, name = task.functions[fn].sglang.partition(":")
    return interpretable(module, name)


def test_the_family_has_a_task_with_tiny_rows() -> None:
    assert ROWS, f"no task of {FAMILY} has rows tagged tiny (kda new-task <arch>_... --family {FAMILY})"


@pytest.mark.parametrize(("task", "row"), ROWS, ids=[f"{t.slug}-{w.name}" for t, w in ROWS])
def test_sglang_agrees_with_the_oracle(task, row) -> None:
    results = check_row(task, row.with_dtype("float32"), contract(FAMILY, row.fn),
                        {"baseline": _sglang(task, row.fn)}, seed=1, device="cpu")
    assert all(r.ok for r in results), "\n".join(r.describe() for r in results)


@pytest.mark.parametrize(("task", "row"), ROWS, ids=[f"{t.slug}-{w.name}" for t, w in ROWS])
def test_the_checker_rejects_a_wrong_implementation(task, row) -> None:
    sglang, fc = _sglang(task, row.fn), contract(FAMILY, row.fn)

    def one_element_off(**kwargs):  # SGLang's answer with its first output element moved by 1.0
        result = sglang(**kwargs)
        first = fc.outputs(result, kwargs)[0]
        first[(0,) * first.dim()] += 1.0
        return result

    results = check_row(task, row.with_dtype("float32"), fc, {"wrong": one_element_off}, seed=1,
                        device="cpu")
    assert not all(r.ok for r in results), "an output one element off passed the checker"
