"""The machinery every append-only ledger shares: UTF-8 reads, locked appends, the hash chain, chained CSV,
and the append-only rules against git. One place: the task ledgers (:mod:`kda_lab.ledger`), the e2e ledger
(:mod:`kda_lab.ledger.e2e`, which keeps its own columns) and the GPU box merge (:mod:`kda_lab.ledger.box`) all
write through here.

Appends take an exclusive ``fcntl`` lock on the ledger file and read the file again under it, so the new
rows chain from the last row actually in the file: two processes appending at once no longer break the
chain (each chained from the tail it had read before the other wrote). Readers take no lock (an append is
one write).
"""

from __future__ import annotations

import csv
import datetime as _dt
import fcntl
import hashlib
import io
import json
import math
import os
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any


class LedgerError(ValueError):
    """A ledger that breaks its schema or its append-only history."""


def read_text(path: Path) -> str:
    """A ledger's text; a file that is not UTF-8 is a LedgerError naming the first bad byte (never a
    traceback).
    """
    data = Path(path).read_bytes()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data[: e.start].count(b"\n") + 1
        raise LedgerError(
            f"{path}:{line}: not UTF-8 (byte {data[e.start]:#04x} at offset {e.start}); ledgers are "
            "UTF-8 text: restore the file from git (`git checkout -- <file>`) and append again"
        ) from None


def append_locked(path: Path, build: Callable[[str], str]) -> str:
    """Append ``build(current text)`` to ``path`` under an exclusive lock, the text read again under the lock
    (a new file is created). Returns what was appended."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a+b") as f:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX)
        try:
            f.seek(0)
            data = f.read()
            try:
                text = data.decode("utf-8")
            except UnicodeDecodeError:
                text = read_text(path)  # raises the LedgerError that names the byte
            out = build(text)
            if out:
                f.seek(0, os.SEEK_END)
                f.write(out.encode("utf-8"))
                f.flush()
                os.fsync(f.fileno())
            return out
        finally:
            fcntl.flock(f.fileno(), fcntl.LOCK_UN)


def now_iso() -> str:
    return _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def chain(prev: str, content: str) -> str:
    return hashlib.sha256((prev + "\n" + content).encode()).hexdigest()[:16]


def row_content(row: dict[str, Any], columns: tuple[str, ...]) -> str:
    return json.dumps([str(row.get(c, "")) for c in columns if c != "chain"], ensure_ascii=True)


def fmt(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        if math.isnan(value):
            return ""
        return f"{value:.6g}"
    return str(value)


def chained_csv(
    columns: tuple[str, ...],
    rows: list[dict[str, Any]],
    prev: str,
    header: bool,
    name: str,
    check: Callable[[dict[str, Any]], None] | None = None,
) -> str:
    """CSV text of ``rows`` (unknown keys rejected, missing keys empty, ``ts`` filled) whose ``chain`` column
    extends the hash chain from ``prev``; with the header line first when ``header``. Every append-only CSV
    ledger (task benchmark.csv, e2e/benchmark.csv) writes through this."""
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=columns, lineterminator="\n")
    if header:
        writer.writeheader()
    for row in rows:
        unknown = set(row) - set(columns)
        if unknown:
            raise LedgerError(f"unknown {name} columns: {sorted(unknown)}")
        if check is not None:
            check(row)
        out = {c: fmt(row.get(c)) for c in columns}
        out["ts"] = out["ts"] or now_iso()
        out["chain"] = chain(prev, row_content(out, columns))
        prev = out["chain"]
        writer.writerow(out)
    return buf.getvalue()


# ---------------------------------------------------------------- one-schema CSV ledgers (e2e/benchmark.csv)


def csv_rows(text: str) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(text))) if text else []


def append_csv(
    path: Path,
    columns: tuple[str, ...],
    rows: list[dict[str, Any]],
    name: str,
    check: Callable[[dict[str, Any]], None] | None = None,
) -> None:
    """Append ``rows`` to a one-schema CSV ledger under the lock, chained from its last row (header if new).
    """

    def build(text: str) -> str:
        if text and not text.endswith("\n"):
            raise LedgerError(f"{path}: the last line is cut (no newline at the end); run `kda validate`")
        existing = csv_rows(text)
        prev = existing[-1]["chain"] if existing else ""
        return chained_csv(columns, rows, prev, header=not text, name=name, check=check)

    append_locked(path, build)


def _row_problems(where: str, row: dict[str, str], own: dict[str, str], floats: tuple[str, ...],
                  env: tuple[str, ...], check: Callable[[dict[str, str]], str] | None,
                  unique: tuple[str, ...], seen: dict[tuple[str, ...], str]) -> list[str]:
    """One row's checks (``row`` over the newest schema, ``own`` over its own): ``check``, numbers, the
    environment columns its schema has, a duplicate ``unique`` key (``seen`` records the first of each)."""
    problems = []
    why = check(row) if check is not None else ""
    if why:
        problems.append(f"{where}: {why}")
    for c in floats:
        if row.get(c):
            try:
                float(row[c])
            except ValueError:
                problems.append(f"{where}: {c}={row[c]!r} is not a number")
    missing = [c for c in env if c in own and not own[c]]
    if missing:
        problems.append(f"{where}: environment columns empty: {missing}")
    if unique:
        key = tuple(row[c] for c in unique)
        if key in seen:
            problems.append(f"{where}: duplicate {'/'.join(unique)} {list(key)} (first at {seen[key]}): "
                            "a run was appended twice")
        seen.setdefault(key, where)
    return problems


def validate_csv(
    path: Path,
    columns: tuple[str, ...],
    name: str,
    floats: tuple[str, ...],
    env: tuple[str, ...],
    check: Callable[[dict[str, str]], str] | None = None,
    unique: tuple[str, ...] = (),
) -> list[str]:
    """Header, numbers, environment columns, ``check`` (a problem or ''), duplicate ``unique`` keys, hash
    chain, a cut last line, and append-only against the whole git history and HEAD."""
    path = Path(path)
    if not path.exists():
        return []
    try:
        text = read_text(path)
    except LedgerError as e:
        return [str(e)]
    problems: list[str] = []
    if not text or text.splitlines()[0] != ",".join(columns):
        return [f"{name}: header differs from the fixed schema"]
    prev = ""
    seen: dict[tuple[str, ...], str] = {}
    for i, row in enumerate(csv.DictReader(io.StringIO(text)), start=2):
        where = f"{name}:{i}"
        if None in row or any(v is None for v in row.values()):
            problems.append(f"{where}: wrong number of fields")
            return problems
        problems += _row_problems(where, row, row, floats, env, check, unique, seen)
        if row["chain"] != chain(prev, row_content(row, columns)):
            problems.append(f"{where}: hash chain broken (a row was edited, removed or reordered)")
            return problems
        prev = row["chain"]
    if not text.endswith("\n"):
        problems.append(f"{name}: the last line is cut (no newline at the end of the file)")
    return problems + validate_git_history(path) + validate_against_git(path)


# ---------------------------------------------------------------- versioned CSV (benchmark.csv, e2e/rows.csv)
# A ledger whose columns grew keeps one fixed schema per version, oldest first. Appending to a file written
# under an older schema first appends the newest header line (the migration); the rows above it keep their
# schema and their chain (never rewritten). Readers fill the columns a row's schema lacks with "".


def csv_records(text: str) -> list[tuple[int, list[str]]]:
    """(line number, fields) of every CSV record, header lines included."""
    reader = csv.reader(io.StringIO(text))
    return [(reader.line_num, fields) for fields in reader]


def schema_records(text: str, schemas: tuple[tuple[str, ...], ...], where: str, fixed: str
                   ) -> tuple[list[tuple[int, tuple[str, ...], list[str]]], list[str]]:
    """Data records with the schema in force at each (a known header line switches it, oldest to newest),
    and the structural problems (unknown or backwards header, wrong number of fields). ``fixed`` names the
    schema in the messages."""
    rows: list[tuple[int, tuple[str, ...], list[str]]] = []
    problems: list[str] = []
    columns: tuple[str, ...] | None = None
    for line, fields in csv_records(text):
        schema = tuple(fields)
        if schema in schemas:
            if columns is not None and schemas.index(schema) <= schemas.index(columns):
                problems.append(f"{where}:{line}: header line repeated or older than the one above it")
            columns = schema
            continue
        if columns is None:
            problems.append(f"{where}:{line}: header differs from the fixed schema ({fixed})")
            return rows, problems
        if len(fields) != len(columns):
            problems.append(
                f"{where}:{line}: wrong number of fields ({len(fields)}, the schema has {len(columns)})")
            continue
        rows.append((line, columns, fields))
    return rows, problems


def as_newest(columns: tuple[str, ...], fields: list[str], newest: tuple[str, ...]) -> dict[str, str]:
    """A record as a dict over the newest schema (the columns its own schema lacks are "")."""
    row = dict.fromkeys(newest, "")
    row.update(zip(columns, fields, strict=True))
    return row


def last_chain(rows: list[tuple[int, tuple[str, ...], list[str]]]) -> str:
    if not rows:
        return ""
    _, columns, fields = rows[-1]
    return fields[columns.index("chain")]


def header_in_force(text: str, schemas: tuple[tuple[str, ...], ...]) -> tuple[str, ...] | None:
    """The last known header line of a ledger's text (the schema new rows would be read under)."""
    found = None
    for _, fields in csv_records(text):
        if tuple(fields) in schemas:
            found = tuple(fields)
    return found


def append_versioned_csv(
    path: Path,
    schemas: tuple[tuple[str, ...], ...],
    rows: list[dict[str, Any]],
    name: str,
    fixed: str,
    check: Callable[[dict[str, Any]], None] | None = None,
) -> None:
    """Append ``rows`` under the newest schema, chained from the last row in the file, under the lock; a file
    written under an older schema gets the newest header line first (its rows stay as they are)."""
    newest = schemas[-1]

    def build(text: str) -> str:
        if text and not text.endswith("\n"):
            raise LedgerError(f"{path}: the last line is cut (no newline at the end); run `kda validate`")
        existing, problems = schema_records(text, schemas, Path(path).name, fixed)
        if problems:
            raise LedgerError(f"{path}: {problems[0]}; run `kda validate`")
        header = header_in_force(text, schemas) != newest
        return chained_csv(newest, rows, last_chain(existing), header=header, name=name, check=check)

    append_locked(path, build)


def validate_versioned_csv(
    path: Path,
    schemas: tuple[tuple[str, ...], ...],
    name: str,
    fixed: str,
    floats: tuple[str, ...],
    env: tuple[str, ...],
    check: Callable[[dict[str, str]], str] | None = None,
    unique: tuple[str, ...] = (),
) -> list[str]:
    """:func:`validate_csv` for a ledger with schema versions: each row is checked over the newest schema
    (the columns its own lacks read as ""), its chain over its own schema; ``env`` columns are required where
    the row's schema has them."""
    path = Path(path)
    if not path.exists():
        return []
    try:
        text = read_text(path)
    except LedgerError as e:
        return [str(e)]
    if not text:
        return [f"{name}: header differs from the fixed schema ({fixed})"]
    records, problems = schema_records(text, schemas, name, fixed)
    if problems and not records and "header differs" in problems[0]:
        return problems
    prev = ""
    seen: dict[tuple[str, ...], str] = {}
    for line, columns, fields in records:
        where = f"{name}:{line}"
        own = dict(zip(columns, fields, strict=True))
        row = as_newest(columns, fields, schemas[-1])
        problems += _row_problems(where, row, own, floats, env, check, unique, seen)
        if own["chain"] != chain(prev, row_content(own, columns)):
            problems.append(f"{where}: hash chain broken (a row was edited, removed or reordered)")
            return problems
        prev = own["chain"]
    if not text.endswith("\n"):
        problems.append(f"{name}: the last line is cut (no newline at the end of the file)")
    return problems + validate_git_history(path) + validate_against_git(path)


# ---------------------------------------------------------------- git history


def git(
    cwd: Path | str, *args: str, stdin: bytes | None = None
) -> subprocess.CompletedProcess[bytes] | None:
    try:
        return subprocess.run(["git", "-C", str(cwd), *args], capture_output=True, input=stdin, check=False)
    except FileNotFoundError:
        return None


def _repo_path(path: Path) -> tuple[str, str] | None:
    """(toplevel, path relative to it) when ``path`` lies in a git work tree, else None."""
    p = git(path.parent, "rev-parse", "--show-toplevel")
    if p is None or p.returncode != 0:
        return None
    top = p.stdout.decode().strip()
    try:
        return top, path.relative_to(Path(top).resolve()).as_posix()
    except ValueError:
        return None


def blobs(top: str, ids: list[str]) -> dict[str, bytes]:
    """Blob id -> bytes, through one ``git cat-file --batch`` (also kda_lab.task.commits')."""
    if not ids:
        return {}
    p = git(top, "cat-file", "--batch", stdin="".join(i + "\n" for i in ids).encode())
    out: dict[str, bytes] = {}
    data = p.stdout if p is not None else b""
    pos = 0
    while pos < len(data):
        nl = data.index(b"\n", pos)
        head = data[pos:nl].split()
        if len(head) < 3 or head[1] != b"blob":
            pos = nl + 1
            continue
        size = int(head[2])
        out[head[0].decode()] = data[nl + 1 : nl + 1 + size]
        pos = nl + 1 + size + 1
    return out


_NO_BLOB = "0" * 40


def validate_git_history(path: Path) -> list[str]:
    """Every committed version of the ledger extends the version in each parent commit (all history reachable
    from HEAD, merges included): committing a ledger with its last rows dropped is caught."""
    path = Path(path).resolve()
    loc = _repo_path(path)
    if loc is None:
        return []
    top, rel = loc
    p = git(
        top,
        "log",
        "--full-history",
        "-m",
        "--raw",
        "--no-abbrev",
        "--no-renames",
        "--format=commit %H",
        "HEAD",
        "--",
        rel,
    )
    if p is None or p.returncode != 0:
        return []  # no commits yet
    edges: list[tuple[str, str, str, str]] = []
    commit = ""
    for line in p.stdout.decode().splitlines():
        if line.startswith("commit "):
            commit = line.split()[1]
        elif line.startswith(":"):
            meta, _, _ = line.partition("\t")
            _, _, old, new, status = meta.split()
            edges.append((commit, old, new, status))
    contents = blobs(top, sorted({b for _, old, new, _ in edges for b in (old, new) if b != _NO_BLOB}))
    problems: list[str] = []
    for commit, old, new, status in edges:
        if status.startswith("D") or new == _NO_BLOB:
            problems.append(f"{rel}: deleted in commit {commit[:12]}, but ledgers are append-only")
        elif old != _NO_BLOB and not contents.get(new, b"").startswith(contents.get(old, b"\0")):
            problems.append(
                f"{rel}: commit {commit[:12]} rewrote or dropped committed rows (every committed "
                "version must extend the one before it: append a superseding row instead)"
            )
    return problems


def validate_against_git(path: Path, ref: str = "HEAD") -> list[str]:
    """The committed ledger must be a prefix of the working copy (append-only history)."""
    path = Path(path).resolve()
    loc = _repo_path(path)
    if loc is None:
        return []
    top, rel = loc
    old = git(top, "show", f"{ref}:{rel}")
    if old is None or old.returncode != 0:
        return []  # not committed yet at ref
    if not path.exists():
        return [f"{rel}: deleted, but ledgers are append-only"]
    if not path.read_bytes().startswith(old.stdout):
        return [
            f"{rel}: history differs from {ref} (ledgers are append-only: append a superseding row instead)"
        ]
    return []
