"""The evidence gate: what the task's ledgers must hold, at one source hash on the task's arch, before the
exporter promotes anything (the rules are in :mod:`kda_lab.export`'s docstring). Every Refusal says what is
missing and which `kda` command supplies it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kda_kernels.registry import FAST_PATH_FAMILIES
from kda_lab import ledger
from kda_lab.evidence import (
    a_gpu,
    bench_row_counts,
    check_coverage_gap,
    check_failed,
    describe_gaps,
    solution_counts,
    table_gaps,
)
from kda_lab.export import Refusal
from kda_lab.export.task import TaskMeta
from kda_lab.task.commits import commit_gap

GEOMEAN_MIN = 1.0
WORST_MIN = 0.97


@dataclass
class Evidence:
    source_hash: str
    check: dict[str, Any]
    run_id: str
    rows: list[dict[str, str]]
    summary: dict[str, Any]
    functions: dict[str, dict[str, Any]] = field(default_factory=dict)
    not_promoted: dict[str, str] = field(default_factory=dict)


def as_float(v: Any) -> float | None:
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


def rounded(v: float | None) -> float | None:
    """A speedup as the manifest and the stamps hold it."""
    return None if v is None else round(float(v), 4)


def _validated(task: TaskMeta) -> tuple[list[dict[str, Any]], list[dict[str, str]]]:
    """(solutions, benchmark rows) after the same validation `kda validate` runs; Refusal lists its
    problems."""
    problems = ledger.validate_ledgers(task.path)
    if problems:
        raise Refusal(f"{task.slug}: the ledgers do not validate (`kda validate {task.slug}`):\n  "
                      + "\n  ".join(problems))
    return ledger.read_solutions(task.path), ledger.read_benchmark_rows(task.path)


def _passing_checks(task: TaskMeta, sols: list[dict[str, Any]], h: str) -> tuple[list[dict], list[dict]]:
    """(every evidence check of hash h, the passing ones that count): event check, on a GPU that is the task's
    arch; a passing one counts only when it ran every production row with the task's seed count."""
    checks = [r for r in sols if r.get("event") == "check" and r.get("source_hash") == h
              and solution_counts(r, task.arch)]
    passing = [r for r in checks if r.get("status") == "correct"
               and (r.get("evidence") or {}).get("failed") in (None, 0)
               and not check_coverage_gap(r, task.checked, task.all_rows, task.seeds)]
    return checks, passing


def _refuse_failed_checks(task: TaskMeta, sols: list[dict[str, Any]], h: str) -> None:
    """Any failing correctness check of hash h, on any GPU, at any time, blocks promotion of that hash: a
    later passing check (other seeds, fewer rows) does not undo a wrong result."""
    failed = [r for r in sols if r.get("event") == "check" and r.get("source_hash") == h and check_failed(r)]
    if failed:
        r = failed[0]
        raise Refusal(f"{task.slug} at source hash {h}: a correctness check of this hash FAILED (run "
                      f"{(r.get('evidence') or {}).get('run_id')}, {r.get('gpu')}, {r.get('ts')}): a failing "
                      "check blocks its hash whatever comes after; fix src/ (a new hash) and check again")


def _evidence_runs(task: TaskMeta, rows: list[dict[str, str]], h: str) -> dict[str, list[dict[str, str]]]:
    """Bench runs of hash h measured on the task's arch, not superseded, with production rows, in order."""
    superseded = {r.get("supersedes") for r in rows if r.get("supersedes")}
    runs: dict[str, list[dict[str, str]]] = {}
    for r in rows:
        if (r.get("mode") == "bench" and r.get("source_hash") == h and bench_row_counts(r, task.arch)
                and r.get("run_id") not in superseded and r.get("function") in task.functions):
            runs.setdefault(r["run_id"], []).append(r)
    # A run of extra rows only (test rows, an end-to-end measurement) is not a benchmark of the table.
    return {rid: rr for rid, rr in runs.items() if any(r.get("row_kind") == "production" for r in rr)}


def _commit_gap(task: TaskMeta, rows: list[dict[str, Any]], h: str) -> str:
    """'' when every row's git_commit is in HEAD's history and holds src/ at h (kda_lab.task.commits); else
    why not."""
    for commit in dict.fromkeys(str(r.get("git_commit") or "") for r in rows):
        why = commit_gap(task.path, commit, h)
        if why:
            return why
    return ""


def _coverage_gaps(task: TaskMeta, checks: list[dict[str, Any]]) -> str:
    """Why the passing checks of a hash are not evidence (the latest one's reason), '' when there are none."""
    passed = [r for r in checks if r.get("status") == "correct"]
    if not passed:
        return ""
    r = passed[-1]
    why = check_coverage_gap(r, task.checked, task.all_rows, task.seeds)
    return f"the latest passing check (run {(r.get('evidence') or {}).get('run_id')}) is not evidence: {why}"


def gather_evidence(task: TaskMeta, h: str) -> Evidence:
    """The ledger evidence for source hash ``h`` on the task's arch, or Refusal saying what is missing."""
    where = f"{task.slug} at source hash {h} on {task.arch}"
    sols, rows = _validated(task)
    _refuse_failed_checks(task, sols, h)
    checks, passing = _passing_checks(task, sols, h)
    if not passing:
        gaps = _coverage_gaps(task, checks)
        if gaps:
            raise Refusal(f"{where}: no correctness run on {a_gpu(task.arch)} counts: {gaps}; run "
                          f"`kda check {task.slug}` (every row, the task's {task.seeds} seeds)")
        other = sorted({r.get("source_hash") for r in sols if r.get("event") == "check"
                        and r.get("status") == "correct" and r.get("arch") == task.arch} - {h})
        hint = (f" (passing GPU checks exist for other source hashes {other}: src/ changed since)"
                if other else "")
        raise Refusal(f"{where}: no passing correctness run on {a_gpu(task.arch)} in solutions.jsonl{hint}; "
                      f"run `kda check {task.slug}` on {a_gpu(task.arch)}")
    backed = [r for r in passing if not _commit_gap(task, [r], h)]
    if not backed:
        raise Refusal(f"{where}: no passing correctness run is backed by its commit: "
                      f"{_commit_gap(task, [passing[-1]], h)}")
    passing = backed
    runs = _evidence_runs(task, rows, h)
    if not runs:
        other = sorted({r.get("source_hash") for r in rows if r.get("mode") == "bench"
                        and r.get("arch") == task.arch} - {h})
        hint = f" (bench runs exist for other source hashes {other}: src/ changed since)" if other else ""
        raise Refusal(f"{where}: no benchmark run on {a_gpu(task.arch)} in benchmark.csv{hint}; run "
                      f"`kda bench {task.slug}` on {a_gpu(task.arch)}")
    if not task.production:
        raise Refusal(f"{where}: task.toml declares no timed production rows: nothing to promote on")
    whole = [rid for rid, rr in runs.items() if not any(table_gaps(rr, task.production))]
    if not whole:
        latest = list(runs)[-1]
        gaps = describe_gaps(*table_gaps(runs[latest], task.production), total=len(task.production))
        raise Refusal(f"{where}: no benchmark run covers the whole production table with finite speedups "
                      f"(latest run {latest}: {gaps}); run `kda bench {task.slug}` without --rows")
    unbacked = [rid for rid in whole if _commit_gap(task, runs[rid], h)]
    if len(unbacked) == len(whole):
        raise Refusal(f"{where}: no whole-table benchmark run is backed by its commit (run {whole[-1]}: "
                      f"{_commit_gap(task, runs[whole[-1]], h)})")
    whole = [rid for rid in whole if rid not in unbacked]
    return evidence_of_run(task, h, whole[-1], passing[-1], runs[whole[-1]])


def evidence_of_run(task: TaskMeta, h: str, run_id: str, check: dict[str, Any],
                    run_rows: list[dict[str, str]]) -> Evidence:
    """The gate and the per-function verdicts over one whole-table run (what the stamps are made of)."""
    where = f"{task.slug} at source hash {h} on {task.arch}"
    prod = [r for r in run_rows if r.get("row_kind") == "production" and task.production.get(r.get("row")) ==
            r.get("function")]
    summary = ledger.summarize_run(prod)
    gm, worst = as_float(summary.get("geomean")), as_float(summary.get("worst"))
    if not summary.get("n_rows") or gm is None or worst is None:
        raise Refusal(f"{where}: benchmark run {run_id} has no production rows with a speedup")
    if gm < GEOMEAN_MIN or worst < WORST_MIN:
        raise Refusal(f"{where}: benchmark run {run_id} fails the gate: geomean {gm:.3f}x "
                      f"(needs >= {GEOMEAN_MIN}), worst {worst:.3f}x on {summary.get('worst_row')} "
                      f"(needs >= {WORST_MIN})")
    ev = Evidence(h, check, run_id, run_rows, summary)
    for fn in task.functions:
        s = ledger.summarize_run([r for r in prod if r.get("function") == fn])
        fgm = as_float(s.get("geomean"))
        if not s.get("n_rows") or fgm is None:
            ev.not_promoted[fn] = f"no production rows in benchmark run {run_id}"
        elif fgm < GEOMEAN_MIN:
            ev.not_promoted[fn] = f"geomean {fgm:.3f}x < {GEOMEAN_MIN} in benchmark run {run_id}"
        else:
            ev.functions[fn] = {"speedup": rounded(fgm), "worst": rounded(as_float(s.get("worst"))),
                                "rows": s["n_rows"]}
    fp = FAST_PATH_FAMILIES.get(task.family)
    if fp is not None:  # the fast path is the unit the overlay installs: promoted when every kernel of it is
        if ev.not_promoted:
            ev.not_promoted = {fp.name: "; ".join(f"{k}: {v}" for k, v in ev.not_promoted.items())}
            ev.functions = {}
        else:
            ev.functions = {fp.name: {"speedup": rounded(gm), "worst": rounded(worst),
                                      "rows": summary["n_rows"]}}
    return ev


def manifest_evidence(task: TaskMeta, m: dict[str, Any]) -> Evidence:
    """The evidence the manifest names (its bench run and check run), re-derived from the ledgers under the
    gate's rules; Refusal when those rows are not (or no longer) evidence."""
    h = m.get("source_hash")
    bench_id = ((m.get("evidence") or {}).get("bench") or {}).get("run_id")
    check_id = ((m.get("evidence") or {}).get("check") or {}).get("run_id")
    sols, rows = _validated(task)
    _refuse_failed_checks(task, sols, h)
    _, passing = _passing_checks(task, sols, h)
    named = [r for r in passing if (r.get("evidence") or {}).get("run_id") == check_id]
    if not named:
        raise Refusal(f"the manifest's check run {check_id!r} is not a passing {task.arch} check of {h} in "
                      "solutions.jsonl (that ran every production row with the task's seeds)")
    gap = _commit_gap(task, named, h) or (_commit_gap(task, runs_rows, h) if (runs_rows := [
        r for r in rows if r.get("run_id") == bench_id]) else "")
    if gap:
        raise Refusal(f"the manifest's evidence is not backed by its commit: {gap}")
    runs = _evidence_runs(task, rows, h)
    if bench_id not in runs:
        raise Refusal(f"the manifest's bench run {bench_id!r} is not an {task.arch} bench run of {h} in "
                      "benchmark.csv (missing, superseded, another hash, or measured on another GPU)")
    gaps = table_gaps(runs[bench_id], task.production)
    if any(gaps):
        raise Refusal(f"the manifest's bench run {bench_id} is not a whole-table run: "
                      f"{describe_gaps(*gaps, total=len(task.production))}")
    return evidence_of_run(task, h, bench_id, named[-1], runs[bench_id])
