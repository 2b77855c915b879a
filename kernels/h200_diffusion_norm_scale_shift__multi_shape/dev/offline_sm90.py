"""Offline sm_90a build of the candidate's kernel on a CPU host (no GPU, no interpreter): what ptxas makes of each
production signature (registers, spills, 16-byte vector loads/stores, barriers). Direction only, not evidence.

    env -u TRITON_INTERPRET python kernels/h200_diffusion_norm_scale_shift__multi_shape/dev/offline_sm90.py [--sass]

Triton's driver is swapped for a stand-in (sm_90, 132 SMs) whose launcher does nothing; each row's arguments are
built as on the GPU (CPU tensors with the production shapes/strides/dtypes, never read) and sent through the
candidate's own checked path, so the compiled specializations are the ones `kda bench` would launch.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

TASK_DIR = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(TASK_DIR.parents[1]))


def _stand_in() -> None:
    """Triton compiles for sm_90a; a launcher that does nothing (kda_lab.interpret.offline_launch)."""
    from kda_lab.interpret.offline_launch import record_launches

    record_launches(record=False)


def _ptxas_stats(ptx: str) -> dict:
    import triton

    ptxas = Path(triton.__file__).parent / "backends/nvidia/bin/ptxas"
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "k.ptx"
        src.write_text(ptx)
        out = subprocess.run([str(ptxas), "-arch=sm_90a", "-v", str(src), "-o", str(Path(tmp) / "k.cubin")],
                             capture_output=True, text=True, check=True).stderr
    regs = re.search(r"Used (\d+) registers", out)
    spill = re.search(r"(\d+) bytes spill stores", out)
    smem = re.search(r"(\d+) bytes smem", out)
    return {"regs": int(regs.group(1)) if regs else None, "spill": int(spill.group(1)) if spill else 0,
            "smem": int(smem.group(1)) if smem else 0}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", nargs="*", default=None)
    ap.add_argument("--sass", action="store_true", help="print the PTX memory ops of each kernel")
    args = ap.parse_args(argv)
    if os.environ.get("TRITON_INTERPRET") == "1":
        sys.exit("run without TRITON_INTERPRET (env -u TRITON_INTERPRET ...)")
    _stand_in()
    import torch

    from kda_lab.measure.inputs import make_inputs
    from kda_lab.task import load_task
    from kda_lab.task.schema import load_candidate

    task = load_task(TASK_DIR)
    reg = load_candidate(task)
    reg.runs_here = lambda *t: True
    real_plan = reg.plan
    plan_used = []

    def recording_plan(*a):
        plan_used.append(real_plan(*a))
        return plan_used[-1]
    seen = {}
    from triton.runtime.jit import JITFunction

    compiled = []
    real_run = JITFunction.run

    def recording_run(self, *a, **k):
        kern = real_run(self, *a, **k)
        compiled.append(kern)
        return kern

    JITFunction.run = recording_run
    torch.set_grad_enabled(False)
    for w in task.workloads:
        if args.rows and w.name not in args.rows:
            continue
        if not args.rows and w.kind != "production":
            continue
        small = _shrunk(w)
        a = make_inputs(small, torch.device("cpu"), 0)
        start = len(compiled)
        full_rows = w.args["x"].shape[0] * w.args["x"].shape[1]
        reg.plan = lambda d, e, n, eb, u, _rows=full_rows: recording_plan(d, e, _rows, eb, u)  # the plan of the full-size row
        reg.EXPORTS[w.fn](**a)
        if len(compiled) == start:
            print(f"{w.name}: no launch (fell back?)")
            continue
        kern = compiled[-1]
        ptx = kern.asm["ptx"]
        sig = (kern.name, kern.hash)
        if sig not in seen:
            st = _ptxas_stats(ptx)
            st["ld128"] = len(re.findall(r"ld\.global[^;]*\.v4\.b32", ptx))
            st["st128"] = len(re.findall(r"st\.global[^;]*\.v4\.b32", ptx))
            st["ld_other"] = len(re.findall(r"ld\.global", ptx)) - st["ld128"]
            st["st_other"] = len(re.findall(r"st\.global", ptx)) - st["st128"]
            st["bar"] = len(re.findall(r"bar\.sync|barrier\.sync", ptx))
            st["warps"] = kern.metadata.num_warps
            st["plan"] = plan_used[-1]
            seen[sig] = st
            if args.sass:
                for line in ptx.splitlines():
                    if re.search(r"(ld|st)\.global|bar\.sync|barrier", line):
                        print("   ", line.strip())
        st = seen[sig]
        print(f"{w.name:50s} plan {st['plan']} regs {st['regs']:3d} spill {st['spill']} smem {st['smem']:4d} "
              f"ld.v4 {st['ld128']:2d} st.v4 {st['st128']:2d} other ld/st {st['ld_other']}/{st['st_other']} "
              f"bar {st['bar']}")
    return 0


def _shrunk(w):
    """The row with at most 64 tokens: same dtypes, strides and modulation layouts (B = 1 everywhere in production,
    so a batch stride allocates nothing). The compile depends on the token count only through S == 1."""
    import dataclasses

    from kda_lab.task.workloads import TensorSpec

    args = {}
    for name, spec in w.args.items():
        if isinstance(spec, TensorSpec) and len(spec.shape) == 3 and spec.shape[1] > 64:
            spec = dataclasses.replace(spec, shape=(spec.shape[0], 64, spec.shape[2]))
        args[name] = spec
    return dataclasses.replace(w, args=args)


if __name__ == "__main__":
    sys.exit(main())
