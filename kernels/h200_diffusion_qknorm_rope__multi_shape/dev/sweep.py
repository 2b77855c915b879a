"""H200 dev sweep of c007's knobs against SGLang on the production rows (dev numbers, never ledger rows).

    python kernels/h200_diffusion_qknorm_rope__multi_shape/dev/sweep.py [--rows qwen_T19,...] [--trials 15]

For each production row (task.toml), with the harness's own pieces (kda_lab.measure: L2-cold rotated input sets,
one CUDA graph per implementation, interleaved samples, the same-size copy yardstick):

- the launch plan c007 picks (rows per item, CTAs, L2-prefetch bytes per CTA, resident CTAs per SM);
- every variant checked against the fp64 oracle first (task tolerances), then timed: SGLang; c007 as shipped
  ("auto"); rows per item forced to 1/2/4; the L2 prefetch forced off/on; launch_dependents at the end
  ("late": SGLang's placement) -- each isolates one mechanism of docs/notes.md's predictions;
- host time of one eager call (SGLang's entry vs c007's) on the same inputs.

Prints a table and writes $OUT/qknorm_sweep.json (or /tmp/qknorm_sweep.json).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

import torch

TASK_DIR = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(TASK_DIR.parents[1]))

KEYS = ("q", "k", "q_weight", "k_weight", "cos_sin_cache", "positions")
VARIANTS: dict[str, dict[str, Any]] = {
    "auto": {}, "R1": {"rows": 1}, "R2": {"rows": 2}, "R4": {"rows": 4},
    "pf_off": {"prefetch": 1}, "pf_on": {"prefetch": 2}, "late": {"late_trigger": True},
}


def variant_call(cand: Any, knobs: dict[str, Any]) -> Any:
    """One knob setting of the kernel as a timer's call (an argument dict in, nothing out)."""
    def call(a: dict[str, Any]) -> None:
        cand.run_variant(*(a[k] for k in KEYS), is_neox=a["is_neox"], eps=a["eps"], rope_dim=a.get("rope_dim", 0),
                         cache_has_full_width=a.get("cache_has_full_width", False), **knobs)

    return call


def main() -> int:
    from kda_lab.families import contract
    from kda_lab.families.qknorm_rope import qknorm_rope_oracle
    from kda_lab.measure.correctness import compare
    from kda_lab.measure.inputs import clone_args, make_inputs, rotation_count
    from kda_lab.measure.run import resolve_baseline
    from kda_lab.measure.timing import GraphTimer, copy_yardstick, host_time_us, time_interleaved
    from kda_lab.task import load_task
    from kda_lab.task.schema import load_candidate

    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", default="", help="comma-separated row names (default: every production row)")
    ap.add_argument("--trials", type=int, default=15)
    ap.add_argument("--variants", default=",".join(VARIANTS))
    opt = ap.parse_args()

    task = load_task(TASK_DIR)
    cand = load_candidate(task)
    device = torch.device("cuda", torch.cuda.current_device())
    rows = [w for w in task.workloads if w.kind == "production"]
    if opt.rows:
        rows = [w for w in task.workloads if w.name in opt.rows.split(",")]
    fn = task.functions["fused_inplace_qknorm_rope"]
    c = contract(task.family, "fused_inplace_qknorm_rope")
    baseline = resolve_baseline(fn)
    l2 = int(getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 60 << 20))
    results: list[dict[str, Any]] = []
    torch.set_grad_enabled(False)
    for w in rows:
        sets = rotation_count(w, l2)
        arg_sets = [c.prepared(make_inputs(w, device, 1234 + i)) for i in range(sets)]
        a0 = arg_sets[0]
        plan = cand.launch_plan(*(a0[k] for k in KEYS), is_neox=a0["is_neox"], rope_dim=a0.get("rope_dim", 0),
                                cache_has_full_width=a0.get("cache_has_full_width", False))
        impls: dict[str, Any] = {"sglang": lambda a: baseline(**a)}
        for name in opt.variants.split(","):
            knobs = VARIANTS[name]
            if name == "auto":
                impls[name] = lambda a: cand.fused_inplace_qknorm_rope(**a)
            else:
                impls[name] = variant_call(cand, knobs)
        tol = task.tolerance("bfloat16")
        checks = {}
        for name, call in impls.items():
            a = clone_args(a0)
            ref = qknorm_rope_oracle(clone_args(a0))
            call(a)
            torch.cuda.synchronize()
            cmps = [compare(n, out, r, tol) for n, out, r in zip(("q", "k"), (a["q"], a["k"]), ref, strict=True)]
            checks[name] = all(x.ok for x in cmps)
        timed = {n: f for n, f in impls.items() if checks[n]}
        timers = {n: GraphTimer(f, arg_sets) for n, f in timed.items()}
        nbytes = fn.byte_model.bytes(w)
        timers["copy"] = copy_yardstick(nbytes, sets, device)
        times = time_interleaved(timers, opt.trials, seed=7)
        us = {n: s.median for n, s in times.summaries.items()}
        host = {n: host_time_us(timed[n], arg_sets) for n in ("sglang", "auto") if n in timed}
        row = {"row": w.name, "bytes": nbytes, "sets": sets, "plan": plan, "correct": checks, "us": us,
               "speedup_vs_sglang": {n: us["sglang"] / v for n, v in us.items() if n not in ("sglang", "copy")},
               "sol": {n: us["copy"] / v for n, v in us.items() if n != "copy"}, "host_us": host}
        results.append(row)
        best = max(row["speedup_vs_sglang"].items(), key=lambda kv: kv[1])
        print(f"{w.name:28s} {nbytes / 1e6:7.1f} MB plan {plan} | SGLang {us['sglang']:7.2f} us | "
              + " ".join(f"{n} {v:.3f}x" for n, v in row["speedup_vs_sglang"].items())
              + f" | best {best[0]} | sol auto {row['sol'].get('auto', 0):.3f} | host {host}"
              + ("" if all(checks.values()) else f" | WRONG: {[n for n, ok in checks.items() if not ok]}"),
              flush=True)
    out = Path(os.environ.get("OUT", "/tmp")) / "qknorm_sweep.json"
    out.write_text(json.dumps({"device": torch.cuda.get_device_name(device), "rows": results}, indent=1))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
