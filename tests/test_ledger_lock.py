"""Ledger appends under concurrency, duplicate runs, and the one home of the ledger machinery (issue 37, 4 and
5).

- Appends take an exclusive fcntl lock and chain from the tail read under it: real processes appending to one
  ledger at once leave a valid chain with every row (unlocked, the chain broke at some row in one try of two).
- A run appended twice is refused by `kda validate` (benchmark.csv, solutions.jsonl, the e2e ledgers) and
  unpacking the same box tarballs twice never doubles a row.
- One package holds every ledger (kda_lab/ledger/) and one module of it the machinery (kda_lab.ledger.store);
  kda_lab/measure imports nothing from kda_lab/e2e.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kda_lab import ledger
from kda_lab.ledger import e2e as e2e_ledger
from kda_lab.ledger import store
from tests.conftest import FSS, REPO
from tests.test_box_ledgers import box_call, repo, unpack  # noqa: F401 - the fixture
from tests.test_report import bench_rows

WRITER = r"""
import sys
from pathlib import Path
from kda_lab import ledger
from tests.test_report import bench_rows
task, who, n, kind = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3]), sys.argv[4]
for i in range(n):
    if kind == "solutions":
        ledger.append_solution(task, id="c001", parent=None, status="proposed", event="note",
                               source_hash="h" * 16, arch="h200", gpu="cpu", evidence={}, git_commit="0" * 40,
                               command=f"{who} {i}",
                               note=f"{who} row {i}")
    else:
        rows = bench_rows(task, run_id=f"{who}-{i}", mode="baseline-only", cand="c000", factors=1.0,
                          ts="2026-11-25T02:10:00Z")
        ledger.append_benchmark_rows(task, rows[:2])
"""


def _task(tmp_path: Path) -> Path:
    task = tmp_path / "kernels" / FSS
    task.mkdir(parents=True)
    (task / "task.toml").write_bytes((REPO / "kernels" / FSS / "task.toml").read_bytes())
    (task / ledger.BENCHMARK_FILE).write_text(ledger.header_line() + "\n")
    (task / ledger.SOLUTIONS_FILE).write_text("")
    return task


@pytest.mark.parametrize("kind", ["solutions", "benchmark"])
def test_concurrent_appends_from_real_processes_keep_the_chain(tmp_path: Path, kind: str) -> None:
    task = _task(tmp_path)
    writers, n = 4, 60 if kind == "solutions" else 25
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, str(task), f"w{w}", str(n), kind],
            env=env,
            cwd=REPO,
            stderr=subprocess.PIPE,
            text=True,
        )
        for w in range(writers)
    ]
    for p in procs:
        _, err = p.communicate(timeout=600)
        assert p.returncode == 0, err
    if kind == "solutions":
        assert ledger.validate_solutions(task / ledger.SOLUTIONS_FILE) == []
        assert len(ledger.read_solutions(task)) == writers * n
    else:
        assert ledger.validate_benchmark_csv(task / ledger.BENCHMARK_FILE) == []
        assert len(ledger.read_benchmark_rows(task)) == writers * n * 2


def test_append_reads_the_tail_under_the_lock(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What another process appended since this one last looked is what the new row chains from."""
    task = _task(tmp_path)
    ledger.append_solution(
        task,
        id="c001",
        parent=None,
        status="proposed",
        event="note",
        source_hash="h" * 16,
        arch="h200",
        gpu="cpu",
        evidence={},
        git_commit="0" * 40,
        command="a",
        note="",
    )
    seen: list[str] = []
    original = store.append_locked

    def spy(path: Path, build):  # another writer lands right before this one takes the lock
        if not seen:
            seen.append("other")
            original(path, lambda text: '{"chain": "deadbeefdeadbeef"}\n')
        return original(path, build)

    monkeypatch.setattr(ledger, "append_locked", spy)
    row = ledger.append_solution(
        task,
        id="c001",
        parent=None,
        status="proposed",
        event="note",
        source_hash="h" * 16,
        arch="h200",
        gpu="cpu",
        evidence={},
        git_commit="0" * 40,
        command="b",
        note="",
    )
    assert row["chain"] == store.chain(
        "deadbeefdeadbeef",
        __import__("json").dumps({k: row[k] for k in ledger.SOLUTION_FIELDS if k != "chain"}, sort_keys=True),
    )


# --------------------------------------------------------------------------------------------- duplicates


def test_validate_refuses_a_benchmark_run_appended_twice(tmp_path: Path) -> None:
    task = _task(tmp_path)
    rows = bench_rows(
        task, run_id="r-dup", mode="baseline-only", cand="c000", factors=1.0, ts="2026-11-25T02:10:00Z"
    )
    ledger.append_benchmark_rows(task, rows)
    assert ledger.validate_benchmark_csv(task / ledger.BENCHMARK_FILE) == []
    ledger.append_benchmark_rows(
        task,
        bench_rows(
            task, run_id="r-other", mode="baseline-only", cand="c000", factors=1.0, ts="2026-11-25T02:11:00Z"
        ),
    )
    ledger.append_benchmark_rows(task, rows)
    problems = ledger.validate_benchmark_csv(task / ledger.BENCHMARK_FILE)
    assert any("duplicate run id r-dup" in p for p in problems), problems


def test_validate_refuses_a_check_row_appended_twice(tmp_path: Path) -> None:
    task = _task(tmp_path)
    for _ in range(2):
        ledger.append_solution(
            task,
            id="c001",
            parent=None,
            status="correct",
            event="check",
            source_hash="h" * 16,
            arch="h200",
            gpu="NVIDIA H200",
            evidence={"run_id": "chk-1", "passed": 1, "failed": 0},
            git_commit="0" * 40,
            command="kda check",
            note="",
        )
    problems = ledger.validate_solutions(task / ledger.SOLUTIONS_FILE)
    assert any("duplicate run id chk-1" in p for p in problems), problems


def test_validate_refuses_an_e2e_run_appended_twice(tmp_path: Path) -> None:
    row = {c: "" for c in e2e_ledger.E2E_COLUMNS if c not in ("ts", "chain")}
    row.update(
        run_id="e-1",
        row="flux_block",
        status="ok",
        gpu_name="NVIDIA H200",
        torch="2.11",
        sglang="0.5.23",
        git_commit="0" * 40,
        command="kda e2e",
        quality="lossless",
        stage="module",
    )
    e2e_ledger.append(tmp_path, [row])
    assert e2e_ledger.validate(tmp_path) == []
    e2e_ledger.append(tmp_path, [row])
    assert any("duplicate run_id/row/quality/stage" in p for p in e2e_ledger.validate(tmp_path))


def test_unpacking_the_same_tarballs_twice_never_doubles_rows(repo: Path, tmp_path: Path) -> None:  # noqa: F811
    first = box_call(repo, tmp_path, "call1", "r-one", "2026-11-25T02:10:00Z")
    second = box_call(repo, tmp_path, "call2", "r-two", "2026-11-25T02:20:00Z")
    assert unpack(repo, first, second).returncode == 0
    task = repo / "kernels" / FSS
    before = (task / ledger.BENCHMARK_FILE).read_text()
    again = unpack(repo, first, second)
    assert again.returncode == 0, again.stderr
    assert (task / ledger.BENCHMARK_FILE).read_text() == before
    assert (
        "already here" in again.stdout or "unchanged" in again.stdout or again.stdout.count("appended") == 0
    )
    assert ledger.validate_ledgers(task) == []


# --------------------------------------------------------------------------------------------- one home


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            out |= {node.module, *(f"{node.module}.{a.name}" for a in node.names)}
        elif isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
    return out


def test_measure_does_not_import_e2e() -> None:
    for path in sorted((REPO / "kda_lab" / "measure").glob("*.py")):
        bad = sorted(m for m in _imports(path) if m.startswith("kda_lab.e2e"))
        assert not bad, f"{path.name} imports {bad}"


def test_one_module_holds_the_chain_and_the_lock() -> None:
    home = REPO / "kda_lab" / "ledger"
    assert sorted(p.name for p in home.glob("*.py")) == ["__init__.py", "box.py", "e2e.py", "store.py"]
    for path in sorted(home.glob("*.py")):
        if path.name != "store.py":
            text = path.read_text()
            assert "hashlib" not in text and "fcntl" not in text and '.open("a' not in text, path.name
    assert "fcntl.flock" in (home / "store.py").read_text()
    elsewhere = [p.relative_to(REPO).as_posix() for p in sorted((REPO / "kda_lab").rglob("*.py"))
                 if home not in p.parents and locks_a_ledger(p.read_text())]
    assert elsewhere == [], "ledger locking outside kda_lab/ledger/"
    # the rule tells a ledger lock from another file lock (the test helper's compiler-cache lock)
    assert locks_a_ledger((home / "store.py").read_text())
    assert not locks_a_ledger((REPO / "kda_lab" / "testing.py").read_text())


LEDGER_FILES = ("benchmark.csv", "solutions.jsonl", "rows.csv", "kda_lab.ledger",
                "from kda_lab import ledger")


def locks_a_ledger(text: str) -> bool:
    """A module that takes a file lock (fcntl) and names a ledger: only kda_lab/ledger/ may."""
    return "fcntl" in text and any(name in text for name in LEDGER_FILES)
