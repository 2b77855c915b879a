"""The exporter's evidence gate, round 2 (issue 37): which check rows count, and which commits back a row.

- A check counts only when it ran every production row with the task's seed count: a zero-seed or a --rows
  check is recorded, never evidence; any failing check of a hash blocks that hash, whatever comes after.
- A check or bench row counts only when its git_commit is in HEAD's history and holds src/ at the row's hash.
Real git repositories throughout (the fixture lab of tests/test_export.py is one).
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from tests.test_export import (
    ALL_ROWS,
    GOOD,
    KERNEL,
    SLUG,
    TABLE,
    add_bench,
    add_check,
    commit,
    git,
    run,
    src_hash,
)
from tests.test_export import lab as lab  # noqa: F401 - the fixture

# --------------------------------------------------------------------------------- which checks count


@pytest.mark.parametrize(
    ("rows", "seeds", "why"),
    [
        (ALL_ROWS, 0, "it ran 0 seed(s) per row, the task asks for 2"),
        (ALL_ROWS, 1, "it ran 1 seed(s) per row, the task asks for 2"),
        ([TABLE[0][0]], 2, "it did not run 2 production row(s)"),
    ],
)
def test_a_zero_seed_or_subset_check_is_never_evidence(lab, capsys, rows, seeds, why):  # noqa: F811
    h = src_hash(lab)
    add_check(lab, h, rows=rows, seeds=seeds)
    add_bench(lab, h, GOOD)
    rc, out = run(lab, SLUG, capsys=capsys)
    assert rc == 1 and "no correctness run on an H200 counts" in out and why in out, out


def test_a_task_that_asks_for_more_seeds_needs_them(lab, capsys):  # noqa: F811
    toml = lab / "kernels" / SLUG / "task.toml"
    toml.write_text("seeds = 3\n" + toml.read_text())
    h = src_hash(lab)
    add_check(lab, h, seeds=2)
    add_bench(lab, h, GOOD)
    rc, out = run(lab, SLUG, capsys=capsys)
    assert rc == 1 and "the task asks for 3" in out
    add_check(lab, h, seeds=3, run_id="chk-3")
    assert run(lab, SLUG, capsys=capsys)[0] == 0


def test_legacy_check_rows_count_by_their_note(lab, capsys):  # noqa: F811
    """Rows written before the harness recorded `rows`/`seeds` say `rows N; seeds S` in their note."""
    from kda_lab import ledger

    h = src_hash(lab)
    task = lab / "kernels" / SLUG

    def legacy(note: str, run_id: str) -> None:
        ledger.append_solution(
            task,
            id="c001",
            parent=None,
            status="correct",
            event="check",
            source_hash=h,
            arch="h200",
            gpu="NVIDIA H200",
            evidence={"run_id": run_id, "passed": 2, "failed": 0},
            git_commit=commit(lab),
            command="kda check",
            note=note,
        )

    legacy("base seed 1; rows 1; seeds 2", "legacy-subset")
    add_bench(lab, h, GOOD)
    rc, out = run(lab, SLUG, capsys=capsys)
    assert rc == 1 and "it ran 1 of the task's 4 rows" in out
    legacy(f"base seed 1; rows {len(ALL_ROWS)}; seeds 2", "legacy-full")
    assert run(lab, SLUG, capsys=capsys)[0] == 0


def test_a_failing_check_blocks_its_hash_whatever_comes_after(lab, capsys):  # noqa: F811
    h = src_hash(lab)
    add_check(lab, h, run_id="full-pass")
    add_bench(lab, h, GOOD)
    assert run(lab, SLUG, capsys=capsys)[0] == 0
    assert run(lab, "--check", capsys=capsys)[0] == 0
    add_check(lab, h, status="incorrect", failed=1, run_id="full-fail")
    rc, out = run(lab, "--check", capsys=capsys)
    assert rc == 1 and "FAILED (run full-fail" in out
    # what flipped the old --check back to ok: a passing one-row check, then a zero-seed one, then a full one
    add_check(lab, h, rows=[TABLE[0][0]], run_id="one-row")
    add_check(lab, h, seeds=0, run_id="zero-seeds")
    add_check(lab, h, run_id="full-pass-again")
    rc, out = run(lab, "--check", capsys=capsys)
    assert rc == 1 and "FAILED (run full-fail" in out
    rc, out = run(lab, SLUG, capsys=capsys)
    assert rc == 1 and "FAILED (run full-fail" in out
    # a new hash is a new candidate: its own evidence promotes it
    (lab / "kernels" / SLUG / "src" / "kernel.py").write_text(KERNEL + "\n# fixed\n")
    h2 = src_hash(lab)
    add_check(lab, h2, run_id="fixed")
    add_bench(lab, h2, GOOD, run_id="fixed-run")
    assert run(lab, SLUG, capsys=capsys)[0] == 0


# --------------------------------------------------------------------------------- which commits back a row


def test_a_commit_that_does_not_exist_backs_nothing(lab, capsys):  # noqa: F811
    h = src_hash(lab)
    add_check(lab, h, git_commit="f" * 40)
    add_bench(lab, h, GOOD)
    rc, out = run(lab, SLUG, capsys=capsys)
    assert rc == 1 and "does not exist in this repository" in out, out
    add_check(lab, h, run_id="real")
    add_bench(lab, h, GOOD, run_id="made-up", git_commit="f" * 40, ts="2099-01-01T00:00:00Z")
    rc, out = run(lab, SLUG, capsys=capsys)
    assert rc == 0, out  # the made-up run never counts; the real run-1 is the evidence
    from kda_lab.ledger import read_solutions

    assert read_solutions(lab / "kernels" / SLUG)[-1]["evidence"]["run_id"] == "run-1"


def test_a_commit_outside_heads_history_backs_nothing(lab, capsys):  # noqa: F811
    git(lab, "checkout", "-q", "-b", "side")
    side = commit(lab, "a commit only a side branch holds")
    git(lab, "checkout", "-q", "main")
    h = src_hash(lab)
    add_check(lab, h, git_commit=side)
    add_bench(lab, h, GOOD)
    rc, out = run(lab, SLUG, capsys=capsys)
    assert rc == 1 and "is not in the history of HEAD" in out, out


def test_a_commit_without_the_measured_sources_backs_nothing(lab, capsys):  # noqa: F811
    before = commit(lab)
    (lab / "kernels" / SLUG / "src" / "kernel.py").write_text(
        KERNEL + "\n# measured, never committed first\n"
    )
    h = src_hash(lab)
    add_check(lab, h, git_commit=before)
    add_bench(lab, h, GOOD, git_commit=before)
    rc, out = run(lab, SLUG, capsys=capsys)
    assert rc == 1 and f"not the row's {h}" in out, out


def test_check_verifies_the_commits_of_the_manifests_rows(lab, capsys, tmp_path):  # noqa: F811
    h = src_hash(lab)
    add_check(lab, h)
    add_bench(lab, h, GOOD)
    assert run(lab, SLUG, capsys=capsys)[0] == 0
    commit(lab, "the export")
    assert run(lab, "--check", capsys=capsys)[0] == 0
    # the same tree with its history squashed away: the commits the rows name are gone
    squashed = tmp_path / "squashed"
    shutil.copytree(lab, squashed, ignore=shutil.ignore_patterns(".git"))
    subprocess.run(["git", "init", "-q", str(squashed)], check=True)
    commit(squashed, "squashed")
    rc, out = run(squashed, "--check", capsys=capsys)
    assert rc == 1 and "not backed by its commit" in out and "does not exist in this repository" in out, out


def test_commit_gap_outside_git(tmp_path: Path):
    from kda_lab.task.commits import commit_gap

    (tmp_path / "task" / "src").mkdir(parents=True)
    assert "not in a git repository" in commit_gap(tmp_path / "task", "0" * 40, "x")
