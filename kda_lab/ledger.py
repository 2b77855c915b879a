"""The two append-only ledgers of a task folder: ``benchmark.csv`` and ``solutions.jsonl``.

Both carry a hash chain (``chain`` = sha256 of the previous row's chain and this row's content), so an
edited or removed historical row is detectable from the file alone; ``validate_*`` also compares against
the committed version in git (the committed file must be a prefix of the working copy).
Mistakes are corrected by appending a row that names the run it supersedes, never by editing.
"""

from __future__ import annotations

import csv
import datetime as _dt
import hashlib
import io
import json
import math
import subprocess
from pathlib import Path
from typing import Any

BENCHMARK_FILE = "benchmark.csv"
SOLUTIONS_FILE = "solutions.jsonl"

# Fixed schema. Adding a column is a schema change: bump LEDGER_SCHEMA and migrate by appending.
BENCHMARK_COLUMNS: tuple[str, ...] = (
    "ts", "run_id", "task", "arch", "mode", "candidate_id", "source_hash",
    "function", "row", "row_kind", "model", "preset", "dtype", "shape", "bytes",
    "baseline_us", "baseline_p10_us", "baseline_p90_us",
    "candidate_us", "candidate_p10_us", "candidate_p90_us", "speedup",
    "compile_us", "speedup_vs_compile", "copy_us", "sol", "candidate_tbps", "baseline_tbps",
    "host_baseline_us", "host_candidate_us", "trials", "input_sets", "seed",
    "gpu_name", "gpu_cc", "driver", "torch", "triton", "cuda", "sglang",
    "git_commit", "git_dirty", "command", "supersedes", "note", "chain",
)
BENCHMARK_MODES = ("bench", "aa", "baseline-only")
ROW_KINDS = ("production", "test")
# Environment columns that every row measured on a GPU must fill.
ENV_COLUMNS = ("gpu_name", "gpu_cc", "driver", "torch", "triton", "cuda", "sglang", "git_commit", "command")
FLOAT_COLUMNS = (
    "bytes", "baseline_us", "baseline_p10_us", "baseline_p90_us", "candidate_us", "candidate_p10_us",
    "candidate_p90_us", "speedup", "compile_us", "speedup_vs_compile", "copy_us", "sol",
    "candidate_tbps", "baseline_tbps", "host_baseline_us", "host_candidate_us",
)

SOLUTION_FIELDS: tuple[str, ...] = (
    "ts", "id", "parent", "status", "event", "source_hash", "arch", "gpu", "evidence",
    "git_commit", "command", "note", "chain",
)
STATUSES = ("baseline", "proposed", "correct", "incorrect", "benchmarked", "promoted", "rejected", "superseded")
# "interpret": a CPU verdict of `kda check --interpret` (gpu "cpu-interpreter"); never evidence (only GPU "check" is).
EVENTS = ("register", "check", "interpret", "bench", "promote", "revert", "note")
EVIDENCE_KEYS = ("run_id", "passed", "failed", "geomean", "worst")


class LedgerError(ValueError):
    """A ledger that breaks its schema or its append-only history."""


def now_iso() -> str:
    return _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _chain(prev: str, content: str) -> str:
    return hashlib.sha256((prev + "\n" + content).encode()).hexdigest()[:16]


def _row_content(row: dict[str, Any], columns: tuple[str, ...]) -> str:
    return json.dumps([str(row.get(c, "")) for c in columns if c != "chain"], ensure_ascii=True)


# ---------------------------------------------------------------- benchmark.csv

def _fmt(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        if math.isnan(value):
            return ""
        return f"{value:.6g}"
    return str(value)


def read_benchmark_rows(task_dir: Path) -> list[dict[str, str]]:
    path = Path(task_dir) / BENCHMARK_FILE
    if not path.exists():
        return []
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def append_benchmark_rows(task_dir: Path, rows: list[dict[str, Any]]) -> None:
    """Append rows (unknown keys rejected, missing keys empty), extending the hash chain."""
    path = Path(task_dir) / BENCHMARK_FILE
    existing = read_benchmark_rows(task_dir)
    prev = existing[-1]["chain"] if existing else ""
    new_file = not path.exists() or path.stat().st_size == 0
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=BENCHMARK_COLUMNS, lineterminator="\n")
    if new_file:
        writer.writeheader()
    for row in rows:
        unknown = set(row) - set(BENCHMARK_COLUMNS)
        if unknown:
            raise LedgerError(f"unknown benchmark.csv columns: {sorted(unknown)}")
        out = {c: _fmt(row.get(c)) for c in BENCHMARK_COLUMNS}
        out["ts"] = out["ts"] or now_iso()
        out["chain"] = _chain(prev, _row_content(out, BENCHMARK_COLUMNS))
        prev = out["chain"]
        writer.writerow(out)
    with path.open("a", newline="") as f:
        f.write(buf.getvalue())


def _header_line() -> str:
    return ",".join(BENCHMARK_COLUMNS)


def validate_benchmark_csv(path: Path) -> list[str]:
    """Schema, vocabulary, environment columns and hash chain. Returns a list of problems."""
    problems: list[str] = []
    path = Path(path)
    if not path.exists():
        return [f"{path}: missing"]
    text = path.read_text()
    if not text:
        return [f"{path}: empty (must hold at least the header)"]
    first = text.splitlines()[0]
    if first != _header_line():
        return [f"{path}: header differs from the fixed schema (kda_lab.ledger.BENCHMARK_COLUMNS)"]
    prev = ""
    for i, row in enumerate(csv.DictReader(io.StringIO(text)), start=2):
        where = f"{path.name}:{i}"
        if None in row or any(v is None for v in row.values()):
            problems.append(f"{where}: wrong number of fields")
            continue
        if row["mode"] not in BENCHMARK_MODES:
            problems.append(f"{where}: mode {row['mode']!r} not in {BENCHMARK_MODES}")
        if row["row_kind"] not in ROW_KINDS:
            problems.append(f"{where}: row_kind {row['row_kind']!r} not in {ROW_KINDS}")
        for c in FLOAT_COLUMNS:
            if row[c]:
                try:
                    float(row[c])
                except ValueError:
                    problems.append(f"{where}: {c}={row[c]!r} is not a number")
        missing_env = [c for c in ENV_COLUMNS if not row[c]]
        if missing_env:
            problems.append(f"{where}: environment columns empty: {missing_env}")
        if not row["run_id"] or not row["source_hash"]:
            problems.append(f"{where}: run_id and source_hash are required")
        expect = _chain(prev, _row_content(row, BENCHMARK_COLUMNS))
        if row["chain"] != expect:
            problems.append(f"{where}: hash chain broken (a row was edited, removed or reordered)")
            return problems
        prev = row["chain"]
    return problems


# ---------------------------------------------------------------- solutions.jsonl

def read_solutions(task_dir: Path) -> list[dict[str, Any]]:
    path = Path(task_dir) / SOLUTIONS_FILE
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def append_solution(task_dir: Path, **fields: Any) -> dict[str, Any]:
    unknown = set(fields) - set(SOLUTION_FIELDS)
    if unknown:
        raise LedgerError(f"unknown solutions.jsonl fields: {sorted(unknown)}")
    if fields.get("status") not in STATUSES:
        raise LedgerError(f"status {fields.get('status')!r} not in {STATUSES}")
    if fields.get("event") not in EVENTS:
        raise LedgerError(f"event {fields.get('event')!r} not in {EVENTS}")
    rows = read_solutions(task_dir)
    prev = rows[-1]["chain"] if rows else ""
    row: dict[str, Any] = {k: fields.get(k) for k in SOLUTION_FIELDS if k != "chain"}
    row["ts"] = row["ts"] or now_iso()
    evidence = dict(row.get("evidence") or {})
    for k in EVIDENCE_KEYS:
        evidence.setdefault(k, None)
    row["evidence"] = evidence
    row["note"] = row["note"] or ""
    row["chain"] = _chain(prev, json.dumps({k: row[k] for k in SOLUTION_FIELDS if k != "chain"}, sort_keys=True))
    with (Path(task_dir) / SOLUTIONS_FILE).open("a") as f:
        f.write(json.dumps(row, sort_keys=True) + "\n")
    return row


def validate_solutions(path: Path) -> list[str]:
    problems: list[str] = []
    path = Path(path)
    if not path.exists():
        return [f"{path}: missing"]
    prev = ""
    for i, line in enumerate(path.read_text().splitlines(), start=1):
        where = f"{path.name}:{i}"
        if not line.strip():
            problems.append(f"{where}: blank line")
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            problems.append(f"{where}: not JSON ({e})")
            return problems
        if set(row) != set(SOLUTION_FIELDS):
            problems.append(f"{where}: fields {sorted(row)} differ from the fixed schema {sorted(SOLUTION_FIELDS)}")
            continue
        if row["status"] not in STATUSES:
            problems.append(f"{where}: unknown status {row['status']!r} (allowed: {', '.join(STATUSES)})")
        if row["event"] not in EVENTS:
            problems.append(f"{where}: unknown event {row['event']!r} (allowed: {', '.join(EVENTS)})")
        if not isinstance(row["evidence"], dict) or not set(EVIDENCE_KEYS) <= set(row["evidence"]):
            problems.append(f"{where}: evidence must be an object with {EVIDENCE_KEYS}")
        if not row["id"] or not row["source_hash"]:
            problems.append(f"{where}: id and source_hash are required")
        expect = _chain(prev, json.dumps({k: row[k] for k in SOLUTION_FIELDS if k != "chain"}, sort_keys=True))
        if row["chain"] != expect:
            problems.append(f"{where}: hash chain broken (a row was edited, removed or reordered)")
            return problems
        prev = row["chain"]
    return problems


def validate_against_git(path: Path, ref: str = "HEAD") -> list[str]:
    """The committed ledger must be a prefix of the working copy (append-only history)."""
    path = Path(path).resolve()
    try:
        top = subprocess.run(["git", "-C", str(path.parent), "rev-parse", "--show-toplevel"],
                             capture_output=True, text=True, check=True).stdout.strip()
    except (subprocess.CalledProcessError, FileNotFoundError):
        return []
    rel = path.relative_to(Path(top).resolve())
    old = subprocess.run(["git", "-C", top, "show", f"{ref}:{rel.as_posix()}"], capture_output=True, text=True)
    if old.returncode != 0:
        return []  # not committed yet at ref
    if not path.exists():
        return [f"{rel}: deleted, but ledgers are append-only"]
    if not path.read_text().startswith(old.stdout):
        return [f"{rel}: history differs from {ref} (ledgers are append-only: append a superseding row instead)"]
    return []


# ---------------------------------------------------------------- summaries

def _f(v: Any) -> float | None:
    try:
        x = float(v)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(x) else x


def geomean(values: list[float]) -> float:
    vals = [v for v in values if v is not None and v > 0]
    if not vals:
        return float("nan")
    return math.exp(sum(math.log(v) for v in vals) / len(vals))


def summarize_run(rows: list[dict[str, Any]], column: str = "speedup") -> dict[str, Any]:
    """Equal-weight geomean and worst row of ``column`` over the production rows of one run."""
    prod = [(r["row"], _f(r.get(column))) for r in rows if r.get("row_kind") == "production"]
    prod = [(name, v) for name, v in prod if v is not None]
    if not prod:
        return {"geomean": None, "worst": None, "worst_row": None, "n_rows": 0}
    worst_row, worst = min(prod, key=lambda p: p[1])
    return {"geomean": geomean([v for _, v in prod]), "worst": worst, "worst_row": worst_row, "n_rows": len(prod)}


def runs(rows: list[dict[str, str]]) -> dict[str, list[dict[str, str]]]:
    """Rows grouped by run_id, in ledger order, minus runs superseded by a later run."""
    grouped: dict[str, list[dict[str, str]]] = {}
    superseded = {r["supersedes"] for r in rows if r.get("supersedes")}
    for r in rows:
        if r["run_id"] not in superseded:
            grouped.setdefault(r["run_id"], []).append(r)
    return grouped
