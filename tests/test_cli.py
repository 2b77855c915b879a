"""The documented `kda` commands, run as a user would (subprocess, CPU host)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import FSS, REPO


def kda(*args: str, root: Path | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    if root is not None:
        env["KDA_ROOT"] = str(root)
    return subprocess.run([sys.executable, "-m", "kda_lab", *args], capture_output=True, text=True, cwd=REPO, env=env,
                          timeout=600)


def test_tasks_lists_the_task_with_status():
    r = kda("tasks", "--rows")
    assert r.returncode == 0, r.stderr
    assert FSS in r.stdout and "fuse_scale_shift" in r.stdout and "qwen_edit_ln_select01_L8424" in r.stdout


def test_validate_passes_on_the_repo_and_fails_on_a_broken_copy(lab_copy: Path):
    assert kda("validate").returncode == 0
    (lab_copy / "solutions.jsonl").write_text('{"id": "c9", "status": "awesome"}\n')
    r = kda("validate", root=lab_copy.parents[1])
    assert r.returncode == 1 and "INVALID" in r.stdout


def test_check_without_gpu_says_how_to_proceed():
    r = kda("check", FSS)
    assert r.returncode == 2 and "needs a CUDA GPU" in r.stderr and "--interpret" in r.stderr


def test_check_interpret_runs_sglang_triton_on_cpu():
    env_note = "TRITON_INTERPRET=1 is set by the CLI itself when triton is not yet imported"
    r = kda("check", FSS, "--interpret", "--dtypes", "float32", "--no-record")
    assert r.returncode == 0, (env_note, r.stdout[-2000:], r.stderr[-2000:])
    assert "CPU interpreter verdict PASSED" in r.stdout


def test_unknown_task_is_a_clear_error():
    r = kda("bench", "h200_no_such_task")
    assert r.returncode == 2 and "known tasks" in r.stderr


def test_doctor_reports_missing_pieces_with_fixes():
    r = kda("doctor")
    assert r.returncode == 0 and "sglang" in r.stdout and "nvcc" in r.stdout
    assert "fix:" in r.stdout  # this CPU host has no GPU: the doctor says how to get one


def test_benchmark_py_is_a_thin_forwarder():
    r = subprocess.run([sys.executable, str(REPO / "kernels" / FSS / "benchmark.py"), "--aa"], capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 2 and "needs a CUDA GPU" in r.stderr


def test_bench_supersedes_only_a_like_run_and_says_so_before_measuring(lab_copy: Path):
    """`kda bench --supersedes` accepted any earlier run id: a one-row run could void a full one (#10 item 3).
    It now refuses, before needing a GPU, a run of another mode or over other rows."""
    root = lab_copy.parents[1]
    aa_run, one_row = "20261121-222646-c45b0a", "firered_edit_1_0_muladd_L8424"
    r = kda("bench", FSS, "--supersedes", aa_run, root=root)
    assert r.returncode == 2 and "only a run of the same mode" in r.stderr, r.stderr
    r = kda("bench", FSS, "--aa", "--rows", one_row, "--supersedes", aa_run, root=root)
    assert r.returncode == 2 and "only a run over the same rows" in r.stderr, r.stderr
    r = kda("bench", FSS, "--aa", "--supersedes", aa_run, root=root)  # a like run: on to the GPU requirement
    assert r.returncode == 2 and "needs a CUDA GPU" in r.stderr, r.stderr


def test_tasks_and_validate_report_an_unparsable_ledger_without_a_traceback(lab_copy: Path):
    p = lab_copy / "benchmark.csv"
    p.write_text(p.read_text() + "2026-11-22T00:00:00Z,cut-here\n")
    r = kda("validate", FSS, root=lab_copy.parents[1])
    assert r.returncode == 1 and "wrong number of fields" in r.stdout and "Traceback" not in r.stderr
    r = kda("tasks", root=lab_copy.parents[1])
    assert r.returncode == 1 and f"{FSS}" in r.stdout and "INVALID" in r.stdout and "run `kda validate`" in r.stdout
    assert "Traceback" not in r.stderr
