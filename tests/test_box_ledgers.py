"""scripts/unpack_ledgers.sh over several calls of one box session (kda_lab/ledger/box.py), in a real git repo.

Each box call starts from the committed ledgers, so two calls that write the same task come back as two
tarballs that both extend the commit: the second one's rows must be appended after the first one's with the
chain extended, and anything that did not start from the commit must be refused.
"""

from __future__ import annotations

import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

from kda_lab import ledger
from tests.conftest import FSS, REPO
from tests.test_report import bench_rows

SCRIPT = REPO / "scripts" / "unpack_ledgers.sh"


def git(root: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True, text=True).stdout


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "lab"
    task = root / "kernels" / FSS
    task.mkdir(parents=True)
    for name in ("task.toml", ledger.BENCHMARK_FILE, ledger.SOLUTIONS_FILE):
        shutil.copy(REPO / "kernels" / FSS / name, task / name)
    git(root, "init", "-q")
    git(root, "-c", "user.email=t@t", "-c", "user.name=t", "add", "-A")
    git(root, "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "base")
    (root / ".kda-git-commit").write_text(git(root, "rev-parse", "HEAD"))
    return root


def box_call(repo: Path, tmp_path: Path, name: str, run_id: str, ts: str) -> Path:
    """What one box call brings back: the committed ledgers plus the rows that call appended."""
    box = tmp_path / name
    shutil.copytree(repo / "kernels", box / "kernels")
    for f in (box / "kernels" / FSS).glob("*"):  # the box gets the committed files, not local edits
        f.write_text(git(repo, "show", f"HEAD:kernels/{FSS}/{f.name}"))
    task = box / "kernels" / FSS
    ledger.append_benchmark_rows(task, bench_rows(task, run_id=run_id, mode="baseline-only", cand="c000",
                                                  factors=1.0, ts=ts))
    tgz = tmp_path / f"{name}.tgz"
    with tarfile.open(tgz, "w:gz") as tar:
        tar.add(task / ledger.BENCHMARK_FILE, arcname=f"kernels/{FSS}/{ledger.BENCHMARK_FILE}")
    return tgz


def unpack(repo: Path, *tgz: Path) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(SCRIPT), *map(str, tgz)], cwd=repo, capture_output=True, text=True)


def test_two_calls_on_one_task_both_land_and_the_chain_holds(repo: Path, tmp_path: Path) -> None:
    first = box_call(repo, tmp_path, "call1", "r-one", "2026-11-25T02:10:00Z")
    second = box_call(repo, tmp_path, "call2", "r-two", "2026-11-25T02:20:00Z")
    r = unpack(repo, first, second)
    assert r.returncode == 0, r.stderr
    assert "replaced" in r.stdout and "appended" in r.stdout
    task = repo / "kernels" / FSS
    assert ledger.validate_ledgers(task) == []
    runs = ledger.runs(ledger.read_benchmark_rows(task))
    assert "r-one" in runs and "r-two" in runs
    committed = git(repo, "show", f"HEAD:kernels/{FSS}/{ledger.BENCHMARK_FILE}")
    assert (task / ledger.BENCHMARK_FILE).read_text().startswith(committed)  # append-only
    again = unpack(repo, second)  # the same tarball twice adds nothing twice
    assert again.returncode == 0
    assert len(ledger.runs(ledger.read_benchmark_rows(task))) == len(runs)


def test_a_copy_from_another_commit_is_refused(repo: Path, tmp_path: Path) -> None:
    call = box_call(repo, tmp_path, "call1", "r-one", "2026-11-25T02:10:00Z")
    task = repo / "kernels" / FSS
    ledger.append_benchmark_rows(task, bench_rows(task, run_id="r-local", mode="baseline-only", cand="c000",
                                                  factors=1.0, ts="2026-11-25T01:00:00Z"))
    git(repo, "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qam", "later")
    (repo / ".kda-git-commit").write_text(git(repo, "rev-parse", "HEAD"))  # the box did not measure from this
    before = (task / ledger.BENCHMARK_FILE).read_text()
    r = unpack(repo, call)
    assert r.returncode == 1 and "does not start with the file at" in r.stderr
    assert (task / ledger.BENCHMARK_FILE).read_text() == before


def test_a_local_ledger_edited_off_the_commit_is_refused(repo: Path, tmp_path: Path) -> None:
    call = box_call(repo, tmp_path, "call1", "r-one", "2026-11-25T02:10:00Z")
    path = repo / "kernels" / FSS / ledger.BENCHMARK_FILE
    lines = path.read_text().splitlines(keepends=True)
    path.write_text("".join(lines[:-1]))  # a committed row dropped locally
    r = unpack(repo, call)
    assert r.returncode == 1 and "not an extension" in r.stderr
