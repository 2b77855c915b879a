"""Eager host time per call of ``triton_one_pass_rms_norm`` on the H200: SGLang 0.5.23 (the facade) against c007's
public entry point (``src/register.py`` EXPORTS, what ``kda bench`` times), over 50 distinct row counts of
[S, 128] bf16 under 10 MB, plus the production rows.

Per row count: the first call's wall time (SGLang compiles a kernel for every new S: SEQ is a constexpr), then the
median enqueue time of 50 calls measured as kda_lab.measure.timing.host_time_us does (no sync per call, a sync
every 8). Shows no recompilation (Triton cache entries of SGLang's kernel and of c006's Triton kernel before and
after; c007's CUDA extension compiles nothing per shape) and no growth (median of the first 10 against the last
10 row counts, and each first call against the steady state). Checks each c007 output against SGLang's (bf16
tolerance). Under 60 s once the extension is built (run it after ``kda check``, which builds it; else the first
call builds it and the build time is reported apart). Writes $OUT/host_sweep.json (or ./host_sweep.json).

    python kernels/h200_diffusion_norm_infer__multi_shape/dev/host_sweep.py
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch

TASK_DIR = Path(__file__).resolve().parents[1]
REPO = TASK_DIR.parents[1]
sys.path.insert(0, str(REPO))

D = 128
ROW_COUNTS = [1000 + 367 * i for i in range(50)]  # 1000 .. 18983 rows: 0.5 .. 9.7 MB, every one distinct
PRODUCTION = [1320, 4096, 16384, 648720, 650040]
SGLANG_BUDGET_S = 35.0  # SGLang's first calls compile: stop giving it new row counts past this


def host_median_us(fn: Any, x: torch.Tensor, w: torch.Tensor, calls: int = 50) -> float:
    fn(x, w, 1e-6)
    torch.cuda.synchronize()
    walls = []
    for i in range(calls):
        t0 = time.perf_counter_ns()
        fn(x, w, 1e-6)
        walls.append((time.perf_counter_ns() - t0) / 1000.0)
        if i % 8 == 7:
            torch.cuda.synchronize()
    torch.cuda.synchronize()
    walls.sort()
    return walls[len(walls) // 2]


def first_call_us(fn: Any, x: torch.Tensor, w: torch.Tensor) -> float:
    torch.cuda.synchronize()
    t0 = time.perf_counter_ns()
    fn(x, w, 1e-6)
    return (time.perf_counter_ns() - t0) / 1000.0


def triton_entries(jit_fn: Any) -> int:
    try:
        return sum(len(v[0]) for v in jit_fn.device_caches.values())
    except Exception:  # noqa: BLE001 - another Triton layout: report unknown
        return -1


def main() -> int:
    t_start = time.perf_counter()
    from sglang.kernels.ops.diffusion import triton_one_pass_rms_norm as sglang_fn
    from sglang.kernels.ops.diffusion.norm.rmsnorm_onepass_triton import _rms_norm_tiled_onepass

    from kda_lab.task import load_task
    from kda_lab.task.schema import load_candidate

    reg = load_candidate(load_task(TASK_DIR))
    cand = reg.EXPORTS["triton_one_pass_rms_norm"]
    kernel_mod = sys.modules[reg.launch.__module__]
    dev = torch.device("cuda")
    torch.manual_seed(0)
    w = (torch.rand(D, device=dev) + 0.5).to(torch.bfloat16)

    t0 = time.perf_counter()
    ext = reg.load_extension()
    build_s = time.perf_counter() - t0
    assert ext is not None, "c007's extension did not load"

    sg_before, c6_before = triton_entries(_rms_norm_tiled_onepass), triton_entries(kernel_mod._norm_rows_kernel)
    rows: list[dict[str, Any]] = []
    t_sweep = time.perf_counter()
    for s in ROW_COUNTS:
        x = torch.randn(s, D, device=dev, dtype=torch.bfloat16)
        plan = ext.plan(x, w, 1e-6, 0)
        rec: dict[str, Any] = {"rows": s, "mb": round(2 * s * D * 2 / 1e6, 2), "plan_R_G_ctas": plan[:3]}
        rec["c007_first_us"] = round(first_call_us(cand, x, w), 1)
        rec["c007_us"] = round(host_median_us(cand, x, w), 2)
        y = cand(x, w, 1e-6)
        if time.perf_counter() - t_sweep < SGLANG_BUDGET_S:
            rec["sglang_first_us"] = round(first_call_us(sglang_fn, x, w), 1)
            rec["sglang_us"] = round(host_median_us(sglang_fn, x, w), 2)
            ref = sglang_fn(x, w, 1e-6).float()
        else:
            ref = (x.float() * torch.rsqrt(x.float().square().mean(-1, keepdim=True) + 1e-6) * w.float())
        err = (y.float() - ref).abs() - (4e-3 + 8e-3 * ref.abs())
        rec["ok"] = bool(torch.isfinite(y.float()).all()) and float(err.max()) <= 0.0
        rows.append(rec)
    sweep_s = time.perf_counter() - t_sweep
    sg_after, c6_after = triton_entries(_rms_norm_tiled_onepass), triton_entries(kernel_mod._norm_rows_kernel)

    prod = []
    for s in PRODUCTION:
        x = torch.randn(s, D, device=dev, dtype=torch.bfloat16)
        prod.append({"rows": s, "plan_R_G_ctas": ext.plan(x, w, 1e-6, 0)[:3],
                     "c007_us": round(host_median_us(cand, x, w), 2),
                     "sglang_us": round(host_median_us(sglang_fn, x, w), 2)})
        del x

    c7 = [r["c007_us"] for r in rows]
    sg = [r["sglang_us"] for r in rows if "sglang_us" in r]
    summary = {
        "device": torch.cuda.get_device_name(),
        "build_or_load_s": round(build_s, 2),
        "sweep_s": round(sweep_s, 2),
        "total_s": round(time.perf_counter() - t_start, 2),
        "row_counts": len(rows),
        "all_ok": all(r["ok"] for r in rows),
        "c007_median_us": round(statistics.median(c7), 2),
        "c007_max_us": round(max(c7), 2),
        "c007_first10_vs_last10_us": [round(statistics.median(c7[:10]), 2), round(statistics.median(c7[-10:]), 2)],
        "c007_first_call_max_us": max(r["c007_first_us"] for r in rows),
        "sglang_median_us": round(statistics.median(sg), 2) if sg else None,
        "sglang_rows_measured": len(sg),
        "sglang_first_call_median_us": (round(statistics.median([r["sglang_first_us"] for r in rows
                                                                 if "sglang_first_us" in r]), 1) if sg else None),
        "triton_cache_entries": {"sglang_onepass": [sg_before, sg_after], "c006_norm_rows": [c6_before, c6_after]},
        "target_us": 12.0,
        "c007_under_target": max(c7) <= 12.0,
    }
    report = {"summary": summary, "production": prod, "rows": rows}
    out_dir = Path(os.environ.get("OUT", "."))
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "host_sweep.json").write_text(json.dumps(report, indent=1) + "\n")
    print(json.dumps(summary, indent=1))
    print(f"{'rows':>8} {'c007 us':>8} {'SGLang us':>9}")
    for p in prod:
        print(f"{p['rows']:>8} {p['c007_us']:>8} {p['sglang_us']:>9}")
    return 0 if summary["all_ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
