"""PNG plots for ``kda report`` (matplotlib, Agg backend), drawn from :class:`kda_lab.report.TaskReport` only.

Per task, under ``docs/plots/<task>/``:

- ``speedup.png``: per production row, speedup vs SGLang for the benchmarked candidates (each candidate's best
  run), the torch.compile peer and the latest A/A run; the A/A band is shaded around 1.0 (= SGLang);
- ``tbps.png``: per production row, TB/s of SGLang and the candidates by the byte model, and the same-size copy
  yardstick measured in the same run;
- ``lineage.png``: geomean of every bench run per candidate in lineage order, and the best-so-far line.

The two per-row plots are a grid so that a task of a hundred rows fits a screen: one row of panels per
function, one column per size class (:data:`SIZE_CLASSES`); in a panel each production row is one line,
smallest at the top, labelled with its name and size, with one marker per series.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kda_lab.report.model import Run, TaskReport, compile_state, correct_peer_times, plot_names

MAX_CANDIDATES = 4
BASELINE_COLOR = "#7f7f7f"
AA_COLOR = "#a9a9a9"
COMPILE_COLOR = "#9467bd"
COPY_COLOR = "#000000"
PEER_COLOR = "#17becf"
CANDIDATE_COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728")
PNG_META = {"Software": None}
# Upper byte bounds of the grid's columns. Under ~8 MB a graph-replayed kernel's fixed cost (~2 µs) is at least
# the time its bytes take at the copy ceiling (docs/h200-baselines.md); from 64 MB on the report summarizes
# `sol` (report.LARGE_ROW_BYTES).
SIZE_CLASSES = ((8e6, "under 8 MB (launch bound)"), (64e6, "8–64 MB"), (math.inf, "64 MB and up (sol counted)"))
ROW_INCH = 0.16  # height of one production row in a panel
PANEL_INCH = 4.6  # width of one panel, labels included


def _plt() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams.update({"font.size": 8, "axes.titlesize": 8.5, "legend.fontsize": 8, "figure.dpi": 100,
                         "ytick.labelsize": 7})
    return plt


def candidate_series(t: TaskReport) -> list[Run]:
    """Each benchmarked candidate's best run: the headline's candidate first, then the most recent others."""
    head, _ = t.headline()
    best = [c.best for c in t.lineage if c.best is not None]
    if head is None:
        return best[-MAX_CANDIDATES:]
    others = [r for r in best if r.candidate_id != head.candidate_id]
    return [head, *others[-(MAX_CANDIDATES - 1):]]


def _cand_label(t: TaskReport, run: Run) -> str:
    status = {c.id: c.status for c in t.lineage}.get(run.candidate_id, "benchmarked")
    return f"{run.candidate_id} ({status}, run {run.date})"


def size_class(nbytes: float | None) -> str:
    return next(label for bound, label in SIZE_CLASSES if (nbytes or 0) < bound)


@dataclass
class Grid:
    """The panels of a per-row plot: ``cells[(function, size class)]`` lists its rows, smallest first."""

    functions: list[str]  # panel rows, in task.toml order
    classes: list[str]  # panel columns: the size classes that have rows, smallest first
    cells: dict[tuple[str, str], list[str]]
    labels: dict[str, str]  # row -> "name  (size)"

    def rows(self) -> list[str]:
        return [r for f in self.functions for c in self.classes for r in self.cells.get((f, c), [])]


def grid(t: TaskReport, runs: list[Run]) -> Grid:
    """Every production row measured in ``runs``, placed by its function and its size (bytes by the byte model)."""
    info: dict[str, tuple[str, float | None]] = {}
    for run in runs:
        for r in run.rows:
            if r["row"] not in info or info[r["row"]][1] is None:
                info[r["row"]] = (r["function"] or "?", r["bytes"])
    position = {name: i for i, (name, _) in enumerate(t.production)}
    ordered = sorted(info, key=lambda n: (position.get(n, len(position)), n))
    functions = list(dict.fromkeys(info[n][0] for n in ordered))
    cells: dict[tuple[str, str], list[str]] = {}
    for n in sorted(ordered, key=lambda n: (info[n][1] or 0, position.get(n, len(position)), n)):
        cells.setdefault((info[n][0], size_class(info[n][1])), []).append(n)
    classes = [label for _, label in SIZE_CLASSES if any(c == label for _, c in cells)]
    labels = {}
    for n, (_, nbytes) in info.items():
        mb = (nbytes or 0) / 1e6
        labels[n] = n if nbytes is None else f"{n}  ({mb:.1f} MB)" if mb >= 1 else f"{n}  ({mb:.2f} MB)"
    return Grid(functions=functions, classes=classes, cells=cells, labels=labels)


def _values(run: Run, rows: list[str], key: str) -> list[float | None]:
    by = {r["row"]: r for r in run.rows}
    return [by[n][key] if n in by else None for n in rows]


Series = tuple[str, str, str, list[float | None]]  # (label, color, marker, value per row of Grid.rows())


def _draw_grid(plt: Any, g: Grid, series: list[Series], *, title: str, xlabel: str, reference: float | None,
               band: tuple[float, float, str] | None = None, stem_first: bool = False) -> Any:
    """One panel per (function, size class) with rows; markers per series; with ``stem_first`` a stem from
    ``reference`` (SGLang = 1.0) to the first series' value. The x range is shared within a size class."""
    heights = [max(len(g.cells.get((f, c), [])) for c in g.classes) for f in g.functions]
    fig = plt.figure(figsize=(max(7.0, PANEL_INCH * len(g.classes)),
                              1.5 + sum(ROW_INCH * h + 0.45 for h in heights)), layout="constrained")
    gs = fig.add_gridspec(len(g.functions), len(g.classes), height_ratios=[h + 2.8 for h in heights])
    index = {row: i for i, row in enumerate(g.rows())}
    offsets = [0.0] if len(series) == 1 else [0.56 * (i / (len(series) - 1) - 0.5) for i in range(len(series))]
    for col, cls in enumerate(g.classes):
        vals = [v for _, _, _, vs in series for v in (vs[index[r]] for f in g.functions
                                                       for r in g.cells.get((f, cls), [])) if v is not None]
        vals += [reference] if reference is not None else [0.0]
        if band:
            vals += [band[0], band[1]]
        lo, hi = min(vals), max(vals)
        pad = max(0.02 * max(abs(hi), 1e-9), 0.06 * (hi - lo))
        xlim = (0.0 if reference is None else lo - pad, hi + pad)
        for row, fn in enumerate(g.functions):
            rows = g.cells.get((fn, cls), [])
            ax = fig.add_subplot(gs[row, col])
            if not rows:
                ax.axis("off")
                continue
            ys = range(len(rows))
            if band:
                ax.axvspan(band[0], band[1], color="#f0f0f0", zorder=0, label=band[2])
            if reference is not None:
                ax.axvline(reference, color=BASELINE_COLOR, linewidth=1.0, zorder=1, label="SGLang 0.5.23 = 1.0")
            for k, (label, color, marker, vs) in enumerate(series):
                pts = [(y + offsets[k], vs[index[r]]) for y, r in zip(ys, rows, strict=True) if vs[index[r]] is not None]
                if not pts:
                    continue
                if k == 0 and stem_first and reference is not None:
                    ax.hlines([y for y, _ in pts], reference, [v for _, v in pts], color=color, alpha=0.35,
                              linewidth=1.2, zorder=2)
                ax.plot([v for _, v in pts], [y for y, _ in pts], linestyle="none", marker=marker, color=color,
                        markersize=4 if marker != "x" else 5, label=label, zorder=3)
            ax.set_yticks(list(ys))
            ax.set_yticklabels([g.labels[r] for r in rows])
            ax.set_ylim(heights[row] - 0.5, -0.5)  # same row pitch across the panels of one function
            ax.set_xlim(*xlim)
            ax.grid(axis="x", color="#e5e5e5", linewidth=0.8)
            ax.set_axisbelow(True)
            ax.set_title(f"{fn} · {cls} · {len(rows)} row{'s' if len(rows) != 1 else ''}", loc="left")
    handles: dict[str, Any] = {}
    for ax in fig.axes:
        for h, lab in zip(*ax.get_legend_handles_labels(), strict=True):
            handles.setdefault(lab, h)
    # The x-axis explanation heads the legend: a separate figure label would collide with it.
    fig.legend(handles.values(), handles.keys(), loc="outside lower center", ncols=min(3, len(handles)),
               frameon=False, title=xlabel)
    fig.suptitle(title)
    return fig


def _save(fig: Any, path: Path, plt: Any) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, bbox_inches="tight", metadata=PNG_META)
    plt.close(fig)
    return path


def draw_speedup(t: TaskReport, path: Path) -> Path:
    plt = _plt()
    cands = candidate_series(t)
    aa = t.latest_aa
    head, _ = t.headline()
    peers = t.peer_view()
    g = grid(t, [*cands, *([aa] if aa else []), *([peers] if peers else [])])
    rows = g.rows()
    series: list[Series] = []
    for i, run in enumerate(cands):
        series.append((_cand_label(t, run), CANDIDATE_COLORS[i % len(CANDIDATE_COLORS)], "o",
                       _values(run, rows, "speedup")))
    if peers is not None:
        # the report's best peer per row (compile counted where its verdict is ok), not the ledger's best_peer
        # column, which older rows wrote without compile
        by_row = {r["row"]: r for r in peers.rows}
        fastest = {n: min((us for _, us in correct_peer_times(r)), default=None) for n, r in by_row.items()}
        best = [None if (n not in by_row or not by_row[n]["baseline_us"] or not fastest[n])
                else by_row[n]["baseline_us"] / fastest[n] for n in rows]
        if any(v is not None for v in best):
            series.append((f"best correct peer vs SGLang, compile counted where checked (run {peers.date}; "
                           "docs/peers.md)", PEER_COLOR, "^", best))
    peer = head or (cands[-1] if cands else None)
    if peer is not None:
        comp = [None if (b is None or c is None or c <= 0) else b / c
                for b, c in zip(_values(peer, rows, "baseline_us"), _values(peer, rows, "compile_us"), strict=True)]
        if any(v is not None for v in comp):
            # times the oracle never checked (rows from before kda bench did) are drawn, and say so
            unchecked = all(compile_state(r) != "ok" for r in peer.rows)
            series.append((f"torch.compile vs SGLang (run {peer.date}"
                           + ("; no oracle verdict, not counted as a peer)" if unchecked else ")"),
                           COMPILE_COLOR, "D", comp))
    if aa is not None:
        series.append((f"A/A: SGLang vs SGLang (run {aa.date})", AA_COLOR, "s", _values(aa, rows, "speedup")))
    spread = aa.aa() if aa else None
    band = (1 - spread["max_dev"], 1 + spread["max_dev"], f"A/A band ±{spread['max_dev']:.2%}") if spread else None
    if cands:
        s = cands[0].summary()
        note = f"{cands[0].candidate_id}: geomean {s['geomean']:.3f}×, worst {s['worst']:.3f}× ({s['worst_row']})"
    else:
        note = "no candidate benchmarked yet: A/A only"
    gpu = (head or aa or t.runs[-1]).gpu
    fig = _draw_grid(plt, g, series, reference=1.0, band=band, stem_first=bool(cands),
                     title=f"{t.slug}\nSpeedup vs SGLang 0.5.23 per production row, {gpu}; {note}",
                     xlabel="speedup vs SGLang (× = SGLang median / median, CUDA-graph replay; > 1 is faster)")
    return _save(fig, path, plt)


def draw_tbps(t: TaskReport, path: Path) -> Path:
    plt = _plt()
    cands = candidate_series(t)
    base = t.baseline_run()
    assert base is not None
    g = grid(t, [base, *cands])
    rows = g.rows()
    series: list[Series] = [(f"SGLang 0.5.23 (run {base.date}, {base.mode})", BASELINE_COLOR, "o",
                             _values(base, rows, "baseline_tbps"))]
    for i, run in enumerate(cands):
        series.append((_cand_label(t, run), CANDIDATE_COLORS[i % len(CANDIDATE_COLORS)], "o",
                       _values(run, rows, "candidate_tbps")))
    copy = [b / c / 1e6 if b and c else None
            for b, c in zip(_values(base, rows, "bytes"), _values(base, rows, "copy_us"), strict=True)]
    if any(v is not None for v in copy):
        series.append(("same-size copy (yardstick)", COPY_COLOR, "x", copy))
    fig = _draw_grid(plt, g, series, reference=None,
                     title=f"{t.slug}\nAchieved bandwidth per production row, {base.gpu}",
                     xlabel="TB/s (byte model: each input read once, each output written once / median device time)")
    return _save(fig, path, plt)


def draw_lineage(t: TaskReport, path: Path) -> Path:
    plt = _plt()
    ids = [c.id for c in t.lineage]
    fig, ax = plt.subplots(figsize=(max(6.0, 1.0 + 0.55 * len(ids)), 4.2))
    aa = t.latest_aa.aa() if t.latest_aa else None
    if aa:
        d = aa["max_dev"]
        ax.axhspan(1 - d, 1 + d, color="#f0f0f0", zorder=0, label=f"A/A band ±{d:.2%}")
    ax.axhline(1.0, color=BASELINE_COLOR, linewidth=1.2, label="SGLang 0.5.23 = 1.0")
    xs, ys, best_x, best_y = [], [], [], []
    so_far: float | None = None
    for i, c in enumerate(t.lineage):
        for r in c.runs:
            if r.geomean is not None:
                xs.append(i)
                ys.append(r.geomean)
        b = c.best
        if b is not None and b.geomean is not None:
            so_far = b.geomean if so_far is None else max(so_far, b.geomean)
        if so_far is not None:
            best_x.append(i)
            best_y.append(so_far)
    ax.plot(xs, ys, linestyle="none", marker="o", color=CANDIDATE_COLORS[0], alpha=0.6, label="bench run geomean")
    if best_x:
        ax.plot(best_x, best_y, drawstyle="steps-post", color=CANDIDATE_COLORS[2], linewidth=2, label="best so far")
    for i, c in enumerate(t.lineage):
        if c.status == "promoted" and c.best is not None:
            ax.plot([i], [c.best.geomean], marker="*", markersize=14, color=CANDIDATE_COLORS[3], linestyle="none",
                    label="promoted")
    ax.set_xticks(range(len(ids)))
    ax.set_xticklabels(ids, rotation=45 if len(ids) > 12 else 0)
    ax.set_xlim(-0.5, max(len(ids) - 0.5, 0.5))
    vals = ys + [1.0]
    pad = max(0.02, 0.1 * (max(vals) - min(vals)))
    ax.set_ylim(min(vals) - pad, max(vals) + pad)
    ax.grid(axis="y", color="#e5e5e5", linewidth=0.8)
    ax.set_axisbelow(True)
    ax.set_xlabel("candidate, in lineage order (solutions.jsonl)")
    ax.set_ylabel("geomean speedup vs SGLang (×)")
    note = ""
    if best_y:
        lead = max((c for c in t.lineage if c.best is not None), key=lambda c: (c.best.geomean, c.id))
        note = f"; best so far {best_y[-1]:.3f}× ({lead.id})"
    ax.set_title(f"{t.slug}\nGeomean over production rows along the candidate lineage{note}")
    handles, labels = ax.get_legend_handles_labels()
    uniq = dict(zip(labels, handles, strict=True))
    ax.legend(uniq.values(), uniq.keys(), loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, bbox_inches="tight", metadata=PNG_META)
    plt.close(fig)
    return path


DRAW = {"speedup.png": draw_speedup, "tbps.png": draw_tbps, "lineage.png": draw_lineage}


def draw_all(plots_dir: Path, reports: list[TaskReport]) -> list[Path]:
    """Draw every task's plots; remove PNGs this report no longer produces. Returns the files written."""
    written: list[Path] = []
    slugs = {t.slug for t in reports}
    for t in reports:
        wanted = plot_names(t) if not t.problem else []
        folder = plots_dir / t.slug
        for old in sorted(folder.glob("*.png")) if folder.exists() else []:
            if old.name not in wanted:
                old.unlink()
        for name in wanted:
            written.append(DRAW[name](t, folder / name))
        if folder.exists() and not any(folder.iterdir()):
            folder.rmdir()
    if plots_dir.exists():
        for folder in sorted(p for p in plots_dir.iterdir() if p.is_dir() and p.name not in slugs):
            for old in folder.glob("*.png"):
                old.unlink()
            if not any(folder.iterdir()):
                folder.rmdir()
    return written
