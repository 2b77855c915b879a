"""Host cost per eager call on a CPU-only host (direction only, not evidence): the candidate's public functions
through Triton's real Python dispatch (kept launches dropped before each call) and through the kept launch, with
a real offline sm_90a compile and a stand-in driver whose C launcher does nothing. CPU tensors stand for CUDA
ones (the candidate's "runs on CUDA" gates are patched open: one attribute check each).

    .venv/bin/python kernels/h200_diffusion_norm_infer__multi_shape/profile/host_cpu.py
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

os.environ.pop("TRITON_INTERPRET", None)

import torch  # noqa: E402

from kda_lab.interpret.offline_launch import record_launches  # noqa: E402

TASK_DIR = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(TASK_DIR.parents[1]))


def _per_call_us(fn: Any, calls: int = 2000) -> float:
    fn()
    runs = []
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        runs.append((time.perf_counter() - t0) / calls * 1e6)
    return statistics.median(runs)


def main() -> None:
    record_launches(record=False)  # a launcher that does nothing, Triton compiling for sm_90a
    from kda_lab.task import load_task
    from kda_lab.task.schema import load_candidate

    reg = load_candidate(load_task(TASK_DIR))
    reg.runs_here = lambda *t: True
    reg._one_pass_signature = lambda x, w: (x.shape, x.stride(), x.dtype, w.shape, w.stride(), w.dtype)
    plain_norm_sig = reg._norm_signature

    def norm_sig_cpu(x: Any, weight: Any, bias: Any, is_rms_norm: Any, out: Any) -> Any:
        return (x.shape, x.stride(), x.dtype, None if weight is None else (weight.shape, weight.dtype),
                None if bias is None else (bias.shape, bias.dtype), out is None, is_rms_norm)

    reg._norm_signature = norm_sig_cpu
    torch.set_grad_enabled(False)
    x = torch.randn(4096, 128, dtype=torch.bfloat16)
    w = torch.randn(128, dtype=torch.bfloat16)
    xl = torch.randn(64, 5120)
    wl, bl = torch.randn(5120), torch.randn(5120)

    def dispatch_one_pass() -> None:
        reg.ONE_PASS_LAUNCHES.clear()
        reg.triton_one_pass_rms_norm(x, w, 1e-6)

    def dispatch_norm() -> None:
        reg.NORM_LAUNCHES.clear()
        reg.norm_infer(xl, wl, bl, 1e-6, False)

    rows = [
        ("triton_one_pass_rms_norm [4096,128] bf16, Triton dispatch", dispatch_one_pass),
        ("triton_one_pass_rms_norm [4096,128] bf16, kept launch", lambda: reg.triton_one_pass_rms_norm(x, w, 1e-6)),
        ("norm_infer [64,5120] fp32 LN w+b, Triton dispatch", dispatch_norm),
        ("norm_infer [64,5120] fp32 LN w+b, kept launch", lambda: reg.norm_infer(xl, wl, bl, 1e-6, False)),
        ("torch.empty_like alone (allocation floor)", lambda: torch.empty_like(x)),
    ]
    for name, fn in rows:
        print(f"{name}: {_per_call_us(fn, 500 if 'dispatch' in name else 2000):.1f} us")
    reg._norm_signature = plain_norm_sig


if __name__ == "__main__":
    main()
