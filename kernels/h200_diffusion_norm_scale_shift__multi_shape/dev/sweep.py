"""Dev sweep on the H200 (not evidence: `kda bench` is): the candidate's launch-plan variants (warps per row, rows
per program, late or early loads of the row-broadcast operands) against SGLang and a same-size copy, on one row of
each production class, timed the way `kda bench` times (one CUDA graph over rotated L2-cold input sets, samples
interleaved), to pick nss_kernel.plan's defaults before a ledger run.

    python3 kernels/h200_diffusion_norm_scale_shift__multi_shape/dev/sweep.py [--trials 7] [--out DIR] [--rows R..]

Every variant's outputs are first checked against the fp64 oracle under the task's tolerances (a wrong variant
reads WRONG and is not timed). Prints us, TB/s and speedup over SGLang per row and variant; --out writes
sweep.json. Runs SGLang's CuTe DSL baseline, so the box needs .gpu-stage-b installed (docs/gpu-box.md).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

TASK_DIR = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(TASK_DIR.parents[1]))

# one row per class: bf16 broadcast D = 3072 (the 3.1 TB/s class) and 5120, residual forms, fp32 broadcast
# modulation, per-token fp32, and the small (latency-bound) rows
ROWS = ["qwen_nss_L4096", "hyvideo_nss_L27030", "qwen_res_nss_L4096", "firered_res_nss_L8424", "mova_nss_L44100",
        "wan_t2v_nss_L37800_f32", "wan_t2v_res_nss_L37800_scalar_affine_f32gate", "wan_ti2v_nss_L18144_f32_tok",
        "helios_nss_L11040_f32_tok", "qwen_nss_L47", "qwen_res_nss_L47", "mova_nss_L101", "qwen_edit_res_nss_L195"]
# (warps, rows per program, late); None keeps the default plan's value
VARIANTS = [None, (2, 1, True), (4, 1, True), (4, 2, True), (2, 2, True), (4, 1, False), (8, 1, True),
            (4, 4, True)]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trials", type=int, default=7)
    ap.add_argument("--rows", nargs="*", default=ROWS)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)

    import torch

    from kda_lab.families import contract
    from kda_lab.measure.correctness import compare
    from kda_lab.measure.inputs import make_inputs, rotation_count
    from kda_lab.measure.run import resolve_baseline
    from kda_lab.measure.timing import GraphTimer, copy_yardstick, time_interleaved
    from kda_lab.task import load_task
    from kda_lab.task.schema import load_candidate

    task = load_task(TASK_DIR)
    reg = load_candidate(task)
    kmod = sys.modules[reg.__name__.rsplit(".", 1)[0] + ".nss_kernel"]
    device = torch.device("cuda")
    l2 = int(getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 60 << 20))
    by_name = {w.name: w for w in task.workloads}
    results = []
    for name in args.rows:
        w = by_name[name]
        c = contract(task.family, w.fn)
        spec = task.functions[w.fn]
        sets = rotation_count(w, l2)
        arg_sets = [c.prepared(make_inputs(w, device, 1000 + i)) for i in range(sets)]
        nbytes = spec.byte_model.bytes(w)
        d, elem = arg_sets[0]["x"].shape[-1], arg_sets[0]["x"].element_size()
        with torch.no_grad():
            expected = c.oracle(c.prepared(dict(arg_sets[0])))
        fns = {"sglang": resolve_baseline(spec)}
        chosen = {}
        for v in VARIANTS:
            label = "default" if v is None else f"w{v[0]} r{v[1]} {'late' if v[2] else 'early'}"
            fns[label] = _variant(reg, kmod, w.fn, d, elem, v)
            chosen[label] = v
        timers, row = {}, {"row": name, "bytes": nbytes, "sets": sets, "variants": {}}
        with torch.no_grad():
            for label, fn in fns.items():
                outs = fn(**arg_sets[0])
                outs = (outs,) if isinstance(outs, torch.Tensor) else tuple(outs)
                torch.cuda.synchronize()
                bad = [cmp.describe() for o, e, n in zip(outs, expected, ("y", "residual_out"), strict=False)
                       if not (cmp := compare(n, o, e, task.tolerance(str(o.dtype).removeprefix("torch.")))).ok]
                if bad:
                    row["variants"][label] = {"wrong": bad}
                    continue
                timers[label] = GraphTimer(lambda a, f=fn: f(**a), arg_sets)
            timers["copy"] = copy_yardstick(nbytes, sets, device)
            times = time_interleaved(timers, args.trials, seed=1)
        base = times.summaries["sglang"].median
        row["copy_us"] = times.summaries["copy"].median
        for label in fns:
            if label not in times.summaries:
                continue
            us = times.summaries[label].median
            row["variants"][label] = {"us": us, "tbps": nbytes / us / 1e6, "speedup": base / us,
                                      "sol": row["copy_us"] / us,
                                      "override": None if label == "sglang" else _plan(chosen[label]),
                                      "plans": getattr(fns[label], "plans", None)}
        results.append(row)
        _print(row)
        _reset(reg, kmod)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "sweep.json").write_text(json.dumps({"gpu": torch.cuda.get_device_name(), "rows": results},
                                                        indent=1, default=str))
    return 0


def _plan(v):
    return {"warps": v[0], "rows": v[1], "late": v[2]} if v else "default"


def _reset(reg, kmod) -> None:
    kmod.WARPS_OVERRIDE.clear()
    kmod.ROWS_OVERRIDE.clear()
    kmod.LATE_OVERRIDE.clear()
    reg.NSS_LAUNCHES.entries.clear()
    reg.SRNSS_LAUNCHES.entries.clear()


def _variant(reg, kmod, fn_name, d, elem, v):
    """The candidate's function with the plan overrides of variant v in force for its calls (the kept-launch caches
    are per variant: each variant gets its own cache dicts, swapped in around the call). ``call.plans`` collects
    the plans the candidate resolved (warps, chunks, chunk columns, rows per program, late)."""
    nss_cache, srnss_cache = {}, {}
    fn = reg.EXPORTS[fn_name]
    plan = reg.plan

    def recording_plan(*a):
        p = plan(*a)
        if p not in call.plans:
            call.plans.append(p)
        return p

    def call(**a):
        saved = (dict(kmod.WARPS_OVERRIDE), dict(kmod.ROWS_OVERRIDE), list(kmod.LATE_OVERRIDE),
                 reg.NSS_LAUNCHES.entries, reg.SRNSS_LAUNCHES.entries)
        kmod.WARPS_OVERRIDE.clear()
        kmod.ROWS_OVERRIDE.clear()
        kmod.LATE_OVERRIDE.clear()
        if v is not None:
            kmod.WARPS_OVERRIDE[(d, elem)] = v[0]
            kmod.ROWS_OVERRIDE[(d, elem)] = v[1]
            kmod.LATE_OVERRIDE.append(v[2])
        reg.NSS_LAUNCHES.entries, reg.SRNSS_LAUNCHES.entries = nss_cache, srnss_cache
        reg.plan = recording_plan
        try:
            return fn(**a)
        finally:
            reg.plan = plan
            kmod.WARPS_OVERRIDE.clear()
            kmod.WARPS_OVERRIDE.update(saved[0])
            kmod.ROWS_OVERRIDE.clear()
            kmod.ROWS_OVERRIDE.update(saved[1])
            kmod.LATE_OVERRIDE[:] = saved[2]
            reg.NSS_LAUNCHES.entries, reg.SRNSS_LAUNCHES.entries = saved[3], saved[4]

    call.plans = []
    return call


def _print(row) -> None:
    print(f"{row['row']}  ({row['bytes'] / 1e6:.1f} MB, copy {row['copy_us']:.2f} us)")
    for label, v in row["variants"].items():
        if "wrong" in v:
            print(f"    {label:16s} WRONG {v['wrong'][0][:120]}")
        else:
            print(f"    {label:16s} {v['us']:9.2f} us {v['tbps']:6.3f} TB/s  x{v['speedup']:.3f}  sol {v['sol']:.3f}"
                  f"  {v['plans'] or ''}")
    sys.stdout.flush()


if __name__ == "__main__":
    sys.exit(main())
