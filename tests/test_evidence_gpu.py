"""On a CUDA GPU (marked ``gpu``): `kda check` / `kda bench` record the arch the GPU's *name* identifies, print
one NOT EVIDENCE line when that is not the task's arch, and write rows the exporter's gate accepts on an H200.

Run on the GPU box:  python3 -m pytest -m gpu tests/test_evidence_gpu.py -v
It works on a copy of the GroupNorm task (the real ledgers are not touched).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SLUG = "h200_diffusion_group_norm_silu__multi_shape"


def _gpu() -> tuple[str, tuple[int, int]] | None:
    try:
        import torch

        if torch.cuda.is_available():
            return torch.cuda.get_device_name(0), torch.cuda.get_device_capability(0)
    except Exception:  # noqa: BLE001
        pass
    return None


pytestmark = [pytest.mark.gpu, pytest.mark.skipif(_gpu() is None, reason="needs a CUDA GPU")]


def test_rows_carry_the_arch_the_gpu_name_identifies(tmp_path):
    from kda_lab import ledger
    from kda_lab.evidence import evidence_arch

    name, cc = _gpu()
    if cc != (9, 0):
        pytest.skip(f"{name} is not a (9, 0) GPU: h200 tasks refuse it")
    root = tmp_path / "lab"
    (root / "kernels").mkdir(parents=True)
    (root / "kda_lab").mkdir()
    shutil.copytree(REPO / "kernels" / SLUG, root / "kernels" / SLUG, ignore=shutil.ignore_patterns("__pycache__"))
    env = dict(os.environ, KDA_ROOT=str(root), KDA_GIT_COMMIT=os.environ.get("KDA_GIT_COMMIT", "gpu-test"))
    rows = ["hunyuanvideo_apply_1x512x5x32x32", "hunyuanvideo_triton_1x512x5x32x32"]
    for args in (["check", SLUG, "--rows", *rows, "--seeds", "1"],
                 ["bench", SLUG, "--rows", *rows, "--trials", "3", "--no-compile"]):
        p = subprocess.run([sys.executable, "-m", "kda_lab", *args], capture_output=True, text=True, cwd=REPO,
                           env=env, timeout=900)
        assert p.returncode in (0, 1), p.stderr[-3000:]
        expect = evidence_arch(name, cc)
        notices = [ln for ln in p.stdout.splitlines() if ln.startswith("NOT EVIDENCE")]
        assert len(notices) == (0 if expect == "h200" else 1), p.stdout[-3000:]
    task = root / "kernels" / SLUG
    assert ledger.validate_ledgers(task) == []
    bench = ledger.read_benchmark_rows(task)[-1]
    check = [r for r in ledger.read_solutions(task) if r["event"] == "check"][-1]
    assert bench["arch"] == check["arch"] == evidence_arch(name, cc)
    assert bench["gpu_name"] == check["gpu"] == name and bench["overlay"].startswith(("off", "on:"))
