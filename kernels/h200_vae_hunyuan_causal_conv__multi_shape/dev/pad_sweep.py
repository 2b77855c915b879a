"""Dev sweep on the H200 (not evidence: `kda bench` is): the plain NCDHW pad's launch variants against F.pad and a
same-size copy on the task's largest rows, to pick the launcher's defaults before a ledger run.

    python3 kernels/h200_vae_hunyuan_causal_conv__multi_shape/dev/pad_sweep.py [--out DIR] [--cuda]

--cuda also builds dev/pad_cuda/ (torch.utils.cpp_extension with nvcc, sm_90a, -O3, no fast math) and times its
kernels as more variants: pad_rows.cu (a warp per output row, 16-byte loads into shared memory, 16-byte stores
aligned to the output), pad_vec.cu's two (one aligned 16-byte output vector per thread step, its source bytes
shifted into place in registers; "cuda vec" sends row edges and row straddles down a scalar path, "cuda uniform
xN" builds them with pad_vec_core.cuh's clamped shifts, the same instructions in every lane, N vectors per thread
step) and pad_stage.cu's ("cuda stage SxNK": a block per chunk of an output plane, its source rows staged in shared
memory with cp.async, S stage buffers of ~N KB, the output gathered from shared memory into aligned 16-byte
vectors). Each is first checked bit for bit against F.pad on odd shapes (rows narrower than a vector, tails,
unaligned rows, head/tail pads of 0-3) in fp16, bf16 and fp32; a variant that fails is reported and not timed.

--cuda also runs copy_diag.cu's ceiling diagnostics on buffers the size of each row's output, sol against torch's
copy_ of the same bytes: "own copy16" (an aligned 16-byte copy in our launch style) and "shift ldg2" / "shift shfl"
(out[i] = in[i + 1] on 2-byte elements: aligned 16-byte stores, loads funnel-shifted by one element, the second
word loaded again or shuffled from the next lane). A shift well under 0.9 of copy_ caps every pad whose load and
store alignments differ; a shift near 0.95 says the pads lose elsewhere.

Each variant's output is compared with F.pad bit for bit before it is timed. Times are triton.testing.do_bench
medians (warmup 10 ms, 50 ms of repetitions: tens to hundreds of calls per variant, enough for a median on rows
this size); every row moves >= 200 MB, several times the 60 MB L2, so no input rotation is needed. The full table,
the diagnostics and a short table (the yardsticks and the new variants) print last; --out gets pad_sweep.json.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import time
import traceback
from pathlib import Path

import torch
import torch.nn.functional as F
import triton

HERE = Path(__file__).resolve().parent
ROWS = [(1, 128, 33, 480, 848), (1, 512, 17, 240, 424), (1, 256, 17, 256, 256), (1, 512, 9, 120, 212),
        (1, 256, 17, 256, 80), (1, 512, 9, 128, 128), (1, 512, 5, 128, 128)]
PAD = (1, 1, 1, 1, 2, 0)
BENCH = {"warmup": 10, "rep": 50, "return_mode": "median"}
STAGE_VARIANTS = {"cuda stage 2x8K": (8192, 2), "cuda stage 2x16K": (16384, 2), "cuda stage 1x16K": (16384, 1)}
DIAGS = ("own copy16", "shift ldg2", "shift shfl")
SHORT = ("planes b2048 w4", "cuda rows", "cuda uniform x1", *STAGE_VARIANTS)


def _pad_kernels():
    spec = importlib.util.spec_from_file_location("pad_kernels", HERE.parent / "src" / "pad_kernels.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--cuda", action="store_true", help="also build and time dev/pad_cuda")
    args = ap.parse_args(argv)
    t0 = time.time()
    pk = _pad_kernels()
    variants: dict[str, object] = {"rows (c003)": None}
    ext, failed, build_error = None, {}, None
    if args.cuda:
        try:
            ext, pads, failed = _cuda_pads()
            variants.update(pads)
        except Exception:  # noqa: BLE001 - a failed build still leaves the Triton sweep worth reporting
            build_error = traceback.format_exc()
            print(f"dev/pad_cuda did not build; Triton variants only:\n{build_error}", flush=True)
    for block, warps in ((1024, 4), (2048, 4), (2048, 8), (4096, 4), (4096, 8), (8192, 8)):
        variants[f"planes b{block} w{warps}"] = (block, warps)
    results = []
    for shape in ROWS:
        row = _sweep_row(pk, shape, variants)
        if ext is not None:
            row["diag"] = _copy_diag(ext, 2 * row["out_numel"])
        results.append(row)
        print(f"[{time.time() - t0:5.0f} s] {'x'.join(map(str, shape))} done", flush=True)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "pad_sweep.json").write_text(json.dumps(
            {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "bench": BENCH,
             "check_failures": failed, "build_error": build_error, "seconds": time.time() - t0, "rows": results},
            indent=1))
    _print_tables(results, list(variants), failed)
    print(f"{time.time() - t0:.0f} s", flush=True)
    return 0


def _cell(v: dict | None) -> str:
    if v is None:
        return "-"
    return "WRONG" if v.get("wrong") else f"{v['sol']:.3f} ({v['tbps']:.2f})"


def _print_tables(results: list[dict], names: list[str], failed: dict[str, str]) -> None:
    print("sol against a copy of the pad's bytes (TB/s):")
    print("shape".ljust(24), "MB".rjust(6), "F.pad sol".rjust(9), *[n.rjust(16) for n in names])
    for r in results:
        print("x".join(map(str, r["shape"])).ljust(24), f"{r['bytes'] / 1e6:6.0f}",
              f"{r['copy_us'] / r['fpad_us']:9.3f}", *[_cell(r["variants"].get(n)).rjust(16) for n in names])
    for name, why in failed.items():
        print(f"not timed, failed its check: {name}: {why}")
    have_diag = any("diag" in r for r in results)
    if have_diag:
        print("\ncopy diagnostics, sol against torch copy_ of the same bytes (TB/s):")
        print("output bytes of".ljust(24), "MB".rjust(6), "copy_ TB/s".rjust(10), *[n.rjust(16) for n in DIAGS])
        for r in results:
            d = r.get("diag", {})
            print("x".join(map(str, r["shape"])).ljust(24), f"{d.get('bytes', 0) / 1e6:6.0f}",
                  f"{d.get('copy_tbps', 0):10.2f}", *[_cell(d.get(n)).rjust(16) for n in DIAGS])
    cols = [n for n in SHORT if n in names]
    print("\nshort table, sol (the pads against a copy of their bytes, the diagnostics against copy_ of theirs):")
    print("shape".ljust(24), *[n.replace("cuda ", "").rjust(14) for n in cols],
          *([n.rjust(11) for n in DIAGS] if have_diag else []))
    for r in results:
        pads = [r["variants"].get(n) for n in cols]
        diag = [r.get("diag", {}).get(n) for n in DIAGS] if have_diag else []
        print("x".join(map(str, r["shape"])).ljust(24),
              *[("-" if v is None else "WRONG" if v.get("wrong") else f"{v['sol']:.3f}").rjust(14) for v in pads],
              *[("-" if v is None else "WRONG" if v.get("wrong") else f"{v['sol']:.3f}").rjust(11) for v in diag])


def _sweep_row(pk, shape, variants) -> dict:
    x = torch.randn(shape, device="cuda", dtype=torch.float16)
    ref = F.pad(x, PAD, mode="replicate")
    nbytes = 2 * (x.numel() + ref.numel())
    src = torch.empty(nbytes // 2, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    copy_ms = triton.testing.do_bench(lambda: dst.copy_(src), **BENCH)
    fpad_ms = triton.testing.do_bench(lambda: F.pad(x, PAD, mode="replicate"), **BENCH)
    row = {"shape": shape, "bytes": nbytes, "out_numel": ref.numel(), "copy_us": copy_ms * 1e3,
           "fpad_us": fpad_ms * 1e3, "variants": {}}
    for name, v in variants.items():
        out = torch.full_like(ref, float("nan"))

        def run(v=v, out=out):
            if v is None:
                _rows(pk, x, out)
            elif callable(v):
                v(x, out, PAD)
            else:
                pk.launch_ncdhw(x, out, PAD, block=v[0], num_warps=v[1])
        run()
        torch.cuda.synchronize()
        if not torch.equal(out, ref):
            row["variants"][name] = {"wrong": True}
            continue
        ms = triton.testing.do_bench(run, **BENCH)
        row["variants"][name] = {"us": ms * 1e3, "sol": copy_ms / ms, "tbps": nbytes / ms / 1e9}
        del out
    return row


def _copy_diag(ext, out_bytes: int) -> dict:
    """copy_diag.cu's kernels over out_bytes (rounded down to 16), each checked, then timed against torch's copy_."""
    n = out_bytes // 16 * 16
    src = torch.randint(0, 256, (n + 16,), dtype=torch.uint8, device="cuda")
    dst = torch.empty(n, dtype=torch.uint8, device="cuda")
    copy_ms = triton.testing.do_bench(lambda: dst.copy_(src[:n]), **BENCH)
    res: dict = {"bytes": 2 * n, "copy_us": copy_ms * 1e3, "copy_tbps": 2 * n / copy_ms / 1e9}
    for name, fn, want in _diag_fns(ext, src, dst):
        dst.zero_()
        fn()
        torch.cuda.synchronize()
        if not torch.equal(dst, want):
            res[name] = {"wrong": True}
            continue
        ms = triton.testing.do_bench(fn, **BENCH)
        res[name] = {"us": ms * 1e3, "sol": copy_ms / ms, "tbps": 2 * n / ms / 1e9}
    return res


def _diag_fns(ext, src: torch.Tensor, dst: torch.Tensor) -> list:
    n = dst.numel()
    return [("own copy16", lambda: ext.copy16(src, dst), src[:n]),
            ("shift ldg2", lambda: ext.shift_copy(src, dst, False), src[2:n + 2]),
            ("shift shfl", lambda: ext.shift_copy(src, dst, True), src[2:n + 2])]


def _cuda_pads() -> tuple[object, dict, dict[str, str]]:
    """Build dev/pad_cuda and check every kernel on shapes that take every path, before any timing. Returns the
    extension, the pads that passed and {name: why} for those that did not (reported, not timed)."""
    from torch.utils.cpp_extension import load

    src = HERE / "pad_cuda"
    ext = load(name="kda_pad_cuda_dev",
               sources=[str(src / f) for f in ("pad_rows.cu", "pad_vec.cu", "pad_stage.cu", "copy_diag.cu",
                                                "pad_rows_binding.cpp")],
               extra_cuda_cflags=["-O3", "-gencode=arch=compute_90a,code=sm_90a"], extra_cflags=["-O3"],
               extra_include_paths=[str(src)],
               verbose=False)
    pads = {"cuda rows": lambda x, out, p: ext.pad_rows(x, out, p[0], p[2], p[4]),
            "cuda vec": lambda x, out, p: ext.pad_vec(x, out, p[0], p[2], p[4]),
            **{f"cuda uniform x{n}": (lambda x, out, p, n=n: ext.pad_vec_uniform(x, out, p[0], p[2], p[4], n))
               for n in (1, 2, 4)},
            **{name: (lambda x, out, p, cb=cb, st=st: ext.pad_stage(x, out, p[0], p[2], p[4], cb, st))
               for name, (cb, st) in STAGE_VARIANTS.items()}}
    cases = [((1, 3, 2, 7, 13), (1, 1, 1, 1, 2, 0)), ((2, 2, 3, 5, 1), (1, 1, 1, 1, 2, 0)),
             ((1, 2, 1, 41, 99), (3, 0, 2, 5, 1, 2)), ((1, 4, 3, 9, 212), (1, 1, 1, 1, 2, 0)),
             ((1, 4, 3, 9, 848), (1, 1, 1, 1, 2, 0)), ((1, 3, 2, 5, 2), (0, 3, 0, 0, 0, 1)),
             ((2, 5, 3, 11, 80), (1, 1, 1, 1, 2, 0)), ((1, 1, 1, 1, 1), (2, 2, 0, 0, 0, 0)),
             ((1, 3, 2, 37, 130), (1, 1, 1, 1, 2, 0)), ((1, 2, 3, 300, 424), (1, 1, 1, 1, 2, 0))]
    failed: dict[str, str] = {}
    for name, pad in pads.items():
        try:
            for shape, p in cases:
                for dt in (torch.float16, torch.bfloat16, torch.float32):
                    x = torch.randn(shape, device="cuda").to(dt)
                    ref = F.pad(x, p, mode="replicate")
                    out = torch.full_like(ref, float("nan"))
                    pad(x, out, p)
                    torch.cuda.synchronize()
                    if not torch.equal(out, ref):
                        raise AssertionError(f"wrong on {shape} {p} {dt}")
        except Exception as e:  # noqa: BLE001 - one broken variant must not cost the others their numbers
            failed[name] = f"{type(e).__name__}: {e}"
    for n_words in (1, 31, 32, 33, 1027, 4101, 100003):
        s = torch.randint(0, 256, (16 * n_words + 16,), dtype=torch.uint8, device="cuda")
        d = torch.empty(16 * n_words, dtype=torch.uint8, device="cuda")
        for name, fn, want in _diag_fns(ext, s, d):
            d.zero_()
            fn()
            torch.cuda.synchronize()
            if not torch.equal(d, want):
                failed.setdefault(name, f"wrong on {n_words} words")
    for name, why in failed.items():
        print(f"dev/pad_cuda {name}: {why}", flush=True)
    return ext, {k: v for k, v in pads.items() if k not in failed}, failed


def _rows(pk, x, out):
    """The c003 row-tile kernel, launched as c003's launcher did."""
    wl, _, hl, _, tl_, _ = PAD
    B, C, T, H, W = x.shape
    _, _, To, Ho, Wo = out.shape
    n_rows = B * C * To * Ho
    block_w = pk._pow2_at_most(Wo, 512)
    rows = max(1, 4096 // block_w)
    grid = (triton.cdiv(n_rows, rows), triton.cdiv(Wo, block_w))
    pk._pad_ncdhw[grid](x, out, n_rows, C, T, H, W, To, Ho, Wo, *x.stride(), tl_, hl, wl,
                        ROWS=rows, BLOCK_W=block_w, num_warps=4)


if __name__ == "__main__":
    sys.exit(main())
