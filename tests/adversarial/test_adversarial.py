"""Known-bad candidates, kept as files (tests/adversarial/candidates/), run through the real `kda check
--interpret`.

Each is a src/register.py an agent could write for the fuse_scale_shift task to pass the check without
doing the work right (the reward hacks KernelBench's unit tests, Wafer's and Makora's lists catalogue).
Each must be rejected on CPU with the reason named. Two need the GPU: the size-dependent shortcut skips
work only on rows too large for the interpreter (rejected here by the same check code on a production row
in plain torch, and by the GPU check and bench in test_adversarial_gpu.py) and the side-stream one is right
on CPU by construction.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kda_lab import cli
from tests.test_interpret_candidate import FSS, task_copy

CANDIDATES = Path(__file__).with_name("candidates")

# candidate -> a reason the check must print (any one of them)
REJECTED_ON_CPU = {
    "wrong_dtype": ("dtype bfloat16 != SGLang's float32",),
    "mutates_input": ("wrote its read-only input(s) ['scale']",),
    "returns_input": ("wrote its read-only input(s) ['x']", "returned its input(s) ['x']"),
    "cached_result": ("reused output buffer",),
    "stale_buffer": ("reused output buffer", "changed after the call returned"),
    "low_precision": ("beyond tolerance",),
    "reads_oracle": ("not fully written",),
    "deferred": ("not fully written", "changed after the call returned"),
}


def candidate(name: str) -> str:
    return (CANDIDATES / f"{name}.py").read_text()


def test_every_candidate_file_has_a_verdict() -> None:
    names = {p.stem for p in CANDIDATES.glob("*.py")}
    assert names == set(REJECTED_ON_CPU) | {"size_shortcut", "side_stream"}


@pytest.mark.parametrize("name", sorted(REJECTED_ON_CPU))
def test_rejected_by_kda_check_interpret(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    task_copy(tmp_path / "lab", FSS, candidate(name), monkeypatch)
    rc = cli.main(["check", FSS, "--interpret", "--no-record", "--dtypes", "float32", "--seeds", "2"])
    out = capsys.readouterr().out
    assert rc == 1, out
    assert "verdict FAILED" in out
    assert any(reason in out for reason in REJECTED_ON_CPU[name]), out


def test_size_shortcut_is_rejected_on_a_production_row(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The interpreter's tiny rows never reach the shortcut; the check's own code on a production row does
    (the same check_row the GPU check runs, here with the candidate's plain-torch path on CPU)."""
    from kda_lab.families import contract
    from kda_lab.families.fuse_scale_shift import fuse_scale_shift_reference
    from kda_lab.measure.correctness import check_row
    from kda_lab.measure.run import candidate_identity
    from kda_lab.task import load_task

    task_copy(tmp_path / "lab", FSS, candidate("size_shortcut"), monkeypatch)
    task = load_task(FSS)
    cand = candidate_identity(task, register=False)
    prod = min(
        (
            w
            for w in task.workloads
            if w.kind == "production" and w.fn == "fuse_scale_shift_kernel" and w.primary().numel >= 1 << 20
        ),
        key=lambda w: w.primary().numel,
    )
    results = check_row(
        task,
        prod.with_dtype("float32"),
        contract(task.family, prod.fn),
        {"baseline": fuse_scale_shift_reference, "candidate": cand.exports[prod.fn]},
        seed=1,
        device="cpu",
    )
    res = next(r for r in results if r.impl == "candidate")
    assert not res.ok and "not fully written" in res.describe()
