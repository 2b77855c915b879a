"""The kept launch (kda_kernels.launch_cache) hands Triton's C launcher exactly what Triton's own dispatch hands it.

Runs on a CPU host: a child process without the interpreter compiles the real kernel for sm_90a offline, with
Triton's driver swapped for a stand-in that records launches (``kda_lab.interpret.offline_launch``). Each public function
is called twice per signature: the first call goes through ``kernel[grid]`` (Triton's dispatch), the second
through the kept launch; the recorded grid, stream, function, packed metadata and arguments must agree (a
pointer as the tensor there, as its ``data_ptr()`` here), with the second call's fresh outputs in the output
slots. With Triton's launch hook chains empty the kept launch passes None for them (the launcher then skips
calling them); with a hook registered it passes the chains and the launch metadata. A misaligned operand (the
kept binary assumes 16-byte-aligned pointers) and a changed signature go through Triton's dispatch again.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

TASK_DIR = Path(__file__).resolve().parents[1]


def _child() -> None:
    import torch

    from kda_lab.interpret.offline_launch import offline_candidate

    rec, reg = offline_candidate(TASK_DIR)
    launches = rec.launches
    bf, f32 = torch.bfloat16, torch.float32
    d = 1024
    x = torch.randn(1, 6, d, dtype=bf)
    mod = torch.randn(1, 1, 6 * d, dtype=f32)
    tok = torch.randn(1, 6, d, dtype=f32)
    cases = {
        "nss": (reg.fused_norm_scale_shift, (x, None, None, mod[..., d:2 * d], mod[..., :d], "layer", 1e-6)),
        "nss_affine_scalar": (reg.fused_norm_scale_shift,
                              (x, torch.randn(d), torch.randn(d), torch.randn(1, dtype=bf), torch.randn(1, dtype=bf),
                               "layer", 1e-6)),
        "srnss": (reg.fused_scale_residual_norm_scale_shift,
                  (torch.randn(1, 6, d, dtype=bf), x, tok, torch.randn(d), torch.randn(d), mod[..., d:2 * d],
                   mod[..., :d], "layer", 1e-6)),
        "srnss_nogate_rms": (reg.fused_scale_residual_norm_scale_shift,
                             (torch.randn(1, 6, d, dtype=bf), x, None, torch.randn(d, dtype=bf), None,
                              torch.randn(d, dtype=bf), torch.randn(1, d, dtype=bf), "rms", 1e-6)),
    }
    report: dict[str, Any] = {}
    for name, (fn, args) in cases.items():
        start = len(launches)
        outs = [fn(*args), fn(*args)]
        flat = [[o.data_ptr()] if isinstance(o, torch.Tensor) else [t.data_ptr() for t in o] for o in outs]
        report[name] = {"launches": launches[start:], "outs": flat}
    report["dispatches_before"] = rec.dispatches
    buf = torch.randn(2 + 6 * d, dtype=bf)
    xm = buf[1:-1].view(1, 6, d)  # 2 bytes past an aligned address, same signature as the nss case
    reg.fused_norm_scale_shift(xm, None, None, mod[..., d:2 * d], mod[..., :d], "layer", 1e-6)
    report["dispatches_after_misaligned"] = rec.dispatches
    reg.fused_norm_scale_shift(x, None, None, mod[..., d:2 * d], mod[..., :d], "layer", 1e-5)  # another eps
    report["dispatches_after_new_eps"] = rec.dispatches
    from triton import knobs

    seen = []
    knobs.runtime.launch_enter_hook.add(seen.append)
    start = len(launches)
    reg.fused_norm_scale_shift(*cases["nss"][1])  # kept, with a hook registered
    knobs.runtime.launch_enter_hook.remove(seen.append)
    report["hooked"] = launches[start:]
    report["dispatches_after_hooked"] = rec.dispatches
    print(json.dumps(report))


def test_kept_launch_repeats_tritons_dispatch_exactly() -> None:
    from kda_lab.interpret.offline_launch import assert_kept_repeat, child_report

    report = child_report(__file__)
    for name in ("nss", "nss_affine_scalar", "srnss", "srnss_nogate_rms"):
        first, second = report[name]["launches"]
        outs1, outs2 = report[name]["outs"]
        n_out = len(outs1)
        assert first["args"][:n_out] == [repr(p) for p in outs1], name  # y (and residual_out) in their slots
        assert second["args"][:n_out] == [repr(p) for p in outs2], name
        assert_kept_repeat(first, second, [0, 1], name)  # output slots (nss: y twice, srnss: y and residual_out)
    # four dispatches for eight calls (the second call of each signature is the kept launch), then one more for
    # the misaligned x and one for the new eps
    assert report["dispatches_before"] == 4
    assert report["dispatches_after_misaligned"] == 5
    assert report["dispatches_after_new_eps"] == 6
    (hooked,) = report["hooked"]
    assert report["dispatches_after_hooked"] == 6  # still the kept launch ...
    assert hooked["hooks"] == ["HookChain", "HookChain"] and hooked["meta"]  # ... handing the hooks over
    assert hooked["args"][2:] == report["nss"]["launches"][0]["args"][2:]


if __name__ == "__main__" and sys.argv[1:] == ["--child"]:
    _child()
