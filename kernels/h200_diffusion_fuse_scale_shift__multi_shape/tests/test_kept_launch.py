"""The MulAdd kept launch (kda_kernels.launch_cache) hands Triton's C launcher exactly what Triton's own dispatch
hands it.

Runs on a CPU host: a child process without the interpreter compiles the real kernel for sm_90a offline, with
Triton's driver swapped for a stand-in that records launches (``kda_lab.interpret.offline_launch``). Each layout
is called twice: the first call goes through ``kernel[grid]``, the second through the kept launch; grid, stream,
function, packed metadata and every argument must agree, except the fresh ``y`` in its slot. A misaligned x, a
new ``scale_constant`` and a new shape go through Triton's dispatch again; a registered launch hook gets the
hook chains and the launch metadata.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

TASK_DIR = Path(__file__).resolve().parents[1]
Y_SLOT = 3  # _muladd_kernel(x_ptr, shift_ptr, scale_ptr, y_ptr, ...)


def _child() -> None:
    import torch

    from kda_lab.interpret.offline_launch import record_launches
    from kda_lab.task import load_task
    from kda_lab.task.schema import load_candidate

    rec = record_launches()
    launches = rec.launches
    reg = load_candidate(load_task(TASK_DIR))
    reg.runs_here = lambda *t: True
    reg.KEEP_ON_CPU = True
    torch.set_grad_enabled(False)
    bf, f32 = torch.bfloat16, torch.float32
    c = 3072
    x = torch.randn(1, 19, c, dtype=bf)
    chunk = torch.randn(1, 19, 6, c, dtype=f32)[:, :, 2]  # Wan's per-token fp32 scale, a strided chunk
    cases = {
        "broadcast_scale": (x, torch.randn(1, 1, c, dtype=bf), torch.randn(1, 19, c, dtype=bf), 1.0),
        "bc_scale": (torch.randn(2, 5, 1000, dtype=bf), torch.randn(2, 1000, dtype=bf),
                     torch.randn(2, 5, 1000, dtype=bf), 1.0),
        "fp32_chunk_scale": (x, chunk, torch.randn(1, 19, c, dtype=bf), 0.0),
        "scalar_scale": (x, torch.randn((), dtype=bf), torch.randn(1, 1, c, dtype=bf), 1.0),
    }
    report: dict[str, Any] = {}
    for name, args in cases.items():
        start = len(launches)
        outs = [reg.fuse_scale_shift_kernel(*args), reg.fuse_scale_shift_kernel(*args)]
        report[name] = {"launches": launches[start:], "outs": [o.data_ptr() for o in outs]}
    report["dispatches_before"] = rec.dispatches
    base = cases["broadcast_scale"]
    buf = torch.randn(2 + x.numel(), dtype=bf)
    xm = buf[1:-1].view(x.shape)  # 2 bytes past an aligned address, same signature
    reg.fuse_scale_shift_kernel(xm, *base[1:])
    report["dispatches_after_misaligned"] = rec.dispatches
    reg.fuse_scale_shift_kernel(*base[:3], 0.0)
    report["dispatches_after_new_constant"] = rec.dispatches
    reg.fuse_scale_shift_kernel(torch.randn(1, 20, c, dtype=bf), base[1], torch.randn(1, 20, c, dtype=bf), 1.0)
    report["dispatches_after_new_shape"] = rec.dispatches
    from triton import knobs

    seen: list[Any] = []
    knobs.runtime.launch_enter_hook.add(seen.append)
    start = len(launches)
    reg.fuse_scale_shift_kernel(*base)  # kept, with a hook registered
    knobs.runtime.launch_enter_hook.remove(seen.append)
    report["hooked"] = launches[start:]
    report["dispatches_after_hooked"] = rec.dispatches
    print(json.dumps(report))


def test_kept_launch_repeats_tritons_dispatch_exactly() -> None:
    from kda_lab.interpret.offline_launch import child_report

    report = child_report(__file__)
    names = ("broadcast_scale", "bc_scale", "fp32_chunk_scale", "scalar_scale")
    for name in names:
        first, second = report[name]["launches"]
        y1, y2 = report[name]["outs"]
        assert first["args"][Y_SLOT] == repr(y1) and second["args"][Y_SLOT] == repr(y2), name
        same = ("grid", "stream", "function", "packed")
        assert {k: first[k] for k in same} == {k: second[k] for k in same}, name
        assert first["hooks"] == ["HookChain", "HookChain"] and second["hooks"] == ["NoneType", "NoneType"], name
        assert not second["meta"], name
        assert first["args"][:Y_SLOT] == second["args"][:Y_SLOT], name
        assert first["args"][Y_SLOT + 1:] == second["args"][Y_SLOT + 1:], name
    # one dispatch per layout (its second call is the kept launch), then one each for the misaligned x, the new
    # scale_constant and the new shape
    assert report["dispatches_before"] == len(names)
    assert report["dispatches_after_misaligned"] == len(names) + 1
    assert report["dispatches_after_new_constant"] == len(names) + 2
    assert report["dispatches_after_new_shape"] == len(names) + 3
    (hooked,) = report["hooked"]
    assert report["dispatches_after_hooked"] == len(names) + 3  # still the kept launch ...
    assert hooked["hooks"] == ["HookChain", "HookChain"] and hooked["meta"]  # ... handing the hooks over
    first = report["broadcast_scale"]["launches"][0]
    assert hooked["args"][:Y_SLOT] == first["args"][:Y_SLOT] and hooked["args"][Y_SLOT + 1:] == first["args"][Y_SLOT + 1:]


if __name__ == "__main__" and sys.argv[1:] == ["--child"]:
    _child()
