"""PNG plots for ``kda report`` (matplotlib, Agg backend), drawn from :class:`kda_lab.report.TaskReport` only.

Per task, under ``docs/plots/<task>/``:

- ``speedup.png``: per production row, speedup vs SGLang for the benchmarked candidates (each candidate's best
  run), the torch.compile peer and the latest A/A run; bars start at 1.0 (= SGLang), the A/A band is shaded;
- ``tbps.png``: per production row, TB/s of SGLang and the candidates by the byte model, and the same-size copy
  yardstick measured in the same run (x markers);
- ``lineage.png``: geomean of every bench run per candidate in lineage order, and the best-so-far line.

Rows are horizontal bars labelled with the row name and its size, so long names stay legible.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kda_lab.report import Run, TaskReport

MAX_CANDIDATES = 4
BASELINE_COLOR = "#7f7f7f"
AA_COLOR = "#a9a9a9"
COMPILE_COLOR = "#9467bd"
COPY_COLOR = "#000000"
CANDIDATE_COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728")
PNG_META = {"Software": None}


def _plt() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams.update({"font.size": 9, "axes.titlesize": 10, "legend.fontsize": 8, "figure.dpi": 100})
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


def _rows(t: TaskReport, runs: list[Run]) -> list[str]:
    seen = {r["row"] for run in runs for r in run.rows}
    order = [n for n, _ in t.production if n in seen]
    return order + sorted(seen - set(order))


def _label(row: str, runs: list[Run]) -> str:
    for run in runs:
        for r in run.rows:
            if r["row"] == row and r["bytes"]:
                mb = r["bytes"] / 1e6
                return f"{row}  ({mb:.1f} MB)" if mb >= 1 else f"{row}  ({mb:.2f} MB)"
    return row


def _values(run: Run, rows: list[str], key: str) -> list[float | None]:
    by = {r["row"]: r for r in run.rows}
    return [by[n][key] if n in by else None for n in rows]


def _fig(plt: Any, n_rows: int, n_series: int) -> tuple[Any, Any]:
    height = 1.6 + n_rows * (0.16 * max(n_series, 1) + 0.22)
    return plt.subplots(figsize=(10.5, max(3.2, height)))


def _bars(ax: Any, rows: list[str], series: list[tuple[str, str, list[float | None]]], left: float) -> None:
    n = len(series)
    h = 0.8 / max(n, 1)
    for i, (label, color, vals) in enumerate(series):
        ys = [j - 0.4 + h * (i + 0.5) for j in range(len(rows))]
        pts = [(y, v) for y, v in zip(ys, vals, strict=True) if v is not None]
        if not pts:
            continue
        ax.barh([y for y, _ in pts], [v - left for _, v in pts], left=left, height=h * 0.92, color=color,
                label=label, edgecolor="none")


def _finish(fig: Any, ax: Any, rows: list[str], labels: list[str], path: Path, plt: Any) -> Path:
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels(labels)
    ax.set_ylim(len(rows) - 0.5, -0.5)
    ax.grid(axis="x", color="#e5e5e5", linewidth=0.8)
    ax.set_axisbelow(True)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, bbox_inches="tight", metadata=PNG_META)
    plt.close(fig)
    return path


def draw_speedup(t: TaskReport, path: Path) -> Path:
    plt = _plt()
    cands = candidate_series(t)
    aa = t.latest_aa
    head, _ = t.headline()
    runs = [*cands, *([aa] if aa else [])]
    rows = _rows(t, runs)
    series: list[tuple[str, str, list[float | None]]] = []
    for i, run in enumerate(cands):
        series.append((_cand_label(t, run), CANDIDATE_COLORS[i % len(CANDIDATE_COLORS)],
                       _values(run, rows, "speedup")))
    peer = head or (cands[-1] if cands else None)
    if peer is not None:
        comp = [None if (b is None or c is None or c <= 0) else b / c
                for b, c in zip(_values(peer, rows, "baseline_us"), _values(peer, rows, "compile_us"), strict=True)]
        if any(v is not None for v in comp):
            series.append((f"torch.compile vs SGLang (run {peer.date})", COMPILE_COLOR, comp))
    if aa is not None:
        series.append((f"A/A: SGLang vs SGLang (run {aa.date})", AA_COLOR, _values(aa, rows, "speedup")))
    fig, ax = _fig(plt, len(rows), len(series))
    spread = aa.aa() if aa else None
    if spread:
        d = spread["max_dev"]
        ax.axvspan(1 - d, 1 + d, color="#f0f0f0", zorder=0, label=f"A/A band ±{d:.2%}")
    _bars(ax, rows, series, left=1.0)
    ax.axvline(1.0, color=BASELINE_COLOR, linewidth=1.2, label="SGLang 0.5.23 = 1.0")
    vals = [v for _, _, vs in series for v in vs if v is not None] + [1.0]
    lo, hi = min(vals), max(vals)
    pad = max(0.02, 0.08 * (hi - lo))
    ax.set_xlim(min(lo - pad, 0.98), max(hi + pad, 1.02))
    if cands:
        s = cands[0].summary()
        note = f"{cands[0].candidate_id}: geomean {s['geomean']:.3f}×, worst {s['worst']:.3f}× ({s['worst_row']})"
    else:
        note = "no candidate benchmarked yet: A/A only"
    gpu = (head or aa or t.runs[-1]).gpu
    ax.set_title(f"{t.slug}\nSpeedup vs SGLang 0.5.23 per production row, {gpu}; {note}")
    ax.set_xlabel("speedup vs SGLang (× = SGLang median / median, CUDA-graph replay; > 1 is faster)")
    return _finish(fig, ax, rows, [_label(r, runs) for r in rows], path, plt)


def draw_tbps(t: TaskReport, path: Path) -> Path:
    plt = _plt()
    cands = candidate_series(t)
    base = t.baseline_run()
    assert base is not None
    runs = [base, *cands]
    rows = _rows(t, runs)
    series: list[tuple[str, str, list[float | None]]] = [
        (f"SGLang 0.5.23 (run {base.date}, {base.mode})", BASELINE_COLOR, _values(base, rows, "baseline_tbps"))]
    for i, run in enumerate(cands):
        series.append((_cand_label(t, run), CANDIDATE_COLORS[i % len(CANDIDATE_COLORS)],
                       _values(run, rows, "candidate_tbps")))
    fig, ax = _fig(plt, len(rows), len(series))
    _bars(ax, rows, series, left=0.0)
    copy = []
    for j, (b, c) in enumerate(zip(_values(base, rows, "bytes"), _values(base, rows, "copy_us"), strict=True)):
        if b and c:
            copy.append((j, b / c / 1e6))
    if copy:
        ax.plot([v for _, v in copy], [j for j, _ in copy], linestyle="none", marker="x", color=COPY_COLOR,
                markersize=6, label="same-size copy (yardstick)")
    ax.set_xlim(left=0)
    ax.set_title(f"{t.slug}\nAchieved bandwidth per production row, {base.gpu}")
    ax.set_xlabel("TB/s (byte model: each input read once, each output written once / median device time)")
    return _finish(fig, ax, rows, [_label(r, runs) for r in rows], path, plt)


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
    from kda_lab.report import plot_names

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
