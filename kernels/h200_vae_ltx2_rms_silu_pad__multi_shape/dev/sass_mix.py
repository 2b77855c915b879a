"""Offline sm_90a compile of conv_input.py's kernel (no GPU): the SASS instruction mix per output element.

Triton compiles the candidate's real kernel for sm_90a with the run-time specialisations of a production row
(bf16 x, C = 128, BLOCK_V = 32, 4 warps; channels_last_3d x gets Triton's stride-1 specialisation of the
channel stride and 16-divisibility of C and the other strides), nvdisasm (Triton's own) disassembles the cubin,
and the instructions up to the first unpredicated EXIT (the main body with its skipped slow-path branches, not
the subroutines after it) are counted per element of a thread (32). Static counts, not a measurement: the
yardstick for "is this kernel instruction-bound", against the H200's issue rate (docs/notes.md).
"""

from __future__ import annotations

import collections
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
import conv_input  # noqa: E402

SIG = {"x_ptr": "*i16", "out_ptr": "*i16", "C": "i32", "T": "i32", "H": "i32", "W": "i32", "To": "i32",
       "HWo": "i32", "Wo": "i32", "sxb": "i64", "sxc": "i32", "sxt": "i32", "sxh": "i32", "sxw": "i32",
       "wl": "i32", "ht": "i32", "tf": "i32", "inv_c": "fp32", "eps": "fp32", "NORM": "constexpr",
       "X_BF16": "constexpr", "BLOCK_V": "constexpr", "BLOCK_C": "constexpr"}


def compile_kernel(norm: bool, channels_last: bool, block_v: int = 32, block_c: int = 128) -> bytes:
    sig = dict(SIG)
    consts = {"NORM": norm, "X_BF16": True, "BLOCK_V": block_v, "BLOCK_C": block_c}
    names = list(SIG)
    if channels_last:
        sig["sxc"] = "constexpr"
        consts["sxc"] = 1
        div = ["x_ptr", "out_ptr", "C", "sxb", "sxt", "sxh", "sxw"]
    else:
        div = ["x_ptr", "out_ptr", "C", "sxb", "sxc"]
    src = ASTSource(fn=conv_input._conv_input_kernel, signature=sig, constexprs=consts,
                    attrs={(names.index(n),): [["tt.divisibility", 16]] for n in div})
    k = triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": 4, **conv_input._NO_FMA})
    return k.asm["cubin"]


def main_body_mix(cubin: bytes) -> collections.Counter[str]:
    nvdisasm = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "nvdisasm"
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        text = subprocess.run([str(nvdisasm), "-c", f.name], capture_output=True, text=True, check=True).stdout
    ops: collections.Counter[str] = collections.Counter()
    for line in text.splitlines():
        if not re.match(r"\s+/\*[0-9a-f]{4}\*/", line):
            continue
        op = re.sub(r"^\s+/\*[0-9a-f]{4}\*/\s+(@!?U?P\w+\s+)?", "", line).split()[0].split(".")[0]
        ops[op] += 1
        if op == "EXIT" and not re.search(r"@!?U?P", line):
            break
    return ops


if __name__ == "__main__":
    per_thread = 32
    for norm in (True, False):
        for cl in (True, False):
            ops = main_body_mix(compile_kernel(norm, cl))
            n = sum(ops.values())
            print(f"NORM={norm!s:5} channels_last={cl!s:5} {n:5d} instructions, {n / per_thread:5.1f} per element; "
                  + ", ".join(f"{o} {c}" for o, c in ops.most_common(10)))
