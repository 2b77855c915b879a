"""dev/pad_cuda/pad_stage_core.cuh on the CPU: pad_stage.cu's chunk plans, stage extents, per-thread cursors, both
vector paths and the head/tail scalars, built with g++ and run over every work item and thread of the block by
pad_stage_core_check.cpp against a reference pad; two deliberately wrong variants must be rejected (the check can
fail: one by a wrong value, one by a read outside what the chunk staged)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from kda_lab.testing import compile_host_cpp

HERE = Path(__file__).resolve().parent
CORE_DIR = HERE.parent / "dev" / "pad_cuda"


@pytest.fixture(scope="module")
def stage_checker(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return compile_host_cpp(HERE / "pad_stage_core_check.cpp", CORE_DIR, tmp_path_factory.mktemp("pad_stage_core") / "pad_stage_core_check")


def test_pad_stage_every_chunk_matches_the_reference_pad(stage_checker: Path) -> None:
    r = subprocess.run([str(stage_checker)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.startswith("ok: ") and int(r.stdout.split()[1]) > 19000


def test_pad_stage_fast_path_everywhere_is_rejected(stage_checker: Path) -> None:
    r = subprocess.run([str(stage_checker), "fast-only"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 1 and "mismatch" in r.stdout, r.stdout + r.stderr


def test_pad_stage_short_stage_is_rejected(stage_checker: Path) -> None:
    r = subprocess.run([str(stage_checker), "stage-short"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 1 and "out-of-bounds stage read" in r.stdout, r.stdout + r.stderr
