"""Pure statistics over timing samples (testable without a GPU)."""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass


def geomean(values: list[float]) -> float:
    """Equal-weight geometric mean of the positive values (nan when there are none)."""
    vals = [v for v in values if v is not None and v > 0]
    if not vals:
        return float("nan")
    return math.exp(sum(math.log(v) for v in vals) / len(vals))


def percentile(samples: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile, q in [0, 100]."""
    if not samples:
        raise ValueError("no samples")
    if not 0 <= q <= 100:
        raise ValueError(f"q={q} outside [0, 100]")
    xs = sorted(samples)
    pos = (len(xs) - 1) * q / 100
    lo, hi = math.floor(pos), math.ceil(pos)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


@dataclass(frozen=True)
class Summary:
    median: float
    p10: float
    p90: float
    n: int

    @property
    def spread(self) -> float:
        """(p90 - p10) / median: relative width of the middle 80%."""
        return (self.p90 - self.p10) / self.median if self.median else float("nan")


def summarize(samples: Sequence[float]) -> Summary:
    return Summary(percentile(samples, 50), percentile(samples, 10), percentile(samples, 90), len(samples))


def interleaved_order(impls: Sequence[str], trials: int, seed: int) -> list[list[str]]:
    """Per trial, the impls in a seeded shuffled order (so drift and warm-up hit every side alike)."""
    rng = random.Random(seed)
    order = []
    for _ in range(trials):
        trial = list(impls)
        rng.shuffle(trial)
        order.append(trial)
    return order


def aa_spread(speedups: Sequence[float]) -> dict[str, float]:
    """For an A/A run (baseline vs itself): geomean and the largest per-row deviation from 1."""
    vals = [s for s in speedups if s and s > 0]
    if not vals:
        return {"geomean": float("nan"), "max_dev": float("nan"), "min": float("nan"), "max": float("nan")}
    return {"geomean": geomean(vals), "max_dev": max(abs(v - 1) for v in vals), "min": min(vals), "max": max(vals)}
