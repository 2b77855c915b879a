"""The kept launch (kda_kernels.launch_cache) hands Triton's C launcher exactly what Triton's own dispatch hands it.

Runs on a CPU host: a child process without the interpreter compiles the real kernel for sm_90a offline, with
Triton's driver swapped for a stand-in that records launches (``kda_lab.interpret.offline_launch``). Each
signature is called twice: the first call goes through ``kernel[grid]`` (Triton's
dispatch), the second through the kept launch; grid, stream, function, packed metadata and arguments must agree
(with no launch hook registered the kept launch passes None for the hooks and the launch metadata).
A misaligned q (the kept binary assumes 16-byte-aligned pointers) must go through Triton's dispatch again.
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
    reg.runs_here = lambda *t: True

    def signature_on_cpu(*tensors_and_extra: Any) -> Any:
        tensors, extra = tensors_and_extra[:6], tensors_and_extra[6:]
        return (*((t.shape, t.stride(), t.dtype) for t in tensors), *extra)

    reg._signature = signature_on_cpu
    torch.set_grad_enabled(False)
    buf = torch.randn(8 + 5 * 3 * 24 * 128, dtype=torch.bfloat16)
    qkv = buf[:-8].view(5, 3 * 24 * 128)
    q, k = qkv[:, :3072].view(5, 24, 128), qkv[:, 3072:6144].view(5, 24, 128)
    w = torch.ones(128, dtype=torch.bfloat16)
    cache = torch.rand(5, 128)
    pos = torch.arange(5)
    report: dict[str, Any] = {}
    for _ in range(2):
        reg.fused_inplace_qknorm_rope(q, k, w, w, cache, pos, is_neox=False, eps=1e-6)
    report["launches"] = launches[:]
    report["inputs"] = [describe(a) for a in (q, k, w, w, cache, pos)]
    report["dispatches_before_misaligned"] = rec.dispatches
    qkv2 = buf[8:].view(5, 3 * 24 * 128)  # 16 bytes on: aligned, same signature
    reg.fused_inplace_qknorm_rope(qkv2[:, :3072].view(5, 24, 128), qkv2[:, 3072:6144].view(5, 24, 128), w, w, cache,
                                  pos, is_neox=False, eps=1e-6)
    report["dispatches_after_aligned"] = rec.dispatches
    qkv3 = buf[1:-7].view(5, 3 * 24 * 128)  # 2 bytes past an aligned address, same signature
    reg.fused_inplace_qknorm_rope(qkv3[:, :3072].view(5, 24, 128), qkv3[:, 3072:6144].view(5, 24, 128), w, w, cache,
                                  pos, is_neox=False, eps=1e-6)
    report["dispatches_after_misaligned"] = rec.dispatches
    print(json.dumps(report))


def test_kept_launch_repeats_tritons_dispatch_exactly() -> None:
    from kda_lab.interpret.offline_launch import child_report

    report = child_report(__file__)
    first, second = report["launches"][:2]
    assert first["args"][:6] == report["inputs"]
    same = ("grid", "stream", "function", "packed")
    assert {k: first[k] for k in same} == {k: second[k] for k in same}
    # Triton's hook chains are empty: the kept launch hands the launcher None for them and no launch metadata
    assert first["hooks"] == ["HookChain", "HookChain"] and second["hooks"] == ["NoneType", "NoneType"]
    assert first["meta"] and not second["meta"]
    assert first["args"] == second["args"]
    assert report["dispatches_before_misaligned"] == 1  # the second call was the kept launch
    assert report["dispatches_after_aligned"] == 1  # other aligned pointers, same signature: kept launch
    assert report["dispatches_after_misaligned"] == 2  # a misaligned q goes through Triton's dispatch again


if __name__ == "__main__" and sys.argv[1:] == ["--child"]:
    _child()
