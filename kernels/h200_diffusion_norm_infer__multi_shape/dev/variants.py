"""Device time of c007's one-pass plan variants on the H200 against SGLang, the way ``kda bench`` times (one CUDA
graph per implementation over rotated input sets, > 3x L2 of them so every call is L2-cold; interleaved samples):

- ``sglang``: the facade; ``c007``: the public entry point (the plan's R, PDL on);
- ``r1`` / ``r2``: rows per group forced to 1 / 2 (PDL on), into preallocated outputs;
- ``nopdl``: the plan's R, launched without programmatic stream serialization.

On the production one-pass rows (bf16, D = 128). A dev aid for choosing the plan, not evidence (``kda bench`` is).
Writes $OUT/variants.json (or ./variants.json); about 30-60 s with the extension built (run after ``kda check``).

    python kernels/h200_diffusion_norm_infer__multi_shape/dev/variants.py
"""

from __future__ import annotations

import json
import math
import os
import sys
from pathlib import Path
from typing import Any

import torch

TASK_DIR = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(TASK_DIR.parents[1]))

ROWS = [1320, 4096, 16384, 648720, 650040]
D = 128
L2_BYTES = 60 * 2**20


def main() -> int:
    from sglang.kernels.ops.diffusion import triton_one_pass_rms_norm as sglang_fn

    from kda_lab.measure.timing import GraphTimer, time_interleaved
    from kda_lab.task import load_task
    from kda_lab.task.schema import load_candidate

    reg = load_candidate(load_task(TASK_DIR))
    cand = reg.EXPORTS["triton_one_pass_rms_norm"]
    ext = reg.load_extension()
    dev = torch.device("cuda")
    torch.manual_seed(0)
    results: dict[str, Any] = {"device": torch.cuda.get_device_name(), "rows": {}}
    for s in ROWS:
        nbytes = 2 * s * D * 2
        sets = max(2, min(256, math.ceil(3 * L2_BYTES / nbytes)))
        w = (torch.rand(D, device=dev) + 0.5).to(torch.bfloat16)
        args = [{"x": torch.randn(s, D, device=dev, dtype=torch.bfloat16), "w": w,
                 "y": torch.empty(s, D, device=dev, dtype=torch.bfloat16)} for _ in range(sets)]

        def forced(r: int, pdl: bool) -> Any:
            def call(a: dict[str, Any]) -> None:
                assert ext.launch_into(a["x"], a["w"], 1e-6, a["y"], r, pdl)
            return call

        impls = {
            "sglang": lambda a: sglang_fn(a["x"], a["w"], 1e-6),
            "c007": lambda a: cand(a["x"], a["w"], 1e-6),
            "r1": forced(1, True),
            "r2": forced(2, True),
            "nopdl": forced(0, False),
        }
        ref = sglang_fn(args[0]["x"], w, 1e-6).float()
        ok = {}
        for name in ("c007", "r1", "r2", "nopdl"):
            y = impls[name](args[0])
            y = args[0]["y"] if y is None else y
            torch.cuda.synchronize()
            ok[name] = bool(((y.float() - ref).abs() <= 4e-3 + 8e-3 * ref.abs()).all())
        timers = {k: GraphTimer(f, args) for k, f in impls.items()}
        times = time_interleaved(timers, trials=15, seed=s)
        med = {k: round(v.median, 3) for k, v in times.summaries.items()}
        base = med["sglang"]
        results["rows"][str(s)] = {
            "mb": round(nbytes / 1e6, 2), "sets": sets, "plan_R_G_ctas": ext.plan(args[0]["x"], w, 1e-6, 0)[:3],
            "median_us": med, "speedup_vs_sglang": {k: round(base / v, 3) for k, v in med.items()}, "ok": ok,
        }
        print(s, results["rows"][str(s)], flush=True)
        del args, timers
        torch.cuda.empty_cache()
    out_dir = Path(os.environ.get("OUT", "."))
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "variants.json").write_text(json.dumps(results, indent=1) + "\n")
    return 0 if all(all(r["ok"].values()) for r in results["rows"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
