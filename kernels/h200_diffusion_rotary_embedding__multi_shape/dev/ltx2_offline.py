"""Offline sm_90a compile (CPU host, no GPU) of the c006 dev variants (dev/ltx2_variants.py), c005's stream kernel
and SGLang's kernel at production LTX-2 shapes: registers, spills, shared memory and the PTX's global access
widths and fp32 fma count, so a variant's code shape can be read before the H200 runs it.

    python kernels/h200_diffusion_rotary_embedding__multi_shape/dev/ltx2_offline.py [--json PATH]

Triton compiles the real kernels for sm_90a through its normal dispatch, with kda_lab's recording stand-in driver
(the binary is never loaded; CPU tensors stand for CUDA ones); ``cuobjdump --dump-resource-usage`` reads the
cubin. ``fma/elem`` is the fp32 fma count per output element: SGLang's expression contracts to one fma per
element (``bf16(x*cos) + (+-x_p)*sin``); a variant with a different count rounds differently on the GPU.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

os.environ.pop("TRITON_INTERPRET", None)  # a real compile, not the interpreter

DEV_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(DEV_DIR.parents[2]))
sys.path.insert(0, str(DEV_DIR))

SHAPES = {"B1_S6144_H32_D128": (1, 6144, 32, 128), "B1_S24576_H32_D64": (1, 24576, 32, 64)}
PROGRAMS = 132 * 12  # the persistent grid offline (occupancy needs the loaded binary; only the code matters here)


def _resources(cubin: bytes) -> dict[str, int]:
    import triton

    cuobjdump = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        text = subprocess.run([str(cuobjdump), "--dump-resource-usage", f.name], capture_output=True, text=True,
                              check=True).stdout
    found = {k: int(v) for k, v in re.findall(r"(REG|STACK|SHARED|LOCAL):(\d+)", text)}
    return {"regs": found.get("REG", -1), "stack": found.get("STACK", -1), "shared": found.get("SHARED", -1),
            "local": found.get("LOCAL", -1)}


def describe(compiled: Any, n_elems: int, grid: int) -> dict[str, Any]:
    """Resources and PTX facts of one compiled kernel (per-thread static counts, and fma per output element
    from the static count x threads x grid / elements for straight-line kernels)."""
    ptx = compiled.asm["ptx"]
    warps = compiled.metadata.num_warps
    loads = re.findall(r"ld\.global(?:\.[a-z_:0-9]+)*?\.(v[248])?\.?[bfu](\d+)", ptx)
    info: dict[str, Any] = {"num_warps": warps, **_resources(compiled.asm["cubin"]),
                            "dyn_shared": compiled.metadata.shared}
    info["ld.global"] = {f"{v or 'v1'}.b{b}": sum(1 for x in loads if x == (v, b)) for v, b in sorted(set(loads))}
    stores = re.findall(r"st\.global(?:\.[a-z_:0-9]+)*?\.(v[248])?\.?[bfu](\d+)", ptx)
    info["st.global"] = {f"{v or 'v1'}.b{b}": sum(1 for x in stores if x == (v, b)) for v, b in sorted(set(stores))}
    info["cp.async"] = len(re.findall(r"cp\.async\.", ptx))
    fma = len(re.findall(r"\bfma\.rn\.f32\b", ptx))
    info["fma.rn.f32 (static)"] = fma
    info["loop"] = bool(re.search(r"^\s*@%p\d+ bra", ptx, re.M))
    if not info["loop"]:
        info["fma/elem"] = round(fma * 32 * warps * grid / n_elems, 3)
    return info


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", default="", help="also write the facts here")
    opt = ap.parse_args()

    import torch

    from kda_lab.interpret.offline_launch import record_launches

    record_launches()
    import ltx2_variants as dev

    dev._native_cvt = lambda x: True  # compile the GPU path (SGLang's cvt.rn.bf16.f32), not the interpreter's
    src = dev.SRC
    from sglang.kernels.ops.diffusion.rope import ltx2_rotary_triton as sg

    torch.set_grad_enabled(False)
    facts: dict[str, dict[str, Any]] = {}
    for shape_name, (b, s, h, d) in SHAPES.items():
        x = torch.empty(b, s, h * d, dtype=torch.bfloat16)
        table = torch.empty(b, s, h, d // 2, dtype=torch.bfloat16).transpose(1, 2)  # LTX-2's [B,H,S,D/2] view
        out = torch.empty_like(x)
        n = x.numel()
        row: dict[str, Any] = {}
        compiled = sg._ltx2_split_rotary_kernel[(b * s, 2)](
            out, x, table, table, s, h, d, d // 2, *dev._tables(table, table), BLOCK_HEADS=16, BLOCK_HALF=d // 2,
            num_warps=8)
        row["sglang"] = describe(compiled, n, b * s * 2)
        p = src.plan_stream(h, d // 2, 2, n)  # c005's large-row plan, its GPU path (src.launch would pick the
        # interpreter's rounding for CPU tensors)
        compiled = src._ltx2_split_rope_kernel[(b * s * 2,)](
            out, x, table, table, s, h, d // 2, *dev._tables(table, table), p.block_heads, p.block_half, True, True,
            False, True, h // p.block_heads, "", num_warps=p.num_warps)
        row["c005_stream"] = describe(compiled, n, b * s * 2)
        for name, plan in dev.VARIANTS.items():
            if isinstance(plan, dev.FlatPlan):
                compiled = dev.launch_flat(out, x, table, table, plan)
                row[name] = describe(compiled, n, -(-n // plan.xblock))
            else:
                compiled = dev.launch_persistent(out, x, table, table, plan, programs=PROGRAMS)
                row[name] = describe(compiled, n, PROGRAMS)
        facts[shape_name] = row
        print(f"== {shape_name} (bf16, sm_90a)")
        for name, info in row.items():
            print(f"  {name:16s} " + " ".join(f"{k}={v}" for k, v in info.items()))
    if opt.json:
        Path(opt.json).write_text(json.dumps(facts, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
