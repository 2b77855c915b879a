"""The kept launch (kda_kernels.launch_cache) hands Triton's C launcher exactly what Triton's own dispatch hands it.

Runs on a CPU host: a child process without the interpreter compiles the real kernels for sm_90a offline and
swaps Triton's driver for a stand-in that records launches (``kda_lab.interpret.offline_launch``). Each public
function is called twice per signature: the first call goes through ``kernel[grid]`` (Triton's dispatch), the
second through the kept launch; the recorded grid, stream, function, packed metadata and arguments must agree.
With Triton's launch hook chains empty the kept launch passes None for them (the launcher then skips calling
them); with a hook registered it passes the chains and the launch metadata. A misaligned x (the kept binary
assumes 16-byte-aligned pointers) must go through Triton's dispatch again.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

TASK_DIR = Path(__file__).resolve().parents[1]


def _child() -> None:
    import torch

    from kda_lab.interpret.offline_launch import record_launches
    from kda_lab.task import load_task
    from kda_lab.task.schema import load_candidate

    rec = record_launches()
    launches, describe = rec.launches, rec.describe
    reg = load_candidate(load_task(TASK_DIR))
    reg._runs_here = lambda *t: True
    plain_signature = reg._signature

    def signature_on_cpu(x: Any, cos: Any, sin: Any, *extra: object) -> Any:
        return plain_signature(x, cos, sin, *extra) if x.is_cuda else \
            (x.shape, x.stride(), x.dtype, cos.shape, cos.stride(), cos.dtype, sin.shape, sin.stride(), sin.dtype,
             *extra)

    reg._signature = signature_on_cpu
    torch.set_grad_enabled(False)
    table = torch.randn(1, 12, 3, 32, dtype=torch.bfloat16).transpose(1, 2)
    buf = torch.randn(2 + 12 * 3 * 64, dtype=torch.bfloat16)
    cases = {
        "rope": (reg.apply_rotary_embedding, (torch.randn(2, 12, 3, 64, dtype=torch.bfloat16),
                                              torch.randn(12, 32), torch.randn(12, 32), False)),
        "ltx2": (reg.apply_ltx2_split_rotary_emb, (buf[:-2].view(1, 12, 3 * 64), table, table)),
    }
    report: dict[str, Any] = {}
    for name, (fn, args) in cases.items():
        start = len(launches)
        outs = [fn(*args), fn(*args)]
        report[name] = {"launches": launches[start:], "outs": [o.data_ptr() for o in outs],
                        "inputs": [describe(a) for a in args[:3]]}
    report["dispatches_before_misaligned"] = rec.dispatches
    x = buf[1:-1].view(1, 12, 3 * 64)  # 2 bytes past an aligned address, same signature as the ltx2 case
    reg.apply_ltx2_split_rotary_emb(x, table, table)
    report["dispatches_after_misaligned"] = rec.dispatches
    from triton import knobs

    seen: list[Any] = []
    knobs.runtime.launch_enter_hook.add(seen.append)
    start = len(launches)
    reg.apply_ltx2_split_rotary_emb(*cases["ltx2"][1])  # kept, with a hook registered
    knobs.runtime.launch_enter_hook.remove(seen.append)
    report["hooked"] = launches[start:]
    report["dispatches_after_hooked"] = rec.dispatches
    print(json.dumps(report))


def test_kept_launch_repeats_tritons_dispatch_exactly() -> None:
    from kda_lab.interpret.offline_launch import child_report

    report = child_report(__file__)
    for name in ("rope", "ltx2"):
        first, second = report[name]["launches"]
        out1, out2 = report[name]["outs"]
        assert first["args"][0] == repr(out1) and second["args"][0] == repr(out2)
        assert first["args"][1:4] == report[name]["inputs"]  # x (its [B*T,H,D] view for rope), cos, sin
        same = ("grid", "stream", "function", "packed")
        assert {k: first[k] for k in same} == {k: second[k] for k in same}, name
        assert first["hooks"] == ["HookChain", "HookChain"] and second["hooks"] == ["NoneType", "NoneType"], name
        assert not second["meta"], name
        assert first["args"][1:] == second["args"][1:], name
    # two dispatches for four calls (the second call of each signature is the kept launch), then one more for
    # the misaligned x
    assert report["dispatches_before_misaligned"] == 2
    assert report["dispatches_after_misaligned"] == 3
    (hooked,) = report["hooked"]
    assert report["dispatches_after_hooked"] == 3  # still the kept launch ...
    assert hooked["hooks"] == ["HookChain", "HookChain"] and hooked["meta"]  # ... handing the hooks over
    assert hooked["args"][1:] == report["ltx2"]["launches"][0]["args"][1:]


if __name__ == "__main__" and sys.argv[1:] == ["--child"]:
    _child()
