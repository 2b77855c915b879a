"""The end-to-end section of docs/leaderboard.md and its plots, from the e2e ledgers only (`kda report`).

Shown, latest GPU measurement each (runs superseded by a later run left out; CPU rows, CI's tiny configurations,
counted, not shown):

- whole requests (``kda e2e --request``) at their tier: per stage off/on, the request speedup, each stage's
  share, and a stacked-bar plot per model (the headline numbers);
- which promoted families a request at each tier actually ran (coverage);
- module rows per tier and GPU model, and the frozen pre-tier rows (e2e/benchmark.csv) marked ``exact (legacy)``:
  overlay off/on device time, speedup, the latest A/A ratio of the same row, tier and GPU, eager speedup,
  agreement, and the share of device time in the swap-target families' kernels (what the overlay can touch:
  Amdahl).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from kda_lab.e2e.latest import by_request_stage, by_row_tier_gpu, gpu_label, latest_rows
from kda_lab.ledger import e2e as e2e_ledger
from kda_lab.ledger.e2e import kda_calls

PLOT = Path("docs/plots/e2e/speedup.png")


def latest_gpu_rows(root: Path, aa: bool = False) -> tuple[list[dict[str, str]], int]:
    """(latest GPU module measurement per (row, tier, GPU model) in ledger order, the legacy rows first; number of
    CPU rows); ``aa``: the A/A runs instead."""
    rows = [*e2e_ledger.read_legacy(root), *e2e_ledger.read(root)]
    latest, cpu = latest_rows(rows, by_row_tier_gpu, stages=("module",), aa=aa)
    return list(latest.values()), cpu


def latest_requests(root: Path, aa: bool = False) -> list[tuple[str, str, dict[str, Any], list[dict[str, str]]]]:
    """(request, tier, summary, its stage rows) per request, tier and GPU model (an H100's run never hides an
    H200's), evidence GPUs first: the latest row of each stage, ok rows before failed ones, so that a request
    whose stages ran in separate calls (``--stage``) is put together; ``aa``: the A/A runs instead."""
    from kda_lab.e2e.request import summarize

    latest, _ = latest_rows(e2e_ledger.read(root), by_request_stage, stages=("denoise_step", "decode"), aa=aa,
                            failed="after_ok")
    runs: dict[tuple[str, ...], list[dict[str, str]]] = {}
    for (req, q, arch, _, _), r in latest.items():
        runs.setdefault((req, q, arch), []).append(r)
    ordered = sorted(runs.items(), key=lambda kv: not gpu_label(kv[1][0])[1])
    return [(req, q, summarize(stages), stages) for (req, q, _), stages in ordered]


def family_share(r: dict[str, str]) -> dict[str, float]:
    shares = json.loads(r["shares_off"]) if r.get("shares_off") else {}
    return {k.removeprefix("family:"): v for k, v in shares.items() if k.startswith("family:")}


def _layout(r: dict[str, str]) -> str:
    """" (sp=2 kv_gather=2)" for a multi-worker row (`kda e2e --sp N`), "" for one process."""
    return f" ({r['parallel']})" if r.get("parallel") else ""


def _num(v: str, fmt: str) -> str:
    try:
        return format(float(v), fmt)
    except (TypeError, ValueError):
        return "–"


def _speedup_cell(speedup: float, row: dict[str, str] | None) -> str:
    """A stage's speedup; where the overlay served no call in it, the ratio is the run's noise and says so."""
    if row is not None and kda_calls(row.get("coverage_on")) == 0:
        return f"{speedup:.3f}× (0 KDA calls)"
    return f"{speedup:.3f}×"


def _aa_cell(s: dict[str, Any] | None) -> str:
    """The latest A/A run of the same request, tier and GPU model: its off/off ratio, the noise to clear."""
    return f"{s['speedup']:.3f}×" if s else "not run"


def _module_aa_cell(r: dict[str, str] | None) -> str:
    """The latest A/A run of a module row at its tier on its GPU model: its off/off ratio, "–" where none ran."""
    num = _num(r["speedup"], ".3f") if r else "–"
    return "–" if num == "–" else f"{num}×"


def _request_section(root: Path) -> list[str]:
    reqs = latest_requests(root)
    if not reqs:
        return ["**No whole-request measurements yet** (`kda e2e --request MODEL` on an H200, docs/e2e.md).", ""]
    out = ["### Whole requests (`kda e2e --request`)", "",
           "One default request as SGLang runs it: the recipe's DiT forwards (one full-depth forward timed, eager, "
           "times the forwards per request) plus the VAE decode; text encoding left out. Device time, overlay off "
           "vs on, at the request's tier, on the GPU named (only an H200's or a B200's rows are evidence). A stage "
           "where the overlay served no call says `0 KDA calls`: its ratio is the measurement's noise; the A/A "
           "column is the same request run with the overlay off in both arms (`kda e2e --request M --aa`).", "",
           "| request | tier | GPU | DiT forwards | step off / on ms | denoise off / on ms | decode off / on ms | "
           "request off / on ms | request | denoise | decode | decode share | A/A request | run |",
           "|---|---|---|---:|---|---|---|---|---:|---:|---:|---:|---:|---|"]
    aa = {(req, q, gpu_label(rows[0])[0]): s for req, q, s, rows in latest_requests(root, aa=True) if s}
    for req, q, s, stage_rows in reqs:
        run = "`, `".join(dict.fromkeys(x["run_id"] for x in stage_rows))
        arch, evidence = gpu_label(stage_rows[0])
        gpu = arch if evidence else f"{arch} (not evidence)"
        if not s:
            bad = "; ".join(f"{x['stage']} {x['status']}" for x in stage_rows)
            out.append(f"| {req} | {q} | {gpu} | – | – | – | – | – | – | – | – | – | – | `{run}` {bad} |")
            continue
        by = {x["stage"]: x for x in stage_rows if x["status"] == "ok"}
        o, n = s["off"], s["on"]
        nothing = all(kda_calls(x.get("coverage_on")) == 0 for x in by.values())
        request = f"**{s['speedup']:.3f}×**" + (" (0 KDA calls)" if nothing else "")
        out.append(f"| {req} | {q} | {gpu} | {s['forwards']} | {o['step_ms']:.1f} / {n['step_ms']:.1f} | "
                   f"{o['denoise_ms']:.0f} / {n['denoise_ms']:.0f} | {o['decode_ms']:.0f} / {n['decode_ms']:.0f} | "
                   f"{o['request_ms']:.0f} / {n['request_ms']:.0f} | {request} | "
                   f"{_speedup_cell(s['denoise_speedup'], by.get('denoise_step'))} | "
                   f"{_speedup_cell(s['decode_speedup'], by.get('decode'))} | {s['decode_share_off']:.0%} | "
                   f"{_aa_cell(aa.get((req, q, arch)))} | `{run}` |")
    out += ["", *(f"![{req} at {q} on {gpu_label(rows[0])[0]}, by stage]"
                  f"({_request_plot(req, q, gpu_label(rows[0])[0]).relative_to('docs').as_posix()})"
                  for req, q, s, rows in reqs if s), ""]
    return out


def short_kernel(name: str, width: int = 90) -> str:
    """A profiler kernel name without ``void`` and its argument list, cut to ``width``."""
    name = name.removeprefix("void ").replace("(anonymous namespace)::", "")
    paren = name.find("(", 10)
    name = name[:paren] if paren > 0 else name
    return name if len(name) <= width else name[:width - 1] + "…"


def _idle_families(r: dict[str, str]) -> frozenset[str]:
    """The families a stage row's forward never called (kernels.idle_families), from its own columns."""
    from kda_lab.e2e.kernels import idle_families

    calls = json.loads(r["coverage_on"]) if r.get("coverage_on") else {}
    return idle_families(calls, e2e_ledger.installed_families(r))


def _top_kernels_section(root: Path) -> list[str]:
    """Per request and stage (overlay off): the decode's split, and the top kernels outside GEMM and attention,
    so that "other" is named kernel by kernel (issue #35, item 4)."""
    from kda_lab.e2e.kernels import vae_bucket

    reqs = [(req, q, rows) for req, q, s, rows in latest_requests(root) if s]
    if not reqs:
        return []
    out = ["### Where each stage's time goes outside GEMM and attention", "",
           "Overlay off, one profiled forward of each stage of the latest request row: the kernels outside GEMM "
           "and attention with the most device time (up to 15, `kda_lab/e2e/kernels.py: top_kernels`; a class "
           "`family:X` is a swap target of the overlay) and, for a decode, its split into convolution, "
           "norm+activation, pad/cat, layout copies, upsampling, attention, GEMM and the rest, with the "
           "convolutions' achieved TFLOP/s.", ""]
    for req, q, rows in reqs:
        gpu = gpu_label(rows[0])
        for r in sorted(rows, key=lambda x: x["stage"] != "denoise_step"):
            if r["status"] != "ok" or not r.get("top_kernels_off"):
                continue
            total = float(r["kernel_ms_off"]) if r.get("kernel_ms_off") else 0.0
            out.append(f"**{req} · {r['stage']} · {q} · {gpu[0]}{'' if gpu[1] else ' (not evidence)'}** "
                       f"(`{r['run_id']}`, {total:.1f} ms of kernels)")
            out.append("")
            if r.get("split_off"):
                split = json.loads(r["split_off"])
                parts = ", ".join(f"{k} {v:.1f} ms ({v / total:.0%})" if total else f"{k} {v:.1f} ms"
                                  for k, v in sorted(split.items(), key=lambda kv: -kv[1]))
                rate = float(r["conv_tflops_off"] or 0) if r.get("conv_tflops_off") else 0.0
                tf = f"; convolutions at {rate:.1f} TFLOP/s" if rate else ""  # 0: FLOPs not counted (pre-fix rows)
                out += [f"Decode split: {parts}{tf}.", ""]
            out += ["| kernel | class | ms | share |", "|---|---|---:|---:|"]
            idle = _idle_families(r)
            for k in json.loads(r["top_kernels_off"]):
                cls = vae_bucket(k["kernel"]) if r.get("split_off") else k["class"]  # a decode: its split's buckets
                if cls.removeprefix("family:") in idle:  # a row recorded before kernels.idle_families
                    cls = "other"
                out.append(f"| `{short_kernel(k['kernel'])}` | {cls} | {k['ms']:.2f} | {k['share']:.1%} |")
            out.append("")
    return out


def coverage_table(root: Path) -> list[str]:
    """Per promoted swap target and fast path, the calls KDA served / handed to SGLang in the latest GPU run of
    each request at each tier (its stage rows' ``coverage_on``), then summed over the module rows per tier."""
    from kda_kernels.registry import BY_FUNCTION, FAMILIES, FAST_PATH_FAMILIES
    from kda_lab.e2e.coverage import served

    reqs = [(req, q, gpu_label(rows[0])[0], rows) for req, q, s, rows in latest_requests(root)]
    by_tier = served(root, stage="module")
    tiers = [t for t in ("exact", "lossless", "high") if t in by_tier]
    if not reqs and not tiers:
        return []
    heads = [*(f"{req} ({q}, {arch})" for req, q, arch, _ in reqs), *(f"module rows ({t})" for t in tiers)]
    out = ["| function | tier it needs | " + " | ".join(heads) + " |", "|---|---|" + "---|" * len(heads)]
    names = [*(fn for fns in FAMILIES.values() for fn in fns), *(fp.name for fp in FAST_PATH_FAMILIES.values())]
    for fn in names:
        need = BY_FUNCTION[fn].tier if fn in BY_FUNCTION else "lossless"
        cells = []
        for _, _, _, rows in reqs:
            calls = [json.loads(r["coverage_on"]).get(fn) for r in rows if r.get("coverage_on")]
            calls = [c for c in calls if c]
            cells.append(f"{sum(c['kda'] for c in calls)} / {sum(c['sglang'] for c in calls)}" if calls else "–")
        for t in tiers:
            c = by_tier[t].get(fn)
            cells.append(f"{c['kda']} / {c['sglang']}" if c else "–")
        out.append(f"| `{fn}` | {need} | " + " | ".join(cells) + " |")
    return [*out, "", "KDA / SGLang: calls in one overlay-on forward of each stage (denoise step and decode "
            "together); – : not called (an SGLang fusion or fast path took the call site, or the model never "
            "calls it)."]


def _coverage_section(root: Path) -> list[str]:
    table = coverage_table(root)
    if not table:
        return []
    return ["### Which promoted kernels ran, per request and tier", "",
            "A lossless kernel hands exact-tier calls to SGLang; a kernel whose SGLang call site a default-tier "
            "fusion replaces is never called. The same table is spliced into docs/e2e.md.", "", *table, ""]


def section(root: Path) -> str:
    rows, cpu = latest_gpu_rows(root)
    out = ["## End to end: SGLang's own models (`kda e2e`)", "", *_request_section(root), *_coverage_section(root),
           *_top_kernels_section(root),
           "### Module rows", "",
           "SGLang 0.5.23's model classes (DiT stacks, VAE decoders, the LTX-2 latent upsampler) with seeded random "
           "weights at production sizes, overlay off vs on, interleaved ([docs/e2e.md](e2e.md)). Speedup = off "
           "median / on median of device time; swap-target share = share of the off run's device time in kernels "
           "of the families the overlay can replace. Per row, tier and GPU model (only an H200's or a B200's rows "
           "are evidence); A/A = the latest run of the same row, tier and GPU with the overlay off in both arms "
           "(`kda e2e --aa`), the noise a speedup must clear, – where none ran.", ""]
    if not rows:
        out += ["**No GPU measurements in e2e/rows.csv yet**: run `kda e2e` on an H200 (docs/e2e.md)."]
        if cpu:
            out.append(f"{cpu} rows measured on a CPU (tiny configurations) are not shown.")
        return "\n".join(out) + "\n"
    out += ["| row | model | tier | GPU | cites | DiT blocks | off ms | on ms | speedup | A/A | eager | agree "
            "| swap-target share | GEMM | attention | conv | run |",
            "|---|---|---|---|---|---:|---:|---:|---:|---:|---:|---|---|---:|---:|---:|---|"]
    aa = {by_row_tier_gpu(r): r for r in latest_gpu_rows(root, aa=True)[0]}
    for r in rows:
        arch, evidence = gpu_label(r)
        gpu = arch if evidence else f"{arch} (not evidence)"
        a = aa.get(by_row_tier_gpu(r))
        fam = family_share(r)
        sh = json.loads(r["shares_off"]) if r.get("shares_off") else {}
        fam_text = ", ".join(f"{k} {v:.1%}" for k, v in sorted(fam.items(), key=lambda kv: -kv[1])) or "0"
        agree = {"1": "yes", "0": "**no**"}.get(r["agree"], "–")
        cites = r["cites"].split(":")[-1] or "–"
        out.append(f"| `{r['row']}`{_layout(r)} | {r['model']} | {r['quality']} | {gpu} | `{cites}` | {r['blocks'] or '–'} | "
                   f"{_num(r['off_device_ms'], '.2f')} | {_num(r['on_device_ms'], '.2f')} | "
                   f"{_num(r['speedup'], '.3f')}× | {_module_aa_cell(a)} | {_num(r['eager_speedup'], '.3f')}× | "
                   f"{agree} | {fam_text} | "
                   f"{sh.get('gemm', 0):.0%} | {sh.get('attention', 0):.0%} | {sh.get('conv', 0):.0%} | "
                   f"`{r['run_id']}` {r['status']} |")
    out += ["", f"![speedup per model with the swap-target kernel share]({PLOT.relative_to('docs').as_posix()})"]
    if cpu:
        out += ["", f"{cpu} rows measured on a CPU (tiny configurations) are not shown."]
    return "\n".join(out) + "\n"


def _request_plot(request: str, quality: str, arch: str) -> Path:
    return PLOT.parent / f"request_{request}_{quality}_{arch}.png"


def plot_paths(root: Path) -> list[Path]:
    rows, _ = latest_gpu_rows(root)
    reqs = [root / _request_plot(req, q, gpu_label(rows[0])[0]) for req, q, s, rows in latest_requests(root) if s]
    return ([root / PLOT] if rows else []) + reqs


def _draw_request(root: Path, request: str, quality: str, arch: str, s: dict[str, Any]) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.2, 4.0))
    states = ["overlay off", "overlay on"]
    den = [s["off"]["denoise_ms"] / 1e3, s["on"]["denoise_ms"] / 1e3]
    dec = [s["off"]["decode_ms"] / 1e3, s["on"]["decode_ms"] / 1e3]
    ax.bar(states, den, color="#4a7ab5", label=f"denoise ({s['forwards']} DiT forwards)")
    ax.bar(states, dec, bottom=den, color="#d98c3a", label="VAE decode")
    for i in range(2):
        ax.annotate(f"{den[i] + dec[i]:.2f} s", (i, den[i] + dec[i]), ha="center", va="bottom", fontsize=9)
    ax.set_ylabel("device time per request (s)")
    ax.set_title(f"{request} ({quality}, {arch}): request {s['speedup']:.3f}x", fontsize=10)
    ax.legend(fontsize=8)
    fig.tight_layout()
    out = root / _request_plot(request, quality, arch)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out


def draw(root: Path) -> list[Path]:
    written = [_draw_request(root, req, q, gpu_label(rows[0])[0], s) for req, q, s, rows in latest_requests(root)
               if s]
    rows, _ = latest_gpu_rows(root)
    rows = [r for r in rows if r.get("speedup")]
    if not rows:
        return written
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    # the GPU is named only off the evidence GPUs, where two bars of one row and tier would otherwise look alike
    names = [f"{r['row']}{_layout(r)} ({r['quality']}{'' if gpu_label(r)[1] else ', ' + gpu_label(r)[0]})"
             for r in rows]
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
    return [out, *written]


def summary(root: Path) -> dict[str, Any]:
    rows, cpu = latest_gpu_rows(root)
    return {"gpu_rows": len(rows), "cpu_rows": cpu}
