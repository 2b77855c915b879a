"""GPU: the promoted GroupNorm impl built ahead of time serves SGLang's calls in a process that cannot compile."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0),
                                 reason="needs a compute-capability (9,0) GPU (the h200 impl)")]


def test_build_then_serve_without_compiling(tmp_path):
    env = dict(os.environ, KDA_KERNELS_CACHE=str(tmp_path / "cache"),
               PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    p = subprocess.run([sys.executable, "-m", "kda_kernels", "build", "--family", "group_norm_silu"],
                       capture_output=True, text=True, env=env, cwd=REPO, timeout=900)
    assert p.returncode == 0 and "ok    group_norm_silu/h200" in p.stdout, p.stdout + p.stderr
    code = textwrap.dedent('''
    import json, warnings, torch
    import torch.utils.cpp_extension as cx
    def _refuse(*a, **k):
        raise AssertionError("compiled inside a serving process")
    cx.load = _refuse
    import kda_kernels
    from sglang.kernels.ops.diffusion.norm import group_norm_silu_triton as site
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        kda_kernels.install()
    from kda_kernels.diffusion.group_norm_silu._impls.h200 import register as impl
    x = torch.randn(1, 512, 3, 48, 40, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(512, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(512, device="cuda", dtype=torch.bfloat16)
    with torch.no_grad():
        y = site.triton_group_norm_silu(x, w, b, 32, 1e-6)
    ref = torch.nn.functional.silu(torch.nn.functional.group_norm(x.double(), 32, w.double(), b.double(), 1e-6))
    st = kda_kernels.status()["triton_group_norm_silu"]
    print(json.dumps({"kda": impl.EXTENSION.module is not None, "err": float((y.double() - ref).abs().max()),
                      "built": st["builds"]["h200"]["built"], "problems": st["problems"]}))
    ''')
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=REPO, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    r = json.loads(p.stdout.strip().splitlines()[-1])
    assert r["kda"] and r["built"] and not r["problems"], r
    assert r["err"] < 0.05, r  # bf16 output vs fp64 reference
    # an empty cache in a process serving on the H200: SGLang's kernel serves, and status() says why
    env["KDA_KERNELS_CACHE"] = str(tmp_path / "empty")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=REPO, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    r = json.loads(p.stdout.strip().splitlines()[-1])
    assert not r["kda"] and not r["built"] and r["err"] < 0.05, r
    assert any("not built on this machine" in x for x in r["problems"]), r
