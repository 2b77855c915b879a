"""Relative host cost per call on a CPU-only host (direction only, not evidence): SGLang's two wrappers, a
candidate's public functions, through Triton's real Python dispatch and a real offline sm_90a compile, with a
stand-in driver whose C launcher does nothing (no GPU here). Tensors are CPU tensors; the candidate's
"runs on CUDA" gates are patched open for the measurement (one attribute check each).

    .venv/bin/python kernels/h200_diffusion_rotary_embedding__multi_shape/profile/host_cpu.py [SRC_DIR]

SRC_DIR: a candidate src/ (default: this task's src/), e.g. an older one from ``git archive``.
"""

from __future__ import annotations

import importlib
import os
import statistics
import sys
import time
import types
from pathlib import Path
from typing import Any

os.environ.pop("TRITON_INTERPRET", None)

import torch  # noqa: E402

from kda_lab.interpret.offline_launch import record_launches  # noqa: E402


def load_src(src: Path) -> types.ModuleType:
    name = f"rotary_cand_{abs(hash(str(src)))}"
    pkg = types.ModuleType(name)
    pkg.__path__ = [str(src)]
    sys.modules[name] = pkg
    reg = importlib.import_module(f"{name}.register")
    reg._runs_here = lambda *t: True
    if hasattr(reg, "_signature"):
        def signature_on_cpu(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, *extra: object) -> Any:
            return (x.shape, x.stride(), x.dtype, x.get_device(), cos.shape, cos.stride(), cos.dtype,
                    cos.get_device(), sin.shape, sin.stride(), sin.dtype, sin.get_device(),
                    reg.current_device(), *extra)

        reg._signature = signature_on_cpu
    return reg


def per_call_us(fn: Any, args: tuple[Any, ...], calls: int = 500) -> float:
    for _ in range(3):
        fn(*args)
    walls = []
    for _ in range(calls):
        t0 = time.perf_counter_ns()
        fn(*args)
        walls.append((time.perf_counter_ns() - t0) / 1000.0)
    return statistics.median(walls)


def main() -> None:
    src = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parents[1] / "src"
    record_launches(record=False)  # a launcher that does nothing, Triton compiling for sm_90a
    from sglang.kernels.ops.diffusion.rope.ltx2_rotary_triton import apply_ltx2_split_rotary_emb as sgl_ltx2

    reg = load_src(src)
    torch.set_grad_enabled(False)
    rope_args = (torch.empty(1, 2048, 24, 128, dtype=torch.bfloat16), torch.empty(2048, 64), torch.empty(2048, 64))
    s, h, half = 1536, 32, 32
    table = torch.empty(1, s, h, half, dtype=torch.bfloat16).transpose(1, 2)
    ltx2_args = (torch.empty(1, s, h * 2 * half, dtype=torch.bfloat16), table, table)
    print(f"candidate src: {src}")
    # SGLang's apply_rotary_embedding is autotuned: with the stand-in launcher its autotuner re-benchmarks on
    # every call (~0.1 s), so it is left out here (its H200 host time: 44-48 us, c002 bench).
    for name, fn, args in (                           ("candidate apply_rotary_embedding", reg.apply_rotary_embedding, rope_args),
                           ("SGLang apply_ltx2_split_rotary_emb", sgl_ltx2, ltx2_args),
                           ("candidate apply_ltx2_split_rotary_emb", reg.apply_ltx2_split_rotary_emb, ltx2_args)):
        print(f"{name:<40} {per_call_us(fn, args):7.2f} us per call (median, CPU, launcher stubbed)")


if __name__ == "__main__":
    main()
