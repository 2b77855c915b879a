"""Every append-only ledger of the lab, in one package; this module is the two of a task folder:
``benchmark.csv`` and ``solutions.jsonl``.

The package: :mod:`kda_lab.ledger.store` (what every ledger shares: UTF-8 reads, locked appends, the hash
chain, chained CSV, the append-only rules against git), this module (the task ledgers), :mod:`kda_lab.ledger.e2e`
(``e2e/rows.csv``, the `kda e2e` ledger) and :mod:`kda_lab.ledger.box` (the GPU box's ledgers merged back,
``scripts/unpack_ledgers.sh``). It imports no stage: ``measure``, ``e2e``, ``report`` and ``export`` all read
and write ledgers through here, and none of them needs another for it.

Both carry a hash chain (``chain`` = sha256 of the previous row's chain and this row's content), so an
edited or removed historical row is detectable from the file alone. The chain has no fixed end, so dropping
the last rows is caught against git instead: every committed version must extend the one before it, and the
working copy must extend HEAD's (:func:`validate_git_history`, :func:`validate_against_git`).
:func:`validate_ledgers` is the one entry point (``kda validate`` and the exporter both run it).
Mistakes are corrected by appending a run that names the run it supersedes (same mode, arch, GPU model and
rows), never by editing.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from kda_lab.evidence import gpu_model_arch
from kda_lab.ledger.store import (
    LedgerError,
    append_locked,
    append_versioned_csv,
    as_newest,
    chain,
    now_iso,
    read_text,
    row_content,
    schema_records,
    validate_against_git,
    validate_git_history,
)
from kda_lab.stats import geomean

BENCHMARK_FILE = "benchmark.csv"
SOLUTIONS_FILE = "solutions.jsonl"

# Fixed schemas, oldest first. Adding a column is a schema change: a new entry here; appending to a ledger
# written under an older schema first appends the new header line (the migration), and rows above it keep
# their schema and their chain (never rewritten). Readers fill columns a row's schema lacks with "".
_V1 = (
    "ts", "run_id", "task", "arch", "mode", "candidate_id", "source_hash",
    "function", "row", "row_kind", "model", "preset", "dtype", "shape", "bytes",
    "baseline_us", "baseline_p10_us", "baseline_p90_us",
    "candidate_us", "candidate_p10_us", "candidate_p90_us", "speedup",
    "compile_us", "speedup_vs_compile", "copy_us", "sol", "candidate_tbps", "baseline_tbps",
    "host_baseline_us", "host_candidate_us", "trials", "input_sets", "seed",
    "gpu_name", "gpu_cc", "driver", "torch", "triton", "cuda", "sglang",
    "git_commit", "git_dirty", "command", "supersedes", "note", "chain",
)


def _after(schema: tuple[str, ...], anchor: str, added: tuple[str, ...]) -> tuple[str, ...]:
    """``schema`` with ``added`` inserted right after column ``anchor``."""
    k = schema.index(anchor) + 1
    return schema[:k] + added + schema[k:]


# v2: + overlay (was kda_kernels installed in the measuring process; kda_lab.measure.env.overlay_state)
_V2 = _after(_V1, "sglang", ("overlay",))
# v3: + the public peers (kda_lab.families.peers): every peer's verdict/time as JSON, and the best one
_V3 = _after(_V2, "overlay", ("peers", "best_peer", "best_peer_us", "speedup_vs_best_peer"))
# v4: + gpu_uuid (which GPU of the host measured, `--gpu`; kda_lab.measure.env.capture; older rows have none)
_V4 = _after(_V3, "gpu_cc", ("gpu_uuid",))
BENCHMARK_SCHEMAS: tuple[tuple[str, ...], ...] = (_V1, _V2, _V3, _V4)
BENCHMARK_COLUMNS: tuple[str, ...] = BENCHMARK_SCHEMAS[-1]
BENCHMARK_MODES = ("bench", "aa", "baseline-only")
# The torch.compile peer's key in the ``peers`` column: its oracle verdict (and time), written by `kda bench` since
# compile is checked like the public peers. Older rows have ``compile_us`` and no such key: no verdict.
COMPILE_PEER = "torch.compile"
ROW_KINDS = ("production", "test")
# Environment columns that every row must fill (those its schema has).
ENV_COLUMNS = ("gpu_name", "gpu_cc", "driver", "torch", "triton", "cuda", "sglang", "overlay", "git_commit", "command")
FLOAT_COLUMNS = (
    "bytes", "baseline_us", "baseline_p10_us", "baseline_p90_us", "candidate_us", "candidate_p10_us",
    "candidate_p90_us", "speedup", "compile_us", "speedup_vs_compile", "copy_us", "sol",
    "candidate_tbps", "baseline_tbps", "host_baseline_us", "host_candidate_us", "best_peer_us",
    "speedup_vs_best_peer",
)

SOLUTION_FIELDS: tuple[str, ...] = (
    "ts", "id", "parent", "status", "event", "source_hash", "arch", "gpu", "evidence",
    "git_commit", "command", "note", "chain",
)
STATUSES = ("baseline", "proposed", "correct", "incorrect", "benchmarked", "promoted", "rejected", "superseded")
# "interpret": a CPU verdict of `kda check --interpret` (gpu "cpu-interpreter"); never evidence (only GPU "check" is).
EVENTS = ("register", "check", "interpret", "bench", "promote", "revert", "note")
EVIDENCE_KEYS = ("run_id", "passed", "failed", "geomean", "worst")
RUN_EVENTS = ("check", "interpret", "bench")  # events whose evidence.run_id names one run, recorded once


# ---------------------------------------------------------------- benchmark.csv

def _parse_benchmark(text: str, where: str) -> tuple[list[tuple[int, tuple[str, ...], list[str]]], list[str]]:
    """Data records with the schema in force at each (a known header line switches it, oldest to newest),
    and the structural problems (unknown or backwards header, wrong number of fields)."""
    return schema_records(text, BENCHMARK_SCHEMAS, where, "kda_lab.ledger.BENCHMARK_COLUMNS")


def _as_row(columns: tuple[str, ...], fields: list[str]) -> dict[str, str]:
    return as_newest(columns, fields, BENCHMARK_COLUMNS)


def read_benchmark_rows(task_dir: Path) -> list[dict[str, str]]:
    """Every row as a dict over the newest schema (columns a row's schema lacks are ""). A record that does
    not parse raises LedgerError (run `kda validate`)."""
    path = Path(task_dir) / BENCHMARK_FILE
    return benchmark_rows_from_text(read_text(path), str(path)) if path.exists() else []


def benchmark_rows_from_text(text: str, where: str) -> list[dict[str, str]]:
    """:func:`read_benchmark_rows` of a benchmark.csv's text (``where`` names it in the error)."""
    rows, problems = _parse_benchmark(text, Path(where).name)
    if problems:
        raise LedgerError(f"{where}: {problems[0]} (run `kda validate`)")
    return [_as_row(columns, fields) for _, columns, fields in rows]


def append_benchmark_rows(task_dir: Path, rows: list[dict[str, Any]]) -> None:
    """Append rows (unknown keys rejected, missing keys empty), extending the hash chain from the last row in the
    file under an exclusive lock (kda_lab.ledger.store.append_locked). A ledger written under an older schema gets the
    current header line first (its rows stay as they are)."""
    append_versioned_csv(Path(task_dir) / BENCHMARK_FILE, BENCHMARK_SCHEMAS, rows, name=BENCHMARK_FILE,
                         fixed="kda_lab.ledger.BENCHMARK_COLUMNS")


def header_line() -> str:
    """The header a new benchmark.csv starts with (the newest schema)."""
    return ",".join(BENCHMARK_COLUMNS)


def _ledger_text(path: Path) -> tuple[str | None, list[str]]:
    """(the ledger's text, []) or (None, [its one problem]: missing or unreadable)."""
    if not path.exists():
        return None, [f"{path}: missing"]
    try:
        return read_text(path), []
    except LedgerError as e:
        return None, [str(e)]


def validate_benchmark_csv(path: Path) -> list[str]:
    """Schema, vocabulary, environment columns, hash chain, supersedes. Returns a list of problems."""
    path = Path(path)
    text, unreadable = _ledger_text(path)
    if text is None:
        return unreadable
    if not text:
        return [f"{path}: empty (must hold at least the header)"]
    records, problems = _parse_benchmark(text, path.name)
    if not text.endswith("\n"):
        problems.append(f"{path.name}: the last line is cut (no newline at the end of the file)")
    prev = ""
    rows: list[tuple[str, dict[str, str]]] = []
    for line, columns, fields in records:
        where = f"{path.name}:{line}"
        row = dict(zip(columns, fields, strict=True))
        if row["mode"] not in BENCHMARK_MODES:
            problems.append(f"{where}: mode {row['mode']!r} not in {BENCHMARK_MODES}")
        if row["row_kind"] not in ROW_KINDS:
            problems.append(f"{where}: row_kind {row['row_kind']!r} not in {ROW_KINDS}")
        for c in FLOAT_COLUMNS:
            if row.get(c):  # a column the row's schema lacks reads as empty
                try:
                    float(row[c])
                except ValueError:
                    problems.append(f"{where}: {c}={row[c]!r} is not a number")
        if row.get("peers"):
            try:
                peers = json.loads(row["peers"])
            except json.JSONDecodeError:
                peers = None
            if not isinstance(peers, dict):
                problems.append(f"{where}: peers is not a JSON object: {row['peers'][:60]!r}")
        missing_env = [c for c in ENV_COLUMNS if c in row and not row[c]]
        if missing_env:
            problems.append(f"{where}: environment columns empty: {missing_env}")
        if not row["run_id"] or not row["source_hash"]:
            problems.append(f"{where}: run_id and source_hash are required")
        if row["chain"] != chain(prev, row_content(row, columns)):
            problems.append(f"{where}: hash chain broken (a row was edited, removed or reordered)")
            return problems
        prev = row["chain"]
        rows.append((where, _as_row(columns, fields)))
    return problems + duplicate_runs(rows) + validate_supersedes(rows)


def duplicate_runs(rows: list[tuple[str, dict[str, str]]]) -> list[str]:
    """A run measures each (function, row) once, in one block of lines: a run id that comes back after another run,
    or measures a row twice, was appended twice (e.g. one box tarball unpacked twice)."""
    problems: list[str] = []
    seen: dict[tuple[str, str, str], str] = {}
    ended: set[str] = set()
    current = None
    for where, r in rows:
        if r["run_id"] != current:
            if r["run_id"] in ended:
                problems.append(f"{where}: duplicate run id {r['run_id']}: its rows appear again after another run")
            if current is not None:
                ended.add(current)
            current = r["run_id"]
        key = (r["run_id"], r["function"], r["row"])
        if key in seen:
            problems.append(f"{where}: duplicate run id {r['run_id']}: row {r['row']} measured twice (first at "
                            f"{seen[key]})")
        seen.setdefault(key, where)
    return problems[:10]


def _run_identity(rows: list[dict[str, str]]) -> tuple[str, str, frozenset[tuple[str, str]]]:
    first = rows[0]
    return (first["mode"], f"{first['arch']} on {gpu_model_arch(first['gpu_name'])}",
            frozenset((r["function"], r["row"]) for r in rows))


def validate_supersedes(rows: list[tuple[str, dict[str, str]]]) -> list[str]:
    """A run may supersede only an earlier run of the same mode, measured for the same arch on the same GPU
    model, over exactly the same rows (a one-row run cannot void a full one)."""
    problems: list[str] = []
    runs_in_order: dict[str, list[dict[str, str]]] = {}
    first_where: dict[str, str] = {}
    for where, r in rows:
        runs_in_order.setdefault(r["run_id"], []).append(r)
        first_where.setdefault(r["run_id"], where)
    seen: list[str] = []
    for run_id, rr in runs_in_order.items():
        where = first_where[run_id]
        targets = {r["supersedes"] for r in rr}
        target = next(iter(targets))
        if len(targets) > 1:
            problems.append(f"{where}: run {run_id} names several superseded runs {sorted(targets)}")
        elif target:
            if target == run_id or target not in seen:
                problems.append(f"{where}: run {run_id} supersedes {target}, which is not an earlier run")
            else:
                mine, theirs = _run_identity(rr), _run_identity(runs_in_order[target])
                if mine[0] != theirs[0]:
                    problems.append(f"{where}: run {run_id} ({mine[0]}) supersedes {target} ({theirs[0]}): "
                                    "only a run of the same mode may supersede another")
                if mine[1] != theirs[1]:
                    problems.append(f"{where}: run {run_id} ({mine[1]}) supersedes {target} ({theirs[1]}): "
                                    "only a run on the same arch and GPU model may supersede another")
                if mine[2] != theirs[2]:
                    missing = sorted(row for _, row in theirs[2] - mine[2])
                    extra = sorted(row for _, row in mine[2] - theirs[2])
                    problems.append(f"{where}: run {run_id} supersedes {target} but covers other rows "
                                    f"(missing {len(missing)}: {missing[:5]}, extra {len(extra)}: {extra[:5]}); "
                                    "only a run over the same rows may supersede another")
        seen.append(run_id)
    return problems


# ---------------------------------------------------------------- solutions.jsonl

def read_solutions(task_dir: Path) -> list[dict[str, Any]]:
    """Every row; a line that is not JSON raises LedgerError (run `kda validate`)."""
    path = Path(task_dir) / SOLUTIONS_FILE
    if not path.exists():
        return []
    out = []
    for i, line in enumerate(read_text(path).splitlines(), start=1):
        if not line.strip():
            continue
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError as e:
            raise LedgerError(f"{path}:{i}: not JSON ({e}); run `kda validate`") from None
    return out


def append_solution(task_dir: Path, **fields: Any) -> dict[str, Any]:
    unknown = set(fields) - set(SOLUTION_FIELDS)
    if unknown:
        raise LedgerError(f"unknown solutions.jsonl fields: {sorted(unknown)}")
    if fields.get("status") not in STATUSES:
        raise LedgerError(f"status {fields.get('status')!r} not in {STATUSES}")
    if fields.get("event") not in EVENTS:
        raise LedgerError(f"event {fields.get('event')!r} not in {EVENTS}")
    path = Path(task_dir) / SOLUTIONS_FILE
    row: dict[str, Any] = {k: fields.get(k) for k in SOLUTION_FIELDS if k != "chain"}
    row["ts"] = row["ts"] or now_iso()
    evidence = dict(row.get("evidence") or {})
    for k in EVIDENCE_KEYS:
        evidence.setdefault(k, None)
    row["evidence"] = evidence
    row["note"] = row["note"] or ""

    def build(text: str) -> str:  # under the lock: chained from the last row actually in the file
        if text and not text.endswith("\n"):
            raise LedgerError(f"{path}: the last line is cut (no newline at the end); run `kda validate`")
        last = next((ln for ln in reversed(text.splitlines()) if ln.strip()), "")
        try:
            prev = json.loads(last)["chain"] if last else ""
        except (json.JSONDecodeError, KeyError, TypeError):
            raise LedgerError(f"{path}: the last line is not a ledger row; run `kda validate`") from None
        row["chain"] = chain(prev, json.dumps({k: row[k] for k in SOLUTION_FIELDS if k != "chain"}, sort_keys=True))
        return json.dumps(row, sort_keys=True) + "\n"

    append_locked(path, build)
    return row


def validate_solutions(path: Path) -> list[str]:
    problems: list[str] = []
    path = Path(path)
    text, unreadable = _ledger_text(path)
    if text is None:
        return unreadable
    if text and not text.endswith("\n"):
        problems.append(f"{path.name}: the last line is cut (no newline at the end of the file)")
    prev = ""
    runs_seen: dict[tuple[str, str], str] = {}
    for i, line in enumerate(text.splitlines(), start=1):
        where = f"{path.name}:{i}"
        if not line.strip():
            problems.append(f"{where}: blank line")
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            problems.append(f"{where}: not JSON ({e})")
            return problems
        if not isinstance(row, dict) or set(row) != set(SOLUTION_FIELDS):
            keys = sorted(row) if isinstance(row, dict) else type(row).__name__
            problems.append(f"{where}: fields {keys} differ from the fixed schema {sorted(SOLUTION_FIELDS)}")
            continue
        if row["status"] not in STATUSES:
            problems.append(f"{where}: unknown status {row['status']!r} (allowed: {', '.join(STATUSES)})")
        if row["event"] not in EVENTS:
            problems.append(f"{where}: unknown event {row['event']!r} (allowed: {', '.join(EVENTS)})")
        if not isinstance(row["evidence"], dict) or not set(EVIDENCE_KEYS) <= set(row["evidence"]):
            problems.append(f"{where}: evidence must be an object with {EVIDENCE_KEYS}")
        if not row["id"] or not row["source_hash"]:
            problems.append(f"{where}: id and source_hash are required")
        run_id = row["evidence"].get("run_id") if isinstance(row["evidence"], dict) else None
        if run_id and row["event"] in RUN_EVENTS:
            if (row["event"], run_id) in runs_seen:
                problems.append(f"{where}: duplicate run id {run_id} for a {row['event']} row (first at "
                                f"{runs_seen[(row['event'], run_id)]}): a run was appended twice")
            runs_seen.setdefault((row["event"], run_id), where)
        expect = chain(prev, json.dumps({k: row[k] for k in SOLUTION_FIELDS if k != "chain"}, sort_keys=True))
        if row["chain"] != expect:
            problems.append(f"{where}: hash chain broken (a row was edited, removed or reordered)")
            return problems
        prev = row["chain"]
    return problems


def validate_ledgers(task_dir: Path) -> list[str]:
    """Everything `kda validate` checks on a task's two ledgers (the exporter runs the same code first):
    schema, hash chain, cut last line, supersedes, and append-only against the whole git history."""
    problems: list[str] = []
    bench, sols = Path(task_dir) / BENCHMARK_FILE, Path(task_dir) / SOLUTIONS_FILE
    if bench.exists():
        problems += validate_benchmark_csv(bench)
    if sols.exists():
        problems += validate_solutions(sols)
    for path in (bench, sols):
        problems += validate_git_history(path) + validate_against_git(path)
    return problems


# ---------------------------------------------------------------- summaries

def number(v: Any) -> float | None:
    """A ledger cell as a float; None when it is empty, not a number, or NaN."""
    try:
        x = float(v)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(x) else x


def summarize_run(rows: list[dict[str, Any]], column: str = "speedup") -> dict[str, Any]:
    """Equal-weight geomean and worst row of ``column`` over the production rows of one run."""
    prod = [(r["row"], number(r.get(column))) for r in rows if r.get("row_kind") == "production"]
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
