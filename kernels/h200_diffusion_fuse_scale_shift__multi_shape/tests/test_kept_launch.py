"""The MulAdd and select01 kept launches (kda_kernels.launch_cache) hands Triton's C launcher exactly what Triton's own dispatch
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

    from kda_lab.interpret.offline_launch import offline_candidate

    rec, reg = offline_candidate(TASK_DIR)
    launches = rec.launches
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
    # the select01 pair: plain and residual, with and without weight/bias ([1, C] modulation, int32 index)
    mods = tuple(torch.randn(1, c, dtype=bf) for _ in range(6))
    idx = torch.randint(0, 2, (1, 19), dtype=torch.int32)
    s01 = {
        "select01": (reg.fuse_layernorm_scale_shift_gate_select01_kernel, (x, None, None, *mods, idx, 1e-6)),
        "select01_affine": (reg.fuse_layernorm_scale_shift_gate_select01_kernel,
                            (x, torch.randn(c, dtype=bf), torch.randn(c, dtype=bf), *mods, idx, 1e-6)),
        "res_select01": (reg.fuse_residual_layernorm_scale_shift_gate_select01_kernel,
                         (x, torch.randn(1, 19, c, dtype=bf), torch.randn(1, 19, c, dtype=bf), None, None, *mods,
                          idx, 1e-6)),
    }
    for name, (fn, args) in s01.items():
        start = len(launches)
        outs = [fn(*args), fn(*args)]
        report[name] = {"launches": launches[start:], "outs": [[o.data_ptr() for o in out] for out in outs]}
    before = rec.dispatches
    strided = torch.randn(c, 2, dtype=bf)[:, 0][None]  # C stride 2: the checked path hands the kernel a copy
    fn, args = s01["select01"]
    fn(x, None, None, strided, *mods[1:], idx, 1e-6)
    fn(x, None, None, strided, *mods[1:], idx, 1e-6)
    report["select01_copies_dispatched"] = rec.dispatches - before
    fn(*args[:-1], 1e-5)  # a new eps
    report["select01_new_eps_dispatched"] = rec.dispatches - before - report["select01_copies_dispatched"]
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
    from kda_lab.interpret.offline_launch import assert_kept_repeat, child_report

    report = child_report(__file__)
    names = ("broadcast_scale", "bc_scale", "fp32_chunk_scale", "scalar_scale")
    for name in names:
        first, second = report[name]["launches"]
        y1, y2 = report[name]["outs"]
        assert first["args"][Y_SLOT] == repr(y1) and second["args"][Y_SLOT] == repr(y2), name
        assert_kept_repeat(first, second, [Y_SLOT], name)
    for name, n_out in (("select01", 2), ("select01_affine", 2), ("res_select01", 3)):
        first, second = report[name]["launches"]
        outs1, outs2 = report[name]["outs"]
        slots = [0, 2] if n_out == 2 else [0, 1, 2]  # y, (residual_out,) gate_out; the plain form passes y twice
        assert [first["args"][i] for i in slots] == [repr(p) for p in outs1], name
        assert [second["args"][i] for i in slots] == [repr(p) for p in outs2], name
        assert_kept_repeat(first, second, [0, 1, 2], name)
    # a strided modulation vector (the kernel got a dense copy) is dispatched every call; a new eps once
    assert report["select01_copies_dispatched"] == 2
    assert report["select01_new_eps_dispatched"] == 1
    n_first = len(names) + 3 + 2 + 1  # one dispatch per layout and per select01 case, then the two above
    # then one each for the misaligned x, the new scale_constant and the new shape
    assert report["dispatches_before"] == n_first
    assert report["dispatches_after_misaligned"] == n_first + 1
    assert report["dispatches_after_new_constant"] == n_first + 2
    assert report["dispatches_after_new_shape"] == n_first + 3
    (hooked,) = report["hooked"]
    assert report["dispatches_after_hooked"] == n_first + 3  # still the kept launch ...
    assert hooked["hooks"] == ["HookChain", "HookChain"] and hooked["meta"]  # ... handing the hooks over
    first = report["broadcast_scale"]["launches"][0]
    assert hooked["args"][:Y_SLOT] == first["args"][:Y_SLOT] and hooked["args"][Y_SLOT + 1:] == first["args"][Y_SLOT + 1:]


if __name__ == "__main__" and sys.argv[1:] == ["--child"]:
    _child()
