"""The adversarial candidates (tests/adversarial/candidates/) on the GPU: the real `kda check` rejects every
one that the CPU check rejects, and `kda bench` flags the two the CPU cannot see: the size-dependent
shortcut (its large rows come out faster than a copy of their bytes: sol above SUSPECT_SOL) and the
side-stream one (the timed region never waits for its work: CUDA-graph capture refuses it, or its time is a
fraction of the copy's).

Run on an H200 (marker gpu): python3 -m pytest -m gpu tests/adversarial/test_adversarial_gpu.py -q
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from kda_lab.task import load_task
from tests.adversarial.test_adversarial import REJECTED_ON_CPU, candidate
from tests.test_interpret_candidate import FSS, task_copy

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(
        not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0),
        reason="needs an H200 (compute capability 9.0): the task is an h200 task",
    ),
]

SMALL, LARGE = "test_tail_bc_modulation", "qwen_muladd_L4096"
# The task's fuse_scale_shift_kernel rows are bf16 (x): a bf16 output or fp16 arithmetic is wrong only on fp32
# inputs, so these two run the same rows in fp32 (the interpreter checks fp32 on CPU).
NEEDS_FP32 = ("wrong_dtype", "low_precision")


def gpu_check(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[list[str], str]:
    from kda_lab.measure.run import run_check

    task_copy(tmp_path / "lab", FSS, candidate(name), monkeypatch)
    lines: list[str] = []
    report = run_check(load_task(FSS), rows=[SMALL, LARGE], seeds=2, seed=11, record=False, show=lines.append)
    return sorted({r.row for r in report.failed("candidate")}), "\n".join(lines)


def gpu_bench(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[list[dict], str]:
    from kda_lab.measure.run import run_bench

    task_copy(tmp_path / "lab", FSS, candidate(name), monkeypatch)
    lines: list[str] = []
    rows = run_bench(
        load_task(FSS),
        rows=[LARGE],
        trials=5,
        seed=3,
        compile_peer=False,
        public_peers=False,
        record=False,
        show=lines.append,
    )
    return rows, "\n".join(lines)


def gpu_check_fp32(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[list[str], str]:
    """The check's own code (check_row vs SGLang's kernel and the oracle) on the rows in fp32, on the GPU."""
    from kda_lab.families import contract
    from kda_lab.measure.correctness import check_row
    from kda_lab.measure.run import candidate_identity, resolve_baseline

    task_copy(tmp_path / "lab", FSS, candidate(name), monkeypatch)
    task = load_task(FSS)
    cand = candidate_identity(task, register=False)
    failed, lines = [], []
    for w in (w for w in task.workloads if w.name in (SMALL, LARGE)):
        impls = {"baseline": resolve_baseline(task.functions[w.fn]), "candidate": cand.exports[w.fn]}
        for r in check_row(
            task,
            w.with_dtype("float32"),
            contract(task.family, w.fn),
            impls,
            seed=5,
            device="cuda",
            installed=cand.exports,
        ):
            lines.append(r.describe())
            if r.impl == "candidate" and not r.ok:
                failed.append(w.name)
    return failed, "\n".join(lines)


@pytest.mark.parametrize("name", sorted(REJECTED_ON_CPU))
def test_rejected_by_the_gpu_check(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    failed, out = (gpu_check_fp32 if name in NEEDS_FP32 else gpu_check)(name, tmp_path, monkeypatch)
    assert failed, out
    assert any(reason in out for reason in REJECTED_ON_CPU[name]), out


def test_size_shortcut_fails_the_check_on_large_rows_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    failed, out = gpu_check("size_shortcut", tmp_path, monkeypatch)
    assert failed == [LARGE], out


def test_size_shortcut_is_flagged_by_bench(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from kda_lab.measure.run import LARGE_ROW_BYTES, SUSPECT_SOL

    rows, out = gpu_bench("size_shortcut", tmp_path, monkeypatch)
    (row,) = rows
    assert row["bytes"] >= LARGE_ROW_BYTES and row["sol"] > SUSPECT_SOL, out
    assert "!" in out.splitlines()[2], out  # the table marks the row as suspect


def test_side_stream_is_refused_or_flagged_by_bench(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from kda_lab.measure.run import SUSPECT_SOL

    try:
        rows, out = gpu_bench("side_stream", tmp_path, monkeypatch)
    except RuntimeError as e:  # capture of un-joined side-stream work: the bench refuses to time it
        assert "captur" in str(e).lower() or "stream" in str(e).lower(), e
        return
    (row,) = rows
    assert row["sol"] > SUSPECT_SOL, out
