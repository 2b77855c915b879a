"""Offline sm_90a build of the select01 kernels on a CPU host (no GPU, no interpreter): SGLang 0.5.23's two
kernels and the candidate's, at the production signature (x [1, L, 3072] bf16, [1, C] bf16 modulation, int32
index, no weight/bias). For each: launch geometry (grid, warps), what ptxas makes of it (registers, spills,
shared memory, the resident CTAs per SM that implies), and the global memory instructions in the PTX and SASS
(16-byte vectors or narrower). Direction only, not evidence: timings come from the H200.

    env -u TRITON_INTERPRET .venv/bin/python kernels/h200_diffusion_fuse_scale_shift__multi_shape/dev/offline_sm90.py [--json] [--ptx]

Triton's driver is swapped for the recording stand-in of ``kda_lab.interpret.offline_launch`` (sm_90, 132 SMs);
CPU tensors with the production shapes/strides/dtypes stand for the CUDA ones (never read). SGLang's wrappers
assert ``x.is_cuda``: they run here from their own source with that one assertion dropped, so the kernel sees
exactly the arguments (and Triton the specializations) that SGLang launches on the GPU.
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

TASK_DIR = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(TASK_DIR.parents[1]))

PLAIN = "fuse_layernorm_scale_shift_gate_select01_kernel"
RESID = "fuse_residual_layernorm_scale_shift_gate_select01_kernel"
SM_REGS, SM_THREADS, SM_CTAS, SM_SMEM = 65536, 2048, 32, 232448


def ptxas_stats(ptx: str) -> dict:
    """Registers, spills and shared memory from ptxas -v, and the SASS global memory instructions by width."""
    import triton

    bin_dir = Path(triton.__file__).parent / "backends/nvidia/bin"
    with tempfile.TemporaryDirectory() as tmp:
        src, cubin = Path(tmp) / "k.ptx", Path(tmp) / "k.cubin"
        src.write_text(ptx)
        out = subprocess.run([str(bin_dir / "ptxas"), "-arch=sm_90a", "-v", str(src), "-o", str(cubin)],
                             capture_output=True, text=True, check=True).stderr
        sass = subprocess.run([str(bin_dir / "cuobjdump"), "-sass", str(cubin)], capture_output=True, text=True,
                              check=True).stdout
    regs = re.search(r"Used (\d+) registers", out)
    spill = re.search(r"(\d+) bytes spill stores", out)
    smem = re.search(r"(\d+) bytes smem", out)
    ldg = re.findall(r"\bLDG\.E(\S*)", sass)
    stg = re.findall(r"\bSTG\.E(\S*)", sass)
    first_bar = sass.find("BAR.SYNC")
    head = sass if first_bar < 0 else sass[:first_bar]
    return {"regs": int(regs.group(1)) if regs else None, "spill": int(spill.group(1)) if spill else 0,
            "smem": int(smem.group(1)) if smem else 0,
            "sass_ldg128": sum(".128" in s for s in ldg), "sass_ldg_other": sum(".128" not in s for s in ldg),
            "sass_stg128": sum(".128" in s for s in stg), "sass_stg_other": sum(".128" not in s for s in stg),
            # machine order: global loads issued before the first block barrier (the row's DRAM round trip) and
            # after it (what waits for the statistics: index, modulation, or a late segment of the row)
            "sass_ldg128_before_bar": len(re.findall(r"\bLDG\.E\S*\.128", head)),
            "sass_ldg_after_bar": len(ldg) - len(re.findall(r"\bLDG\.E", head))}


def ctas_per_sm(regs: int, warps: int, smem: int) -> int:
    """Resident CTAs per SM on sm_90 from registers (allocated per warp in units of 256), threads and shared
    memory (Triton's, dynamic: ``metadata.shared``)."""
    per_warp = -(-regs * 32 // 256) * 256
    by_regs = SM_REGS // (per_warp * warps)
    by_threads = SM_THREADS // (32 * warps)
    by_smem = SM_SMEM // max(smem + 1024, 1)  # 1 KB per CTA reserved by the driver
    return min(by_regs, by_threads, by_smem, SM_CTAS)


def ptx_memory(ptx: str) -> dict:
    lds = re.findall(r"ld\.global[^ ]*", ptx)
    sts = re.findall(r"st\.global[^ ]*", ptx)
    return {"ptx_ld_v4": sum(".v4." in s for s in lds), "ptx_ld_other": sum(".v4." not in s for s in lds),
            "ptx_st_v4": sum(".v4." in s for s in sts), "ptx_st_other": sum(".v4." not in s for s in sts),
            "ptx_ld_widths": sorted(set(lds)), "bar": len(re.findall(r"bar\.sync|barrier\.sync", ptx)),
            "branches": len(re.findall(r"^\s*(@%p\d+\s+)?bra\b", ptx, re.M))}


def sglang_wrappers() -> dict:
    """SGLang's two select01 wrappers, recompiled from their source without ``assert x.is_cuda``."""
    import sglang.kernels.ops.diffusion.modulate.scale_shift_triton as m

    out = {}
    for name in (PLAIN, RESID):
        src = inspect.getsource(getattr(m, name)).replace("    assert x.is_cuda\n", "")
        ns: dict = {}
        exec(compile(src, m.__file__, "exec"), m.__dict__ | ns, ns)  # noqa: S102 - SGLang's own source
        out[name] = ns[name]
    return out


def inputs(fn: str, seq: int, c: int):
    import torch

    g = torch.Generator().manual_seed(0)

    def t(*shape, dtype=torch.bfloat16):
        return torch.randn(*shape, generator=g).to(dtype)
    a = {"x": t(1, seq, c)}
    if fn == RESID:
        a["residual"], a["residual_gate"] = t(1, seq, c), t(1, seq, c)
    a["weight"] = a["bias"] = None
    for k in ("scale0", "shift0", "gate0", "scale1", "shift1", "gate1"):
        a[k] = t(1, c)
    a["index"] = torch.randint(0, 2, (1, seq), generator=g, dtype=torch.int32)
    a["eps"] = 1e-6
    return a


def build(seq: int = 8424, c: int = 3072) -> list[dict]:
    """One row per (impl, function): the last compiled kernel of that call and the grid it was launched on."""
    from kda_lab.interpret.offline_launch import offline_candidate

    rec, cand = offline_candidate(TASK_DIR)  # CPU tensors stand for CUDA ones
    compiled = rec.compiled
    impls = {"sglang": sglang_wrappers(), "candidate": {fn: cand.EXPORTS[fn] for fn in (PLAIN, RESID)}}
    rows = []
    for impl, fns in impls.items():
        for fn, f in fns.items():
            n_compiled, n_launch = len(compiled), len(rec.launches)
            f(**inputs(fn, seq, c))
            if len(rec.launches) == n_launch:  # a kept launch (no dispatch) still launches through the stand-in
                raise RuntimeError(f"{impl} {fn}: no launch")
            kern = compiled[-1] if len(compiled) > n_compiled else None
            if kern is None:
                raise RuntimeError(f"{impl} {fn}: launched without a Triton dispatch (kept launch): rerun fresh")
            ptx = kern.asm["ptx"]
            st = ptxas_stats(ptx) | ptx_memory(ptx)
            st["smem"] = max(st["smem"], kern.metadata.shared)
            warps = kern.metadata.num_warps
            grid = rec.launches[-1]["grid"]
            ctas = ctas_per_sm(st["regs"], warps, st["smem"])
            rows.append({"impl": impl, "fn": fn, "kernel": kern.name, "grid": grid, "warps": warps,
                         "ctas_per_sm": ctas, "warps_per_sm": ctas * warps,
                         "waves": round(grid[0] / (132 * ctas), 2), **st})
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", action="store_true", help="print one JSON list (for tests)")
    ap.add_argument("--seq", type=int, default=8424)
    ap.add_argument("--c", type=int, default=3072)
    args = ap.parse_args(argv)
    if os.environ.get("TRITON_INTERPRET") == "1":
        sys.exit("run without TRITON_INTERPRET (env -u TRITON_INTERPRET ...)")
    rows = build(args.seq, args.c)
    if args.json:
        print(json.dumps(rows))
        return 0
    for r in rows:
        print(f"{r['impl']:9s} {r['fn'][:22]:22s}{'(res)' if r['fn'] == RESID else '     '} grid {r['grid'][0]:6d} "
              f"warps {r['warps']:2d} regs {r['regs']:3d} spill {r['spill']} smem {r['smem']:4d} "
              f"CTA/SM {r['ctas_per_sm']:2d} ({r['warps_per_sm']:2d} warps) waves {r['waves']:5.2f} | PTX ld.v4 "
              f"{r['ptx_ld_v4']:2d} other {r['ptx_ld_other']:2d} st.v4 {r['ptx_st_v4']:2d} other "
              f"{r['ptx_st_other']:2d} | SASS LDG.128 {r['sass_ldg128']:2d} other {r['sass_ldg_other']:2d} "
              f"STG.128 {r['sass_stg128']:2d} other {r['sass_stg_other']:2d} | LDG.128 before 1st BAR "
              f"{r['sass_ldg128_before_bar']:2d}, LDG after {r['sass_ldg_after_bar']:2d} | bar {r['bar']} "
              f"bra {r['branches']}")
        print(f"{'':9s} ld kinds: {', '.join(r['ptx_ld_widths'])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
