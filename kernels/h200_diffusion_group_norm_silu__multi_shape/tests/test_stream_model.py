"""CPU evidence for path E (c008, negative on the H200, docs/notes.md "c008 on the H200 (2026-11-27): negative"):
the host-and-device schedule and merge code of c008's gns_sched.h, kept as dev/path_e/gns_sched.h since src/ went
back to c007, run under g++ against an fp64 reference (tests/stream_model.cpp, with its deliberately wrong
variants). The schedule/merge model stays valid on its own; the kernel that used it (gns_stream_kernel) is at
commit d0dea7a only, so c008's ptxas no-spill test for it went with it (run it there: `git show
d0dea7a:kernels/h200_diffusion_group_norm_silu__multi_shape/tests/test_stream_model.py`)."""

from __future__ import annotations

import subprocess
from pathlib import Path

from kda_lab.testing import compile_host_cpp

TASK = Path(__file__).resolve().parents[1]
PATH_E = TASK / "dev" / "path_e"


def test_stream_model_against_fp64_and_wrong_variants(tmp_path: Path) -> None:
    exe = compile_host_cpp(TASK / "tests" / "stream_model.cpp", PATH_E, tmp_path / "stream_model")
    run = subprocess.run([str(exe)], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    out = run.stdout
    assert "ALL OK" in out
    for rejected in ("LP = P-2 rejected", "applies-first and LP = P-2 deadlock (rejected)",
                     "completion-order merge changes bits (rejected)", "E[x^2]-mean^2 error"):
        assert rejected in out, out


def test_path_e_header_not_in_src() -> None:
    # src/ is c007 (promoted; kda export --check compares the export with it): path E's header lives under dev/.
    assert (PATH_E / "gns_sched.h").is_file()
    assert not (TASK / "src" / "gns_sched.h").exists()
    assert "gns_sched.h" not in (TASK / "src" / "gns_kernels.cuh").read_text()
