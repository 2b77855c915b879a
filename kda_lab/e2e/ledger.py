"""``e2e/benchmark.csv``: the append-only ledger of `kda e2e` runs (one row per model row per run).

Same discipline as the task ledgers (kda_lab.ledger): a fixed header, a hash chain over every row (``chain`` =
sha256 of the previous chain and this row's content, kda_lab.ledger's helper), and the committed file must be a
prefix of the working copy and every committed version must extend the one before it (kda_lab.ledger's
validate_against_git and validate_git_history, the rules of the task ledgers). `kda validate` runs it. Mistakes are fixed by a run that names the run
it supersedes, never by editing.
"""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import Any

from kda_lab.ledger import (
    LedgerError,
    _chain,
    _row_content,
    chained_csv,
    validate_against_git,
    validate_git_history,
)

E2E_DIR = "e2e"
E2E_FILE = "benchmark.csv"
E2E_COLUMNS: tuple[str, ...] = (
    "ts", "run_id", "arch", "row", "model", "module", "kind", "cites", "config", "shape", "dtype", "blocks", "tiny",
    "timing", "trials", "seed",
    "off_device_ms", "off_device_p10_ms", "off_device_p90_ms", "on_device_ms", "on_device_p10_ms", "on_device_p90_ms",
    "speedup",
    "off_eager_ms", "off_eager_p10_ms", "off_eager_p90_ms", "on_eager_ms", "on_eager_p10_ms", "on_eager_p90_ms",
    "eager_speedup",
    "agree", "max_abs_err", "tolerance",
    "kernel_ms_off", "kernel_ms_on", "shares_off", "shares_on",
    "promoted", "overlay", "status", "error",
    "gpu_name", "gpu_cc", "driver", "torch", "triton", "cuda", "sglang", "transformers", "diffusers",
    "git_commit", "git_dirty", "command", "supersedes", "chain",
)
FLOATS = tuple(c for c in E2E_COLUMNS if c.endswith("_ms") or c in ("speedup", "eager_speedup", "max_abs_err"))
STATUSES = ("ok", "disagree", "failed")
ENV = ("gpu_name", "torch", "sglang", "git_commit", "command")


def path(root: Path) -> Path:
    return Path(root) / E2E_DIR / E2E_FILE


def read(root: Path) -> list[dict[str, str]]:
    p = path(root)
    return rows_from_text(p.read_text()) if p.exists() else []


def rows_from_text(text: str) -> list[dict[str, str]]:
    """:func:`read` of an e2e/benchmark.csv's text."""
    return list(csv.DictReader(io.StringIO(text))) if text else []


def append(root: Path, rows: list[dict[str, Any]]) -> None:
    """Append rows (unknown keys rejected), extending the hash chain; creates e2e/benchmark.csv if needed."""
    p = path(root)
    existing = read(root)
    prev = existing[-1]["chain"] if existing else ""
    def known_status(row: dict[str, Any]) -> None:
        if row.get("status") not in STATUSES:
            raise LedgerError(f"status {row.get('status')!r} not in {STATUSES}")

    text = chained_csv(E2E_COLUMNS, rows, prev, header=not p.exists() or p.stat().st_size == 0,
                       name="e2e/benchmark.csv", check=known_status)
    p.parent.mkdir(parents=True, exist_ok=True)
    with p.open("a", newline="") as f:
        f.write(text)


def validate(root: Path) -> list[str]:
    """Header, statuses, numbers, environment columns, hash chain, a cut last line, and append-only against the
    whole git history and HEAD (the task ledgers' rules)."""
    p = path(root)
    if not p.exists():
        return []
    text = p.read_text()
    problems: list[str] = []
    if not text or text.splitlines()[0] != ",".join(E2E_COLUMNS):
        return [f"{E2E_DIR}/{E2E_FILE}: header differs from kda_lab.e2e.ledger.E2E_COLUMNS"]
    prev = ""
    for i, row in enumerate(csv.DictReader(io.StringIO(text)), start=2):
        where = f"{E2E_DIR}/{E2E_FILE}:{i}"
        if None in row or any(v is None for v in row.values()):
            problems.append(f"{where}: wrong number of fields")
            return problems
        if row["status"] not in STATUSES:
            problems.append(f"{where}: status {row['status']!r} not in {STATUSES}")
        for c in FLOATS:
            if row[c]:
                try:
                    float(row[c])
                except ValueError:
                    problems.append(f"{where}: {c}={row[c]!r} is not a number")
        missing = [c for c in ENV if not row[c]]
        if missing:
            problems.append(f"{where}: environment columns empty: {missing}")
        if row["chain"] != _chain(prev, _row_content(row, E2E_COLUMNS)):
            problems.append(f"{where}: hash chain broken (a row was edited, removed or reordered)")
            return problems
        prev = row["chain"]
    if not text.endswith("\n"):
        problems.append(f"{E2E_DIR}/{E2E_FILE}: the last line is cut (no newline at the end of the file)")
    return problems + validate_git_history(p) + validate_against_git(p)
