"""Dev sweep on the H200 (not evidence: `kda bench` is): the plain NCDHW pad's launch variants against F.pad and a
same-size copy on the task's largest rows, to pick the launcher's defaults before a ledger run.

    python3 kernels/h200_vae_hunyuan_causal_conv__multi_shape/dev/pad_sweep.py [--out DIR] [--cuda]

--cuda also builds dev/pad_cuda/ (torch.utils.cpp_extension with nvcc, sm_90a, -O3, no fast math) and times its
kernels as more variants: pad_rows.cu (a warp per output row, 16-byte loads into shared memory, 16-byte stores
aligned to the output) and pad_vec.cu's two (one aligned 16-byte output vector per thread step, its source bytes
shifted into place in registers; "cuda vec" sends row edges and row straddles down a scalar path, "cuda uniform
xN" builds them with pad_vec_core.cuh's clamped shifts, the same instructions in every lane, N vectors per thread
step). Each is first checked bit for bit against F.pad on odd shapes (rows narrower than a vector, tails, unaligned
rows, head/tail pads of 0-3) in fp16, bf16 and fp32.

Each variant's output is compared with F.pad bit for bit before it is timed. Times are triton.testing.do_bench
medians; every row moves >= 200 MB, several times the 60 MB L2, so no input rotation is needed.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
import triton

HERE = Path(__file__).resolve().parent
ROWS = [(1, 128, 33, 480, 848), (1, 512, 17, 240, 424), (1, 256, 17, 256, 256), (1, 512, 9, 120, 212),
        (1, 256, 17, 256, 80), (1, 512, 9, 128, 128), (1, 512, 5, 128, 128)]
PAD = (1, 1, 1, 1, 2, 0)


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
    pk = _pad_kernels()
    variants: dict[str, object] = {"rows (c003)": None}
    if args.cuda:
        variants.update(_cuda_pads())
    for block, warps in ((1024, 4), (2048, 4), (2048, 8), (4096, 4), (4096, 8), (8192, 8)):
        variants[f"planes b{block} w{warps}"] = (block, warps)
    results = [_sweep_row(pk, shape, variants) for shape in ROWS]
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "pad_sweep.json").write_text(json.dumps({"gpu": torch.cuda.get_device_name(), "rows": results},
                                                            indent=1))
    names = list(variants)
    print("shape".ljust(24), "MB".rjust(6), "F.pad sol".rjust(9), *[n.rjust(16) for n in names])
    for r in results:
        cells = []
        for n in names:
            v = r["variants"][n]
            cells.append("WRONG" if v.get("wrong") else f"{v['sol']:.3f} ({v['tbps']:.2f})")
        print("x".join(map(str, r["shape"])).ljust(24), f"{r['bytes'] / 1e6:6.0f}",
              f"{r['copy_us'] / r['fpad_us']:9.3f}", *[c.rjust(16) for c in cells])
    return 0


def _sweep_row(pk, shape, variants) -> dict:
    x = torch.randn(shape, device="cuda", dtype=torch.float16)
    ref = F.pad(x, PAD, mode="replicate")
    nbytes = 2 * (x.numel() + ref.numel())
    src = torch.empty(nbytes // 2, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    copy_ms = triton.testing.do_bench(lambda: dst.copy_(src), return_mode="median")
    fpad_ms = triton.testing.do_bench(lambda: F.pad(x, PAD, mode="replicate"), return_mode="median")
    row = {"shape": shape, "bytes": nbytes, "copy_us": copy_ms * 1e3, "fpad_us": fpad_ms * 1e3, "variants": {}}
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
        ms = triton.testing.do_bench(run, return_mode="median")
        row["variants"][name] = {"us": ms * 1e3, "sol": copy_ms / ms, "tbps": nbytes / ms / 1e9}
        del out
    return row


def _cuda_pads() -> dict:
    """Build dev/pad_cuda and check both kernels on shapes that take every path, before any timing."""
    from torch.utils.cpp_extension import load

    src = HERE / "pad_cuda"
    ext = load(name="kda_pad_cuda_dev",
               sources=[str(src / "pad_rows.cu"), str(src / "pad_vec.cu"), str(src / "pad_rows_binding.cpp")],
               extra_cuda_cflags=["-O3", "-gencode=arch=compute_90a,code=sm_90a"], extra_cflags=["-O3"],
               extra_include_paths=[str(src)],
               verbose=False)
    pads = {"cuda rows": lambda x, out, p: ext.pad_rows(x, out, p[0], p[2], p[4]),
            "cuda vec": lambda x, out, p: ext.pad_vec(x, out, p[0], p[2], p[4]),
            **{f"cuda uniform x{n}": (lambda x, out, p, n=n: ext.pad_vec_uniform(x, out, p[0], p[2], p[4], n))
               for n in (1, 2, 4)}}
    cases = [((1, 3, 2, 7, 13), (1, 1, 1, 1, 2, 0)), ((2, 2, 3, 5, 1), (1, 1, 1, 1, 2, 0)),
             ((1, 2, 1, 41, 99), (3, 0, 2, 5, 1, 2)), ((1, 4, 3, 9, 212), (1, 1, 1, 1, 2, 0)),
             ((1, 4, 3, 9, 848), (1, 1, 1, 1, 2, 0)), ((1, 3, 2, 5, 2), (0, 3, 0, 0, 0, 1)),
             ((2, 5, 3, 11, 80), (1, 1, 1, 1, 2, 0)), ((1, 1, 1, 1, 1), (2, 2, 0, 0, 0, 0))]
    for name, pad in pads.items():
        for shape, p in cases:
            for dt in (torch.float16, torch.bfloat16, torch.float32):
                x = torch.randn(shape, device="cuda").to(dt)
                ref = F.pad(x, p, mode="replicate")
                out = torch.full_like(ref, float("nan"))
                pad(x, out, p)
                torch.cuda.synchronize()
                assert torch.equal(out, ref), f"dev/pad_cuda {name} wrong on {shape} {p} {dt}"
    return pads


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
