"""Scratch dev bench (H200): build, fp64-oracle correctness, CUDA-graph timing.

Run from the task folder:  python dev/bench.py [--shapes prod|FILE.json] [--compile-shapes 0,5,..]
Writes $OUT/results.json (+ log) and prints a short table last.  Dev numbers only; the lab's
harness (`kda bench`) produces ledger rows.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import statistics
import sys
import time
import traceback

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "src"))
import register  # noqa: E402

OUT = os.environ.get("OUT", "/tmp/gns_out")
os.makedirs(OUT, exist_ok=True)
LOG = open(os.path.join(OUT, "log.txt"), "w")  # noqa: SIM115
T0 = time.time()


def log(*a):
    s = " ".join(str(x) for x in a)
    print(s, flush=True)
    LOG.write(s + "\n")
    LOG.flush()


TOL = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1e-2}


def oracle(x, w, b, G, eps):
    N, C = x.shape[:2]
    xd = x.double().reshape(N, G, -1)
    mean = xd.mean(-1, keepdim=True)
    var = ((xd - mean) ** 2).mean(-1, keepdim=True)
    xn = ((xd - mean) / torch.sqrt(var + eps)).reshape(x.shape)
    shp = [1, C] + [1] * (x.dim() - 2)
    t = xn * w.double().reshape(shp) + b.double().reshape(shp)
    return t * torch.sigmoid(t)


def poisoned_call(fn, x, *args):
    # poison the allocator block the output will most likely reuse
    p = torch.full_like(x, float("nan"))
    del p
    return fn(x, *args)


def check(name, fn, x, w, b, G, eps, tol=None):
    out = poisoned_call(fn, x, w, b, G, eps)
    torch.cuda.synchronize()
    ref = oracle(x, w, b, G, eps)
    o = out.double()
    finite = bool(torch.isfinite(o).all())
    err = float((o - ref).norm() / ref.norm().clamp_min(1e-30))
    maxabs = float((o - ref).abs().max())
    tol = tol if tol is not None else TOL[x.dtype]
    ok = finite and err <= tol and out.shape == x.shape and out.dtype == x.dtype
    return ok, err, maxabs, finite


def rand_inputs(shape, dtype, G, offset=0.0, scale=1.0, seed=0, const=None):
    g = torch.Generator(device="cuda").manual_seed(seed)
    C = shape[1]
    if const is not None:
        x = torch.full(shape, const, device="cuda", dtype=dtype)
    else:
        x = (torch.randn(shape, device="cuda", generator=g, dtype=torch.float32) * scale + offset).to(dtype)
    w = (torch.rand(C, device="cuda", generator=g) * 1.5 + 0.25).to(dtype)
    b = (torch.randn(C, device="cuda", generator=g) * 0.5).to(dtype)
    return x, w, b


def correctness(results):
    cases = []
    # (shape, dtype, G, eps, kwargs, force)
    prod = [(1, 512, 2, 12, 10), (1, 512, 5, 32, 32), (1, 256, 9, 48, 128), (1, 512, 9, 128, 40),
            (1, 256, 5, 256, 80), (1, 128, 17, 96, 256)]
    for s in prod:
        cases.append((s, torch.float16, 32, 1e-6, {}, None))
    for s in [(2, 64, 32, 32), (1, 64, 4, 16, 16), (4, 128), (3, 96, 7, 13), (2, 6, 5), (5, 32, 1),
              (2, 320, 17, 33), (1, 128, 20, 64, 64), (7, 64, 3, 5, 9)]:
        G = 3 if s == (2, 6, 5) else 32
        for dt in (torch.float16, torch.bfloat16, torch.float32):
            cases.append((s, dt, G, 1e-5, {}, None))
    # large groups (path B) in all dtypes
    for dt in (torch.float16, torch.bfloat16, torch.float32):
        cases.append(((1, 128, 20, 256, 256), dt, 32, 1e-6, {}, None))
    # offset 1e4 with small spread (fp32), both paths; constant input
    for s, force in [((1, 512, 5, 32, 32), None), ((1, 256, 9, 48, 128), None), ((1, 128, 17, 96, 256), None),
                     ((1, 256, 9, 48, 128), (2, 0, 0)), ((2, 64, 32, 32), None)]:
        cases.append((s, torch.float32, 32, 1e-6, {"offset": 1e4, "scale": 1.0}, force))
        cases.append((s, torch.float32, 32, 1e-6, {"offset": 1e4, "scale": 0.01}, force))
    cases.append(((1, 512, 5, 32, 32), torch.float16, 32, 1e-6, {"offset": 300.0, "scale": 0.5}, None))
    cases.append(((1, 512, 5, 32, 32), torch.bfloat16, 32, 1e-6, {"const": 3.0}, None))
    cases.append(((1, 128, 17, 96, 256), torch.float16, 32, 1e-6, {"const": -2.0}, None))
    # forced variants on one mid shape: every cluster size, path B, caps
    for force in [(1, 1, 227 * 1024), (1, 2, 0), (1, 4, 0), (1, 8, 0), (1, 16, 0), (2, 0, 0), (1, 0, 100 * 1024)]:
        cases.append(((1, 256, 3, 48, 40), torch.float16, 32, 1e-6, {}, force))
        cases.append(((2, 64, 3, 17, 19), torch.float32, 32, 1e-6, {}, force))
    # path C (pipe): minimal lag (LP = P), every hint mode, all dtypes, multi-batch, offsets
    for force in [(3, 1, 0), (3, 1, 8), (3, 1, 7), (3, 100000, 1), (3, 3, 0)]:
        for s in [(1, 256, 3, 48, 40), (3, 64, 5, 33, 31), (1, 128, 17, 96, 256)]:
            for dt in (torch.float16, torch.bfloat16, torch.float32):
                cases.append((s, dt, 32, 1e-6, {}, force))
        cases.append(((1, 256, 9, 48, 128), torch.float32, 32, 1e-6, {"offset": 1e4, "scale": 0.01}, force))
    n_fail = 0
    for i, (shape, dt, G, eps, kw, force) in enumerate(cases):
        x, w, b = rand_inputs(shape, dt, G, seed=i, **kw)
        if force is None:
            fn = register.triton_group_norm_silu
        else:
            fp, fc, cap = force

            def fn(x, w, b, G, eps, fp=fp, fc=fc, cap=cap):
                return register.group_norm_silu_cuda(x, w, b, G, eps, fp, fc, cap)

        tol = TOL[dt]
        if kw.get("offset", 0) >= 1e4 and kw.get("scale", 1) < 0.1:
            tol = 1e-4  # few distinct fp32 levels at 1e4 +- 0.01; K-shift keeps x-K exact
        try:
            ok, err, mx, _ = check("cand", fn, x, w, b, G, eps, tol)
        except Exception as e:  # noqa: BLE001
            ok, err, mx = False, float("nan"), float("nan")
            log("EXC", shape, dt, force, repr(e))
        try:
            bok, berr, _, _ = check("base", register._baseline(), x, w, b, G, eps, tol)
        except Exception:  # noqa: BLE001
            bok, berr = False, float("nan")
        n_fail += 0 if ok else 1
        rec = dict(shape=shape, dtype=str(dt), G=G, kw=kw, force=force, ok=ok, err=err, maxabs=mx,
                   base_ok=bok, base_err=berr)
        results["correctness"].append(rec)
        log(f"{'PASS' if ok else 'FAIL'} {str(shape):24s} {str(dt):15s} G={G} {kw} force={force} "
            f"err={err:.2e} max={mx:.2e} | base err={berr:.2e}")
    # unaligned (storage offset) contiguous view -> scalar path
    for dt in (torch.float16, torch.float32):
        base = torch.randn(1 + 2 * 64 * 9 * 10, device="cuda").to(dt)
        x = base[1:].view(2, 64, 9, 10)
        _, w, b = rand_inputs((2, 64, 9, 10), dt, 32, seed=99)
        ok, err, mx, _ = check("cand", register.triton_group_norm_silu, x, w, b, 32, 1e-5)
        n_fail += 0 if ok else 1
        log(f"{'PASS' if ok else 'FAIL'} unaligned view {dt} err={err:.2e}")
        results["correctness"].append(dict(shape="unaligned", dtype=str(dt), ok=ok, err=err))
    # apply_group_norm_silu through nn modules, and fallbacks
    gn = torch.nn.GroupNorm(32, 256, eps=1e-6).cuda().half()
    with torch.no_grad():
        gn.weight.copy_(torch.rand(256) + 0.5)
        gn.bias.copy_(torch.randn(256) * 0.3)
    act = torch.nn.SiLU()
    x = torch.randn(1, 256, 3, 48, 40, device="cuda", dtype=torch.float16)
    y = register.apply_group_norm_silu(x, gn, act)
    ref = oracle(x, gn.weight, gn.bias, 32, 1e-6)
    err = float((y.double() - ref).norm() / ref.norm())
    ok = err < TOL[torch.float16]
    n_fail += 0 if ok else 1
    log(f"{'PASS' if ok else 'FAIL'} apply_group_norm_silu module err={err:.2e}")
    xcl = torch.randn(1, 64, 16, 16, device="cuda", dtype=torch.float16).to(memory_format=torch.channels_last)
    _, w, b = rand_inputs((1, 64, 16, 16), torch.float16, 32)
    ok, err, _, _ = check("fallback", register.triton_group_norm_silu, xcl, w, b, 32, 1e-5)
    log(f"{'PASS' if ok else 'FAIL'} channels_last fallback err={err:.2e}")
    n_fail += 0 if ok else 1
    # CUDA graph capture of the candidate (fused one-tile, lagged multi-tile, large groups)
    for shape in [(1, 512, 2, 12, 10), (1, 512, 5, 32, 32), (1, 128, 17, 96, 256)]:
        x, w, b = rand_inputs(shape, torch.float16, 32, seed=5)
        register.triton_group_norm_silu(x, w, b, 32, 1e-6)
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            yg = register.triton_group_norm_silu(x, w, b, 32, 1e-6)
        x.copy_(torch.randn_like(x))
        g.replay()
        torch.cuda.synchronize()
        ref = oracle(x, w, b, 32, 1e-6)
        err = float((yg.double() - ref).norm() / ref.norm())
        ok = err < TOL[torch.float16]
        n_fail += 0 if ok else 1
        log(f"{'PASS' if ok else 'FAIL'} graph capture {shape} err={err:.2e}")
    # determinism: same input twice -> bitwise equal
    x, w, b = rand_inputs((1, 256, 9, 48, 128), torch.float16, 32, seed=7)
    y1 = register.triton_group_norm_silu(x, w, b, 32, 1e-6)
    y2 = register.triton_group_norm_silu(x, w, b, 32, 1e-6)
    det = bool(torch.equal(y1, y2))
    log(f"{'PASS' if det else 'FAIL'} deterministic")
    n_fail += 0 if det else 1
    results["n_fail"] = n_fail
    return n_fail


# ------------------------------------------------------------------------------- timing
try:
    import triton
    import triton.language as tl

    @triton.jit
    def _copy_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
        pid = tl.program_id(0).to(tl.int64)
        offs = pid * BLOCK + tl.arange(0, BLOCK)
        m = offs < n
        tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=m), mask=m)

    def triton_copy(x):
        y = torch.empty_like(x)
        n = x.numel()
        _copy_kernel[(triton.cdiv(n, 8192),)](x, y, n, BLOCK=8192, num_warps=8)
        return y
except Exception:  # noqa: BLE001
    triton_copy = None


def _eager_ref(G, eps):
    def fn(x, w, b):
        return F.silu(F.group_norm(x, G, w, b, eps))

    return fn


def build_graph(fn, sets):
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for a in sets[:2]:
            fn(*a)
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        outs = [fn(*a) for a in sets]
    g.replay()
    torch.cuda.synchronize()
    return g, outs


def replay_us(g, k, reps=3):
    ts = []
    for _ in range(reps):
        e0 = torch.cuda.Event(enable_timing=True)
        e1 = torch.cuda.Event(enable_timing=True)
        e0.record()
        g.replay()
        e1.record()
        e1.synchronize()
        ts.append(e0.elapsed_time(e1) * 1e3 / k)
    return ts


def _bound(f, G, eps):
    def fn(x, w, b):
        return f(x, w, b, G, eps)

    return fn


def _copy_only(x, w, b):
    return triton_copy(x)


def _forced(G, eps, fp, fc, cap):
    def fn(x, w, b):
        return register.group_norm_silu_cuda(x, w, b, G, eps, fp, fc, cap)

    return fn


def timing(results, shapes, variants, compile_shapes, deadline):
    rng = random.Random(1234)
    compiled = {}
    for si, (shape, dtype_s) in enumerate(shapes):
        if time.time() > deadline:
            log("deadline reached, stopping timing at", si)
            break
        dt = getattr(torch, dtype_s)
        G, eps = 32, 1e-6
        numel = math.prod(shape)
        xbytes = numel * dt.itemsize
        k = int(min(512, max(2, math.ceil(200e6 / xbytes))))
        sets = []
        for j in range(k):
            if j < 1:
                x, w, b = rand_inputs(shape, dt, G, seed=1000 + j)
            else:
                x = torch.randn(shape, device="cuda", dtype=dt)
                w, b = sets[0][1], sets[0][2]
            sets.append((x, w, b))
        impls = {}
        base_fn = register._baseline()
        impls["base"] = _bound(base_fn, G, eps)
        impls["cand"] = _bound(register.triton_group_norm_silu, G, eps)
        hw = numel // (shape[0] * shape[1])
        dcode = {"float16": 0, "bfloat16": 1, "float32": 2}[dtype_s]
        for vname, (fp, fc, cap) in variants.items():
            if register.load_extension().describe(dcode, shape[0], shape[1], hw, G, fp, fc, cap)[0] <= 0:
                continue  # the plan rejects this forced variant for this shape
            impls[vname] = _forced(G, eps, fp, fc, cap)
        if triton_copy is not None:
            impls["copy"] = _copy_only
        if si in compile_shapes and time.time() < deadline - 60:
            try:
                key = (tuple(shape), dtype_s)
                cf = torch.compile(_eager_ref(G, eps), dynamic=False)
                t0 = time.time()
                cf(*sets[0])
                torch.cuda.synchronize()
                log(f"  torch.compile warm {time.time() - t0:.1f}s")
                impls["compile"] = cf
                compiled[key] = cf
            except Exception as e:  # noqa: BLE001
                log("compile failed", repr(e)[:200])
        graphs = {}
        for name, fn in impls.items():
            try:
                graphs[name] = build_graph(fn, sets)
            except Exception as e:  # noqa: BLE001
                log("graph failed", name, shape, repr(e)[:300])
        meas = {n: [] for n in graphs}
        for _trial in range(3):
            order = list(graphs)
            rng.shuffle(order)
            for n in order:
                meas[n] += replay_us(graphs[n][0], k, reps=3)
        med = {n: statistics.median(v) for n, v in meas.items()}
        p10p90 = {n: (sorted(v)[0], sorted(v)[-1]) for n, v in meas.items()}
        try:
            plan = register.load_extension().describe({"float16": 0, "bfloat16": 1, "float32": 2}[dtype_s],
                                                      shape[0], shape[1], numel // (shape[0] * shape[1]), G, 0, 0, 0)
        except Exception as e:  # noqa: BLE001
            plan = repr(e)
        mb = 2 * xbytes / 1e6
        rec = dict(shape=shape, dtype=dtype_s, k=k, mb=mb, plan=list(plan) if not isinstance(plan, str) else plan,
                   us=med, minmax=p10p90)
        results["timing"].append(rec)
        sp = med["base"] / med["cand"]
        sol = med.get("copy", float("nan")) / med["cand"]
        log(f"T {str(shape):22s} {mb:8.1f}MB plan={rec['plan'][:4]} base={med['base']:8.1f} "
            f"cand={med['cand']:8.1f} x{sp:5.2f} {mb / 1e6 / (med['cand'] * 1e-6):5.2f}TB/s sol={sol:4.2f} "
            + " ".join(f"{n}={v:.1f}" for n, v in med.items() if n not in ("base", "cand")))
        del graphs, sets, impls
        torch.cuda.empty_cache()


def production_shapes():
    """The 48 distinct x shapes of the H200 production table (HunyuanVideo VAE decoder, fp16,
    G=32, eps=1e-6; each appears once per entry point), regenerated from their product rule."""
    out = []
    rule = [(512, (2, 5), [(12, 10), (12, 32), (24, 20), (24, 64), (32, 10), (32, 32), (64, 20), (64, 64)]),
            (512, (3, 9), [(48, 40), (48, 128), (128, 40), (128, 128)]),
            (256, (3, 9), [(48, 40), (48, 128), (128, 40), (128, 128)]),
            (256, (5, 17), [(96, 80), (96, 256), (256, 80), (256, 256)]),
            (128, (5, 17), [(96, 80), (96, 256), (256, 80), (256, 256)])]
    for C, Ts, hws in rule:
        for T in Ts:
            for h, w in hws:
                out.append(([1, C, T, h, w], "float16"))
    out.sort(key=lambda s: math.prod(s[0]))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", default="prod", help="'prod' or a JSON file of [shape, dtype] pairs")
    ap.add_argument("--only", default="", help="comma list of shape indices to time")
    ap.add_argument("--compile-shapes", default="")
    ap.add_argument("--budget-s", type=float, default=400)
    ap.add_argument("--skip-correct", action="store_true")
    ap.add_argument("--variants", default="A:1,0,0;B:2,0,0;C0:3,0,8;C7:3,0,7;Clag1:3,1,0")
    args = ap.parse_args()
    deadline = T0 + args.budget_s
    results = {"correctness": [], "timing": [], "env": {}}
    results["env"] = dict(gpu=torch.cuda.get_device_name(), torch=torch.__version__,
                          cuda=torch.version.cuda)
    log("env", results["env"])
    import subprocess
    smi = None
    try:
        q = "--query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,utilization.gpu"
        smi_out = open(os.path.join(OUT, "smi.csv"), "w")  # noqa: SIM115
        smi = subprocess.Popen(["nvidia-smi", q, "--format=csv", "-lms", "1000"], stdout=smi_out,
                               stderr=subprocess.DEVNULL)
    except Exception:  # noqa: BLE001
        smi = None
    t0 = time.time()
    register.load_extension()
    log(f"build {time.time() - t0:.1f}s")
    with torch.no_grad():
        if not args.skip_correct:
            try:
                correctness(results)
            except Exception:  # noqa: BLE001
                log("correctness crashed", traceback.format_exc())
                results["n_fail"] = -1
        log("correctness failures:", results.get("n_fail"))
        shapes = production_shapes() if args.shapes == "prod" else json.load(open(args.shapes))
        if args.only:
            shapes = [shapes[int(i)] for i in args.only.split(",")]
        variants = {}
        for item in filter(None, args.variants.split(";")):
            n, v = item.split(":")
            variants[n] = tuple(int(t) for t in v.split(","))
        if args.compile_shapes == "all":
            cs = set(range(len(shapes)))
        else:
            cs = {int(t) for t in args.compile_shapes.split(",") if t.strip()}
        try:
            timing(results, shapes, variants, cs, deadline)
        except Exception:  # noqa: BLE001
            log("timing crashed", traceback.format_exc())
    if smi is not None:
        smi.terminate()
    with open(os.path.join(OUT, "results.json"), "w") as f:
        json.dump(results, f, indent=1, default=str)
    # short table last
    log("\n=== summary (graph replay, us per call, median) ===")
    sps = []
    for r in results["timing"]:
        m = r["us"]
        sp = m["base"] / m["cand"]
        sps.append(sp)
        extra = " ".join(f"{n}={m[n]:.1f}" for n in m if n not in ("base", "cand", "copy"))
        log(f"{str(r['shape']):22s} {r['mb']:7.1f}MB p{r['plan'][0] if isinstance(r['plan'], list) else '?'}"
            f"cs{r['plan'][2] if isinstance(r['plan'], list) else '?'} base {m['base']:7.1f} cand {m['cand']:7.1f} "
            f"x{sp:5.2f} sol {m.get('copy', float('nan')) / m['cand']:4.2f} {extra}")
    if sps:
        log(f"geomean x{math.exp(sum(map(math.log, sps)) / len(sps)):.3f} min x{min(sps):.3f} n={len(sps)} "
            f"fails={results.get('n_fail')} elapsed={time.time() - T0:.0f}s")


if __name__ == "__main__":
    main()
