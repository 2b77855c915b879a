"""H200 dev sweep of c005's LTX-2 split-RoPE tile plans against SGLang and torch.compile (dev numbers, never
ledger rows).

    python kernels/h200_diffusion_rotary_embedding__multi_shape/dev/ltx2_sweep.py [--rows a,b] [--trials 8]
        [--variants c004,stream,flat_x1024_w4,persist,...] [--all-variants-small] [--dump-inductor]

For each LTX-2 production row (task.toml), with the harness's own pieces (kda_lab.measure: L2-cold rotated input
sets, one CUDA graph per implementation, interleaved samples, the same-size copy yardstick):

- every implementation is first checked bit for bit against SGLang's output on the row's first input set
  (task.toml: exact); one that differs is reported WRONG and not timed. The compile peer's bits are reported
  too (it is timed either way, as `kda bench` times it);
- timed: SGLang; torch.compile of the task's torch reference (the `kda bench` peer: dynamo reset per row,
  dynamic=False); "c005" = the registered entry point (plan_auto, kept launch); and each tile plan of
  src/ltx2_split_rope.py through run_ltx2_plan: "c004" (SGLang's geometry and grid order: c004's PTX), and the
  c005 variants below, each isolating one mechanism of docs/notes.md (c005);
- c006 dev candidates (dev/ltx2_variants.py, the same per-element math, other launch structures): "flat_*"
  (torch.compile's 1-D pointwise shape, XBLOCK elements per program) and "persist*" (c005's stream tile in a
  grid of resident programs looping over tiles), through ltx2_variants.run_variant, checked like the rest;
- --dump-inductor: the Triton source Inductor generates for the compile peer of the first row (dynamo reset,
  caches off, torch._inductor.utils.run_and_get_code) goes to $OUT/inductor_<row>.py, headed by the launch
  configs its autotuner kept (XBLOCK, num_warps, registers), so compile's geometry can be read beside ours;
- rows below STREAM_MIN_ELEMS (small and mid rows, where plan_auto is c004's plan) time only SGLang, compile,
  c005, c004 and "stream", unless --all-variants-small.

Prints one line per row as it goes, then a table (us per implementation, speedup vs SGLang and vs compile), and
writes $OUT/ltx2_sweep.json (or /tmp/ltx2_sweep.json). About 60-100 s on an H200 with the defaults (Triton and
Inductor compile on a cold cache included).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

TASK_DIR = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(TASK_DIR.parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))  # ltx2_variants (c006 dev candidates)

FN = "apply_ltx2_split_rotary_emb"
# variant name -> plan function name in src/ltx2_split_rope.py (all exported by register.PLANS_LTX2)
VARIANTS: dict[str, str] = {
    "c004": "plan_sglang_tiles",  # c004: SGLang's tiles, warps and (token, head block) grid order
    "vec16_tok": "plan_vec16_tiles",  # c004's grid order, 16-byte vectors (order held, vector width changed)
    "stream_w8": "plan_stream_w8",  # memory order, c004's tiles and warps (vector width held, order changed)
    "stream": "plan_stream",  # memory order + 16-byte vectors (plan_auto on the large rows)
    "stream_r32": "plan_stream_r32",  # stream capped at 32 registers (full occupancy)
    "stream_row": "plan_stream_row",  # stream with a whole 32-head token row per program
    "stream_h8": "plan_stream_h8",  # stream with 8 heads per program (compile's 1024-element blocks at D=128)
    "stream_evict": "plan_stream_evict",  # stream with evict_first on every load and store
}
# c006 dev candidates (dev/ltx2_variants.py: flat and persistent launches); imported lazily (Triton) in main
DEV_VARIANTS = ("flat_x1024_w4", "flat_x2048_w4", "flat_x2048_w8", "flat_x4096_w8", "flat_x1024_w4_el", "flat_x2048_w8_el", "persist", "persist_o67",
                "persist_s2", "persist_h8")
SMALL_VARIANTS = ("c004", "stream")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", default="", help="comma-separated row names (default: every LTX-2 production row)")
    ap.add_argument("--trials", type=int, default=8)
    known = [*VARIANTS, *DEV_VARIANTS]
    ap.add_argument("--variants", default=",".join(known), help=f"subset of {','.join(known)}")
    ap.add_argument("--all-variants-small", action="store_true", help="every variant on the small rows too")
    ap.add_argument("--no-compile", action="store_true", help="skip the torch.compile peer")
    ap.add_argument("--dump-inductor", action="store_true",
                    help="write Inductor's generated code for the first row's compile peer to $OUT/inductor_<row>.py")
    opt = ap.parse_args()
    unknown = [v for v in opt.variants.split(",") if v and v not in known]
    if unknown:
        ap.error(f"unknown variants {unknown}; known: {known}")
    if opt.dump_inductor and opt.no_compile:
        ap.error("--dump-inductor needs the compile peer (drop --no-compile)")

    import torch

    if not torch.cuda.is_available():
        print("ltx2_sweep: needs a CUDA GPU (the H200); nothing to do here", file=sys.stderr)
        return 2

    import ltx2_variants as dev

    from kda_lab.families import contract
    from kda_lab.measure.inductor_dump import dump_inductor
    from kda_lab.measure.inputs import make_inputs, rotation_count
    from kda_lab.measure.run import resolve_baseline
    from kda_lab.measure.timing import GraphTimer, copy_yardstick, host_time_us, time_interleaved
    from kda_lab.task import load_task
    from kda_lab.task.schema import load_candidate

    assert tuple(dev.VARIANTS) == DEV_VARIANTS, "DEV_VARIANTS out of step with ltx2_variants.VARIANTS"
    out_dir = Path(os.environ.get("OUT", "/tmp"))
    inductor: dict[str, Any] = {}
    t_start = time.perf_counter()
    task = load_task(TASK_DIR)
    cand = load_candidate(task)
    ltx2 = sys.modules[f"{cand.__name__}.ltx2_split_rope"]
    plans = {p.__name__: p for p in cand.PLANS_LTX2}
    device = torch.device("cuda", torch.cuda.current_device())
    rows = [w for w in task.workloads if w.kind == "production" and w.fn == FN]
    if opt.rows:
        wanted = opt.rows.split(",")
        rows = [w for w in task.workloads if w.name in wanted and w.fn == FN]
    spec = task.functions[FN]
    c = contract(task.family, FN)
    baseline = resolve_baseline(spec)
    l2 = int(getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 60 << 20))
    results: list[dict[str, Any]] = []
    torch.set_grad_enabled(False)
    for w in rows:
        t_row = time.perf_counter()
        sets = rotation_count(w, l2)
        arg_sets = [c.prepared(make_inputs(w, device, 1234 + i)) for i in range(sets)]
        a0 = arg_sets[0]
        x0, cos0 = a0["x"], a0["cos"]
        n_elems = x0.numel()
        large = n_elems >= ltx2.STREAM_MIN_ELEMS
        names = [v for v in opt.variants.split(",") if v and (large or opt.all_variants_small or v in SMALL_VARIANTS)]
        impls: dict[str, Any] = {"sglang": lambda a: baseline(**a), "c005": lambda a: cand.apply_ltx2_split_rotary_emb(**a)}
        for name in names:
            if name in DEV_VARIANTS:
                impls[name] = lambda a, n=name: dev.run_variant(a["x"], a["cos"], a["sin"], n)
            else:
                impls[name] = lambda a, p=plans[VARIANTS[name]]: cand.run_ltx2_plan(a["x"], a["cos"], a["sin"], p)
        if not opt.no_compile:
            torch._dynamo.reset()  # a fresh dynamo cache per row (the recompile limit), as kda bench does
            compiled = torch.compile(c.torch_reference, dynamic=False)
            impls["compile"] = lambda a, f=compiled: f(**a)
            if opt.dump_inductor and not inductor:
                path = out_dir / f"inductor_{w.name}.py"
                try:
                    kept = dump_inductor(compiled, a0, path)  # kda_lab.measure.inductor_dump
                    inductor = {"row": w.name, "path": str(path), "kept": kept}
                except Exception as exc:  # a dev aid: report and go on timing  # noqa: BLE001
                    inductor = {"row": w.name, "error": repr(exc)}
                print(f"inductor dump: {json.dumps(inductor)}", flush=True)
        want = baseline(**a0)
        checks: dict[str, bool] = {}
        for name, call in impls.items():
            if name == "sglang":
                continue
            got = call(a0)
            torch.cuda.synchronize()
            checks[name] = bool(got.dtype == want.dtype and got.shape == want.shape and torch.equal(got, want))
            del got
        timed = {n: f for n, f in impls.items() if n in ("sglang", "compile") or checks.get(n)}
        timers = {n: GraphTimer(f, arg_sets) for n, f in timed.items()}
        nbytes = spec.byte_model.bytes(w)
        timers["copy"] = copy_yardstick(nbytes, sets, device)
        times = time_interleaved(timers, opt.trials, seed=7)
        us = {n: s.median for n, s in times.summaries.items()}
        spread = {n: s.spread for n, s in times.summaries.items()}
        host = {n: host_time_us(timed[n], arg_sets, calls=30) for n in ("sglang", "c005") if n in timed}
        auto_plan = ltx2.plan_auto(cos0.shape[1], cos0.shape[3], x0.element_size(), n_elems)
        row = {
            "row": w.name, "bytes": nbytes, "sets": sets, "n_elems": n_elems, "auto_plan": list(auto_plan),
            "bit_exact_vs_sglang": checks, "us": us, "spread": spread,
            "speedup_vs_sglang": {n: us["sglang"] / v for n, v in us.items() if n not in ("sglang", "copy")},
            "speedup_vs_compile": ({n: us["compile"] / v for n, v in us.items() if n not in ("compile", "copy")}
                                   if "compile" in us else {}),
            "tbps": {n: nbytes / v / 1e6 for n, v in us.items()},
            "sol": {n: us["copy"] / v for n, v in us.items() if n != "copy"}, "host_us": host,
            "row_seconds": time.perf_counter() - t_row,
        }
        results.append(row)
        wrong = [n for n, ok in checks.items() if not ok and n != "compile"]
        mine = {n: v for n, v in us.items() if n not in ("sglang", "compile", "copy")}
        best = min(mine.items(), key=lambda kv: kv[1]) if mine else ("-", float("nan"))
        print(f"{w.name:38s} {nbytes / 1e6:7.1f} MB | SGLang {us['sglang']:7.2f} compile {us.get('compile', float('nan')):7.2f}"
              f" c005 {us.get('c005', float('nan')):7.2f} | best {best[0]} {best[1]:.2f} us | "
              f"{row['row_seconds']:.1f} s" + (f" | WRONG (not timed): {wrong}" if wrong else "")
              + ("" if checks.get("compile", True) else " | compile peer not bit-exact"), flush=True)
        del timers, arg_sets, a0, want
        torch.cuda.empty_cache()

    cols = ["sglang", "compile", "c005", *VARIANTS, *DEV_VARIANTS]
    cols = [n for n in cols if any(n in r["us"] for r in results)]
    print("\nus per call (median of interleaved CUDA-graph samples); x = speedup vs SGLang; c = vs compile")
    print(f"{'row':38s} " + " ".join(f"{n:>12s}" for n in cols) + f" {'copy':>8s}")
    for r in results:
        cells = []
        for n in cols:
            if n not in r["us"]:
                cells.append(f"{'-':>12s}")
                continue
            v = r["us"][n]
            cells.append(f"{v:7.2f}/{r['speedup_vs_sglang'].get(n, 1.0):.3f}" if n != "sglang" else f"{v:12.2f}")
        print(f"{r['row']:38s} " + " ".join(f"{s:>12s}" for s in cells) + f" {r['us']['copy']:8.2f}")
    print("\nvs compile (compile us / impl us; > 1 beats the peer):")
    for r in results:
        vc = r["speedup_vs_compile"]
        print(f"{r['row']:38s} " + " ".join(f"{n}={vc[n]:.3f}" for n in cols if n in vc and n != "compile"))
    out = out_dir / "ltx2_sweep.json"
    dev_plans = {n: {"kind": type(p).__name__, **p._asdict()} for n, p in dev.VARIANTS.items()}
    out.write_text(json.dumps({"device": torch.cuda.get_device_name(device), "trials": opt.trials,
                               "variants": VARIANTS, "dev_variants": dev_plans, "inductor": inductor,
                               "stream_min_elems": ltx2.STREAM_MIN_ELEMS, "rows": results,
                               "seconds": time.perf_counter() - t_start}, indent=1))
    print(f"wrote {out} ({time.perf_counter() - t_start:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
