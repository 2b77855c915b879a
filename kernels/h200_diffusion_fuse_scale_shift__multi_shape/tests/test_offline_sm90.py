"""What ptxas makes of the candidate's select01 kernel beside SGLang's, at the production signature (x [1, 8424, 3072]
bf16, [1, C] bf16 modulation, int32 index), compiled offline for sm_90a on a CPU host (dev/offline_sm90.py, in a
child process without the interpreter; the stand-in driver launches nothing). These are the properties whose
absence made c004 lose on the H200 (0.725x / 0.909x, run 20261127-072010-b81fb4; docs/notes.md), so each assertion
fails on c004's kernel:

- SGLang's launch geometry: one row per program (grid B*L), 4 warps;
- no more registers than SGLang's kernel and no spills, i.e. at least as many resident programs per SM
  (c004: 125 / 120 registers, 4 programs against SGLang's 8 / 7);
- the whole row (x; residual and residual_gate in the residual form) requested before the first block barrier,
  in 16-byte vectors: one DRAM round trip per row (c004 requested the tail third after the head's reduction);
- after the barrier only the index and the selected modulation row (3 vectors): not both sets (c004: 6 vectors);
- one block reduction per statistic: no more barriers than SGLang (c004: 11 against 5);
- every modulation load and every store a 16-byte vector.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

TASK_DIR = Path(__file__).resolve().parents[1]
PLAIN = "fuse_layernorm_scale_shift_gate_select01_kernel"
RESID = "fuse_residual_layernorm_scale_shift_gate_select01_kernel"
C, THREADS, VEC = 3072, 128, 8  # production width; SGLang's 4 warps; bf16 elements per 16-byte vector


def _child() -> None:
    sys.path.insert(0, str(TASK_DIR / "dev"))
    import offline_sm90

    print(json.dumps(offline_sm90.build(seq=8424, c=C)))


@pytest.fixture(scope="module")
def compiled() -> dict[tuple[str, str], dict]:
    from kda_lab.interpret.offline_launch import child_report

    report = child_report(__file__)
    return {(r["impl"], r["fn"]): r for r in report}


@pytest.mark.parametrize("fn", [PLAIN, RESID], ids=["plain", "residual"])
def test_candidate_beside_sglang_at_the_production_signature(compiled: dict, fn: str) -> None:
    ours, theirs = compiled[("candidate", fn)], compiled[("sglang", fn)]
    streams = 3 if fn == RESID else 1  # row tensors read per token
    per_stream = C // (THREADS * VEC)  # 16-byte vectors per thread per row tensor: 3
    # launch geometry: SGLang's
    assert theirs["grid"] == [8424, 1, 1] and theirs["warps"] == 4
    assert ours["grid"] == theirs["grid"] and ours["warps"] == theirs["warps"]
    # registers and residency
    assert ours["spill"] == 0
    assert ours["regs"] <= theirs["regs"], (ours["regs"], theirs["regs"])
    assert ours["ctas_per_sm"] >= theirs["ctas_per_sm"]
    # the whole row before the first barrier, as 16-byte vectors
    assert ours["sass_ldg128_before_bar"] == streams * per_stream
    # after it: the index (one 4-byte load) and the three selected modulation vectors
    assert ours["sass_ldg_after_bar"] == 1 + 3 * per_stream
    assert ours["sass_ldg_other"] == 1 and ours["sass_ldg128"] == (streams + 3) * per_stream
    # y and gate_out (and residual_out) stored as 16-byte vectors
    assert ours["sass_stg_other"] == 0 and ours["sass_stg128"] == (3 if fn == RESID else 2) * per_stream
    # one block reduction per statistic
    assert ours["bar"] <= theirs["bar"]


def test_plan_keeps_16_byte_vectors() -> None:
    """Production widths: SGLang's 4 warps, one row per program, head + tail with no dead lanes; a tail segment
    always gives each thread at least one 16-byte vector."""
    sys.path.insert(0, str(TASK_DIR.parents[1]))
    from kda_lab.task import load_task
    from kda_lab.task.schema import load_candidate

    cand = load_candidate(load_task(TASK_DIR))
    plan = sys.modules[cand.launch.__module__].plan
    assert plan(3072, 2) == (2048, 1024, True, 1, 4)
    assert plan(5120, 2) == (4096, 1024, True, 1, 4)
    assert plan(3072, 4) == (2048, 1024, True, 1, 4)
    for c in range(512, 16385, 8):
        for size in (2, 4):
            block_a, block_b, tail, rows, warps = plan(c, size)
            if tail:
                assert rows * block_b * size >= 16 * 32 * warps or warps == 1, (c, size)


if __name__ == "__main__" and sys.argv[1:] == ["--child"]:
    _child()
