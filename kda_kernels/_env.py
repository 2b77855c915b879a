"""Environment switches, parsed without importing torch (``import kda_kernels`` must stay light)."""

from __future__ import annotations

import os

from kda_kernels.registry import ARCH_CAPABILITY

FORCE_ENV = "KDA_FORCE_ARCH"
DISABLE_ENV = "KDA_KERNELS_DISABLE"
FORCE_BASELINE = ("baseline", "sglang", "none", "off")


def forced_arch(value: str | None = None) -> str | None:
    """Normalized ``KDA_FORCE_ARCH``: None (dispatch by device), an arch name, or "baseline"."""
    raw = (os.environ.get(FORCE_ENV, "") if value is None else value).strip().lower()
    if not raw:
        return None
    if raw in FORCE_BASELINE:
        return "baseline"
    if raw in ARCH_CAPABILITY:
        return raw
    raise ValueError(f"{FORCE_ENV}={raw!r}: expected one of {', '.join((*ARCH_CAPABILITY, 'baseline'))}")


def disabled() -> bool:
    return os.environ.get(DISABLE_ENV, "").strip() not in ("", "0")
