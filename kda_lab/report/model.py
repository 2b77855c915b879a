"""What the report reads: every task's runs, candidates and lineage, loaded from its ledgers and task.toml.

The model :mod:`kda_lab.report.markdown` (tables, leaderboard, README splice) and :mod:`kda_lab.report.plots`
(PNGs) both render; it imports neither of them, so they share it instead of importing each other.
"""

from __future__ import annotations

import json
import math
import tomllib
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import Any

from kda_lab import ledger
from kda_lab.evidence import bench_row_counts, solution_from_another_gpu
from kda_lab.task.flop_model import FLOP_MODELS
from kda_lab.task.twins import TwinError, with_home_rows

ORDER_FILE = Path("scripts/launch_kernels/order.txt")
# Same thresholds as kda_lab.measure.run (not imported: that module needs torch).
LARGE_ROW_BYTES = 64e6
SUSPECT_SOL = 0.98
# The compile peer's key in the ``peers`` column (its oracle verdict; kda_lab.measure.run.compile_verdict).
COMPILE_PEER = ledger.COMPILE_PEER
# What a split run must share with the runs it merges with (kda_lab.report.model.split_mismatch). The
# candidate's sources and the environment, because a peer table is only one table where every row was timed
# against the same code on the same GPU model and software, and the commit, because the harness itself is code.
SPLIT_KEYS = ("task", "arch", "mode", "candidate_id", "source_hash", "gpu_name", "driver", "torch", "triton",
              "sglang", "git_commit")
# A split table is one sitting of box calls; runs further apart are separate measurements and stay apart.
SPLIT_WINDOW_S = 12 * 3600
NUMERIC = ("bytes", "baseline_us", "candidate_us", "speedup", "compile_us", "speedup_vs_compile", "copy_us", "sol",
           "candidate_tbps", "baseline_tbps", "best_peer_us", "speedup_vs_best_peer")


# ------------------------------------------------------------------------------------------------ model

@dataclass
class Run:
    run_id: str
    mode: str
    candidate_id: str
    source_hash: str
    ts: str
    gpu: str
    arch: str
    rows: list[dict[str, Any]]  # production rows, numbers as float | None
    env: dict[str, str] = field(default_factory=dict)  # SPLIT_KEYS of the run's first row
    merged_from: list[str] = field(default_factory=list)  # the runs a split table was merged from, ledger order

    @property
    def date(self) -> str:
        return self.ts[:10]

    @property
    def label(self) -> str:
        """How the report names the run: its id, or the runs a split table was merged from."""
        if self.merged_from:
            return "merged from runs " + ", ".join(f"`{r}`" for r in self.merged_from)
        return f"run `{self.run_id}`"

    def measured_us(self, r: dict[str, Any]) -> float | None:
        """The measured side's time on row ``r``: the candidate in a bench run, SGLang otherwise."""
        return r["candidate_us"] if self.mode == "bench" else r["baseline_us"]

    def summary(self, column: str = "speedup") -> dict[str, Any]:
        return ledger.summarize_run(self.rows, column)

    @property
    def geomean(self) -> float | None:
        return self.summary()["geomean"]

    def large_sol(self) -> list[tuple[str, float]]:
        return [(r["row"], r["sol"]) for r in self.rows
                if r["sol"] is not None and (r["bytes"] or 0) >= LARGE_ROW_BYTES]

    @property
    def peer_names(self) -> list[str]:
        return sorted({name for r in self.rows for name in r["peers"]})

    @property
    def peers_checked(self) -> bool:
        """Whether any peer ran in this run (timed, or found wrong by the oracle), not only n/a or unavailable."""
        return any(v.get("verdict") in ("ok", "wrong") for r in self.rows for v in r["peers"].values() if v)

    def compile_summary(self) -> dict[str, Any]:
        """The torch.compile peer over this run's rows: SGLang time / compile time on the rows where the oracle
        passed it (geomean, worst), rows it was wrong on, and rows timed with no verdict recorded (not counted)."""
        states = [(r, compile_state(r)) for r in self.rows]
        timed = [(r["row"], r["baseline_us"] / r["compile_us"]) for r, s in states if s == "ok" and r["baseline_us"]]
        worst = min(timed, key=lambda t: t[1]) if timed else (None, None)
        verdict = next((r["peers"][COMPILE_PEER] for r, s in states if s in ("ok", "wrong")), {})
        return {"geomean": ledger.geomean([s for _, s in timed]) if timed else None, "worst": worst[1],
                "worst_row": worst[0], "timed": len(timed),
                "wrong": sorted(r["row"] for r, s in states if s == "wrong"),
                "unchecked": sum(1 for _, s in states if s == "unchecked"),
                "not_applied": sum(1 for _, s in states if s == "n/a"),
                # rows with no verdict still name the torch that compiled them (the row's torch column)
                "version": (verdict.get("version", "") if isinstance(verdict, dict) else "") or self.env.get("torch", "")}

    def best_peers(self) -> list[tuple[str, str, float]]:
        """(row, fastest correct peer, peer time / measured side's time) on every row where a correct peer was
        timed: QuACK, Liger, FlashInfer by their verdicts, torch.compile where its verdict is ok. Computed here
        from ``peers`` and ``compile_us``, not read from ``best_peer``: rows written before compile was checked
        have a ``best_peer`` without it."""
        out = []
        for r in self.rows:
            measured = self.measured_us(r)
            times = correct_peer_times(r)
            if measured and times:
                name, us = min(times, key=lambda t: (t[1], t[0]))
                out.append((r["row"], name, us / measured))
        return out

    def vs_best_peer(self) -> dict[str, Any]:
        """Geomean and worst of :meth:`best_peers` (above 1 the measured side is faster), rows compared."""
        best = self.best_peers()
        if not best:
            return {"geomean": None, "worst": None, "worst_row": None, "worst_peer": None, "n_rows": 0}
        row, peer, worst = min(best, key=lambda t: t[2])
        return {"geomean": ledger.geomean([v for _, _, v in best]), "worst": worst, "worst_row": row,
                "worst_peer": peer, "n_rows": len(best)}

    def peer_summary(self, name: str) -> dict[str, Any]:
        """One peer over this run's production rows: SGLang time / peer time (geomean, worst), rows it was
        timed on, rows where it was wrong, rows it does not apply to (or was not installed for)."""
        verdicts = [(r, r["peers"].get(name)) for r in self.rows]
        timed = [(r["row"], r["baseline_us"] / v["us"]) for r, v in verdicts
                 if v and v.get("verdict") == "ok" and v.get("us") and r["baseline_us"]]
        worst = min(timed, key=lambda t: t[1]) if timed else (None, None)
        return {"geomean": ledger.geomean([s for _, s in timed]) if timed else None, "worst": worst[1],
                "worst_row": worst[0], "timed": len(timed),
                "wrong": sorted(r["row"] for r, v in verdicts if v and v.get("verdict") == "wrong"),
                "not_applied": sum(1 for _, v in verdicts if v and v.get("verdict") in ("n/a", "unavailable")),
                "version": next((v["version"] for _, v in verdicts if v and v.get("version")), "")}

    def beaten_by_peers(self) -> list[tuple[str, str, float]]:
        """(row, best peer, measured side's time / peer's time) where a correct peer, torch.compile included, is
        faster."""
        return [(row, peer, 1 / ratio) for row, peer, ratio in self.best_peers() if ratio < 1]

    def unchecked_compile_faster(self) -> list[tuple[str, float]]:
        """(row, measured side's time / compile time) where torch.compile was timed faster but no oracle verdict
        was recorded for it: shown, never counted."""
        out = []
        for r in self.rows:
            measured = self.measured_us(r)
            if compile_state(r) == "unchecked" and measured and r["compile_us"] < measured:
                out.append((r["row"], measured / r["compile_us"]))
        return out

    def aa(self) -> dict[str, float] | None:
        vals = [r["speedup"] for r in self.rows if r["speedup"]]
        if not vals:
            return None
        return {"geomean": ledger.geomean(vals), "max_dev": max(abs(1 - v) for v in vals), "n": len(vals)}


def compile_state(r: dict[str, Any]) -> str:
    """The compile peer on one row: "ok" or "wrong" (the oracle's verdict, recorded by ``kda bench``), "n/a"
    (it did not run), "unchecked" (a time with no verdict: rows from before compile was checked), "" (not timed).
    A time is counted only with an "ok" verdict, so a compile time recorded beside a "wrong" verdict never
    makes compile the faster peer."""
    info = r["peers"].get(COMPILE_PEER)
    verdict = info.get("verdict") if isinstance(info, dict) else None
    if verdict in ("wrong", "n/a", "unavailable"):
        return "wrong" if verdict == "wrong" else "n/a"
    if r["compile_us"] is None or r["compile_us"] <= 0:
        return ""
    return "ok" if verdict == "ok" else "unchecked"


def correct_peer_times(r: dict[str, Any]) -> list[tuple[str, float]]:
    """(peer, µs) of every peer the oracle passed on row ``r`` and that was timed, torch.compile included when
    its verdict is ok (its time is the row's ``compile_us``)."""
    out = [(name, float(v["us"])) for name, v in r["peers"].items()
           if name != COMPILE_PEER and isinstance(v, dict) and v.get("verdict") == "ok" and v.get("us")]
    if compile_state(r) == "ok":
        out.append((COMPILE_PEER, r["compile_us"]))
    return out


def split_mismatch(a: Run, b: Run) -> str:
    """Why runs ``a`` and ``b`` are not parts of one table split across box calls with ``--rows`` ("" when they
    are): they must share every SPLIT_KEYS column (task, mode, candidate and its source hash, GPU model, driver,
    torch, Triton, SGLang, commit), start within SPLIT_WINDOW_S of each other and measure disjoint rows."""
    for key in SPLIT_KEYS:
        if a.env.get(key, "") != b.env.get(key, ""):
            return f"{key} differs ({a.env.get(key, '')!r} vs {b.env.get(key, '')!r})"
    if not a.rows or not b.rows:
        return "a run without production rows"
    apart = abs((_when(a.ts) - _when(b.ts)).total_seconds())
    if apart > SPLIT_WINDOW_S:
        return f"{apart / 3600:.1f} h apart (one sitting is at most {SPLIT_WINDOW_S // 3600} h)"
    both = {r["row"] for r in a.rows} & {r["row"] for r in b.rows}
    if both:
        return f"{len(both)} rows measured in both ({sorted(both)[0]}, ...)"
    return ""


def _when(ts: str) -> datetime:
    return datetime.fromisoformat(ts.replace("Z", "+00:00"))


def merge_split(runs: list[Run]) -> Run:
    """One evidence view of a table split across runs; ValueError when any two may not merge (split_mismatch)."""
    if not runs:
        raise ValueError("nothing to merge")
    for i, a in enumerate(runs):
        for b in runs[i + 1:]:
            why = split_mismatch(a, b)
            if why:
                raise ValueError(f"runs {a.run_id} and {b.run_id} are not one split table: {why}")
    if len(runs) == 1:
        return runs[0]
    ids = [r.run_id for r in runs]
    return replace(runs[0], run_id="+".join(ids), ts=min(r.ts for r in runs),
                   rows=[row for r in runs for row in r.rows], merged_from=ids)


@dataclass
class Candidate:
    id: str
    parent: str | None
    status: str
    source_hash: str
    first_ts: str
    runs: list[Run] = field(default_factory=list)
    promote_run: str | None = None  # evidence run_id of the latest promote event

    @property
    def best(self) -> Run | None:
        scored = [r for r in self.runs if r.geomean is not None]
        return max(scored, key=lambda r: (r.geomean, r.ts, r.run_id)) if scored else None


@dataclass
class TaskReport:
    slug: str
    arch: str
    family: str
    title: str
    production: list[tuple[str, str]]  # (row, model) in task.toml order
    launcher: str
    runs: list[Run]  # GPU runs on the task's arch, not superseded, ledger order
    superseded: list[tuple[str, str]]  # (run, superseded by)
    ignored_rows: int  # rows measured on cpu or on a GPU that is not the task's arch (kda_lab.evidence)
    lineage: list[Candidate]
    problem: str = ""
    # FLOPs per call of each production row, for a family with a FLOP model (kda_lab.task.flop_model)
    flops: dict[str, float] = field(default_factory=dict)

    @property
    def bench_runs(self) -> list[Run]:
        return [r for r in self.runs if r.mode == "bench"]

    @property
    def latest_aa(self) -> Run | None:
        aa = [r for r in self.runs if r.mode == "aa"]
        return aa[-1] if aa else None

    @property
    def promoted(self) -> list[Candidate]:
        return [c for c in self.lineage if c.status == "promoted"]

    def headline(self) -> tuple[Run | None, str]:
        """(run, kind): the promoted candidate's evidence run, else the best benchmarked run."""
        promoted_ids = {c.id for c in self.promoted}
        if promoted_ids:
            runs = [r for r in self.bench_runs if r.candidate_id in promoted_ids]
            evidence = {c.promote_run for c in self.promoted}
            chosen = [r for r in runs if r.run_id in evidence]
            pool = chosen or runs
            scored = [r for r in pool if r.geomean is not None]
            if scored:
                return max(scored, key=lambda r: (r.geomean, r.ts, r.run_id)), "promoted"
        scored = [r for r in self.bench_runs if r.geomean is not None]
        # a `--rows` subset is not the task's headline: the best run over the whole production table is
        full = [r for r in scored if {x["row"] for x in r.rows} >= {name for name, _ in self.production}]
        if full or scored:
            return max(full or scored, key=lambda r: (r.geomean, r.ts, r.run_id)), "best benchmarked, not promoted"
        return None, ""

    def peer_run(self) -> Run | None:
        """The run whose peer columns are shown: the headline run when a peer ran in it, else the latest run in
        which one did (a baseline-only run times SGLang beside the peers), else the latest run that names peers.
        A box call without a peer's staged package records it as unavailable on every row: such a headline run
        must not hide an earlier run that measured the peer."""
        head, _ = self.headline()
        if head is not None and head.peers_checked:
            return head
        with_peers = [r for r in self.runs if r.mode != "aa" and r.peer_names]
        checked = [r for r in with_peers if r.peers_checked]
        return (checked or with_peers or [None])[-1]

    def split_group(self, run: Run) -> list[Run]:
        """``run`` and every other run of this task that is part of the same split table (split_mismatch says
        what that takes), in ledger order; a run that cannot join all of them is left out."""
        group = [run]
        for other in self.runs:
            if other is not run and all(not split_mismatch(other, g) for g in group):
                group.append(other)
        order = {r.run_id: i for i, r in enumerate(self.runs)}
        return sorted(group, key=lambda r: order.get(r.run_id, -1))

    def headline_sources(self) -> list[Run]:
        """Every bench run of the headline candidate's sources (same candidate and source hash), ledger order:
        the headline run and later runs of the same code (a peer batch, a `--rows` subset)."""
        head, _ = self.headline()
        if head is None:
            return []
        return [r for r in self.bench_runs if r.source_hash == head.source_hash and r.candidate_id == head.candidate_id]

    def merged_views(self, runs: list[Run]) -> list[Run]:
        """``runs`` as evidence views: each split table merged into one, every other run on its own."""
        views: list[Run] = []
        taken: set[str] = set()
        for run in runs:
            if run.run_id in taken:
                continue
            group = [g for g in self.split_group(run) if g in runs and g.run_id not in taken]
            taken.update(g.run_id for g in group)
            views.append(merge_split(group))
        return views

    def family_view(self) -> Run | None:
        """What "vs best peer" compares: of the views of the headline candidate's sources (split tables merged)
        in which a peer was checked, the one comparing the most rows with a correct peer (then the latest), so a
        later batch that times every peer on the whole table, compile with its verdict, replaces an older partial
        one; without any, the headline run (merged with the rest of its table when split)."""
        head, _ = self.headline()
        if head is None:
            return None
        views = self.merged_views(self.headline_sources())
        checked = [v for v in views if v.peers_checked]
        if checked:
            return max(checked, key=lambda v: (v.vs_best_peer()["n_rows"], len(v.rows), v.ts))
        return next(v for v in views if head.run_id in (v.merged_from or [v.run_id]))

    def peer_view(self) -> Run | None:
        """The evidence the peer tables show: :meth:`family_view` when a peer was checked in it, else
        :meth:`peer_run` (a baseline-only run times SGLang beside the peers) merged with the rest of its table
        when split, else the headline run for its compile times."""
        family = self.family_view()
        if family is not None and family.peers_checked:
            return family
        run = self.peer_run()
        if run is None:
            return family
        return merge_split(self.split_group(run))

    def baseline_run(self) -> Run | None:
        """The run whose SGLang numbers are shown: the headline run, else the latest GPU run."""
        head, _ = self.headline()
        return head or (self.runs[-1] if self.runs else None)

    @property
    def status(self) -> str:
        if self.problem:
            return "invalid task.toml"
        if self.promoted:
            return "promoted " + ", ".join(c.id for c in self.promoted)
        head, _ = self.headline()
        if head is not None:
            return f"benchmarked (best {head.candidate_id})"
        if self.runs:
            # a candidate written after the baseline runs (checked on CPU at most) is news the table must carry
            last = self.lineage[-1] if self.lineage else None
            if last is not None and last.status not in ("baseline", "superseded", "rejected") and not last.runs:
                return f"baseline measured; {last.id} {last.status}, no GPU timing"
            return "baseline measured"
        if self.lineage:
            last = self.lineage[-1]
            return f"{last.id} {last.status}, no GPU timing"
        return "no runs yet"


# ------------------------------------------------------------------------------------------------ loading

def _peers(text: str) -> dict[str, dict[str, Any]]:
    """The peers column (JSON; kda validate rejects anything else), {} for rows of an older schema."""
    if not text:
        return {}
    value = json.loads(text)
    return value if isinstance(value, dict) else {}


def read_benchmark(task_dir: Path) -> list[dict[str, str]]:
    """benchmark.csv as string records (kda_lab.ledger's reader: it knows every schema the ledger has had)."""
    return ledger.read_benchmark_rows(task_dir)


def read_solutions(task_dir: Path) -> list[dict[str, Any]]:
    import pandas as pd

    path = task_dir / ledger.SOLUTIONS_FILE
    if not path.exists() or not path.read_text().strip():
        return []
    df = pd.read_json(path, lines=True, dtype=False)
    return [{k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in rec.items()}
            for rec in df.to_dict("records")]


def read_launchers(root: Path) -> dict[str, str]:
    path = root / ORDER_FILE
    if not path.exists():
        return {}
    slugs = [ln.strip() for ln in path.read_text().splitlines()]
    return {s: f"k{i:02d}" for i, s in enumerate(slugs, start=1) if s and not s.startswith("#")}


def load_task_report(task_dir: Path, launchers: dict[str, str]) -> TaskReport:
    slug = task_dir.name
    try:
        raw = tomllib.loads((task_dir / "task.toml").read_text())
        problem = ""
    except (OSError, tomllib.TOMLDecodeError) as e:
        raw, problem = {}, f"task.toml unreadable: {e}"
    try:
        raw = with_home_rows(raw, task_dir)  # a twin's rows are its home's (rows_from), then its own
    except TwinError as e:
        problem = str(e)
    arch, family = str(raw.get("arch", "?")), str(raw.get("family", "?"))
    production = [(str(w.get("name")), str(w.get("model", ""))) for w in raw.get("workloads", [])
                  if w.get("kind") == "production"]
    records = read_benchmark(task_dir)
    superseded: list[tuple[str, str]] = []
    for r in records:
        if r.get("supersedes") and (r["supersedes"], r["run_id"]) not in superseded:
            superseded.append((r["supersedes"], r["run_id"]))
    runs: list[Run] = []
    ignored = 0
    for run_id, rows in ledger.runs(records).items():
        first = rows[0]
        # only rows measured on a GPU that is the task's arch are results (an H100 is not an H200)
        if arch == "?" or not bench_row_counts(first, arch):
            ignored += len(rows)
            continue
        prod = []
        for r in rows:
            if r.get("row_kind") != "production":
                continue
            rec: dict[str, Any] = {k: r.get(k, "") for k in ("row", "row_kind", "model", "function", "shape")}
            rec.update({k: ledger.number(r.get(k)) for k in NUMERIC})
            rec["best_peer"] = r.get("best_peer", "")
            rec["peers"] = _peers(r.get("peers", ""))
            prod.append(rec)
        runs.append(Run(run_id=run_id, mode=first["mode"], candidate_id=first["candidate_id"],
                        source_hash=first["source_hash"], ts=min(r["ts"] for r in rows), gpu=first["gpu_name"],
                        arch=first["arch"], rows=prod, env={k: first.get(k, "") for k in SPLIT_KEYS}))
    lineage: dict[str, Candidate] = {}
    for s in read_solutions(task_dir):
        cid = str(s.get("id"))
        c = lineage.get(cid)
        if c is None:
            c = lineage[cid] = Candidate(id=cid, parent=s.get("parent"), status=str(s.get("status")),
                                         source_hash=str(s.get("source_hash")), first_ts=str(s.get("ts")))
        # A promoted candidate stays promoted until the exporter reverts it or promotes another: a later check or
        # bench of the same sources (a peer comparison, a row subset) does not take it out of kda_kernels.
        # A row another GPU measured (an H100 that ran an h200 task) is in the ledger, but it is not this task's
        # evidence: it does not change the candidate's status here, as its runs are not its results.
        if not solution_from_another_gpu(s, arch) and not (
                c.status == "promoted" and s.get("event") in ("check", "bench", "interpret", "note")):
            c.status = str(s.get("status"))
        if s.get("event") == "promote":
            ev = s.get("evidence") or {}
            c.promote_run = ev.get("run_id") if isinstance(ev, dict) else None
            # one export per task and arch: promoting this candidate replaced whichever was promoted before
            for other in lineage.values():
                if other.id != cid and other.status == "promoted":
                    other.status = "superseded"
    for r in runs:
        if r.mode != "bench":
            continue
        if r.candidate_id not in lineage:
            lineage[r.candidate_id] = Candidate(id=r.candidate_id, parent=None, status="benchmarked",
                                                source_hash=r.source_hash, first_ts=r.ts)
        lineage[r.candidate_id].runs.append(r)
    return TaskReport(slug=slug, arch=arch, family=family, title=str(raw.get("title", slug)), production=production,
                      launcher=launchers.get(slug, ""), runs=runs, superseded=superseded, ignored_rows=ignored,
                      lineage=list(lineage.values()), problem=problem, flops=_row_flops(family, raw))


def _row_flops(family: str, raw: dict[str, Any]) -> dict[str, float]:
    """FLOPs per call of each production row of a task.toml (empty: the family has no FLOP model)."""
    model = FLOP_MODELS.get(family)
    out: dict[str, float] = {}
    if model is None:
        return out
    for w in raw.get("workloads", []):
        if w.get("kind") == "production":
            try:
                out[str(w.get("name"))] = model(w.get("args", {}))
            except (KeyError, TypeError, ValueError):
                continue  # kda validate reports a malformed row; the report shows no FLOPs for it
    return out


def collect(root: Path) -> list[TaskReport]:
    launchers = read_launchers(root)
    dirs = sorted(p.parent for p in (root / "kernels").glob("*/task.toml"))
    return [load_task_report(d, launchers) for d in dirs]


def plot_names(t: TaskReport) -> list[str]:
    """The PNGs `kda report` draws for this task (none without GPU rows)."""
    names = []
    if t.bench_runs or t.latest_aa:
        names.append("speedup.png")
    if t.runs:
        names.append("tbps.png")
    if t.bench_runs:
        names.append("lineage.png")
    return names
