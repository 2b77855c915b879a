"""Python-side host cost of c006's small-row path on a CPU host (direction only, not evidence): the public
functions' wrappers in front of the pybind11 call, with the extension stood in for by a function that returns a
preallocated output, CPU tensors in the small rows' production layouts.

    python kernels/h200_diffusion_norm_scale_shift__multi_shape/dev/host_small_cpu.py

Prints the median per-call time of each wrapper with the stand-in, of the stand-in called directly (the
difference is what the wrapper adds in Python), and of c005's kept Triton launch for the same call (dev/host_cpu.py's
stand-in driver) for scale. The C++ side (tensor conversion, the contract, at::empty, cudaLaunchKernelEx) needs the
GPU box: norm_infer's c007 binding measured 6.5-8.6 us per eager call through the public entry point there.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

TASK_DIR = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(TASK_DIR.parents[1]))


def _median_us(fn, n: int = 5000) -> float:
    for _ in range(100):
        fn()
    walls = []
    for _ in range(n):
        t0 = time.perf_counter_ns()
        fn()
        walls.append((time.perf_counter_ns() - t0) / 1000.0)
    return statistics.median(walls)


def main() -> int:
    import torch

    from kda_lab.task import load_task
    from kda_lab.task.schema import load_candidate

    reg = load_candidate(load_task(TASK_DIR))
    torch.set_grad_enabled(False)
    bf = torch.bfloat16
    d = 3072
    mod = torch.randn(1, 6 * d, dtype=bf)
    x = torch.randn(1, 47, d, dtype=bf)
    res = torch.randn(1, 47, d, dtype=bf)
    gate = torch.randn(1, 1, 6 * d, dtype=bf)[..., :d]
    y, r = torch.empty_like(x), torch.empty_like(x)

    class StandIn:  # the binding's answer for an in-contract call, without the C++ work
        @staticmethod
        def nss(*a: object) -> torch.Tensor:
            return y

        @staticmethod
        def srnss(*a: object) -> tuple[torch.Tensor, torch.Tensor]:
            return y, r

    reg.CUDA.module = StandIn()
    nss_args = (x, None, None, mod[:, d:2 * d], mod[:, :d], "layer", 1e-6)
    srnss_args = (res, x, gate, None, None, mod[:, d:2 * d], mod[:, :d], "layer", 1e-6)
    rows = {
        "fused_norm_scale_shift 1x47x3072 (wrapper + stand-in)": lambda: reg.fused_norm_scale_shift(*nss_args),
        "  the stand-in's nss, called directly": lambda: StandIn.nss(*nss_args),
        "fused_scale_residual_norm_scale_shift 1x47x3072 (wrapper + stand-in)":
            lambda: reg.fused_scale_residual_norm_scale_shift(*srnss_args),
        "  the stand-in's srnss, called directly": lambda: StandIn.srnss(*srnss_args),
        "torch.empty_like (CPU; the binding's at::empty is the CUDA caching allocator)": lambda: torch.empty_like(x),
    }
    for name, fn in rows.items():
        print(f"{name:78s} {_median_us(fn):6.3f} us")
    return 0


if __name__ == "__main__":
    sys.exit(main())
