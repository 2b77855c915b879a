"""A new row count never compiles a new kernel, and a repeated signature skips Triton's dispatch.

Runs on a CPU host: a child process without the interpreter swaps Triton's driver for a stand-in (sm_90a target,
a C launcher that records its arguments instead of launching) and compiles the real kernels offline. Through the
candidate's public functions, a sweep over many distinct row counts (the kept-launch caches cleared before every
call, so each call goes through Triton's dispatch) must leave exactly one compiled kernel in Triton's cache per
launch plan, while the same sweep through SGLang's one-pass kernel (SEQ a constexpr) leaves one per row count: the
counter can fail. A second call of one signature must not go through Triton's dispatch, and must hand the launcher
the same grid, function, metadata and non-pointer arguments Triton's dispatch did.
"""

from __future__ import annotations

import json
import os
import subprocess
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
    from triton.backends.compiler import GPUTarget
    from triton.runtime.driver import driver
    from triton.runtime.jit import JITFunction

    from kda_lab.task import load_task
    from kda_lab.task.schema import load_candidate

    launches: list[dict[str, Any]] = []
    dispatches = [0]

    def describe(a: Any) -> Any:
        return ["tensor", a.data_ptr()] if isinstance(a, torch.Tensor) else repr(a)

    class Utils:
        def load_binary(self, *a: Any) -> tuple[int, int, int, int, int]:
            return 1, 7, 64, 0, 1024

        def get_device_properties(self, device: int) -> dict[str, int]:
            return {"max_shared_mem": 232448, "multiprocessor_count": 132, "max_num_regs": 65536, "warpSize": 32}

    class StandIn:
        utils = Utils()

        def get_current_target(self) -> GPUTarget:
            return GPUTarget("cuda", 90, 32)

        def get_current_device(self) -> int:
            return 0

        def get_current_stream(self, device: int | None = None) -> int:
            return 1234

        def get_active_torch_device(self) -> Any:
            return torch.device("cpu")

        def launcher_cls(self, src: Any, metadata: Any) -> Any:
            def record(g0: int, g1: int, g2: int, stream: int, function: Any, packed: Any, meta: Any,
                       enter: Any, exit_: Any, *args: Any) -> None:
                launches.append({"grid": [g0, g1, g2], "stream": stream, "function": function,
                                 "packed": repr(packed), "args": [describe(a) for a in args]})
            return record

    driver.set_active(StandIn())
    real_run = JITFunction.run

    def counting_run(self: Any, *args: Any, **kwargs: Any) -> Any:
        dispatches[0] += 1
        return real_run(self, *args, **kwargs)

    JITFunction.run = counting_run
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
    d0, l0 = dispatches[0], len(launches)
    outs = [reg.triton_one_pass_rms_norm(x, w, 1e-6).data_ptr() for _ in range(2)]
    report["kept"] = {"dispatches": dispatches[0] - d0, "launches": launches[l0:], "outs": outs,
                      "x": x.data_ptr(), "w": w.data_ptr()}
    print(json.dumps(report))


def _run_child() -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    proc = subprocess.run([sys.executable, __file__, "--child"], env=env, capture_output=True, text=True,
                          timeout=900, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_row_count_is_not_specialized_and_kept_launch_repeats_dispatch() -> None:
    report = _run_child()
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
        assert launch["args"][:4] == [["tensor", kept["x"]], ["tensor", out], ["tensor", kept["w"]],
                                      ["tensor", kept["x"]]]
    assert {k: v for k, v in first.items() if k != "args"} == {k: v for k, v in second.items() if k != "args"}
    assert first["args"][4:] == second["args"][4:]  # rows, width, strides, eps and the constexprs


if __name__ == "__main__" and sys.argv[1:] == ["--child"]:
    _child()
