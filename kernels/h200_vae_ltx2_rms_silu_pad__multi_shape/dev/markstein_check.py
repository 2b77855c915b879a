"""Can the kernel's per-element x / rms (IEEE div.rn) become Markstein's division by a per-voxel reciprocal?

    r = RN(1 / rms)  (once per voxel),  q0 = RN(x * r),  e = fma(-q0, rms, x),  q = fma(e, r, q0)

Markstein's theorem makes q the correctly rounded x / rms when e is exact (no underflow). This checks it bit for
bit against RN(x / rms) on the CPU: fp32 arithmetic emulated exactly in float64 (products of two fp32 values are
exact there; a sum that float64 rounds is redone in fractions), over bf16 activations against random and
adversarial rms (significands of all ones, powers of two, 1 +- ulp, sqrt(eps)), every finite bf16 value against
six rms values, and random fp32 pairs. Results: docs/notes.md.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np


def rn32(x: np.ndarray) -> np.ndarray:
    return x.astype(np.float32)


def _rn32_exact(x: Fraction) -> np.float32:
    f = np.float32(float(x))
    cands = [np.nextafter(f, np.float32(-np.inf)), f, np.nextafter(f, np.float32(np.inf))]
    return min(cands, key=lambda c: (abs(Fraction(float(c)) - x), int(np.float32(c).view(np.uint32)) & 1))


def fma32(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """RN32(a * b + c), exactly, for fp32 arrays."""
    p = a.astype(np.float64) * b.astype(np.float64)
    c64 = c.astype(np.float64)
    s = p + c64
    bb = s - p
    err = (p - (s - bb)) + (c64 - bb)  # TwoSum: 0 when float64 added exactly
    out = rn32(s)
    for i in np.nonzero(err != 0)[0]:
        out[i] = _rn32_exact(Fraction(float(a[i])) * Fraction(float(b[i])) + Fraction(float(c[i])))
    return out


def mismatches(x: np.ndarray, rms: np.ndarray) -> tuple[int, int, int]:
    """(pairs checked, mismatches, mismatches whose quotient is subnormal), over the pairs the kernel can meet
    (rms >= sqrt(eps) = 1e-4, a finite quotient well inside the fp32 range)."""
    x, rms = x.astype(np.float32), rms.astype(np.float32)
    with np.errstate(all="ignore"):
        keep = (np.abs(x.astype(np.float64) / rms) < 2.0 ** 125) & np.isfinite(x) & (rms >= 1e-4)
    x, rms = x[keep], rms[keep]
    ref = rn32(x.astype(np.float64) / rms.astype(np.float64))  # division: float64 then fp32 rounds correctly
    r = rn32(1.0 / rms.astype(np.float64))
    q0 = rn32(x.astype(np.float64) * r)
    q = fma32(e := fma32(-q0, rms, x), r, q0)
    del e
    q = (q.view(np.uint32) & 0x7FFFFFFF | x.view(np.uint32) & 0x80000000).view(np.float32)  # x's sign (+-0)
    bad = q.view(np.uint32) != ref.view(np.uint32)
    return x.size, int(bad.sum()), int((bad & (np.abs(ref) < 2.0 ** -126)).sum())


def main() -> None:
    rng = np.random.default_rng(0)
    n = 2_000_000
    bf16 = (rng.standard_normal(n) * np.exp(rng.uniform(-20, 20, n))).astype(np.float32)
    bf16 = (bf16.view(np.uint32) & 0xFFFF0000).view(np.float32)
    cases = {"bf16 x, random rms": (bf16, np.sqrt(np.exp(rng.uniform(-18, 60, n)) + 1e-8))}
    sig = np.array([0x3FFFFFFF, 0x3F800000, 0x3F800001, 0x3F7FFFFF, 0x3FB504F3, 0x38D1B717, 0x3F7FFFFE],
                   dtype=np.uint32).view(np.float32)
    adv = np.repeat(sig, n // len(sig)) * np.exp2(rng.integers(-10, 30, n // len(sig) * len(sig)))
    cases["bf16 x, adversarial rms"] = (bf16[: adv.size], adv)
    every = (np.arange(65536, dtype=np.uint32) << 16).view(np.float32)
    every = every[np.isfinite(every)]
    for v in (1e-4, 0.37, 1.0, 1.9999999, 3.0, 1234.5):
        cases[f"every finite bf16 x / {v}"] = (every, np.full(every.shape, v))
    cases["fp32 x, fp32 rms"] = ((rng.standard_normal(n) * np.exp(rng.uniform(-30, 30, n))),
                                 np.abs(rng.standard_normal(n) * np.exp(rng.uniform(-10, 30, n))) + 1e-4)
    for name, (x, rms) in cases.items():
        checked, bad, sub = mismatches(np.asarray(x), np.asarray(rms))
        print(f"{name:30s} {checked:8d} pairs, {bad:4d} differ from RN(x / rms) ({sub} with a subnormal quotient)")


if __name__ == "__main__":
    main()
