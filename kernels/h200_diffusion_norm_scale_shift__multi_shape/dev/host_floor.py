"""Where an eager call's host time goes on the H200 box (dev measurement, not a ledger row): the candidate's entry
point, the promoted one's (the export in kda_kernels), SGLang's, and the pieces and floors beside them, per row,
measured the way `kda bench` measures `host_*_us` (kda_lab.measure.timing.host_time_us: median enqueue time of
one call over 50 calls, the queue drained every 8), repeated in shuffled rounds so a drifting host shows as spread.

    python3 kernels/h200_diffusion_norm_scale_shift__multi_shape/dev/host_floor.py [--rounds 7] [--out DIR]

Columns (us per call):
  sglang       SGLang 0.5.23's function (CuTe DSL), the baseline's entry point
  promoted     the exported candidate (kda_kernels' copy: c005 until a new promotion)
  candidate    src/ (this task's current candidate; from c008 its C++ host path)
  python       the candidate's Python path (c007's: nss_python / srnss_python), where the candidate has one
  launch       the candidate's kept launch alone, outputs preallocated (KeptLaunch / DirectLaunch)
  tritonlaunch the same compiled kernel through Triton's CudaLauncher.__call__ (what c005's kept launch does)
  empty_like   one torch.empty_like(x) on the GPU (the candidate allocates one, or two for the residual form)
  aten_neg     torch.neg(x): one ATen op, i.e. one allocation and one launch from C++ (an eager floor)
  aten_neg_out torch.neg(x, out=y): one launch from C++, no allocation
  noop         a Python function taking the same arguments and returning x (the call itself)
Runs SGLang's CuTe DSL baseline, so the box needs .gpu-stage-b installed (docs/gpu-box.md).
"""

from __future__ import annotations

import argparse
import importlib
import json
import random
import statistics
import sys
from pathlib import Path

TASK_DIR = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(TASK_DIR.parents[1]))

ROWS = ["qwen_nss_L19", "qwen_nss_L47", "hyvideo_nss_L55", "mova_nss_L101", "qwen_res_nss_L19", "qwen_res_nss_L47",
        "hyvideo_res_nss_L55", "mova_res_nss_L101_nogate", "qwen_res_nss_L4096", "mova_nss_L44100"]


def _entry(module: object, fn: str):
    return module.EXPORTS[fn]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--rows", nargs="*", default=ROWS)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)

    import torch

    from kda_kernels.launch_cache import KeptLaunch
    from kda_lab.families import contract
    from kda_lab.measure.inputs import make_inputs
    from kda_lab.measure.run import resolve_baseline
    from kda_lab.measure.timing import host_time_us
    from kda_lab.task import load_task
    from kda_lab.task.schema import load_candidate

    task = load_task(TASK_DIR)
    cand = load_candidate(task)
    promoted = importlib.import_module("kda_kernels.diffusion.norm_scale_shift._impls.h200.register")
    device = torch.device("cuda")
    by_name = {w.name: w for w in task.workloads}
    torch.set_grad_enabled(False)
    results = []
    for name in args.rows:
        w = by_name[name]
        c = contract(task.family, w.fn)
        sets = [c.prepared(make_inputs(w, device, 2000 + i)) for i in range(4)]
        fns = {"sglang": resolve_baseline(task.functions[w.fn]), "promoted": _entry(promoted, w.fn),
               "candidate": _entry(cand, w.fn)}
        calls = {k: (lambda a, f=f: f(**a)) for k, f in fns.items()}
        py_path = getattr(cand, "srnss_python" if w.fn.endswith("residual_norm_scale_shift") else "nss_python", None)
        if py_path is not None:
            calls["python"] = lambda a, f=py_path: f(**a)
        calls["noop"] = lambda a: (lambda **kw: kw["x"])(**a)
        calls["empty_like"] = lambda a: torch.empty_like(a["x"])
        calls["aten_neg"] = lambda a: torch.neg(a["x"])
        y = torch.empty_like(sets[0]["x"])
        calls["aten_neg_out"] = lambda a, y=y: torch.neg(a["x"], out=y)
        # the candidate's kept launch, if this row is on its kernel: replay its last kept entry with fixed outputs
        fns["candidate"](**sets[0])
        cache = cand.SRNSS_LAUNCHES if "residual" in sets[0] else cand.NSS_LAUNCHES
        entries = [e for e in cache.entries.values() if e[0] is not None]
        if entries:
            kept = entries[-1][0]
            a0 = sets[0]
            ptrs = [y.data_ptr(), y.data_ptr()] + [a0["x"].data_ptr()] * 7
            calls["launch"] = lambda a, k=kept, p=ptrs: k(*p)
            calls["tritonlaunch"] = lambda a, k=kept, p=ptrs: KeptLaunch.__call__(k, *p)
            launch_kind = type(kept).__name__
        else:
            launch_kind = "handed back"
        samples: dict[str, list[float]] = {k: [] for k in calls}
        rng = random.Random(7)
        for _ in range(args.rounds):
            order = list(calls)
            rng.shuffle(order)
            for k in order:
                samples[k].append(host_time_us(calls[k], sets))
        ext = getattr(cand, "_ext", None)
        row = {"row": name, "fn": w.fn, "launch_kind": launch_kind,
               "host_ext_stats": list(ext.stats()) if ext is not None else None,
               "us": {k: statistics.median(v) for k, v in samples.items()},
               "min_max": {k: (min(v), max(v)) for k, v in samples.items()}}
        results.append(row)
        torch.cuda.synchronize()
        del sets
    cols = ["sglang", "promoted", "candidate", "python", "launch", "tritonlaunch", "empty_like", "aten_neg", "aten_neg_out",
            "noop"]
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "host_floor.json").write_text(json.dumps(
            {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "rounds": args.rounds,
             "rows": results}, indent=1))
    print("| row | path | " + " | ".join(cols) + " |")
    print("|---|---|" + "---:|" * len(cols))
    for r in results:
        cells = [f"{r['us'][k]:.1f}" if k in r["us"] else "-" for k in cols]
        print(f"| {r['row']} | {r['launch_kind']} | " + " | ".join(cells) + " |")
    print("(median over rounds of each round's median us per call; min/max per round in host_floor.json)")
    ext = getattr(cand, "_ext", None)
    if ext is not None:
        print("C++ host path (hits, misses, handbacks, failed launches):", ext.stats())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
