"""The GPU box has no .git: scripts/gpu_box.sh takes the commit from .kda-git-commit, written where the repository
is, or from a literal KDA_GIT_COMMIT; the docs never show a box command that evaluates git on the box."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BOX_GIT = re.compile(r"KDA_GIT_COMMIT=\$\(git rev-parse")


def box_copy(tmp: Path) -> tuple[Path, dict[str, str]]:
    """The working tree as the box receives it (no .git), an empty HOME (no staged SGLang) and an $OUT."""
    box = tmp / "box"
    (box / "scripts").mkdir(parents=True)
    shutil.copy2(REPO / "scripts/gpu_box.sh", box / "scripts/gpu_box.sh")
    (tmp / "out").mkdir()
    (tmp / "home").mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("KDA_GIT_COMMIT", "KDA_GIT_DIRTY")}
    env.update(OUT=str(tmp / "out"), HOME=str(tmp / "home"))
    return box, env


def run(box: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", "scripts/gpu_box.sh", "doctor"], cwd=box, env=env, capture_output=True,
                          text=True, timeout=60)


def test_without_a_commit_the_box_stops_and_says_how_to_take_it_locally(tmp_path: Path) -> None:
    box, env = box_copy(tmp_path)
    r = run(box, env)
    assert r.returncode == 2 and "git rev-parse HEAD > .kda-git-commit" in r.stderr
    # what the old docs' command amounted to on the box: $(git rev-parse HEAD) with no .git is empty
    r = run(box, {**env, "KDA_GIT_COMMIT": ""})
    assert r.returncode == 2 and ".kda-git-commit" in r.stderr


def test_the_commit_file_written_locally_is_read_on_the_box(tmp_path: Path) -> None:
    box, env = box_copy(tmp_path)
    sha = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True,
                         check=True).stdout.strip()
    (box / ".kda-git-commit").write_text(sha + "\n")
    r = run(box, env)
    # past the commit check: it stops at the next step, the missing staged SGLang (exit 3), as on a bare box
    assert r.returncode == 3 and "no staged SGLang" in r.stderr, r.stderr
    r = run(box, {**env, "KDA_GIT_COMMIT": sha[:12]})
    assert r.returncode == 3, r.stderr


def test_no_doc_shows_a_box_command_that_runs_git_on_the_box() -> None:
    tracked = subprocess.run(["git", "-C", str(REPO), "ls-files", "*.md", "*.py", "*.sh"], capture_output=True,
                             text=True, check=True).stdout.split()
    offenders = [p for p in tracked if p != "tests/test_gpu_box_commit.py" and BOX_GIT.search((REPO / p).read_text())]
    assert offenders == []


def test_the_commit_file_is_ignored() -> None:
    r = subprocess.run(["git", "-C", str(REPO), "check-ignore", "-q", ".kda-git-commit"])
    assert r.returncode == 0
