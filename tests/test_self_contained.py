"""Everything the lab needs is in the repository: no tracked file points at a folder beside the checkout.

A fresh clone has only itself, so a reference to the sibling `shared` folder of the development setup (staging
scripts, reference notes, capture files) is a dead link there. Captures are cited by file name and line
(`captured_shapes/<file>.jsonl:<line>`), baselines by docs/h200-baselines.md, staging by scripts/gpu_stage.sh.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from tests.conftest import REPO

# Spelled so that this file does not match itself: "share[d]" matches the word, not this source text.
OUTSIDE = re.compile(r"\.\./share[d]\b|/work/share[d]\b|\bshare[d]/(?:gpu|reference|hooks|DESIGN\.md)\b")


def outside_references(repo: Path) -> list[str]:
    """'path:line: text' for every line of a tracked text file that points outside the checkout."""
    listed = subprocess.run(["git", "-C", str(repo), "ls-files", "-z"], capture_output=True, check=True).stdout
    hits = []
    for rel in filter(None, listed.decode().split("\0")):
        path = repo / rel
        if not path.is_file():
            continue
        data = path.read_bytes()
        if b"\0" in data[:8192]:  # binary (plots): no paths to follow
            continue
        for n, line in enumerate(data.decode("utf-8", errors="replace").splitlines(), start=1):
            if OUTSIDE.search(line):
                hits.append(f"{rel}:{n}: {line.strip()}")
    return hits


def test_no_tracked_file_points_outside_the_repository() -> None:
    hits = outside_references(REPO)
    assert not hits, "references outside the repository:\n" + "\n".join(hits)


def test_the_check_finds_each_kind_of_outside_reference(tmp_path: Path) -> None:
    repo = tmp_path / "clone"
    repo.mkdir()
    word = "share" + "d"  # never spelled whole here: this file is tracked and checked too
    sibling = f"../{word}"
    bad = {
        "docs/a.md": f"stage with `{sibling}/gpu/stage.sh` first\n",
        "kernels/t/task.toml": f'notes = "every capture in {sibling}/reference/captured_shapes/"\n',
        "kda_lab/x.py": f'"""see /work/{word}/DESIGN.md"""\n',
        "tests/test_y.py": f'path = root.parent / "{word}/reference/captured_shapes"\n',
    }
    good = {
        "docs/ok.md": "source `captured_shapes/h200_x.jsonl:12`; shared memory and shared/ in prose stay allowed\n",
        "docs/plot.png": b"\x89PNG\0" + f"{sibling}/gpu".encode(),
    }
    for rel, text in {**bad, **good}.items():
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        if isinstance(text, bytes):
            (repo / rel).write_bytes(text)
        else:
            (repo / rel).write_text("first line\n" + text)
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    subprocess.run(["git", "-C", str(repo), "add", "."], check=True)
    (repo / "untracked.md").write_text(f"{sibling}/gpu/README.md\n")  # not in a clone: not checked
    hits = outside_references(repo)
    assert sorted(h.split(":", 2)[0] for h in hits) == sorted(bad)
    assert all(h.split(":", 2)[1] == "2" for h in hits)
