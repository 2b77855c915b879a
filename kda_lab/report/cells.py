"""Table cells of the report: one way to print a ratio and a plain number, with "–" for a missing value."""

from __future__ import annotations


def times(v: float | None, digits: int = 3) -> str:
    """A ratio (speedup, geomean) as ``1.234×``."""
    return "–" if v is None else f"{v:.{digits}f}×"


def fixed(v: float | None, digits: int = 2) -> str:
    """A time or a bandwidth as a plain fixed-point number."""
    return "–" if v is None else f"{v:.{digits}f}"
