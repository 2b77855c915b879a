"""H200 sweep for c008's path E on the rows of >= 16 MB moved: SGLang, c007, c008 and forced path-E variants (lag,
CTAs per SM, L2 hints) plus c007's path B and a same-size copy, CUDA-graph replay, one process. Target: < 120 s
after the extension is built (`kda check` builds it first in the batch of docs/notes.md "c008").

Runs against commit d0dea7a's src/ only (c008: force_path 6, force_path 7, register._wins_c007). src/ is c007 again
since path E measured negative (docs/notes.md "c008 on the H200 (2026-11-27): negative"; its result is
dev/results/20261127-sweep_large_c008.json); c007's extension has no path E, so to rerun it, check out c008's
sources first, e.g. `git checkout d0dea7a -- kernels/h200_diffusion_group_norm_silu__multi_shape/src` (and back
with `git checkout HEAD -- .../src` afterwards; kda export --check compares the export with src/).

    python kernels/h200_diffusion_group_norm_silu__multi_shape/dev/sweep_large.py              # 14 rows, $OUT/sweep_large.json
    python .../dev/sweep_large.py --rows all --budget-s 300                                    # every >= 16 MB row

Implementations per row (same inputs, same graph method as dev/bench.py: k rotating input sets of >= 200 MB of x
per replay, so x comes from HBM; median over 3 trials x 3 replays, shuffled order):
  sglang   SGLang 0.5.23 triton_group_norm_silu (the harness baseline)
  c007     c007 exactly: register._wins_c007 routing (SGLang for tail-free chunked groups), else force_path 7
  c008     register.triton_group_norm_silu as it stands (auto routing: path E for groups > 240 KB)
  B        c003/c007's split path forced (force_path 2): the 2R+1W reference
  E...     path E forced (force_path 6, force_cs = lag slack in tiles, smem_cap = hints | CTAs-per-SM << 4):
           E4 auto (4 CTAs/SM, slack 3R/4, hints 7), E3 (3 CTAs/SM), Es2 (slack R/2), Es8 (slack 2R),
           Eall (every stats tile first), Eh6 (hints 6: stats loads not evict_last), Eh0 (no hints)
  copy     a same-size Triton copy (the sol yardstick)
Every implementation except copy is checked against the fp64 oracle on the row before timing; a short list of
path-E edge cases (fp32 offset rows, bf16, batch 2, ragged last tiles, minimal lag, 3 CTAs/SM, determinism) runs
first. A forced variant the planner rejects is skipped before any capture (a TORCH_CHECK in the extension kills
the process, docs/notes.md v3).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import statistics
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "src"))
import bench  # noqa: E402  (dev/bench.py: oracle, inputs, graph helpers, triton copy)
import register  # noqa: E402

OUT = os.environ.get("OUT", "/tmp/gns_out")
T0 = time.time()
G = 32
TOL = {torch.float16: (2e-3, 2e-3), torch.bfloat16: (1.6e-2, 8e-3), torch.float32: (1e-4, 1e-4)}
DCODE = {torch.float16: 0, torch.bfloat16: 1, torch.float32: 2}

# (force_path, force_cs, smem_cap); the E slack variants are resolved per device (R = resident slots).
VARIANTS = {
    "B": (2, 0, 0),
    "E4": (6, 0, 0),
    "E3": (6, 0, 0x37),
    "Es2": (6, "R/2", 0),
    "Es8": (6, "2R", 0),
    "Eall": (6, -1, 0),
    "Eh6": (6, 0, 0x46),
    "Eh0": (6, 0, 8),
}

# 16-200 MB and >= 200 MB representatives (fp16 HunyuanVideo rows, bf16 LTX-2 / FLUX rows), by MB moved.
DEFAULT_ROWS = [
    ((1, 512, 2, 64, 64), "float16"),      # 16.8 MB, 262 KB groups (c007: path B, SGLang one-pass)
    ((1, 512, 3, 128, 40), "float16"),     # 31.5
    ((1, 512, 9, 48, 40), "float16"),      # 35.4 (c007: B)
    ((1, 512, 5, 64, 64), "float16"),      # 41.9 (c007: SGLang, chunked tail-free)
    ((1, 512, 16, 32, 48), "bfloat16"),    # 50.3 LTX-2 stage 2 (c007: SGLang)
    ((1, 128, 5, 96, 256), "float16"),     # 62.9 (c007: SGLang)
    ((1, 512, 9, 128, 40), "float16"),     # 94.4 (c007: B)
    ((1, 512, 3, 128, 128), "float16"),    # 100.7 (c007: SGLang)
    ((1, 128, 17, 256, 80), "float16"),    # 178.3 (c007: B)
    ((1, 128, 17, 96, 256), "float16"),    # 213.9 (c007: SGLang)
    ((1, 512, 9, 128, 128), "float16"),    # 302 (c007: SGLang)
    ((1, 256, 512, 512), "bfloat16"),      # 268 FLUX (c007: SGLang)
    ((1, 128, 17, 256, 256), "float16"),   # 570 (c007: SGLang), 8.9 MB groups
    ((1, 256, 17, 256, 256), "float16"),   # 1141 (c007: SGLang), 17.8 MB groups
]
EXTRA_BF16 = [((1, 512, 128, 128), "bfloat16"), ((1, 512, 256, 256), "bfloat16"), ((1, 128, 1024, 1024), "bfloat16"),
              ((1, 512, 16, 32, 48), "bfloat16")]


def within_tol(out, x, w, b, g, eps, ref=None):
    ref = bench.oracle(x, w, b, g, eps) if ref is None else ref
    atol, rtol = TOL[x.dtype]
    o = out.double()
    err = (o - ref).abs()
    ok = bool(torch.isfinite(o).all()) and bool((err <= atol + rtol * ref.abs()).all())
    return ok, float((err / (atol + rtol * ref.abs())).max())


def plan_of(shape, dtype, fp=0, fc=0, cap=0):
    hw = math.prod(shape) // (shape[0] * shape[1])
    return list(register.load_extension().describe(DCODE[dtype], shape[0], shape[1], hw, G, fp, fc, cap))


def resolve(shape, dtype, spec):
    """Turn the symbolic slack of VARIANTS into tiles for this row (R = the plan's persistent grid)."""
    fp, fc, cap = spec
    if isinstance(fc, str):
        grid = plan_of(shape, dtype, 6, 0, cap)[4]
        fc = max(1, grid // 2) if fc == "R/2" else 2 * grid
    return fp, fc, cap


def forced(fp, fc, cap):
    def fn(x, w, b, g, eps):
        return register.group_norm_silu_cuda(x, w, b, g, eps, fp, fc, cap)

    return fn


def c007_call(x, w, b, g, eps):
    if register._in_contract(x, w, b, g) and register._wins_c007(x, g):
        return register.group_norm_silu_cuda(x, w, b, g, eps, 7, 0, 0)
    return register._baseline()(x, w, b, g, eps)


def edge_cases(results):
    """Path E on contract edges; every case also checks bitwise determinism (two calls)."""
    cases = [
        ((1, 32, 16, 128, 128), torch.float32, {"offset": 1e4, "scale": 100.0}, (6, 0, 0)),
        ((1, 32, 16, 128, 128), torch.float32, {"offset": 1e4, "scale": 0.01}, (6, 0, 0)),
        ((2, 64, 3, 96, 80), torch.bfloat16, {}, (6, 0, 0)),
        ((1, 64, 5, 33, 40), torch.float16, {}, (6, 1, 0)),        # ragged last tile, minimal lag
        ((1, 64, 5, 33, 40), torch.float16, {}, (6, -1, 0x37)),    # all stats first, 3 CTAs/SM
        ((3, 96, 7, 64, 64), torch.float16, {"const": 0.75}, (6, 0, 8)),
        ((1, 512, 9, 48, 40), torch.float16, {}, (6, 0, 0x36)),
        ((1, 128, 5, 33, 31), torch.float16, {}, (6, 0, 0)),        # HW % 8 != 0: the planner must refuse
        ((1, 512, 9, 48, 40), torch.float16, {}, (0, 0, 0)),        # auto (c008 routing)
    ]
    n_fail = 0
    for shape, dt, kw, force in cases:
        x, w, b = bench.rand_inputs(shape, dt, G, **kw)
        plan = plan_of(shape, dt, *force)
        if plan[0] <= 0:
            rec = dict(shape=shape, dtype=str(dt), force=force, ok=None, note=f"plan rejects ({plan[0]})")
        else:
            fn = forced(*force)
            out = bench.poisoned_call(fn, x, w, b, G, 1e-6)
            torch.cuda.synchronize()
            ok, worst = within_tol(out, x, w, b, G, 1e-6)
            det = bool(torch.equal(out, fn(x, w, b, G, 1e-6)))
            ok = ok and det
            n_fail += not ok
            rec = dict(shape=shape, dtype=str(dt), kw=kw, force=force, ok=ok, worst_err_over_tol=worst,
                       deterministic=det, plan=plan)
        results["edge"].append(rec)
        print("EDGE", rec, flush=True)
    return n_fail


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", default="default", help="'default' (14 rows) or 'all' (every >= 16 MB row)")
    ap.add_argument("--variants", default=",".join(VARIANTS), help="comma list out of " + ",".join(VARIANTS))
    ap.add_argument("--budget-s", type=float, default=115)
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    os.makedirs(OUT, exist_ok=True)
    deadline = T0 + args.budget_s
    results = {"env": dict(gpu=torch.cuda.get_device_name(), torch=torch.__version__, cuda=torch.version.cuda),
               "edge": [], "rows": []}
    t0 = time.time()
    register.load_extension()
    results["build_s"] = time.time() - t0
    print(f"build/load {results['build_s']:.1f}s", flush=True)
    if args.rows == "all":
        rows = [(tuple(s), d) for s, d in bench.production_shapes() if 4 * math.prod(s) / 1e6 >= 16] + EXTRA_BF16
        rows.sort(key=lambda r: math.prod(r[0]) * getattr(torch, r[1]).itemsize)
    else:
        rows = DEFAULT_ROWS
    chosen = [v for v in args.variants.split(",") if v]
    rng = random.Random(7)
    table = []
    with torch.no_grad():
        results["edge_failures"] = edge_cases(results)
        for shape, dts in rows:
            if time.time() > deadline:
                print("budget reached; stopping before", shape, flush=True)
                results["stopped_before"] = shape
                break
            dt = getattr(torch, dts)
            xbytes = math.prod(shape) * dt.itemsize
            k = int(min(512, max(2, math.ceil(200e6 / xbytes))))
            x0, w, b = bench.rand_inputs(shape, dt, G, seed=11)
            sets = [(x0, w, b)] + [(torch.randn(shape, device="cuda", dtype=dt), w, b) for _ in range(k - 1)]
            eps = 1e-5 if dt == torch.bfloat16 and len(shape) == 5 else 1e-6
            impls = {"sglang": register._baseline(), "c007": c007_call, "c008": register.triton_group_norm_silu}
            plans = {"c008": plan_of(shape, dt), "c007": plan_of(shape, dt, 7, 0, 0)}
            for name in chosen:
                spec = resolve(shape, dt, VARIANTS[name])
                plan = plan_of(shape, dt, *spec)
                if plan[0] > 0:
                    impls[name] = forced(*spec)
                    plans[name] = plan
            check = {}
            ref = bench.oracle(x0, w, b, G, eps)  # once per row (2.3 GB of fp64 on the largest row)
            for name, fn in impls.items():
                out = bench.poisoned_call(fn, x0, w, b, G, eps)
                torch.cuda.synchronize()
                check[name] = within_tol(out, x0, w, b, G, eps, ref)
                del out
            del ref
            fns = {n: (lambda x, w_, b_, f=f, e=eps: f(x, w_, b_, G, e)) for n, f in impls.items()}
            if bench.triton_copy is not None:
                fns["copy"] = lambda x, w_, b_: bench.triton_copy(x)
            meas = {n: [] for n in fns}
            for n, f in fns.items():  # one graph alive at a time: the 1.14 GB row holds k outputs per graph
                g, outs = bench.build_graph(f, sets)
                for _ in range(3):
                    meas[n] += bench.replay_us(g, k, reps=args.reps)
                del g, outs
                torch.cuda.empty_cache()
            order = list(fns)  # a second, shuffled pass for drift between implementations
            rng.shuffle(order)
            for n in order:
                g, outs = bench.build_graph(fns[n], sets)
                meas[n] += bench.replay_us(g, k, reps=args.reps)
                del g, outs
                torch.cuda.empty_cache()
            us = {n: statistics.median(v) for n, v in meas.items()}
            mb = 2 * xbytes / 1e6
            e_names = [n for n in us if n.startswith("E")]
            best_e = min(e_names, key=lambda n: us[n]) if e_names else None
            copy = us.get("copy", float("nan"))
            rec = dict(shape=shape, dtype=dts, mb=mb, k=k, us=us, plans=plans,
                       spread={n: (min(v), max(v)) for n, v in meas.items()},
                       check={n: dict(ok=c[0], worst_err_over_tol=c[1]) for n, c in check.items()},
                       x_c008_vs_sglang=us["sglang"] / us["c008"], x_c007_vs_sglang=us["sglang"] / us["c007"],
                       sol_c008=copy / us["c008"], sol_c007=copy / us["c007"], sol_sglang=copy / us["sglang"],
                       best_e=best_e, sol_best_e=(copy / us[best_e]) if best_e else None)
            results["rows"].append(rec)
            table.append(rec)
            bad = {n: c for n, c in check.items() if not c[0]}
            print(f"{str(shape):24s} {dts:8s} {mb:7.1f}MB sglang {us['sglang']:7.1f} c007 {us['c007']:7.1f} "
                  f"c008 {us['c008']:7.1f} copy {copy:7.1f} | c008 {rec['x_c008_vs_sglang']:.2f}x sol {rec['sol_c008']:.2f}"
                  f" | " + " ".join(f"{n}={us[n]:.1f}" for n in us if n not in ("sglang", "c007", "c008", "copy"))
                  + (f" CHECK FAIL {bad}" if bad else ""), flush=True)
            del sets, x0
            torch.cuda.empty_cache()
    rows_done = results["rows"]
    if rows_done:
        def gm(vals):
            return math.exp(sum(math.log(v) for v in vals) / len(vals))

        def cls(lo, hi):
            return [r for r in rows_done if lo <= r["mb"] < hi]

        summary = {}
        for name, (lo, hi) in {"16-200MB": (16, 200), ">=200MB": (200, 1e9)}.items():
            rs = cls(lo, hi)
            if rs:
                summary[name] = dict(n=len(rs), c008_x_sglang=gm([r["x_c008_vs_sglang"] for r in rs]),
                                     c007_x_sglang=gm([r["x_c007_vs_sglang"] for r in rs]),
                                     c008_worst=min(r["x_c008_vs_sglang"] for r in rs),
                                     c008_sol_min=min(r["sol_c008"] for r in rs),
                                     best_e_counts={n: sum(r["best_e"] == n for r in rs) for n in VARIANTS})
        summary["check_failures"] = sum(not c["ok"] for r in rows_done for c in r["check"].values())
        summary["edge_failures"] = results["edge_failures"]
        summary["elapsed_s"] = time.time() - T0
        results["summary"] = summary
        print("\n| row | MB | SGLang us | c007 us | c008 us | best E | copy us | c008 x SGLang | sol c007 | sol c008 |")
        print("|---|---:|---:|---:|---:|---|---:|---:|---:|---:|")
        for r in table:
            u = r["us"]
            be = f"{r['best_e']} {u[r['best_e']]:.1f}" if r["best_e"] else "-"
            print(f"| {'x'.join(map(str, r['shape']))} {r['dtype']} | {r['mb']:.1f} | {u['sglang']:.1f} | {u['c007']:.1f} | "
                  f"{u['c008']:.1f} | {be} | {u.get('copy', float('nan')):.1f} | {r['x_c008_vs_sglang']:.2f} | "
                  f"{r['sol_c007']:.2f} | {r['sol_c008']:.2f} |")
        print("SUMMARY", json.dumps(summary), flush=True)
    with open(os.path.join(OUT, "sweep_large.json"), "w") as f:
        json.dump(results, f, indent=1, default=str)


if __name__ == "__main__":
    main()
