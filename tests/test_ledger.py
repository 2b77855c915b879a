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


# ------------------------------------------------------------------- git history, schema, supersedes (#10)

def _git(root: Path, *a: str) -> str:
    return subprocess.run(["git", "-C", str(root), "-c", "user.name=t", "-c", "user.email=t@t", *a],
                          check=True, capture_output=True, text=True).stdout


def _drop_last_line(p: Path) -> None:
    p.write_text("".join(p.read_text().splitlines(keepends=True)[:-1]))


def test_committed_truncation_is_caught_in_the_git_history(tmp_path: Path):
    """Dropping the last rows and committing passed: the chain has no fixed end and only HEAD was compared."""
    _git(tmp_path, "init", "-q")
    ledger.append_benchmark_rows(tmp_path, [_row(), _row(row="row2"), _row(row="row3", speedup=0.5)])
    ledger.append_solution(tmp_path, id="c001", parent=None, status="incorrect", event="check", source_hash="h",
                           arch="h200", gpu="NVIDIA H200", evidence={"run_id": "x", "failed": 3})
    _git(tmp_path, "add", "-A")
    _git(tmp_path, "commit", "-qm", "ledgers")
    ledger.append_benchmark_rows(tmp_path, [_row(run_id="r2")])
    _git(tmp_path, "commit", "-qam", "append")  # appending commits are fine
    assert ledger.validate_ledgers(tmp_path) == []
    for name in ("benchmark.csv", "solutions.jsonl"):
        _drop_last_line(tmp_path / name)
    assert ledger.validate_benchmark_csv(tmp_path / "benchmark.csv") == []  # the chain alone cannot tell
    assert any("append-only" in p for p in ledger.validate_ledgers(tmp_path))  # the working copy vs HEAD
    _git(tmp_path, "commit", "-qam", "drop the bad rows")
    assert ledger.validate_against_git(tmp_path / "benchmark.csv") == []  # HEAD now agrees: the old check passes
    problems = ledger.validate_ledgers(tmp_path)
    assert sum("dropped committed rows" in p for p in problems) == 2, problems
    ledger.append_benchmark_rows(tmp_path, [_row(run_id="r3")])  # appending afterwards does not launder it
    _git(tmp_path, "commit", "-qam", "more")
    assert any("benchmark.csv: commit" in p for p in ledger.validate_ledgers(tmp_path))


def test_history_across_a_merge_and_a_deletion(tmp_path: Path):
    _git(tmp_path, "init", "-q", "-b", "main")
    ledger.append_benchmark_rows(tmp_path, [_row()])
    _git(tmp_path, "add", "-A")
    _git(tmp_path, "commit", "-qm", "base")
    _git(tmp_path, "checkout", "-qb", "side")
    ledger.append_benchmark_rows(tmp_path, [_row(run_id="side")])
    _git(tmp_path, "commit", "-qam", "side appends")
    _git(tmp_path, "checkout", "-q", "main")
    (tmp_path / "other.txt").write_text("x\n")
    _git(tmp_path, "add", "-A")
    _git(tmp_path, "commit", "-qm", "unrelated")
    _git(tmp_path, "merge", "-q", "--no-edit", "side")
    assert ledger.validate_ledgers(tmp_path) == []  # a merge that keeps the appended rows is fine
    _git(tmp_path, "checkout", "-qb", "lossy", "HEAD~1")  # main before the merge ...
    _git(tmp_path, "merge", "-q", "--no-edit", "-s", "ours", "side")  # ... merging side but dropping its rows
    assert any("dropped committed rows" in p for p in ledger.validate_ledgers(tmp_path))
    _git(tmp_path, "checkout", "-q", "main")
    _git(tmp_path, "rm", "-q", "benchmark.csv")
    _git(tmp_path, "commit", "-qm", "delete")
    assert any("deleted in commit" in p for p in ledger.validate_git_history(tmp_path / "benchmark.csv"))


def test_cut_last_lines_are_rejected(tmp_path: Path):
    ledger.append_benchmark_rows(tmp_path, [_row(), _row(row="row2")])
    ledger.append_solution(tmp_path, id="c001", parent=None, status="proposed", event="register", source_hash="h",
                           arch="h200", gpu="cpu", evidence={})
    for name, cut in (("benchmark.csv", 1), ("solutions.jsonl", 1), ("solutions.jsonl", 40)):
        p = tmp_path / name
        whole = p.read_text()
        p.write_text(whole[:-cut])
        problems = ledger.validate_ledgers(tmp_path)
        assert any("cut" in x or "not JSON" in x for x in problems), (name, cut, problems)
        with pytest.raises(ledger.LedgerError):  # and nothing appends onto a cut line
            if name == "benchmark.csv":
                ledger.append_benchmark_rows(tmp_path, [_row(run_id="r9")])
            else:
                ledger.append_solution(tmp_path, id="c001", parent=None, status="proposed", event="note",
                                       source_hash="h", arch="h200", gpu="cpu", evidence={})
        p.write_text(whole)
    assert ledger.validate_ledgers(tmp_path) == []


def test_an_old_schema_ledger_migrates_by_appending_a_header(tmp_path: Path):
    """The committed ledgers predate the overlay column: they still validate, and the first append writes the
    new header line after their rows, leaving every old byte (and chain value) as it was."""
    real = REPO / "kernels" / "h200_diffusion_group_norm_silu__multi_shape" / "benchmark.csv"
    committed = real.read_text()
    cuts = [committed.find("\n" + ",".join(s) + "\n") for s in ledger.BENCHMARK_SCHEMAS[1:]]
    cut = min((c for c in cuts if c >= 0), default=-1)  # GroupNorm's ledger migrated (v2) at its c004 run
    old = committed if cut < 0 else committed[:cut + 1]  # its v1 history, as every ledger was before the column
    assert old.splitlines()[0] == ",".join(ledger.BENCHMARK_SCHEMAS[0]) and ledger.header_line() not in old
    (tmp_path / "benchmark.csv").write_text(old)
    assert ledger.validate_benchmark_csv(tmp_path / "benchmark.csv") == []
    n_old = len(ledger.read_benchmark_rows(tmp_path))
    ledger.append_benchmark_rows(tmp_path, [_row(run_id="new-1")])
    ledger.append_benchmark_rows(tmp_path, [_row(run_id="new-2", overlay="on:triton_group_norm_silu")])
    text = (tmp_path / "benchmark.csv").read_text()
    assert text.startswith(old) and text[len(old):].splitlines()[0] == ledger.header_line()
    assert text.count(ledger.header_line()) == 1
    assert ledger.validate_benchmark_csv(tmp_path / "benchmark.csv") == []
    rows = ledger.read_benchmark_rows(tmp_path)
    assert [r["overlay"] for r in rows[n_old - 1:]] == ["", "off", "on:triton_group_norm_silu"]
    # new rows must say whether the overlay was installed; old rows cannot
    ledger.append_benchmark_rows(tmp_path, [_row(run_id="new-3", overlay="")])
    assert any("environment columns empty: ['overlay']" in p for p in ledger.validate_benchmark_csv(tmp_path / "benchmark.csv"))
    # the migration line cannot be dropped, nor an old header slipped in below a new one
    p = tmp_path / "benchmark.csv"
    p.write_text(text.replace(ledger.header_line() + "\n", ""))
    assert any("wrong number of fields" in x for x in ledger.validate_benchmark_csv(p))
    p.write_text(text + ",".join(ledger.BENCHMARK_SCHEMAS[0]) + "\n")
    assert any("older than the one above" in x for x in ledger.validate_benchmark_csv(p))


def test_only_a_like_run_may_supersede(tmp_path: Path):
    full = [_row(row=f"row{i}") for i in range(3)]
    ledger.append_benchmark_rows(tmp_path, full)
    ledger.append_benchmark_rows(tmp_path, [dict(r, run_id="redo", supersedes="r1") for r in full])
    assert ledger.validate_benchmark_csv(tmp_path / "benchmark.csv") == []
    cases = {
        "aa-one-row": ([_row(run_id="aa-one-row", mode="aa", supersedes="redo")], ["same mode", "same rows"]),
        "h100": ([dict(r, run_id="h100", supersedes="redo", gpu_name="NVIDIA H100 80GB HBM3") for r in full],
                 ["same arch and GPU model"]),
        "forward": ([dict(r, run_id="fwd", supersedes="later") for r in full], ["not an earlier run"]),
    }
    for name, (rows, why) in cases.items():
        d = tmp_path / name
        d.mkdir()
        (d / "benchmark.csv").write_text((tmp_path / "benchmark.csv").read_text())
        ledger.append_benchmark_rows(d, rows)
        problems = ledger.validate_benchmark_csv(d / "benchmark.csv")
        for w in why:
            assert any(w in p for p in problems), (name, w, problems)
