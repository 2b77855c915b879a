"""``kda report [--check]``: the leaderboard, per-task plots and the README task table, from the ledgers only.

Inputs: ``kernels/*/benchmark.csv`` and ``solutions.jsonl`` (superseded runs dropped by
:func:`kda_lab.ledger.runs`), ``task.toml`` (arch, family, title, production rows) and
``scripts/launch_kernels/order.txt`` (launcher numbers). Nothing is measured and nothing is imported from a
candidate. Outputs:

- ``docs/leaderboard.md``: per task the headline result (the promoted candidate's run, or the best
  benchmarked run if nothing is promoted), geomean and worst row vs SGLang and vs torch.compile, ``sol`` on
  large rows, the latest A/A spread, per-row numbers, every run, the candidate lineage, and every row where a
  peer (torch.compile included where its verdict is ok) beats a headline candidate;
- ``docs/peers.md``: every peer per task, and each family against its best peer (:mod:`kda_lab.report.peers`);
- ``docs/plots/<task>/{speedup,tbps,lineage}.png``;
- the task table in ``README.md`` between ``<!-- kda:tasks:start -->`` and ``<!-- kda:tasks:end -->``.

Output is a pure function of the ledgers (dates come from ledger rows, never from the clock), so
``kda report --check`` can say whether README.md / docs/leaderboard.md are stale (exit 1) without writing.
PNG bytes depend on the matplotlib/freetype build, so ``--check`` only requires the referenced plots to exist.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from kda_lab.report.cells import fixed, times
from kda_lab.report.model import (
    LARGE_ROW_BYTES,
    SUSPECT_SOL,
    Run,
    TaskReport,
    collect,
    plot_names,
)
from kda_lab.report.peers import (
    PEERS_DOC,
    beaten_section,
    compute_table,
    peers_doc,
    task_peer_lines,
    vs_best_peer_cell,
)

START_MARKER = "<!-- kda:tasks:start -->"
END_MARKER = "<!-- kda:tasks:end -->"
LEADERBOARD = Path("docs/leaderboard.md")
PLOTS = Path("docs/plots")
README = Path("README.md")
E2E_DOC = Path("docs/e2e.md")
COVERAGE_START, COVERAGE_END = "<!-- kda:e2e-coverage:start -->", "<!-- kda:e2e-coverage:end -->"


# ------------------------------------------------------------------------------------------------ formatting


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
    return (f"{times(s['geomean'])} ({head.candidate_id})", f"{times(s['worst'])} {s['worst_row']}", _sol_text(head))


def task_table(reports: list[TaskReport], link_prefix: str = "") -> str:
    head = ("| task | arch | family | status | best geomean | worst row | vs best peer | A/A spread | sol (≥ 64 MB) "
            "| launcher |\n|---|---|---|---|---:|---|---|---|---|---|")
    lines = [head]
    for t in reports:
        g, w, sol = _headline_cells(t)
        lines.append(f"| [{t.slug}]({link_prefix}kernels/{t.slug}/) | {t.arch} | {t.family} | {t.status} | {g} | "
                     f"{w} | {vs_best_peer_cell(t)} | {_aa_text(t)} | {sol} | {t.launcher or '–'} |")
    if not reports:
        lines.append("| (no task folders under kernels/) | | | | | | | | | |")
    return "\n".join(lines)


TABLE_LEGEND = ("best geomean: equal-weight geomean of per-row speedups vs SGLang 0.5.23 over the production rows "
                "(promoted candidate, else best benchmarked); worst row: lowest per-row speedup in that run; vs best "
                "peer: that candidate's time against the fastest correct peer per row (QuACK, Liger, FlashInfer, "
                "torch SDPA's fused backends, sgl_kernel's FA3 and torch.compile, compile counted where its oracle "
                "verdict was recorded; docs/peers.md), geomean and "
                "worst, above 1× the candidate is faster; won: promoted and that geomean above 1×; rows a peer is "
                "faster on are listed in docs/leaderboard.md; A/A "
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
        cells = [f"`{name}`", r["model"] or "", f"{mb:.1f}", fixed(r["baseline_us"])]
        if bench:
            cells += [fixed(r["candidate_us"]), times(r["speedup"])]
        cells += [times(r["speedup_vs_compile"], 2), fixed(r["baseline_tbps"])]
        if bench:
            cells.append(fixed(r["candidate_tbps"]))
        cells.append(sol)
        out.append("| " + " | ".join(cells) + " |")
    return out



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
            out.append(f"| geomean vs SGLang | **{times(s['geomean'])}** over {s['n_rows']} production rows |")
            out.append(f"| worst row vs SGLang | {times(s['worst'])} (`{s['worst_row']}`) |")
            if sc["geomean"] is not None:
                out.append(f"| geomean vs torch.compile | {times(sc['geomean'])} over {sc['n_rows']} rows |")
                out.append(f"| worst row vs torch.compile | {times(sc['worst'])} (`{sc['worst_row']}`) |")
            else:
                # the compile peer may have been timed in a later run of the same sources (a --rows subset)
                peer = [r for r in t.bench_runs if r.source_hash == head.source_hash
                        and r.summary("speedup_vs_compile")["geomean"] is not None]
                if peer:
                    pc = peer[-1].summary("speedup_vs_compile")
                    out.append(f"| vs torch.compile | not measured in this run; run `{peer[-1].run_id}` (same "
                               f"sources): {times(pc['geomean'])} over {pc['n_rows']} rows, worst "
                               f"{times(pc['worst'])} (`{pc['worst_row']}`) |")
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
        out += compute_table(t)
        out += task_peer_lines(t)
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
                g = times(s["geomean"]) if s["geomean"] is not None else "–"
                worst = f"{times(s['worst'])} `{s['worst_row']}`" if s["worst"] is not None else "–"
            sc = r.summary("speedup_vs_compile")["geomean"]
            out.append(f"| `{r.run_id}` | {r.date} | {r.mode} | {r.candidate_id} | {r.gpu} | {len(r.rows)} | {g} | "
                       f"{worst} | {times(sc, 2)} |")
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
            out.append(f"| {c.id} | {c.parent or '–'} | {c.status} | `{c.source_hash}` | {times(g)} | {times(best_so_far)} |")
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
           task_table(reports, link_prefix="../"), "", TABLE_LEGEND, "", *beaten_section(reports)]
    for t in reports:
        out.append(task_section(t))
    return "\n".join(out).rstrip() + "\n"


def splice(text: str, start: str, end: str, body: str) -> str | None:
    """``text`` with ``body`` between the one ``start`` / ``end`` marker pair; None when the pair is missing."""
    if text.count(start) != 1 or text.count(end) != 1:
        return None
    before, rest = text.split(start)
    _, after = rest.split(end)
    return f"{before}{start}\n{body}\n{end}{after}"


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

    files = {root / LEADERBOARD: render_leaderboard(reports) + "\n" + e2e_report.section(root),
             root / PEERS_DOC: peers_doc(reports)}
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
    e2e_doc = root / E2E_DOC
    if e2e_doc.exists():
        table = e2e_report.coverage_table(root) or ["No GPU rows in e2e/rows.csv yet."]
        spliced = splice(e2e_doc.read_text(), COVERAGE_START, COVERAGE_END, "\n".join(table))
        if spliced is not None:
            files[e2e_doc] = spliced
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
        from kda_lab.report import plots as plotting  # matplotlib: only when PNGs are drawn

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
