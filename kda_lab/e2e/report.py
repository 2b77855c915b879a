"""The end-to-end section of docs/leaderboard.md and its plot, from e2e/benchmark.csv only (`kda report`).

Shown: per e2e row, its latest GPU measurement (runs superseded by a later run left out): overlay off/on device
time, speedup, eager speedup, agreement, and the share of device time in the swap-target families' kernels
(what the overlay can touch: Amdahl). CPU rows (CI's tiny configurations) are counted, not shown.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from kda_lab.e2e import ledger

PLOT = Path("docs/plots/e2e/speedup.png")


def latest_gpu_rows(root: Path) -> tuple[list[dict[str, str]], int]:
    """(latest GPU measurement per row in ledger order, number of CPU rows)."""
    rows = ledger.read(root)
    superseded = {r["supersedes"] for r in rows if r.get("supersedes")}
    latest: dict[str, dict[str, str]] = {}
    cpu = 0
    for r in rows:
        if r["run_id"] in superseded:
            continue
        if r["gpu_name"] in ("", "cpu"):
            cpu += 1
            continue
        latest[r["row"]] = r
    return list(latest.values()), cpu


def family_share(r: dict[str, str]) -> dict[str, float]:
    shares = json.loads(r["shares_off"]) if r.get("shares_off") else {}
    return {k.removeprefix("family:"): v for k, v in shares.items() if k.startswith("family:")}


def _num(v: str, fmt: str) -> str:
    try:
        return format(float(v), fmt)
    except (TypeError, ValueError):
        return "–"


def section(root: Path) -> str:
    rows, cpu = latest_gpu_rows(root)
    out = ["## End to end: SGLang's own models (`kda e2e`)", "",
           "SGLang 0.5.23's model classes (DiT stacks, VAE decoders, the LTX-2 latent upsampler) with seeded random "
           "weights at production sizes, overlay off vs on, interleaved ([docs/e2e.md](e2e.md)). Speedup = off "
           "median / on median of device time; swap-target share = share of the off run's device time in kernels "
           "of the families the overlay can replace.", ""]
    if not rows:
        out += ["**No GPU measurements in e2e/benchmark.csv yet**: run `kda e2e` on an H200 (docs/e2e.md)."]
        if cpu:
            out.append(f"{cpu} rows measured on a CPU (tiny configurations) are not shown.")
        return "\n".join(out) + "\n"
    out += ["| row | model | cites | DiT blocks | off ms | on ms | speedup | eager | agree | swap-target share "
            "| GEMM | attention | conv | run |",
            "|---|---|---|---:|---:|---:|---:|---:|---|---|---:|---:|---:|---|"]
    for r in rows:
        fam = family_share(r)
        sh = json.loads(r["shares_off"]) if r.get("shares_off") else {}
        fam_text = ", ".join(f"{k} {v:.1%}" for k, v in sorted(fam.items(), key=lambda kv: -kv[1])) or "0"
        agree = {"1": "yes", "0": "**no**"}.get(r["agree"], "–")
        cites = r["cites"].split(":")[-1]
        out.append(f"| `{r['row']}` | {r['model']} | `{cites}` | {r['blocks'] or '–'} | "
                   f"{_num(r['off_device_ms'], '.2f')} | {_num(r['on_device_ms'], '.2f')} | "
                   f"{_num(r['speedup'], '.3f')}× | {_num(r['eager_speedup'], '.3f')}× | {agree} | {fam_text} | "
                   f"{sh.get('gemm', 0):.0%} | {sh.get('attention', 0):.0%} | {sh.get('conv', 0):.0%} | "
                   f"`{r['run_id']}` {r['status']} |")
    out += ["", f"![speedup per model with the swap-target kernel share]({PLOT.relative_to('docs').as_posix()})"]
    if cpu:
        out += ["", f"{cpu} rows measured on a CPU (tiny configurations) are not shown."]
    return "\n".join(out) + "\n"


def plot_paths(root: Path) -> list[Path]:
    rows, _ = latest_gpu_rows(root)
    return [root / PLOT] if rows else []


def draw(root: Path) -> list[Path]:
    rows, _ = latest_gpu_rows(root)
    rows = [r for r in rows if r.get("speedup")]
    if not rows:
        return []
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [r["row"] for r in rows]
    speed = [float(r["speedup"]) for r in rows]
    share = [sum(family_share(r).values()) * 100 for r in rows]
    fig, ax = plt.subplots(figsize=(max(6.0, 1.0 * len(rows) + 2), 4.2))
    bars = ax.bar(names, speed, color=["#2a7" if s >= 1 else "#c55" for s in speed])
    ax.axhline(1.0, color="black", lw=0.8)
    for b, s, sh in zip(bars, speed, share, strict=True):
        ax.annotate(f"{s:.3f}×\n{sh:.1f}% swap", (b.get_x() + b.get_width() / 2, b.get_height()),
                    ha="center", va="bottom", fontsize=8)
    ax.set_ylabel("speedup, overlay on vs off (device time)")
    ax.set_title("kda e2e: SGLang models, overlay on vs off (label: swap-target kernel share, off)")
    ax.set_ylim(0, max(1.1, max(speed) * 1.25))
    plt.setp(ax.get_xticklabels(), rotation=25, ha="right", fontsize=8)
    fig.tight_layout()
    out = root / PLOT
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return [out]


def summary(root: Path) -> dict[str, Any]:
    rows, cpu = latest_gpu_rows(root)
    return {"gpu_rows": len(rows), "cpu_rows": cpu}
