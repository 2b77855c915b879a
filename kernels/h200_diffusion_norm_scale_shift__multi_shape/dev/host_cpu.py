"""Host cost of one call on a CPU host (direction only, not evidence): the candidate's Python path with Triton's
real dispatch on the first call of a signature and the kept launch after it, Triton's driver stood in for (sm_90
target, a launcher that does nothing), CPU tensors in the production layouts of the small rows.

    env -u TRITON_INTERPRET python kernels/h200_diffusion_norm_scale_shift__multi_shape/dev/host_cpu.py

Prints the median per-call time of the kept path, of a signature the dispatch rule hands to SGLang (SGLang's
function stood in for by a no-op, and that no-op alone), of Triton's own dispatch (``kernel[grid]`` every call) and
of a bare ``torch.empty_like`` for scale. On the GPU the outputs come from the CUDA caching allocator instead.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

TASK_DIR = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(TASK_DIR.parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))


def _median_us(fn, n: int = 2000) -> float:
    for _ in range(50):
        fn()
    walls = []
    for _ in range(n):
        t0 = time.perf_counter_ns()
        fn()
        walls.append((time.perf_counter_ns() - t0) / 1000.0)
    return statistics.median(walls)


def main() -> int:
    from offline_sm90 import _stand_in

    _stand_in()
    import torch

    from kda_lab.task import load_task
    from kda_lab.task.schema import load_candidate

    reg = load_candidate(load_task(TASK_DIR))
    reg.runs_here = lambda *t: True
    reg.KEEP_ON_CPU = True
    torch.set_grad_enabled(False)
    bf = torch.bfloat16
    d = 3072
    mod = torch.randn(1, 6 * d, dtype=bf)
    x = torch.randn(1, 47, d, dtype=bf)
    res = torch.randn(1, 47, d, dtype=bf)
    gate = torch.randn(1, 1, 6 * d, dtype=bf)[..., :d]
    nss_args = (x, None, None, mod[:, d:2 * d], mod[:, :d], "layer", 1e-6)
    srnss_args = (res, x, gate, None, None, mod[:, d:2 * d], mod[:, :d], "layer", 1e-6)
    rows = {
        "fused_norm_scale_shift 1x47x3072 (kept launch)": lambda: reg.fused_norm_scale_shift(*nss_args),
        "fused_scale_residual_norm_scale_shift 1x47x3072 (kept launch)":
            lambda: reg.fused_scale_residual_norm_scale_shift(*srnss_args),
    }
    # a signature the dispatch rule hands to SGLang (SGLang's function stood in for by a no-op): the key lookup
    # and the cached HANDED_BACK verdict, against calling the no-op directly
    reg._sglang_srnss = lambda *a: None
    s_big = reg.RESIDUAL_HANDBACK_BYTES // (4 * d * 2) + 8
    big = torch.empty(1, s_big, d, dtype=bf)
    back_args = (big, big.clone(), gate, None, None, mod[:, d:2 * d], mod[:, :d], "layer", 1e-6)
    rows[f"fused_scale_residual_norm_scale_shift 1x{s_big}x3072 (handed back)"] = \
        lambda: reg.fused_scale_residual_norm_scale_shift(*back_args)
    rows["  the stand-in for SGLang's function, called directly"] = lambda: reg._sglang_srnss(*back_args)
    for name, fn in rows.items():
        print(f"{name:66s} {_median_us(fn):6.2f} us")
    reg.NSS_LAUNCHES.entries.clear()
    reg.NSS_LAUNCHES.keep = lambda key, entry: None  # every call through the checks and Triton's dispatch
    print(f"{'fused_norm_scale_shift 1x47x3072 (checks + Triton dispatch)':66s} "
          f"{_median_us(lambda: reg.fused_norm_scale_shift(*nss_args), 500):6.2f} us")
    print(f"{'torch.empty_like (for scale)':66s} {_median_us(lambda: torch.empty_like(x)):6.2f} us")
    return 0


if __name__ == "__main__":
    sys.exit(main())
