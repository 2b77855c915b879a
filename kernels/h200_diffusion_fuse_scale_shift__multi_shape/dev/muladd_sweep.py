"""H200 dev sweep of the MulAdd kernel's tile size against SGLang and torch.compile (dev numbers, never ledger
rows).

    python kernels/h200_diffusion_fuse_scale_shift__multi_shape/dev/muladd_sweep.py [--rows a,b] [--trials 8]

For each ``fuse_scale_shift_kernel`` production row (task.toml), with the harness's own pieces (kda_lab.measure:
L2-cold rotated input sets, one CUDA graph per implementation, interleaved samples, the same-size copy yardstick):
SGLang, torch.compile of the task's torch reference (dynamo reset per row), the candidate's registered entry point
("cand": its own ``plan``), the kernel with a fixed tile of 4096, 2048 and 1024 elements (``plan_override``) and,
on the rows whose layout it takes (``muladd.flat_layout``), the flat kernel with 512-2048 elements per program. ``--dump-inductor``
writes the compile peer's generated code for the first row to $OUT/inductor_<row>.py.
Every variant is first compared bit for bit with SGLang on the row's first input set; one that differs is
reported WRONG and not timed. Table last; JSON to $OUT/muladd_sweep.json (or /tmp).
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

FN = "fuse_scale_shift_kernel"
TILES = (4096, 2048, 1024)
FLAT_XBLOCKS = (2048, 1024, 512)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", default="", help="comma-separated row names (default: every MulAdd production row)")
    ap.add_argument("--trials", type=int, default=8)
    ap.add_argument("--dump-inductor", action="store_true", help="write the first row's compile peer code to $OUT")
    opt = ap.parse_args()

    import torch

    if not torch.cuda.is_available():
        print("muladd_sweep: needs a CUDA GPU (the H200); nothing to do here", file=sys.stderr)
        return 2

    from kda_lab.families import contract
    from kda_lab.measure.inductor_dump import dump_inductor
    from kda_lab.measure.inputs import make_inputs, rotation_count
    from kda_lab.measure.run import resolve_baseline
    from kda_lab.measure.timing import GraphTimer, copy_yardstick, time_interleaved
    from kda_lab.task import load_task
    from kda_lab.task.schema import load_candidate

    t_start = time.perf_counter()
    task = load_task(TASK_DIR)
    cand = load_candidate(task)
    muladd = cand.muladd
    device = torch.device("cuda", torch.cuda.current_device())
    wanted = set(opt.rows.split(",")) if opt.rows else None
    rows = [w for w in task.workloads if w.fn == FN and w.kind == "production" and (wanted is None or w.name in wanted)]
    spec = task.functions[FN]
    c = contract(task.family, FN)
    baseline = resolve_baseline(spec)
    l2 = int(getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 60 << 20))
    torch.set_grad_enabled(False)

    def fixed(tile: int) -> Any:
        def call(a: dict[str, Any]) -> torch.Tensor:
            x, scale, shift = a["x"], a["scale"], a["shift"]
            scale_arg, s_strides, s_scalar = cand._as_blc(scale, x.shape, is_shift=False)
            shift_arg, h_strides, h_scalar = cand._as_blc(shift, x.shape, is_shift=True)
            p = muladd.tile_plan(x.shape[0] * x.shape[1], x.shape[2], tile)
            y, _ = muladd.launch(x, scale_arg, s_strides, s_scalar, shift_arg, h_strides, h_scalar,
                                 a.get("scale_constant", 1.0), plan_override=p)
            return y
        return call

    results: list[dict[str, Any]] = []
    for w in rows:
        t_row = time.perf_counter()
        sets = rotation_count(w, l2)
        arg_sets = [c.prepared(make_inputs(w, device, 4321 + i)) for i in range(sets)]
        a0 = arg_sets[0]
        impls: dict[str, Any] = {"sglang": lambda a: baseline(**a), "cand": lambda a: cand.EXPORTS[FN](**a)}
        for tile in TILES:
            impls[f"t{tile}"] = fixed(tile)
        if muladd.flat_layout(a0["x"], a0["scale"], a0["shift"]):
            for xb in FLAT_XBLOCKS:
                impls[f"flat{xb}"] = lambda a, b=xb: muladd.launch_flat(a["x"], a["scale"], a["shift"],
                                                                        a.get("scale_constant", 1.0), xblock=b)[0]
        torch._dynamo.reset()
        compiled = torch.compile(c.torch_reference, dynamic=False)
        impls["compile"] = lambda a, f=compiled: f(**a)
        if opt.dump_inductor and w is rows[0]:
            path = Path(os.environ.get("OUT", "/tmp")) / f"inductor_{w.name}.py"
            print(f"inductor dump: {json.dumps({'row': w.name, 'kept': dump_inductor(compiled, a0, path)})}", flush=True)
        want = baseline(**a0)
        checks = {}
        for name, call in impls.items():
            if name in ("sglang", "compile"):
                continue
            got = call(a0)
            torch.cuda.synchronize()
            checks[name] = bool(got.dtype == want.dtype and got.shape == want.shape and torch.equal(got, want))
        timed = {n: f for n, f in impls.items() if n in ("sglang", "compile") or checks.get(n)}
        timers = {n: GraphTimer(f, arg_sets) for n, f in timed.items()}
        nbytes = spec.byte_model.bytes(w)
        timers["copy"] = copy_yardstick(nbytes, sets, device)
        times = time_interleaved(timers, opt.trials, seed=11)
        us = {n: s.median for n, s in times.summaries.items()}
        p = muladd.plan(w.args["x"].shape[0] * w.args["x"].shape[1], w.args["x"].shape[2])
        results.append({"row": w.name, "bytes": nbytes, "sets": sets, "cand_tile": p.block_l * p.block_c,
                        "bit_exact_vs_sglang": checks, "us": us,
                        "spread": {n: s.spread for n, s in times.summaries.items()},
                        "row_seconds": time.perf_counter() - t_row})
        wrong = [n for n, ok in checks.items() if not ok]
        print(f"{w.name:34s} {nbytes / 1e6:8.1f} MB | SGLang {us['sglang']:8.2f} compile {us['compile']:8.2f} cand "
              f"{us.get('cand', float('nan')):8.2f} (tile {p.block_l * p.block_c}) | "
              + " ".join(f"{n} {us[n]:.2f}" for n in us if n not in ("sglang", "compile", "cand", "copy"))
              + (f" | WRONG: {wrong}" if wrong else ""), flush=True)
        del timers, arg_sets, a0, want
        torch.cuda.empty_cache()

    cols = ["cand", *(f"t{t}" for t in TILES), *(f"flat{b}" for b in FLAT_XBLOCKS)]
    print("\ncompile us / impl us (> 1 beats the peer); SGLang us / impl us in brackets")
    for r in results:
        us = r["us"]
        print(f"{r['row']:34s} " + " ".join(
            f"{n}={us['compile'] / us[n]:.3f}[{us['sglang'] / us[n]:.3f}]" for n in cols if n in us))
    out = Path(os.environ.get("OUT", "/tmp")) / "muladd_sweep.json"
    out.write_text(json.dumps({"device": torch.cuda.get_device_name(device), "trials": opt.trials, "rows": results,
                               "seconds": time.perf_counter() - t_start}, indent=1))
    print(f"wrote {out} ({time.perf_counter() - t_start:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
