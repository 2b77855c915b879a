"""``kda report [--check]``: the leaderboard, per-task plots and the README task table, from the ledgers only.

Inputs: ``kernels/*/benchmark.csv`` and ``solutions.jsonl`` (superseded runs dropped by
:func:`kda_lab.ledger.runs`), ``task.toml`` (arch, family, title, production rows) and
``scripts/launch_kernels/order.txt`` (launcher numbers). Nothing is measured and nothing is imported from a
candidate. Outputs:

- ``docs/leaderboard.md``: per task the headline result (the promoted candidate's run, or the best
  benchmarked run if nothing is promoted), geomean and worst row vs SGLang and vs torch.compile, ``sol`` on
  large rows, the latest A/A spread, per-row numbers, every run, the candidate lineage;
- ``docs/plots/<task>/{speedup,tbps,lineage}.png``;
- the task table in ``README.md`` between ``<!-- kda:tasks:start -->`` and ``<!-- kda:tasks:end -->``.

Output is a pure function of the ledgers (dates come from ledger rows, never from the clock), so
``kda report --check`` can say whether README.md / docs/leaderboard.md are stale (exit 1) without writing.
PNG bytes depend on the matplotlib/freetype build, so ``--check`` only requires the referenced plots to exist.
"""

from __future__ import annotations

import argparse
import math
import sys
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kda_lab import ledger
from kda_lab.evidence import bench_row_counts

START_MARKER = "<!-- kda:tasks:start -->"
END_MARKER = "<!-- kda:tasks:end -->"
LEADERBOARD = Path("docs/leaderboard.md")
PLOTS = Path("docs/plots")
README = Path("README.md")
ORDER_FILE = Path("scripts/launch_kernels/order.txt")
# Same thresholds as kda_lab.run (not imported: that module needs torch).
LARGE_ROW_BYTES = 64e6
SUSPECT_SOL = 0.98
NUMERIC = ("bytes", "baseline_us", "candidate_us", "speedup", "compile_us", "speedup_vs_compile", "copy_us", "sol",
           "candidate_tbps", "baseline_tbps")


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

    @property
    def date(self) -> str:
        return self.ts[:10]

    def summary(self, column: str = "speedup") -> dict[str, Any]:
        return ledger.summarize_run(self.rows, column)

    @property
    def geomean(self) -> float | None:
        return self.summary()["geomean"]

    def large_sol(self) -> list[tuple[str, float]]:
        return [(r["row"], r["sol"]) for r in self.rows
                if r["sol"] is not None and (r["bytes"] or 0) >= LARGE_ROW_BYTES]

    def aa(self) -> dict[str, float] | None:
        vals = [r["speedup"] for r in self.rows if r["speedup"]]
        if not vals:
            return None
        return {"geomean": ledger.geomean(vals), "max_dev": max(abs(1 - v) for v in vals), "n": len(vals)}


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
        if scored:
            return max(scored, key=lambda r: (r.geomean, r.ts, r.run_id)), "best benchmarked, not promoted"
        return None, ""

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
            return "baseline measured"
        if self.lineage:
            last = self.lineage[-1]
            return f"{last.id} {last.status}, no GPU timing"
        return "no runs yet"


# ------------------------------------------------------------------------------------------------ loading

def _num(v: Any) -> float | None:
    try:
        x = float(v)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(x) else x


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
            rec.update({k: _num(r.get(k)) for k in NUMERIC})
            prod.append(rec)
        runs.append(Run(run_id=run_id, mode=first["mode"], candidate_id=first["candidate_id"],
                        source_hash=first["source_hash"], ts=min(r["ts"] for r in rows), gpu=first["gpu_name"],
                        arch=first["arch"], rows=prod))
    lineage: dict[str, Candidate] = {}
    for s in read_solutions(task_dir):
        cid = str(s.get("id"))
        c = lineage.get(cid)
        if c is None:
            c = lineage[cid] = Candidate(id=cid, parent=s.get("parent"), status=str(s.get("status")),
                                         source_hash=str(s.get("source_hash")), first_ts=str(s.get("ts")))
        c.status = str(s.get("status"))
        if s.get("event") == "promote":
            ev = s.get("evidence") or {}
            c.promote_run = ev.get("run_id") if isinstance(ev, dict) else None
    for r in runs:
        if r.mode != "bench":
            continue
        if r.candidate_id not in lineage:
            lineage[r.candidate_id] = Candidate(id=r.candidate_id, parent=None, status="benchmarked",
                                                source_hash=r.source_hash, first_ts=r.ts)
        lineage[r.candidate_id].runs.append(r)
    return TaskReport(slug=slug, arch=arch, family=family, title=str(raw.get("title", slug)), production=production,
                      launcher=launchers.get(slug, ""), runs=runs, superseded=superseded, ignored_rows=ignored,
                      lineage=list(lineage.values()), problem=problem)


def collect(root: Path) -> list[TaskReport]:
    launchers = read_launchers(root)
    dirs = sorted(p.parent for p in (root / "kernels").glob("*/task.toml"))
    return [load_task_report(d, launchers) for d in dirs]


# ------------------------------------------------------------------------------------------------ formatting

def _x(v: float | None, digits: int = 3) -> str:
    return "–" if v is None else f"{v:.{digits}f}×"


def _aa_text(t: TaskReport, short: bool = True) -> str:
    aa = t.latest_aa
    s = aa.aa() if aa else None
    if not s:
        return "–"
    text = f"{s['geomean']:.4f}, max {s['max_dev']:.2%}"
    return text if short else f"{text} over {s['n']} rows (run `{aa.run_id}`, {aa.date})"


def _sol_text(run: Run | None, who: str = "") -> str:
    if run is None:
        return "–"
    sols = run.large_sol()
    if not sols:
        return "no large rows"
    lo, hi = min(v for _, v in sols), max(v for _, v in sols)
    flag = "!" if hi > SUSPECT_SOL else ""
    rng = f"{lo:.2f}" if abs(hi - lo) < 5e-3 else f"{lo:.2f}–{hi:.2f}"
    return f"{who}{rng}{flag}"


def _headline_cells(t: TaskReport) -> tuple[str, str, str]:
    """(best geomean, worst row, sol) cells of the task table."""
    head, _ = t.headline()
    if head is None:
        base = t.baseline_run()
        return "–", "–", _sol_text(base, "SGLang ") if base else "–"
    s = head.summary()
    return (f"{_x(s['geomean'])} ({head.candidate_id})", f"{_x(s['worst'])} {s['worst_row']}", _sol_text(head))


def task_table(reports: list[TaskReport], link_prefix: str = "") -> str:
    head = ("| task | arch | family | status | best geomean | worst row | A/A spread | sol (≥ 64 MB) | launcher |\n"
            "|---|---|---|---|---:|---|---|---|---|")
    lines = [head]
    for t in reports:
        g, w, sol = _headline_cells(t)
        lines.append(f"| [{t.slug}]({link_prefix}kernels/{t.slug}/) | {t.arch} | {t.family} | {t.status} | {g} | "
                     f"{w} | {_aa_text(t)} | {sol} | {t.launcher or '–'} |")
    if not reports:
        lines.append("| (no task folders under kernels/) | | | | | | | | |")
    return "\n".join(lines)


TABLE_LEGEND = ("best geomean: equal-weight geomean of per-row speedups vs SGLang 0.5.23 over the production rows "
                "(promoted candidate, else best benchmarked); worst row: lowest per-row speedup in that run; A/A "
                "spread: latest baseline-vs-baseline run, geomean and largest per-row |1−s|; sol: same-size copy "
                "time / kernel time on rows ≥ 64 MB (`!`: above 0.98, suspect; read-heavy kernels can pass a 1:1 "
                "copy legitimately). Generated by `kda report` from the ledgers; details in docs/leaderboard.md.")


def _row_table(t: TaskReport, run: Run) -> list[str]:
    bench = run.mode == "bench"
    out = ["| row | model | MB | SGLang µs | " + ("candidate µs | speedup | " if bench else "")
           + "vs torch.compile | SGLang TB/s | " + ("candidate TB/s | " if bench else "") + "sol |",
           "|---|---|---:|---:|" + ("---:|---:|" if bench else "") + "---:|---:|" + ("---:|" if bench else "")
           + "---:|"]
    by_row = {r["row"]: r for r in run.rows}
    order = [n for n, _ in t.production if n in by_row] + sorted(n for n in by_row if n not in dict(t.production))
    for name in order:
        r = by_row[name]
        mb = (r["bytes"] or 0) / 1e6
        sol = "–" if r["sol"] is None else f"{r['sol']:.2f}" + (
            "!" if r["sol"] > SUSPECT_SOL and (r["bytes"] or 0) >= LARGE_ROW_BYTES else "")
        cells = [f"`{name}`", r["model"] or "", f"{mb:.1f}", _f(r["baseline_us"])]
        if bench:
            cells += [_f(r["candidate_us"]), _x(r["speedup"])]
        cells += [_x(r["speedup_vs_compile"], 2), _f(r["baseline_tbps"])]
        if bench:
            cells.append(_f(r["candidate_tbps"]))
        cells.append(sol)
        out.append("| " + " | ".join(cells) + " |")
    return out


def _f(v: float | None, digits: int = 2) -> str:
    return "–" if v is None else f"{v:.{digits}f}"


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


def task_section(t: TaskReport) -> str:
    out = [f"## {t.slug}", ""]
    meta = [f"arch {t.arch}", f"family {t.family}", f"{len(t.production)} production rows"]
    if t.launcher:
        meta.append(f"launcher {t.launcher}")
    out += [f"{t.title}. " + " · ".join(meta) + ".", ""]
    if t.problem:
        return "\n".join(out + [f"**{t.problem}**", ""])
    head, kind = t.headline()
    if not t.runs:
        out += ["**No GPU measurements in benchmark.csv yet**: nothing to plot. Run `kda bench "
                f"{t.slug} --aa` and `kda bench {t.slug}` on an {t.arch.upper()} (docs/gpu-box.md).", ""]
    else:
        out += ["| | |", "|---|---|"]
        if head is not None:
            s, sc = head.summary(), head.summary("speedup_vs_compile")
            out.append(f"| headline | candidate **{head.candidate_id}** ({kind}), run `{head.run_id}`, {head.date}, "
                       f"{head.gpu} |")
            out.append(f"| geomean vs SGLang | **{_x(s['geomean'])}** over {s['n_rows']} production rows |")
            out.append(f"| worst row vs SGLang | {_x(s['worst'])} (`{s['worst_row']}`) |")
            if sc["geomean"] is not None:
                out.append(f"| geomean vs torch.compile | {_x(sc['geomean'])} over {sc['n_rows']} rows |")
                out.append(f"| worst row vs torch.compile | {_x(sc['worst'])} (`{sc['worst_row']}`) |")
            else:
                out.append("| vs torch.compile | not measured in this run |")
            out.append(f"| sol on large rows (≥ 64 MB) | {_sol_text(head)} |")
        else:
            base = t.baseline_run()
            assert base is not None
            out.append("| headline | no candidate benchmarked yet (`kda bench` in bench mode) |")
            out.append(f"| SGLang measured | run `{base.run_id}` ({base.mode}), {base.date}, {base.gpu} |")
            out.append(f"| sol on large rows (≥ 64 MB), SGLang | {_sol_text(base)} |")
        out.append(f"| A/A spread | {_aa_text(t, short=False)} |")
        out.append("")
        shown = head or t.baseline_run()
        assert shown is not None
        label = "headline run" if head else f"run `{shown.run_id}` ({shown.mode}: SGLang only)"
        out += [f"Per production row, {label}:", ""] + _row_table(t, shown) + [""]
        for name in plot_names(t):
            caption = {"speedup.png": "speedup per production row", "tbps.png": "TB/s per production row",
                       "lineage.png": "best-so-far geomean along the candidate lineage"}[name]
            out.append(f"![{t.slug}: {caption}](plots/{t.slug}/{name})")
        if not t.bench_runs:
            out.append("")
            out.append("No candidate benchmarked yet: no lineage plot.")
        out.append("")
    if t.runs:
        out += ["Runs (superseded runs left out):", "",
                "| run | date | mode | candidate | GPU | rows | geomean | worst | vs compile |",
                "|---|---|---|---|---|---:|---:|---|---:|"]
        for r in t.runs:
            s = r.summary()
            if r.mode == "aa":
                a = r.aa()
                g = f"A/A {a['geomean']:.4f}" if a else "–"
                worst = f"max {a['max_dev']:.2%}" if a else "–"
            else:
                g = _x(s["geomean"]) if s["geomean"] is not None else "–"
                worst = f"{_x(s['worst'])} `{s['worst_row']}`" if s["worst"] is not None else "–"
            sc = r.summary("speedup_vs_compile")["geomean"]
            out.append(f"| `{r.run_id}` | {r.date} | {r.mode} | {r.candidate_id} | {r.gpu} | {len(r.rows)} | {g} | "
                       f"{worst} | {_x(sc, 2)} |")
        out.append("")
    if t.superseded:
        out.append("Superseded: " + "; ".join(f"`{a}` by `{b}`" for a, b in t.superseded) + ".")
        out.append("")
    if t.ignored_rows:
        out.append(f"{t.ignored_rows} ledger rows measured on a CPU or another architecture are not shown.")
        out.append("")
    if t.lineage:
        out += ["Candidate lineage (solutions.jsonl):", "",
                "| candidate | parent | status | source | best geomean | best-so-far |", "|---|---|---|---|---:|---:|"]
        best_so_far: float | None = None
        for c in t.lineage:
            b = c.best
            g = b.geomean if b else None
            if g is not None:
                best_so_far = g if best_so_far is None else max(best_so_far, g)
            out.append(f"| {c.id} | {c.parent or '–'} | {c.status} | `{c.source_hash}` | {_x(g)} | {_x(best_so_far)} |")
        out.append("")
    return "\n".join(out)


def render_leaderboard(reports: list[TaskReport]) -> str:
    out = ["# Leaderboard", "",
           "Generated by `kda report` from the ledgers (`kernels/*/benchmark.csv`, `solutions.jsonl`, `task.toml`); "
           "do not edit by hand. `kda report --check` fails when this file is stale. How to read it: "
           "[docs/report.md](report.md).", "",
           "Speedup = SGLang 0.5.23 median / candidate median of CUDA-graph replays, interleaved per trial, on "
           "production rows; vs torch.compile = torch.compile median / measured median; TB/s by the task's byte "
           "model; sol = same-size copy time / kernel time.", "",
           task_table(reports, link_prefix="../"), "", TABLE_LEGEND, ""]
    for t in reports:
        out.append(task_section(t))
    return "\n".join(out).rstrip() + "\n"


def splice_readme(text: str, table: str) -> str | None:
    """README text with the task table between the markers; None when the markers are missing."""
    if text.count(START_MARKER) != 1 or text.count(END_MARKER) != 1:
        return None
    before, rest = text.split(START_MARKER)
    _, after = rest.split(END_MARKER)
    return f"{before}{START_MARKER}\n{table}\n\n{TABLE_LEGEND}\n{END_MARKER}{after}"


# ------------------------------------------------------------------------------------------------ write / check

def expected_files(root: Path, reports: list[TaskReport]) -> tuple[dict[Path, str], str]:
    """{path: expected text} for README.md (if it has the markers) and docs/leaderboard.md; plus a README note."""
    from kda_lab.e2e import report as e2e_report  # the end-to-end section (e2e/benchmark.csv)

    files = {root / LEADERBOARD: render_leaderboard(reports) + "\n" + e2e_report.section(root)}
    note = ""
    readme = root / README
    if readme.exists():
        spliced = splice_readme(readme.read_text(), task_table(reports))
        if spliced is None:
            note = f"{README}: no {START_MARKER} / {END_MARKER} pair; task table not written"
        else:
            files[readme] = spliced
    else:
        note = f"{README}: missing; task table not written"
    return files, note


def check(root: Path) -> list[str]:
    """What `kda report` would change (empty: everything is current)."""
    reports = collect(root)
    files, _ = expected_files(root, reports)
    stale = [str(p.relative_to(root)) for p, text in files.items() if not p.exists() or p.read_text() != text]
    for t in reports:
        for name in plot_names(t):
            p = root / PLOTS / t.slug / name
            if not p.exists():
                stale.append(str(p.relative_to(root)))
    from kda_lab.e2e import report as e2e_report

    stale += [str(p.relative_to(root)) for p in e2e_report.plot_paths(root) if not p.exists()]
    return stale


def write(root: Path, plots: bool = True) -> tuple[list[Path], str]:
    reports = collect(root)
    files, note = expected_files(root, reports)
    written = []
    for p, text in files.items():
        if not p.exists() or p.read_text() != text:
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_text(text)
            written.append(p)
    if plots:
        from kda_lab import plots as plotting

        written += plotting.draw_all(root / PLOTS, reports)
        from kda_lab.e2e import report as e2e_report

        written += e2e_report.draw(root)
    return written, note


def cmd_report(args: argparse.Namespace) -> int:
    from kda_lab.paths import repo_root

    root = Path(args.root).resolve() if args.root else repo_root()
    if args.check:
        stale = check(root)
        _, note = expected_files(root, collect(root))
        if note:
            print(f"kda report: note: {note}", file=sys.stderr)
        if stale:
            print("kda report --check: stale (run `kda report` and commit): " + ", ".join(stale), file=sys.stderr)
            return 1
        print("kda report --check: README task table and docs/leaderboard.md are current")
        return 0
    written, note = write(root, plots=not args.no_plots)
    if note:
        print(f"kda report: note: {note}", file=sys.stderr)
    for p in written:
        print(f"wrote {p.relative_to(root) if p.is_relative_to(root) else p}")
    if not written:
        print("kda report: everything already current")
    return 0


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("report", help="leaderboard, plots and README task table from the ledgers",
                              description="Write docs/leaderboard.md, docs/plots/<task>/*.png and the README task "
                                          "table from the ledgers only. See docs/report.md.")
    p.add_argument("--check", action="store_true",
                   help="write nothing; exit 1 when README.md or docs/leaderboard.md would change (or a plot is missing)")
    p.add_argument("--no-plots", action="store_true", help="skip the PNGs (markdown only)")
    p.add_argument("--root", help="repository root (default: the current checkout, or $KDA_ROOT)")
    p.set_defaults(func=cmd_report)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m kda_lab.report")
    sub = p.add_subparsers(dest="command")
    register(sub)
    args = p.parse_args(["report", *(argv if argv is not None else sys.argv[1:])])
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
