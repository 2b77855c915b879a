"""dev/pad_cuda/pad_vec_core.cuh on the CPU: the per-vector logic of the uniform CUDA pad (clamped window shifts,
row straddles, multiply-high row splits, in-bounds loads) built with g++ and checked against a reference pad by
pad_vec_core_check.cpp; the same program with the next-row merge left out must fail (the check can fail)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from kda_lab.testing import compile_host_cpp

HERE = Path(__file__).resolve().parent
CORE_DIR = HERE.parent / "dev" / "pad_cuda"


@pytest.fixture(scope="module")
def checker(tmp_path_factory) -> Path:
    return compile_host_cpp(HERE / "pad_vec_core_check.cpp", CORE_DIR, tmp_path_factory.mktemp("pad_vec_core") / "pad_vec_core_check")


def test_every_vector_matches_the_reference_pad(checker: Path) -> None:
    r = subprocess.run([str(checker)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.startswith("ok: ") and int(r.stdout.split()[1]) > 5000


def test_a_pad_without_the_next_row_merge_is_rejected(checker: Path) -> None:
    r = subprocess.run([str(checker), "no-merge"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 1 and "mismatch" in r.stdout, r.stdout + r.stderr
