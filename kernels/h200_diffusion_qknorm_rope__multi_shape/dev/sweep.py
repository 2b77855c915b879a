"""H200 dev sweep of c008's knobs against SGLang on the production rows (dev numbers, never ledger rows).

    python kernels/h200_diffusion_qknorm_rope__multi_shape/dev/sweep.py [--rows qwen_T19,...] [--trials 15]

For each production row (task.toml), with the harness's own pieces (kda_lab.measure: L2-cold rotated input sets,
one CUDA graph per implementation, interleaved samples, the same-size copy yardstick):

- the launch plan c008 picks (double buffer, rows per group, rows, CTAs, resident CTAs per SM);
- every variant checked against the fp64 oracle first (task tolerances), then timed: SGLang; c008 as shipped
  ("auto": one row per group and iteration, its loads -- q/k, position, the cos/sin row speculated from the token
  index -- in one round trip, 6 CTAs per SM, persistent where the rows exceed one wave); "pipe": the
  double-buffered kernel (the next row's loads in flight while the current one computes; 4 CTAs per SM);
  "oneshot": one row per group, no persistent loop (several waves on the large rows: the copy kernel's shape);
  "half": half the resident CTAs, twice the rows per group; "early": launch_dependents first instead of last;
  "arange": the shipped kernel on positions = arange(N), what SGLang's callers pass (the task's rows draw random
  positions, which the speculated cache row misses on each group's first row), timed against SGLang on the same
  arange ("sglang_arange") -- each isolates one mechanism of docs/notes.md's predictions;
- host time of one eager call (SGLang's entry vs c008's) on the same inputs.

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
    "auto": {}, "pipe": {"pipe": 2}, "oneshot": {"grid": 1}, "half": {"grid": 2}, "early": {"early_trigger": True},
    "arange": {"arange_positions": True},
}


def _arange_positions(a: dict[str, Any], cache: dict[int, Any]) -> Any:
    """arange(N) (mod P) in the positions' dtype, made once per argument set (outside the timed graph)."""
    key = a["positions"].data_ptr()
    if key not in cache:
        pos, rows = a["positions"], a["cos_sin_cache"].shape[0]
        cache[key] = (torch.arange(pos.numel(), device=pos.device) % rows).to(pos.dtype)
    return cache[key]


def variant_call(cand: Any, knobs: dict[str, Any]) -> Any:
    """One knob setting of the kernel as a timer's call (an argument dict in, nothing out). "arange_positions":
    the shipped kernel on positions = arange(N), what SGLang's callers pass (the task's rows draw random
    positions): the speculated cache row always right, one memory trip per row."""
    knobs = dict(knobs)
    arange = knobs.pop("arange_positions", False)
    made: dict[int, Any] = {}

    def positions(a: dict[str, Any]) -> Any:
        return _arange_positions(a, made) if arange else a["positions"]

    def call(a: dict[str, Any]) -> None:
        args = [a[k] for k in KEYS]
        args[5] = positions(a)
        cand.run_variant(*args, is_neox=a["is_neox"], eps=a["eps"], rope_dim=a.get("rope_dim", 0),
                         cache_has_full_width=a.get("cache_has_full_width", False), **knobs)

    call.positions = positions  # type: ignore[attr-defined]
    return call


def sglang_arange_call(baseline: Any) -> Any:
    """SGLang on arange positions (the "arange" variant's reference)."""
    made: dict[int, Any] = {}

    def call(a: dict[str, Any]) -> None:
        baseline(**dict(a, positions=_arange_positions(a, made)))

    call.positions = lambda a: _arange_positions(a, made)  # type: ignore[attr-defined]
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
    ap.add_argument("--trials", type=int, default=15)  # 9 rows x 8 timers x 15 samples: ~60-90 s on the H200
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
        if "arange" in opt.variants.split(","):
            impls["sglang_arange"] = sglang_arange_call(baseline)
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
            r = clone_args(a0)
            if hasattr(call, "positions"):  # the oracle on the positions the call uses (arange variants)
                r["positions"] = call.positions(a0).clone()
            ref = qknorm_rope_oracle(r)
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
               "speedup_vs_sglang": {n: us["sglang"] / v for n, v in us.items()
                                     if n not in ("sglang", "copy", "sglang_arange", "arange")},
               "arange_speedup_vs_sglang_arange": (us["sglang_arange"] / us["arange"]
                                                   if "arange" in us and "sglang_arange" in us else None),
               "sol": {n: us["copy"] / v for n, v in us.items() if n != "copy"}, "host_us": host}
        results.append(row)
        best = max(row["speedup_vs_sglang"].items(), key=lambda kv: kv[1])
        print(f"{w.name:28s} {nbytes / 1e6:7.1f} MB plan {plan} | SGLang {us['sglang']:7.2f} us | "
              + " ".join(f"{n} {v:.3f}x" for n, v in row["speedup_vs_sglang"].items())
              + f" | arange vs SGLang arange {row['arange_speedup_vs_sglang_arange'] or 0:.3f}x"
              + f" | best {best[0]} | sol auto {row['sol'].get('auto', 0):.3f} | host {host}"
              + ("" if all(checks.values()) else f" | WRONG: {[n for n, ok in checks.items() if not ok]}"),
              flush=True)
    out = Path(os.environ.get("OUT", "/tmp")) / "qknorm_sweep.json"
    out.write_text(json.dumps({"device": torch.cuda.get_device_name(device), "rows": results}, indent=1))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
