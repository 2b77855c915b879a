"""Shared fixtures for the lab's CPU tests."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
FSS = "h200_diffusion_fuse_scale_shift__multi_shape"


@pytest.fixture
def lab_copy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A temporary lab root holding a copy of the fuse_scale_shift task (KDA_ROOT points at it)."""
    root = tmp_path / "lab"
    (root / "kernels").mkdir(parents=True)
    (root / "kda_lab").mkdir()  # marks the root for kda_lab.paths
    shutil.copytree(REPO / "kernels" / FSS, root / "kernels" / FSS,
                    ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setenv("KDA_ROOT", str(root))
    return root / "kernels" / FSS
