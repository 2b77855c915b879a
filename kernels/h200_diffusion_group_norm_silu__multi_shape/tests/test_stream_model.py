"""CPU evidence for path E (c008): the host-and-device schedule and merge code of src/gns_sched.h run under g++
against an fp64 reference (tests/stream_model.cpp, with its deliberately wrong variants), and ptxas's resource
report for gns_stream_kernel (no spills, registers within the 3/4 CTAs-per-SM budgets)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

TASK = Path(__file__).resolve().parents[1]
SRC = TASK / "src"


def test_stream_model_against_fp64_and_wrong_variants(tmp_path: Path) -> None:
    gxx = shutil.which("g++")
    if gxx is None:
        pytest.skip("g++ not on PATH")
    exe = tmp_path / "stream_model"
    build = subprocess.run([gxx, "-std=c++17", "-O2", "-Wall", "-Wextra", "-Werror", f"-I{SRC}",
                            str(TASK / "tests" / "stream_model.cpp"), "-o", str(exe)],
                           capture_output=True, text=True, timeout=300)
    assert build.returncode == 0, build.stdout + build.stderr
    run = subprocess.run([str(exe)], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    out = run.stdout
    assert "ALL OK" in out
    for rejected in ("LP = P-2 rejected", "applies-first and LP = P-2 deadlock (rejected)",
                     "completion-order merge changes bits (rejected)", "E[x^2]-mean^2 error"):
        assert rejected in out, out


def test_stream_kernel_registers_no_spills(tmp_path: Path) -> None:
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        pytest.skip("nvcc not on PATH (tests/test_cuda_sources.py says whether that is allowed)")
    res = subprocess.run([nvcc, "-std=c++17", "-O3", "-gencode=arch=compute_90a,code=sm_90a", "-Xptxas", "-v",
                          f"-I{SRC}", "-c", str(SRC / "gns_kernels.cu"), "-o", str(tmp_path / "gns.o")],
                         capture_output=True, text=True, timeout=900)
    assert res.returncode == 0, res.stdout + res.stderr
    report = res.stdout + res.stderr
    # ptxas: "Compiling entry function '<mangled>'", then "... N bytes spill stores ...", "Used R registers"
    blocks = re.findall(r"Function properties for (\S*gns_stream_kernel\S*)\n\s*(\d+) bytes stack frame, "
                        r"(\d+) bytes spill stores, (\d+) bytes spill loads\n[^\n]*Used (\d+) registers", report)
    assert len(blocks) == 6, report  # {half, bf16, float} x {3, 4} CTAs per SM
    for name, _stack, st, ld, regs in blocks:
        minb = 3 if "Li3E" in name else 4
        assert int(st) == 0 and int(ld) == 0, f"{name} spills"
        assert int(regs) <= 65536 // (256 * minb), f"{name}: {regs} registers"
