"""CPU model of c004's path D (gns_reg_kernel + plan_reg), checked against the fp64 oracle.

Models, in numpy float32 (one IEEE rounding per operation, as the kernel's fp32 ops): the planner (cluster
size CS, CTA size NT, vectors per thread U), the vector ownership (CTA rank r, thread t, slot k -> vector
r*slice + t + k*NT, clamped loads, the valid prefix nvalid), the channel of each vector through the kernel's
FastDiv (Granlund-Montgomery, checked against exact division), the per-thread two-pass stats (four
accumulators, shifted by the group's first element K), warp_merge_down, the cross-CTA merge (lane-sequential
in index order, then the canonical xor butterfly; every lane must hold the same bits) and the apply
(t = fma(x - K, rstd*w, b - mean*rstd*w), silu, one rounding). Approximations of the model: __fdividef and
__expf are IEEE float32 divide/exp here, fmaf is float64 product + add rounded once to float32.

Checks per case: every element written exactly once, identical (mean, rstd) bits in every lane of every CTA
of a group, outputs within the task tolerance of the fp64 two-pass oracle (kda_lab/families/group_norm_silu).
Mutants (each must be REJECTED, or the checker itself is broken): E[x^2]-mean^2 variance on the fp32 offset
row, a channel index one vector off, a dropped last vector (nvalid - 1), a butterfly without the canonical
operand order (lanes may disagree), weights of the wrong group.

    .venv/bin/python kernels/h200_diffusion_group_norm_silu__multi_shape/dev/reg_model.py [--quick]

Exit status 0 only when every real case passes and every mutant is rejected.
"""

from __future__ import annotations

import argparse
import math
import sys

import numpy as np

F32 = np.float32
SMS = 132
REG_MAX_THREADS = 256
REG_MAX_U = 8
REG_MIN_SLICE_BYTES = 4 * 1024
ON_CHIP_MAX_GROUP_BYTES = 240 * 1024
REG_AUTO_MAX_GROUP_BYTES = 128 * 1024  # gns_kernels.cu kRegAutoMaxGroupBytes
REG_AUTO_GROW_CS = 4  # gns_kernels.cu kRegAutoGrowCs
TOL = {"float16": (2e-3, 2e-3), "bfloat16": (1.6e-2, 8e-3), "float32": (1e-4, 1e-4)}


def cdiv(a: int, b: int) -> int:
    return (a + b - 1) // b


def pow2ceil(v: int) -> int:
    p = 1
    while p < v:
        p <<= 1
    return p


def make_fastdiv(d: int) -> tuple[int, int]:
    s = 0
    while (1 << s) < d:
        s += 1
    m = ((1 << 32) * ((1 << s) - d)) // d + 1
    return m & 0xFFFFFFFF, s


def fdiv(n: np.ndarray, fd: tuple[int, int]) -> np.ndarray:
    m, s = fd
    n = n.astype(np.uint64)
    hi = (n * np.uint64(m)) >> np.uint64(32)
    tot = hi + n
    assert int(tot.max(initial=0)) < 2**32, "FastDiv sum overflows uint32"
    return (tot >> np.uint64(s)).astype(np.int64)


def plan_reg(dvec: int, total: int, uniform: bool, force_cs: int = 0, force_nt: int = 0):
    """Mirror of gns_kernels.cu plan_reg (cluster-fit query assumed true for CS <= 8)."""
    if not uniform or dvec <= 0:
        return None
    cap = REG_MAX_THREADS * REG_MAX_U
    if force_cs > 0:
        if force_cs not in (1, 2, 4, 8, 16) or cdiv(dvec, force_cs) > cap:
            return None
        cs = force_cs
    else:
        cs = next((c for c in (1, 2, 4, 8) if cdiv(dvec, c) <= cap), 0)
        if cs == 0:
            return None
        while cs < REG_AUTO_GROW_CS and total * 2 * cs <= 2 * SMS and cdiv(dvec, 2 * cs) * 16 >= REG_MIN_SLICE_BYTES:
            cs *= 2
    slice_vec = cdiv(dvec, cs)
    if force_nt > 0:
        if force_nt % 32 or force_nt > REG_MAX_THREADS:
            return None
        nt = force_nt
    else:
        nt = REG_MAX_THREADS if slice_vec >= REG_MAX_THREADS else max(32, pow2ceil(slice_vec))
    u = pow2ceil(cdiv(slice_vec, nt))
    if u > REG_MAX_U:
        return None
    return dict(cs=cs, nt=nt, u=u, slice=slice_vec)


def fma(a, b, c):
    return (np.asarray(a, np.float64) * np.asarray(b, np.float64) + np.asarray(c, np.float64)).astype(F32)


def stat_merge(a, b):
    """Chan merge on (n, mean, m2) float32 arrays (broadcasting); exact for empty operands."""
    an, am, aq = a
    bn, bm, bq = b
    n = (an + bn).astype(F32)
    with np.errstate(divide="ignore", invalid="ignore"):
        fb = np.where(n > 0, (bn / np.where(n > 0, n, F32(1))).astype(F32), F32(0)).astype(F32)
    d = (bm - am).astype(F32)
    mean = fma(d, fb, am)
    m2 = ((aq + bq).astype(F32) + (((d * d).astype(F32) * an).astype(F32) * fb).astype(F32)).astype(F32)
    return n, mean, m2


def warp_merge_down(st):
    """st: tuple of arrays [..., 32]; returns lane-0 result [...] (shfl_down tree)."""
    n, m, q = (a.copy() for a in st)
    for off in (16, 8, 4, 2, 1):
        idx = np.arange(32)
        src = np.where(idx + off < 32, idx + off, idx)  # out-of-range shfl_down returns own value
        o = (n[..., src], m[..., src], q[..., src])
        n, m, q = stat_merge((n, m, q), o)
    return n[..., 0], m[..., 0], q[..., 0]


def warp_merge_all(st, canonical=True):
    """Xor butterfly over the last axis (32 lanes); canonical: the lane whose bit is clear is the left operand."""
    n, m, q = (a.copy() for a in st)
    lane = np.arange(32)
    for off in (1, 2, 4, 8, 16):
        p = lane ^ off
        o = (n[..., p], m[..., p], q[..., p])
        if canonical:
            hi = (lane & off) != 0
            left = tuple(np.where(hi, oo, ss) for oo, ss in zip(o, (n, m, q), strict=True))
            right = tuple(np.where(hi, ss, oo) for oo, ss in zip(o, (n, m, q), strict=True))
            n, m, q = stat_merge(left, right)
        else:
            n, m, q = stat_merge((n, m, q), o)
    return n, m, q


def to_dtype(v: np.ndarray, dtype: str) -> np.ndarray:
    if dtype == "float16":
        return v.astype(np.float16).astype(np.float64)
    if dtype == "bfloat16":
        # round-to-nearest-even to bf16
        u = v.astype(F32).view(np.uint32).astype(np.uint64)
        r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) << 16
        return r.astype(np.uint32).view(F32).astype(np.float64)
    return v.astype(F32).astype(np.float64)


def model_forward(x: np.ndarray, w: np.ndarray, b: np.ndarray, G: int, eps: float, dtype: str, mutant: str = "",
                  force_cs: int = 0, force_nt: int = 0):
    """x: [N, C, *sp] float64 holding dtype-representable values. Returns (y float64, plan, info)."""
    N, C = x.shape[:2]
    HW = int(np.prod(x.shape[2:])) if x.ndim > 2 else 1
    Cg = C // G
    D = Cg * HW
    es = {"float16": 2, "bfloat16": 2, "float32": 4}[dtype]
    VEC = 16 // es
    total = N * G
    dvec = D // VEC
    plan = plan_reg(dvec, total, HW % VEC == 0, force_cs, force_nt)
    if plan is None:
        return None, None, "not eligible"
    cs, nt, U, sl = plan["cs"], plan["nt"], plan["u"], plan["slice"]
    fd = make_fastdiv(HW)
    xf = x.reshape(total, D).astype(F32)
    wf, bf = w.astype(F32), b.astype(F32)
    y = np.full((total, D), np.nan)
    written = np.zeros((total, D), np.int32)
    nwarps = nt // 32
    eps32 = F32(eps)
    for gi in range(total):
        g_off = (gi % G) * Cg
        if mutant == "wrong_group_weights":
            g_off = ((gi + 1) % G) * Cg
        K = xf[gi, 0]
        parts = []  # per CTA: (n, mean, m2) arrays [nwarps]
        sumsq_threads = []  # naive_variance mutant only
        cta_data = []
        for rank in range(cs):
            v0 = rank * sl
            rem = dvec - v0
            nv = 0 if rem <= 0 else min(rem, sl)
            tid = np.arange(nt)[:, None]
            k = np.arange(U)[None, :]
            v = np.minimum(v0 + tid + k * nt, dvec - 1)  # clamped loads [nt, U]
            e0 = v * VEC
            if mutant == "channel_off_by_one_vector":
                e0 = np.minimum(e0 + VEC, D - 1)
            ch = g_off + fdiv(e0, fd)
            assert np.array_equal(fdiv(v * VEC, fd), (v * VEC) // HW), "FastDiv disagrees with exact division"
            vals = xf[gi][(v[..., None] * VEC + np.arange(VEC))]  # [nt, U, VEC]
            nvalid = np.where(np.arange(nt) < nv, np.minimum(U, (nv - 1 - np.arange(nt)) // nt + 1), 0)
            if mutant == "drop_last_vector":
                nvalid = np.maximum(nvalid - (np.arange(nt) == 0), 0)
            valid = np.arange(U)[None, :] < nvalid[:, None]  # [nt, U]
            dsh = (vals - K).astype(F32)  # x - K, exact per element in fp32
            acc = np.zeros((nt, 4), F32)
            for kk in range(U):
                for i in range(0, VEC, 4):
                    for j in range(4):
                        acc[:, j] = np.where(valid[:, kk], (acc[:, j] + dsh[:, kk, i + j]).astype(F32), acc[:, j])
            n_t = (nvalid * VEC).astype(F32)
            s_t = ((acc[:, 0] + acc[:, 1]).astype(F32) + (acc[:, 2] + acc[:, 3]).astype(F32)).astype(F32)
            with np.errstate(divide="ignore", invalid="ignore"):
                m_t = np.where(nvalid > 0, (s_t / np.where(nvalid > 0, n_t, F32(1))).astype(F32), F32(0)).astype(F32)
            if mutant == "naive_variance":  # per-thread sum of raw squares, finished as E[x^2]-mean^2 below
                raw = vals.astype(F32)
                q_t = np.zeros(nt, F32)
                for kk in range(U):
                    for i in range(VEC):
                        q_t = np.where(valid[:, kk], (q_t + (raw[:, kk, i] * raw[:, kk, i]).astype(F32)).astype(F32), q_t)
                sumsq_threads.append(q_t)
            if True:
                qa = np.zeros((nt, 4), F32)
                for kk in range(U):
                    for i in range(0, VEC, 4):
                        for j in range(4):
                            d = (dsh[:, kk, i + j] - m_t).astype(F32)
                            qa[:, j] = np.where(valid[:, kk], fma(d, d, qa[:, j]), qa[:, j])
                q_t = ((qa[:, 0] + qa[:, 1]).astype(F32) + (qa[:, 2] + qa[:, 3]).astype(F32)).astype(F32)
            st = tuple(a.reshape(nwarps, 32) for a in (n_t, m_t, q_t))
            parts.append(warp_merge_down(st))
            cta_data.append((v0, nt, nvalid, dsh, ch))
        # one barrier; every warp of every CTA merges the CS*nwarps partials
        E = cs * nwarps
        pn = np.concatenate([p[0] for p in parts]).astype(F32)
        pm = np.concatenate([p[1] for p in parts]).astype(F32)
        pq = np.concatenate([p[2] for p in parts]).astype(F32)
        lanes = (np.zeros(32, F32), np.zeros(32, F32), np.zeros(32, F32))
        for e0_ in range(0, E, 32):
            idx = np.arange(32) + e0_
            ok = idx < E
            ent = tuple(np.where(ok, arr[np.minimum(idx, E - 1)], F32(0)).astype(F32) for arr in (pn, pm, pq))
            lanes = stat_merge(lanes, ent)
        an, am, aq = warp_merge_all(lanes, canonical=(mutant != "noncanonical_butterfly"))
        same = (np.unique(an.view(np.uint32)).size == 1 and np.unique(am.view(np.uint32)).size == 1
                and np.unique(aq.view(np.uint32)).size == 1)
        if not same:
            return None, plan, f"group {gi}: lanes disagree on (n, mean, m2) bits"
        mean = am[0]
        var = max(F32(aq[0] / an[0]), F32(0))
        if mutant == "naive_variance":  # SGLang's single-pass fp32 form: E[x^2] - mean^2
            mraw = F32(mean + K)
            var = max(F32(F32(np.concatenate(sumsq_threads).sum(dtype=F32) / an[0]) - F32(mraw * mraw)), F32(0))
        rstd = F32(1.0 / math.sqrt(float(F32(var + eps32))))  # rsqrtf: ~2 ulp on the GPU
        for v0, nt_, nvalid, dsh, ch in cta_data:
            for kk in range(U):
                rows = np.nonzero(kk < nvalid)[0]
                if rows.size == 0:
                    continue
                vv = v0 + rows + kk * nt_
                a = (rstd * wf[ch[rows, kk]]).astype(F32)
                c = fma(-mean, a, bf[ch[rows, kk]])
                t = fma(dsh[rows, kk, :], a[:, None], c[:, None])
                with np.errstate(over="ignore"):
                    o = (t / (F32(1) + np.exp(-t).astype(F32))).astype(F32)
                cols = vv[:, None] * VEC + np.arange(VEC)
                y[gi][cols] = to_dtype(o, dtype)
                np.add.at(written[gi], cols.ravel(), 1)
    if written.min() != 1 or written.max() != 1:
        return None, plan, f"coverage: min {written.min()} max {written.max()} writes per element"
    return y.reshape(x.shape), plan, "ok"


def oracle(x, w, b, G, eps):
    """fp64 two-pass, as kda_lab/families/group_norm_silu.py."""
    N, C = x.shape[:2]
    xd = x.reshape(N, G, -1)
    mean = xd.mean(-1, keepdims=True)
    var = ((xd - mean) ** 2).mean(-1, keepdims=True)
    xn = ((xd - mean) / np.sqrt(var + eps)).reshape(x.shape)
    shp = [1, C] + [1] * (x.ndim - 2)
    t = xn * w.reshape(shp) + b.reshape(shp)
    return t / (1 + np.exp(-t))


def make_case(shape, dtype, offset=0.0, scale=1.0, seed=0, const=None):
    rng = np.random.default_rng(seed)
    C = shape[1]
    x = np.full(shape, const, np.float64) if const is not None else rng.standard_normal(shape) * scale + offset
    return to_dtype(x, dtype), to_dtype(rng.standard_normal(C) * 0.5 + 1.0, dtype), to_dtype(rng.standard_normal(C) * 0.5, dtype)


def check(shape, dtype, G=32, eps=1e-6, mutant="", force_cs=0, force_nt=0, **kw):
    x, w, b = make_case(shape, dtype, **kw)
    y, plan, info = model_forward(x, w, b, G, eps, dtype, mutant, force_cs, force_nt)
    if y is None:
        return info == "not eligible", plan, info, float("nan")
    ref = oracle(x, w, b, G, eps)
    atol, rtol = TOL[dtype]
    err = np.abs(y - ref)
    bad = ~(err <= atol + rtol * np.abs(ref)) | ~np.isfinite(y)
    worst = float(np.nanmax(err / (atol + rtol * np.abs(ref))))
    return not bad.any(), plan, f"{int(bad.sum())} out of tolerance" if bad.any() else "ok", worst


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="skip the larger production shapes")
    args = ap.parse_args()
    small_prod = [[1, 512, 2, 12, 10], [1, 512, 5, 12, 10], [1, 512, 2, 32, 10], [1, 512, 2, 24, 20],
                  [1, 512, 5, 32, 10], [1, 256, 3, 48, 40]]
    if not args.quick:
        small_prod += [[1, 512, 2, 24, 64], [1, 512, 5, 24, 64]]
    cases = [(s, "float16", {}) for s in small_prod]
    cases += [([1, 512, 16, 16, 24], "bfloat16", {}),             # LTX-2 stage-1 latent (eps 1e-5 below)
              ([2, 64, 3, 8, 8], "bfloat16", {}), ([3, 96, 16], "float32", {}),
              ([2, 64, 4, 4], "float16", {}), ([1, 32, 8], "float32", {}),          # one channel per group
              ([1, 512, 2, 12, 10], "float32", {"offset": 1e4, "scale": 100.0}),  # offset rows
              ([1, 512, 2, 12, 10], "float32", {"offset": 1e4, "scale": 1.0}),
              ([1, 128, 2, 8, 8], "float16", {"const": 0.75})]                       # constant groups
    forced = [([1, 256, 3, 48, 40], "float16", {}, cs, nt) for cs, nt in ((4, 0), (8, 128), (16, 0), (16, 64))]
    n_fail = 0
    print(f"{'case':44s} {'plan':28s} result   worst err/tol")
    for shape, dt, kw in cases:
        eps = 1e-5 if shape == [1, 512, 16, 16, 24] else 1e-6
        ok, plan, info, worst = check(shape, dt, eps=eps, **kw)
        n_fail += not ok
        print(f"{str(shape) + ' ' + dt + (' ' + str(kw) if kw else ''):44s} {str(plan):28s} "
              f"{'PASS' if ok else 'FAIL'} {info} {worst:.3f}")
    for shape, dt, kw, cs, nt in forced:
        ok, plan, info, worst = check(shape, dt, force_cs=cs, force_nt=nt, **kw)
        n_fail += not ok
        print(f"{str(shape) + ' ' + dt + f' force cs={cs} nt={nt}':44s} {str(plan):28s} "
              f"{'PASS' if ok else 'FAIL'} {info} {worst:.3f}")
    # ineligible layouts must be refused by the planner (they keep c003's routing)
    for shape, dt in (([1, 32, 7, 3], "float16"), ([2, 8, 1], "float32"), ([1, 64, 6], "bfloat16")):
        ok, plan, info, _ = check(shape, dt)
        n_fail += not (plan is None and info == "not eligible")
        print(f"{str(shape) + ' ' + dt:44s} {'-':28s} {'PASS' if plan is None else 'FAIL'} planner refuses (HW % VEC)")
    mutants = [("naive_variance", [1, 512, 2, 12, 10], "float32", {"offset": 1e4, "scale": 100.0}),
               ("channel_off_by_one_vector", [1, 512, 2, 12, 10], "float16", {}),
               ("drop_last_vector", [1, 256, 3, 48, 40], "float16", {}),
               ("noncanonical_butterfly", [1, 512, 5, 12, 10], "float16", {"offset": 3.0}),
               ("wrong_group_weights", [1, 512, 2, 12, 10], "float16", {})]
    n_missed = 0
    for mut, shape, dt, kw in mutants:
        ok, plan, info, worst = check(shape, dt, mutant=mut, **kw)
        n_missed += ok
        print(f"mutant {mut:37s} {str(shape):28s} {'REJECTED' if not ok else 'MISSED'} ({info}, worst {worst:.3g})")
    print(f"\nreal cases failed: {n_fail}; mutants missed: {n_missed}")
    sys.exit(1 if (n_fail or n_missed) else 0)


if __name__ == "__main__":
    main()
