"""``e2e/benchmark.csv``: the append-only ledger of `kda e2e` runs (one row per model row per run).

Same discipline as the task ledgers (kda_lab.ledger): a fixed header, a hash chain over every row (``chain`` =
sha256 of the previous chain and this row's content, kda_lab.ledger's helper), and the committed file must be a
prefix of the working copy and every committed version must extend the one before it (kda_lab.ledger's
validate_against_git and validate_git_history, the rules of the task ledgers). `kda validate` runs it. Mistakes are fixed by a run that names the run
it supersedes, never by editing.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kda_lab.ledger_io import LedgerError, append_csv, csv_rows, read_text, validate_csv

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
    return rows_from_text(read_text(p)) if p.exists() else []


def rows_from_text(text: str) -> list[dict[str, str]]:
    """:func:`read` of an e2e/benchmark.csv's text."""
    return csv_rows(text)


def append(root: Path, rows: list[dict[str, Any]]) -> None:
    """Append rows (unknown keys rejected), extending the hash chain under the ledger lock (kda_lab.ledger_io);
    creates e2e/benchmark.csv if needed."""
    def known_status(row: dict[str, Any]) -> None:
        if row.get("status") not in STATUSES:
            raise LedgerError(f"status {row.get('status')!r} not in {STATUSES}")

    append_csv(path(root), E2E_COLUMNS, rows, name="e2e/benchmark.csv", check=known_status)


def validate(root: Path) -> list[str]:
    """Header, statuses, numbers, environment columns, duplicate (run_id, row), hash chain, a cut last line, and
    append-only against the whole git history and HEAD (the task ledgers' rules, kda_lab.ledger_io)."""
    def known_status(row: dict[str, str]) -> str:
        return "" if row["status"] in STATUSES else f"status {row['status']!r} not in {STATUSES}"

    return validate_csv(path(root), E2E_COLUMNS, f"{E2E_DIR}/{E2E_FILE}", FLOATS, ENV, check=known_status,
                        unique=("run_id", "row"))
