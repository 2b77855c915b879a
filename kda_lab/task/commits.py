"""Whether a ledger row's ``git_commit`` backs it: the commit is in the repository's history (an ancestor of
HEAD) and holds the task's ``src/`` at the row's ``source_hash``.

The exporter's gate and ``kda export --check`` count a check or bench row as evidence only when this holds, so
a row that names a commit nobody has (``fff...``), or a commit whose sources hash to something else (measured
on uncommitted edits), never promotes. Git only (no torch); results are cached per (repository, commit,
folder).
"""

from __future__ import annotations

import functools
import subprocess
from pathlib import Path, PurePosixPath

from kda_lab.ledger.store import blobs, git
from kda_lab.task.schema import hash_contents, hashed_source


def _ok(p: subprocess.CompletedProcess[bytes] | None) -> bool:
    return p is not None and p.returncode == 0


def _tree(top: str, commit: str, prefix: str) -> dict[str, str]:
    """Path (relative to ``prefix``) -> blob id of every file under ``prefix`` at ``commit``."""
    p = git(top, "ls-tree", "-r", "-z", "--full-tree", commit, "--", prefix)
    if not _ok(p):
        return {}
    out: dict[str, str] = {}
    for entry in p.stdout.split(b"\0"):  # type: ignore[union-attr]
        if not entry:
            continue
        meta, _, path = entry.decode().partition("\t")
        kind, blob = meta.split()[1:3]
        if kind == "blob":
            out[PurePosixPath(path).relative_to(prefix).as_posix()] = blob
    return out


@functools.lru_cache(maxsize=256)
def _verdict(top: str, rel_task: str, commit: str, head: str) -> tuple[str, str]:
    """(why the commit cannot back anything, the src/ hash at the commit): ('', hash) when it can."""
    if not commit or any(c not in "0123456789abcdef" for c in commit.lower()) or len(commit) < 7:
        return f"git_commit {commit!r} is not a commit id", ""
    full = git(top, "rev-parse", "--verify", "--quiet", f"{commit}^{{commit}}")
    if not _ok(full):
        return f"git_commit {commit[:12]} does not exist in this repository", ""
    sha = full.stdout.decode().strip()  # type: ignore[union-attr]
    if not _ok(git(top, "merge-base", "--is-ancestor", sha, head)):
        return f"git_commit {commit[:12]} is not in the history of HEAD", ""
    src = _tree(top, sha, f"{rel_task}/src")
    if not src:
        return f"git_commit {commit[:12]} holds no {rel_task}/src", ""
    files = {rel: blob for rel, blob in src.items() if hashed_source(PurePosixPath(rel))}
    helpers = _tree(top, sha, "kda_kernels")
    contents = blobs(top, sorted({*files.values(), *helpers.values()}))

    def helper(name: str) -> bytes:
        blob = helpers.get(f"{name}.py")
        return contents.get(blob, b"<missing>") if blob else b"<missing>"

    return "", hash_contents({rel: contents.get(blob, b"") for rel, blob in files.items()}, helper)


def _location(task_dir: Path) -> tuple[str, str, str] | None:
    """(repository top, task folder relative to it, HEAD) or None outside a git work tree with commits."""
    task_dir = Path(task_dir).resolve()
    top = git(task_dir, "rev-parse", "--show-toplevel")
    head = git(task_dir, "rev-parse", "HEAD")
    if not _ok(top) or not _ok(head):
        return None
    root = top.stdout.decode().strip()  # type: ignore[union-attr]
    try:
        rel = task_dir.relative_to(Path(root).resolve()).as_posix()
    except ValueError:
        return None
    return root, rel, head.stdout.decode().strip()  # type: ignore[union-attr]


def commit_gap(task_dir: Path, commit: str, source_hash: str) -> str:
    """'' when ``commit`` is in HEAD's history and holds ``task_dir``/src at ``source_hash``; else why not."""
    loc = _location(task_dir)
    if loc is None:
        return f"{task_dir} is not in a git repository with commits: no commit can back its rows"
    top, rel, head = loc
    why, at_commit = _verdict(top, rel, str(commit or "").strip(), head)
    if why:
        return why
    if at_commit != source_hash:
        return (
            f"git_commit {commit[:12]} holds {rel}/src at source hash {at_commit}, not the row's "
            f"{source_hash} "
            "(measured on uncommitted sources?)"
        )
    return ""
