"""Ledger schemas and append-only history: validators accept real ledgers and reject broken ones."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from kda_lab import ledger
from tests.conftest import FSS, REPO


def _row(**kw):
    base = {"run_id": "r1", "task": FSS, "arch": "h200", "mode": "bench", "candidate_id": "c001", "source_hash": "abc",
            "function": "f", "row": "row1", "row_kind": "production", "speedup": 1.5, "gpu_name": "NVIDIA H200",
            "gpu_cc": "9.0", "driver": "580", "torch": "2.11", "triton": "3.6.0", "cuda": "13.0", "sglang": "0.5.23",
            "overlay": "off", "git_commit": "deadbeef", "command": "kda bench x"}
    base.update(kw)
    return base


def test_real_ledgers_validate():
    d = REPO / "kernels" / FSS
    assert ledger.validate_benchmark_csv(d / "benchmark.csv") == []
    assert ledger.validate_solutions(d / "solutions.jsonl") == []


def test_append_and_validate(tmp_path: Path):
    ledger.append_benchmark_rows(tmp_path, [_row(), _row(row="row2", speedup=0.9)])
    ledger.append_benchmark_rows(tmp_path, [_row(run_id="r2")])
    assert ledger.validate_benchmark_csv(tmp_path / "benchmark.csv") == []
    rows = ledger.read_benchmark_rows(tmp_path)
    assert [r["run_id"] for r in rows] == ["r1", "r1", "r2"]
    s = ledger.summarize_run(rows[:2])
    assert s["worst"] == pytest.approx(0.9) and s["geomean"] == pytest.approx((1.5 * 0.9) ** 0.5)


def test_edited_history_is_rejected(tmp_path: Path):
    ledger.append_benchmark_rows(tmp_path, [_row(), _row(row="row2"), _row(row="row3")])
    p = tmp_path / "benchmark.csv"
    lines = p.read_text().splitlines()
    lines[2] = lines[2].replace(",1.5,", ",1.7,")  # a "better" speedup written over history
    p.write_text("\n".join(lines) + "\n")
    problems = ledger.validate_benchmark_csv(p)
    assert any("hash chain broken" in x for x in problems)


def test_removed_row_is_rejected(tmp_path: Path):
    ledger.append_benchmark_rows(tmp_path, [_row(), _row(row="row2"), _row(row="row3")])
    p = tmp_path / "benchmark.csv"
    lines = p.read_text().splitlines()
    del lines[2]
    p.write_text("\n".join(lines) + "\n")
    assert any("hash chain broken" in x for x in ledger.validate_benchmark_csv(p))


def test_header_and_vocabulary_and_env_are_enforced(tmp_path: Path):
    ledger.append_benchmark_rows(tmp_path, [_row()])
    p = tmp_path / "benchmark.csv"
    text = p.read_text()
    p.write_text(text.replace("speedup,", "speedup_x,", 1))
    assert any("header" in x for x in ledger.validate_benchmark_csv(p))
    q = tmp_path / "q"
    q.mkdir()
    ledger.append_benchmark_rows(q, [_row(mode="fast"), _row(gpu_name="")])
    problems = ledger.validate_benchmark_csv(q / "benchmark.csv")
    assert any("mode 'fast'" in x for x in problems)
    assert any("environment columns empty" in x for x in problems)
    with pytest.raises(ledger.LedgerError):
        ledger.append_benchmark_rows(q, [_row(speedup_vs_eager=2.0)])


def test_unknown_status_is_rejected(tmp_path: Path):
    with pytest.raises(ledger.LedgerError):
        ledger.append_solution(tmp_path, id="c001", status="awesome", event="bench", source_hash="h")
    ledger.append_solution(tmp_path, id="c001", parent=None, status="proposed", event="register", source_hash="h",
                           arch="h200", gpu="cpu", evidence={})
    p = tmp_path / "solutions.jsonl"
    row = json.loads(p.read_text())
    row["status"] = "awesome"
    p.write_text(json.dumps(row) + "\n")
    problems = ledger.validate_solutions(p)
    assert any("unknown status 'awesome'" in x for x in problems)


def test_solutions_chain_detects_edits(tmp_path: Path):
    for status in ("proposed", "correct", "benchmarked"):
        ledger.append_solution(tmp_path, id="c001", parent=None, status=status, event="note", source_hash="h",
                               arch="h200", gpu="NVIDIA H200", evidence={"run_id": "r"})
    p = tmp_path / "solutions.jsonl"
    assert ledger.validate_solutions(p) == []
    lines = p.read_text().splitlines()
    lines[1] = lines[1].replace('"correct"', '"promoted"')
    p.write_text("\n".join(lines) + "\n")
    assert any("hash chain broken" in x for x in ledger.validate_solutions(p))


def test_git_prefix_check(tmp_path: Path):
    def git(*a):
        subprocess.run(["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@t", *a],
                       check=True, capture_output=True)

    git("init", "-q")
    ledger.append_benchmark_rows(tmp_path, [_row(), _row(row="row2")])
    git("add", "benchmark.csv")
    git("commit", "-qm", "ledger")
    p = tmp_path / "benchmark.csv"
    ledger.append_benchmark_rows(tmp_path, [_row(run_id="r2")])
    assert ledger.validate_against_git(p) == []  # appending is fine
    # Rewrite history consistently (chain recomputed from scratch): only git can tell.
    p.unlink()
    ledger.append_benchmark_rows(tmp_path, [_row(speedup=3.0), _row(row="row2")])
    assert ledger.validate_benchmark_csv(p) == []
    assert any("append-only" in x for x in ledger.validate_against_git(p))


def test_superseded_runs_are_dropped():
    rows = [{"run_id": "a", "supersedes": ""}, {"run_id": "b", "supersedes": "a"}]
    assert list(ledger.runs(rows)) == ["b"]
