"""The public peers in the report: per task, per family, and every row where a peer beats the measured side.

Reads only :mod:`kda_lab.report.model` (the ``peers`` and ``compile_us`` ledger columns, written by ``kda bench``).
torch.compile is a peer like QuACK, Liger and FlashInfer: on each row the fastest peer the fp64 oracle passed is
the one to beat, compile included where its verdict is ok. Rows timed before ``kda bench`` checked compile carry
no verdict: their compile times are listed apart and never counted. A promoted family counts as won only where
its candidate beats that best peer (geomean over the rows a correct peer was timed on, above 1×): :func:`won`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from kda_lab.report.cells import times
from kda_lab.report.model import COMPILE_PEER, Run, TaskReport, compile_state, correct_peer_times
from kda_lab.task.flop_model import DENSE_HALF_PEAK_TFLOPS, tflops

PEERS_DOC = Path("docs/peers.md")
PEER_SET = "QuACK, Liger, FlashInfer, torch SDPA's fused backends, sgl_kernel's FA3 and torch.compile"


@dataclass
class FamilyVsPeers:
    """The headline candidate against the fastest correct peer per row (compile counted), and the verdict."""

    run: Run
    geomean: float | None
    worst: float | None
    worst_row: str | None
    worst_peer: str | None
    n_rows: int
    beaten: list[tuple[str, str, float]]  # (row, peer, measured time / peer time)
    # (row, measured / compile, the run's label) where compile has no verdict and is faster, in any run of the
    # candidate's sources, on rows whose compile the family view did not check
    unchecked: list[tuple[str, float, str]]
    promoted: bool

    @property
    def won(self) -> bool | None:
        """True/False for a promoted candidate compared with at least one correct peer; None otherwise."""
        if not self.promoted or self.geomean is None:
            return None
        return self.geomean > 1


def family_vs_peers(t: TaskReport) -> FamilyVsPeers | None:
    """The headline candidate's run (merged with the rest of its table when split) against the best peer."""
    run = t.family_view()
    head, kind = t.headline()
    if run is None or head is None:
        return None
    s = run.vs_best_peer()
    checked = {r["row"] for r in run.rows if compile_state(r) in ("ok", "wrong", "n/a")}
    # compile times with no verdict from every run of the same sources (a `--rows` compile run beside the
    # headline), until a checked compile on the row replaces them
    unchecked = [(row, ratio, view.label) for view in [run, *[v for v in t.merged_views(t.headline_sources())
                                                              if v.run_id != run.run_id]]
                 for row, ratio in view.unchecked_compile_faster() if row not in checked]
    return FamilyVsPeers(run=run, geomean=s["geomean"], worst=s["worst"], worst_row=s["worst_row"],
                         worst_peer=s["worst_peer"], n_rows=s["n_rows"], beaten=run.beaten_by_peers(),
                         unchecked=unchecked, promoted=kind == "promoted")


def won(t: TaskReport) -> bool | None:
    """Whether the family counts as won: its promoted candidate beats the best correct peer, torch.compile
    included, by geomean over the rows a correct peer was timed on. None: not promoted, or no peer to compare."""
    f = family_vs_peers(t)
    return None if f is None else f.won


def _won_text(f: FamilyVsPeers) -> str:
    if f.won is None:
        return "not promoted" if not f.promoted else "no checked peer"
    return "won" if f.won else "not won"


def _rows(n: int) -> str:
    return f"{n} row" if n == 1 else f"{n} rows"


def vs_best_peer_cell(t: TaskReport) -> str:
    """Task-table cell: the headline candidate's time against the fastest correct peer per row, compile
    included (geomean, worst), whether the family is won, rows a peer is faster on; compile times with no verdict
    that are faster, apart."""
    f = family_vs_peers(t)
    if f is None:
        return "–"
    parts = []
    if f.geomean is not None:
        parts.append(f"{times(f.geomean)}, worst {times(f.worst)}, {_won_text(f)}")
        if f.beaten:
            parts.append(f"a peer faster on {_rows(len(f.beaten))}")
    if f.unchecked:
        parts.append(f"compile faster on {_rows(len({row for row, _, _ in f.unchecked}))}, unchecked")
    return "; ".join(parts) or "–"


def _peer_table_rows(run: Run) -> list[tuple[str, str, str, str, int, list[str], int, int]]:
    """(peer, version, geomean vs SGLang, worst row, timed, wrong rows, n/a or absent, timed without a verdict)
    per peer of the run, torch.compile last."""
    out = []
    for name in run.peer_names:
        if name == COMPILE_PEER:
            continue
        p = run.peer_summary(name)
        worst = f"{times(p['worst'])} `{p['worst_row']}`" if p["worst"] is not None else "–"
        out.append((name, p["version"], times(p["geomean"]), worst, p["timed"], p["wrong"], p["not_applied"], 0))
    c = run.compile_summary()
    if c["timed"] or c["wrong"] or c["unchecked"] or c["not_applied"]:
        worst = f"{times(c['worst'])} `{c['worst_row']}`" if c["worst"] is not None else "–"
        out.append((COMPILE_PEER, c["version"], times(c["geomean"]), worst, c["timed"], c["wrong"],
                    c["not_applied"], c["unchecked"]))
    return out


def _beaten_text(beaten: list[tuple[str, str, float]]) -> str:
    return "; ".join(f"`{row}` ({peer} {ratio:.3f}× faster)" for row, peer, ratio in beaten)


def task_peer_lines(t: TaskReport) -> list[str]:
    """The task section's peer table, and the rows where a peer is faster than what was measured."""
    run = t.peer_view()
    if run is None:
        return []
    table = _peer_table_rows(run)
    if not table:
        return []
    side = f"candidate {run.candidate_id}" if run.mode == "bench" else "SGLang"
    split = ("; one table split across box calls with `--rows`: same sources, commit, GPU model and software, "
             "disjoint rows" if run.merged_from else "")
    where = f"the table {run.label}" if run.merged_from else run.label
    out = [f"Peers in {where} ({run.mode}{split}), SGLang time / peer time over the production rows "
           "(checked against the fp64 oracle first; a wrong peer is not counted; torch.compile counts where its "
           "verdict was recorded):", "",
           "| peer | version | geomean vs SGLang | worst row | timed rows | wrong rows | n/a or absent | "
           "timed, no verdict |",
           "|---|---|---:|---|---:|---|---:|---:|"]
    for name, version, g, worst, timed, wrong, na, unchecked in table:
        wrong_cell = ", ".join(f"`{r}`" for r in wrong) or "–"
        out.append(f"| {name} | {version or '–'} | {g} | {worst} | {timed} | {wrong_cell} | {na} | {unchecked} |")
    beaten = run.beaten_by_peers()
    out.append("")
    if beaten:
        out.append(f"**A peer beats the {side} on {len(beaten)} row{'s' if len(beaten) != 1 else ''}:** {_beaten_text(beaten)}.")
    else:
        out.append(f"No correct peer beats the {side} on any row of this view.")
    unchecked = run.unchecked_compile_faster()
    if unchecked:
        out.append("")
        out.append(f"torch.compile was timed faster than the {side} on {len(unchecked)} row{'s' if len(unchecked) != 1 else ''} with no oracle verdict "
                   "recorded (not counted): " + "; ".join(f"`{row}` ({r:.3f}×)" for row, r in unchecked) + ".")
    out.append("")
    return out


def compute_table(t: TaskReport) -> list[str]:
    """For a family with a FLOP model: per production row, TFLOP/s and the share of the arch's dense half-precision
    peak of SGLang, the candidate and every peer the oracle passed (the peer tables' evidence: the same run, or
    the table merged across box calls)."""
    run = t.peer_view() or t.baseline_run()
    if not t.flops or run is None:
        return []
    by_row = {r["row"]: r for r in run.rows}
    names = [n for n, _ in t.production if n in by_row and n in t.flops]
    if not names:
        return []
    peers = sorted({p for n in names for p, _ in correct_peer_times(by_row[n])})
    bench = run.mode == "bench"
    peak = DENSE_HALF_PEAK_TFLOPS.get(t.arch)

    def cell(flops: float, us: float | None) -> str:
        v = tflops(flops, us)
        if v is None:
            return "–"
        return f"{v:.0f} ({v / peak:.0%})" if peak else f"{v:.0f}"

    sides = ["SGLang"] + (["candidate"] if bench else []) + peers
    peak_text = f"the {t.arch.upper()}'s dense bf16 peak, {peak:.0f} TFLOP/s" if peak else "no peak on record"
    out = [f"TFLOP/s per production row, run {run.label} (share of {peak_text}; FLOPs: kda_lab/task/flop_model.py; "
           "peers only where the oracle passed them):", "",
           "| row | GFLOP | " + " | ".join(sides) + " |", "|---|---:|" + "---:|" * len(sides)]
    for n in names:
        r, f = by_row[n], t.flops[n]
        peer_us = dict(correct_peer_times(r))
        us = [r["baseline_us"]] + ([r["candidate_us"]] if bench else []) + [peer_us.get(p) for p in peers]
        out.append(f"| `{n}` | {f / 1e9:.1f} | " + " | ".join(cell(f, u) for u in us) + " |")
    return out + [""]


def beaten_section(reports: list[TaskReport]) -> list[str]:
    """The leaderboard's list of every row where a peer (compile included) is faster than the headline
    candidate, and of the rows where compile was faster but has no verdict."""
    counted: list[str] = []
    unchecked: list[str] = []
    for t in reports:
        f = family_vs_peers(t)
        if f is None:
            continue
        cand = f.run.candidate_id
        for row, peer, ratio in f.beaten:
            counted.append(f"| {t.family} | {cand} | {f.run.label} | `{row}` | {peer} | {ratio:.3f}× |")
        for row, ratio, label in f.unchecked:
            unchecked.append(f"| {t.family} | {cand} | {label} | `{row}` | {COMPILE_PEER} | {ratio:.3f}× |")
    out = ["## Rows where a peer is faster", "",
           f"Per family, the headline candidate against the fastest correct peer on each row ({PEER_SET}); "
           "torch.compile counts where `kda bench` recorded its oracle verdict.", ""]
    head = ["| family | candidate | evidence | row | peer | peer faster by |", "|---|---|---|---|---|---:|"]
    out += head + counted if counted else ["No correct peer is faster than a headline candidate on any row."]
    if unchecked:
        out += ["", "torch.compile timed faster, but no oracle verdict recorded for it on these rows (timed before "
                "`kda bench` checked compile): not counted, to be re-measured.", ""] + head + unchecked
    return out + [""]


def peers_doc(reports: list[TaskReport]) -> str:
    """docs/peers.md: family x peer, from each task's peer view; then each family against its best peer."""
    out = ["# Peers", "",
           "Generated by `kda report` from the `peers` and `compile_us` columns of `kernels/*/benchmark.csv`; do not "
           "edit by hand. Each public peer is called with SGLang's arguments through its adapter (`PEERS` in "
           "`kda_lab/families/<family>.py`, whose `mapping` says how), checked against the family's fp64 oracle on "
           "every row, and only then timed beside SGLang in the same interleaved CUDA-graph replay. torch.compile "
           "of the family's eager torch reference is a peer too: it counts on a row only where the oracle's verdict "
           "on it was recorded and ok (`timed, no verdict`: rows timed before `kda bench` checked it, not counted). "
           "A table split across box calls with `--rows` is merged into one view (same task, mode, candidate "
           "sources, commit, GPU model, driver, torch, Triton, SGLang, within 12 h, disjoint rows) and named by "
           "its runs.", "",
           "| task | family | evidence | peer | geomean vs SGLang | worst row vs SGLang | rows timed | rows wrong | "
           "n/a or absent | timed, no verdict |",
           "|---|---|---|---|---:|---|---:|---:|---:|---:|"]
    any_rows = False
    for t in reports:
        run = t.peer_view()
        table = _peer_table_rows(run) if run is not None else []
        if not table:
            if t.runs:  # measured, but no peer was ever timed: say so rather than leave the family out
                any_rows = True
                out.append(f"| {t.slug} | {t.family} | – | no peer timed: the family has none (`PEERS` in "
                           f"`kda_lab/families/{t.family}.py` says why) or no run since they were added | | | | | | |")
            continue
        for name, version, g, worst, timed, wrong, na, unchecked in table:
            any_rows = True
            out.append(f"| {t.slug} | {t.family} | {run.label} ({run.mode}) | {name} {version} | {g} | {worst} | "
                       f"{timed} | {len(wrong)} | {na} | {unchecked} |")
    if not any_rows:
        out.append("| (no run has timed a peer yet: `kda bench <task> --baseline-only` on the task's GPU) "
                   "| | | | | | | | | |")
    out += ["", "## Each family against its best peer", "",
            f"The headline candidate (the promoted one's evidence run, else the best benchmarked) against the fastest "
            f"correct peer on each row ({PEER_SET}, compile counted where its verdict is ok): peer time / candidate "
            "time, geomean and worst over the rows a correct peer was timed on, above 1× the candidate is faster. "
            "won: promoted and that geomean above 1×.", "",
            "| task | family | candidate | evidence | vs best peer | worst row | rows compared | rows a peer is "
            "faster | compile faster, no verdict | won |",
            "|---|---|---|---|---:|---|---:|---:|---:|---|"]
    for t in reports:
        f = family_vs_peers(t)
        if f is None:
            continue
        worst = f"{times(f.worst)} `{f.worst_row}` ({f.worst_peer})" if f.worst is not None else "–"
        out.append(f"| {t.slug} | {t.family} | {f.run.candidate_id} | {f.run.label} | {times(f.geomean)} | {worst} | "
                   f"{f.n_rows} | {len(f.beaten)} | {len({row for row, _, _ in f.unchecked})} | {_won_text(f)} |")
    out += ["", "The rows themselves are listed in docs/leaderboard.md (\"Rows where a peer is faster\").", ""]
    compute = [(t, table) for t in reports if (table := compute_table(t))]
    if compute:
        out += ["## TFLOP/s per row (compute-bound families)", "",
                "Every backend on every production row of a family with a FLOP model (kda_lab/task/flop_model.py), "
                "against the arch's dense bf16 peak; a peer appears only on rows where the oracle passed it.", ""]
        for t, table in compute:
            out += [f"### {t.slug}", ""] + table
    return "\n".join(out)
