"""A new row count never compiles a new kernel, and a repeated signature skips Triton's dispatch.

Runs on a CPU host: a child process without the interpreter swaps Triton's driver for a stand-in (sm_90a target,
a C launcher that records its arguments instead of launching: ``kda_lab.interpret.offline_launch``) and compiles
the real kernels offline. Through the
candidate's public functions, a sweep over many distinct row counts (the kept-launch caches cleared before every
call, so each call goes through Triton's dispatch) must leave exactly one compiled kernel in Triton's cache per
launch plan, while the same sweep through SGLang's one-pass kernel (SEQ a constexpr) leaves one per row count: the
counter can fail. A second call of one signature must not go through Triton's dispatch, and must hand the launcher
the same grid, function, metadata and non-pointer arguments Triton's dispatch did.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

TASK_DIR = Path(__file__).resolve().parents[1]

# one-pass D = 128 row counts with the same plan (16 rows per program: S >= 8192) and norm_infer widths 5120 rows
# with one row per program; every count distinct
ONE_PASS_ROWS = (8192, 8195, 9001, 12345, 16384, 20000, 33333, 65537)
NORM_ROWS = (1, 2, 7, 100, 1031, 8640)
SGLANG_ROWS = (8192, 8195, 9001)


def _child() -> None:
    import torch

    from kda_lab.interpret.offline_launch import record_launches
    from kda_lab.task import load_task
    from kda_lab.task.schema import load_candidate

    rec = record_launches()
    launches = rec.launches
    reg = load_candidate(load_task(TASK_DIR))
    kernel_mod = sys.modules[reg.launch.__module__]
    jit = kernel_mod._norm_rows_kernel
    reg.runs_here = lambda *t: True  # CPU tensors stand for CUDA ones (the stand-in launcher touches nothing)
    reg._one_pass_signature = lambda x, w: (x.shape, x.stride(), x.dtype, w.shape, w.stride(), w.dtype)
    torch.set_grad_enabled(False)

    def compiled(fn: Any) -> int:
        return sum(len(cache[0]) for cache in fn.device_caches.values())

    report: dict[str, Any] = {}
    # 1. one-pass sweep, kept launches dropped before every call: each call dispatches through Triton
    w = torch.randn(128, dtype=torch.bfloat16)
    plans = set()
    for s in ONE_PASS_ROWS:
        reg.ONE_PASS_LAUNCHES.clear()
        reg.triton_one_pass_rms_norm(torch.randn(s, 128, dtype=torch.bfloat16), w, 1e-6)
        plans.add(kernel_mod.plan_one_pass(s, 128, 2))
    report["one_pass"] = {"compiled": compiled(jit), "plans": len(plans), "calls": len(ONE_PASS_ROWS)}
    # 2. norm_infer sweep (fp32 5120, weight and bias), continuing on the same kernel object
    before = compiled(jit)
    plans = set()
    wf, bf = torch.randn(5120), torch.randn(5120)
    for m in NORM_ROWS:
        reg.NORM_LAUNCHES.clear()
        reg.norm_infer(torch.randn(m, 5120), wf, bf, 1e-6, False)
        plans.add(kernel_mod.plan_norm_infer(m, 5120, 4))
    report["norm_infer"] = {"compiled": compiled(jit) - before, "plans": len(plans), "calls": len(NORM_ROWS)}
    # 3. the counter on SGLang's one-pass kernel (SEQ constexpr): one compile per row count
    from sglang.kernels.ops.diffusion.norm import rmsnorm_onepass_triton as sg

    for s in SGLANG_ROWS:
        x = torch.randn(s, 128, dtype=torch.bfloat16)
        sg._rms_norm_tiled_onepass[(-(-s // 16),)](torch.empty_like(x), x, w, s, 128, 1e-6,
                                                   BLOCK_SIZE_DIM=128, BLOCK_SIZE_SEQ=16)
    report["sglang"] = {"compiled": compiled(sg._rms_norm_tiled_onepass), "calls": len(SGLANG_ROWS)}
    # 4. kept launch: the second call of a signature does not dispatch and repeats the first launch
    reg.ONE_PASS_LAUNCHES.clear()
    x = torch.randn(4096, 128, dtype=torch.bfloat16)
    d0, l0 = rec.dispatches, len(launches)
    outs = [reg.triton_one_pass_rms_norm(x, w, 1e-6).data_ptr() for _ in range(2)]
    report["kept"] = {"dispatches": rec.dispatches - d0, "launches": launches[l0:], "outs": outs,
                      "x": x.data_ptr(), "w": w.data_ptr()}
    print(json.dumps(report))


def test_row_count_is_not_specialized_and_kept_launch_repeats_dispatch() -> None:
    from kda_lab.interpret.offline_launch import child_report

    report = child_report(__file__)
    one = report["one_pass"]
    assert one["plans"] == 1 and one["compiled"] == 1, one  # 8 row counts, one plan, one compiled kernel
    ni = report["norm_infer"]
    assert ni["plans"] == 1 and ni["compiled"] == 1, ni  # 6 row counts (1 .. 8640), one compiled kernel
    # the same counter sees SGLang's constexpr SEQ compile once per row count
    assert report["sglang"]["compiled"] == report["sglang"]["calls"] > 1, report["sglang"]
    kept = report["kept"]
    assert kept["dispatches"] == 1, kept  # the second call skipped Triton's dispatch
    first, second = kept["launches"]
    for launch, out in zip((first, second), kept["outs"], strict=True):
        # X, Y, W, B (B: x as the dummy of an absent bias)
        assert launch["args"][:4] == [repr(kept["x"]), repr(out), repr(kept["w"]), repr(kept["x"])]
    same = ("grid", "stream", "function", "packed")
    assert {k: first[k] for k in same} == {k: second[k] for k in same}
    assert second["hooks"] == ["NoneType", "NoneType"] and not second["meta"]  # no hook registered: none passed
    assert first["args"][4:] == second["args"][4:]  # rows, width, strides, eps and the constexprs


if __name__ == "__main__" and sys.argv[1:] == ["--child"]:
    _child()
