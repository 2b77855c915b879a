"""Where things live. ``KDA_ROOT`` overrides the repository root (tests use temporary copies)."""

from __future__ import annotations

import os
from pathlib import Path

PACKAGE_ROOT = Path(__file__).resolve().parent.parent


def repo_root() -> Path:
    env = os.environ.get("KDA_ROOT")
    if env:
        return Path(env).resolve()
    cwd = Path.cwd().resolve()
    for p in (cwd, *cwd.parents):
        if (p / "kernels").is_dir() and (p / "kda_lab").is_dir():
            return p
    return PACKAGE_ROOT


def kernels_dir() -> Path:
    return repo_root() / "kernels"
