"""Why does SGLang's kernel time faster as the bench's baseline than as c009's hand-back (or as either side of an A/A)?

H200, 2026-11-27: in `kda bench` (run 20261127-132346-f26781) the small rows, which c009 hands to SGLang's own
function, measured 0.86-0.93x, and the baseline itself ran 5-14 % faster than in the A/A run minutes before
(qwen_edit_T195: 2.84 us in bench, 3.29 us on both A/A sides). Same kernel, same inputs, so something in the
bench's setup moves the baseline. This probe times the same row under impl sets that differ in one thing each:

  aa          baseline vs baseline (what `bench --aa` times)
  c009        baseline vs the candidate (no compile peer: `bench --no-compile`)
  c009+cmp    baseline vs the candidate vs the torch.compile peer (what `bench` times)
  base+cmp    baseline vs baseline with the compile peer beside them
  own-sets    c009+cmp, but every impl mutating its own copy of the input sets (the harness shared one until
              this probe; `impl_arg_sets` now gives each side its own)

Prints per-impl medians (us) per set; writes JSON to --out. Dev only: nothing goes to the ledgers.
Run on the box from the repository root (after the staged SGLang is installed):
    python3 kernels/h200_diffusion_qknorm_rope__multi_shape/dev/bias_probe.py --out $OUT/bias_probe.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from kda_lab.families import contract
from kda_lab.measure.inputs import make_inputs, rotation_count
from kda_lab.measure.run import candidate_identity, impl_arg_sets, resolve_baseline
from kda_lab.measure.timing import GraphTimer, time_interleaved
from kda_lab.task import load_task

TASK = "h200_diffusion_qknorm_rope__multi_shape"
ROWS = ("qwen_edit_T195_H24_D128", "zimage_T32_H30_D128", "qwen_T4096_H24_D128")


def probe_row(task, w, cand, trials: int, seed: int) -> dict[str, dict[str, float]]:
    c = contract(task.family, w.fn)
    baseline = resolve_baseline(task.functions[w.fn])
    device = torch.device("cuda")
    l2 = int(torch.cuda.get_device_properties(device).L2_cache_size)
    sets = rotation_count(w, l2)
    shared = [c.prepared(make_inputs(w, device, seed * 7919 + i)) for i in range(sets)]
    torch._dynamo.reset()
    compiled = torch.compile(c.torch_reference, dynamic=False)
    configs = {
        "aa": {"baseline": baseline, "baseline2": baseline},
        "c009": {"baseline": baseline, "candidate": cand},
        "c009+cmp": {"baseline": baseline, "candidate": cand, "compile": compiled},
        "base+cmp": {"baseline": baseline, "baseline2": baseline, "compile": compiled},
    }
    out: dict[str, dict[str, float]] = {}
    with torch.no_grad():
        for name, impls in configs.items():
            timers = {k: GraphTimer(lambda a, f=f: f(**a), shared) for k, f in impls.items()}
            t = time_interleaved(timers, trials, seed)
            out[name] = {k: s.median for k, s in t.summaries.items()}
            del timers
        fns = {"baseline": baseline, "candidate": cand, "compile": compiled}
        own = impl_arg_sets(list(fns), shared, c.mutates)  # what `kda bench` now does for in-place functions
        timers = {k: GraphTimer(lambda a, f=fns[k]: f(**a), own[k]) for k in fns}
        t = time_interleaved(timers, trials, seed)
        out["own-sets"] = {k: s.median for k, s in t.summaries.items()}
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path)
    ap.add_argument("--trials", type=int, default=20)
    ap.add_argument("--seed", type=int, default=1234)
    args = ap.parse_args()
    task = load_task(TASK)
    cand = candidate_identity(task, register=False).exports["fused_inplace_qknorm_rope"]
    result = {}
    for w in task.rows(list(ROWS), kinds=("production",)):
        result[w.name] = probe_row(task, w, cand, args.trials, args.seed)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=1))
    for row, per in result.items():
        print(f"\n{row}")
        for cfg, med in per.items():
            print(f"  {cfg:9s} " + "  ".join(f"{k}={v:7.3f}" for k, v in med.items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
