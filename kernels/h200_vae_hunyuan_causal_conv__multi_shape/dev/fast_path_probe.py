"""The candidate's HunyuanVideo VAE fast path (src/fast_path.py) on SGLang 0.5.23's own decode, before promotion.

`kda e2e` measures what `kda_kernels.install()` does, which needs a promoted export; this script measures the task's
candidate directly, so a candidate is judged on the model before it is exported. Per decode (the e2e builders:
untiled latent [1,16,5,32,32], SGLang's default tiled decode of [1,16,9,60,106]; `--issue-latent` adds the untiled
decode of [1,16,9,60,106], issue 23's 885 ms case):

- agreement: max |on - off|, and each side's max error against the same decode in fp32 with the fast path off
  (the model-level yardstick: the fast path must not be further from the fp32 decode than SGLang's fp16 decode is);
- kernel checks on the decode's own tensors: the fused upsample + pad bit for bit against SGLang's
  interpolate + cat + F.pad, and GroupNorm + SiLU on NDHWC against fp64 within the GroupNorm task's fp16 tolerance;
- timing: interleaved off/on trials (order shuffled per trial), CUDA events around the eager decode, A/A spread of
  the off trials; torch-profiler kernel shares per state (conv, pad, layout copies, norms, ...).

    python3 kernels/h200_vae_hunyuan_causal_conv__multi_shape/dev/fast_path_probe.py [--trials 5] [--issue-latent]

Writes $OUT/fast_path_probe.json (or --out) and prints a table last.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
sys.path.insert(0, str(ROOT))

SLUG = HERE.parent.name
KERNEL_CLASSES = (
    ("pad", ("replication_pad", "reflection_pad")),
    ("kda_gather", ("_pad_ndhwc", "_pad_ncdhw")),
    ("layout_copy", ("nchwtonhwc", "nhwctonchw")),
    ("conv", ("conv", "implicit", "xmma", "sm90", "cutlass", "gemm")),
    ("norm", ("group_norm", "groupnorm", "gns_", "_stats", "_apply", "_finalize")),
    ("upsample", ("upsample",)),
    ("copy", ("copy", "elementwise_kernel_with_index", "cat")),
)


def candidate() -> Any:
    from kda_lab.task.schema import load_candidate, load_task

    return load_candidate(load_task(ROOT / "kernels" / SLUG))


def classify(name: str) -> str:
    low = name.lower()
    for cls, pats in KERNEL_CLASSES:
        if any(p in low for p in pats):
            return cls
    return "other"


def profile(fwd, fast, on: bool) -> dict[str, float]:
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as tprofile

    (fast.install(lambda d: True) if on else fast.uninstall())
    with tprofile(activities=[ProfilerActivity.CUDA]) as prof:
        fwd()
        torch.cuda.synchronize()
    fast.uninstall()
    ms: dict[str, float] = {}
    for ev in prof.events():
        if ev.device_type == DeviceType.CUDA:
            c = classify(ev.name)
            ms[c] = ms.get(c, 0.0) + ev.time_range.elapsed_us() / 1e3
    return dict(sorted(ms.items(), key=lambda kv: -kv[1]))


def timed(fwd, fast, trials: int, seed: int) -> dict[str, list[float]]:
    rng = random.Random(seed)
    out: dict[str, list[float]] = {"off": [], "on": []}
    for state in ("off", "on"):  # warm-up: Triton compiles, cuDNN heuristics, allocator
        (fast.install(lambda d: True) if state == "on" else fast.uninstall())
        fwd()
    for _ in range(trials):
        order = ["off", "on"]
        rng.shuffle(order)
        for state in order:
            (fast.install(lambda d: True) if state == "on" else fast.uninstall())
            torch.cuda.synchronize()
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            fwd()
            b.record()
            torch.cuda.synchronize()
            out[state].append(a.elapsed_time(b))
    fast.uninstall()
    return out


def kernel_checks(mod: Any) -> dict[str, Any]:
    """The fused upsample+pad bit for bit, and GroupNorm+SiLU on NDHWC within tolerance, on decode-sized tensors."""
    fp = mod.fast_path
    gen = torch.Generator(device="cuda").manual_seed(7)
    res: dict[str, Any] = {"upsample_pad": [], "gn_silu_cl": []}
    for shape, factors in (((1, 512, 3, 12, 10), (2, 2, 2)), ((1, 512, 5, 30, 53), (2, 2, 2)),
                           ((1, 256, 9, 60, 106), (1, 2, 2)), ((1, 512, 1, 8, 8), (2, 2, 2))):
        x = torch.randn(shape, generator=gen, device="cuda", dtype=torch.float16)
        t = shape[2]
        first = F.interpolate(x[:, :, :1].squeeze(2), scale_factor=factors[1:], mode="nearest").unsqueeze(2)
        if t > 1:
            rest = F.interpolate(x[:, :, 1:].contiguous(), scale_factor=factors, mode="nearest")
            ref = torch.cat((first, rest), dim=2)
        else:
            ref = first
        ref = F.pad(ref, (1, 1, 1, 1, 2, 0), mode="replicate")
        for layout in ("ncdhw", "ndhwc"):
            xi = x if layout == "ncdhw" else x.contiguous(memory_format=torch.channels_last_3d)
            out = fp.padded_channels_last(xi, (1, 1, 1, 1, 2, 0), factors)
            res["upsample_pad"].append({"shape": list(shape), "factors": list(factors), "x": layout,
                                        "exact": bool(torch.equal(out, ref)),
                                        "channels_last": out.is_contiguous(memory_format=torch.channels_last_3d)})
    import tomllib

    gn_task = ROOT / "kernels" / "h200_diffusion_group_norm_silu__multi_shape" / "task.toml"
    tol = tomllib.loads(gn_task.read_text())["tolerances"]["float16"]
    for shape in ((1, 512, 5, 32, 10), (1, 512, 9, 60, 106), (1, 256, 17, 120, 212), (1, 128, 17, 96, 80),
                  (1, 128, 33, 240, 424), (2, 512, 3, 12, 10)):
        x = (torch.randn(shape, generator=gen, device="cuda") * 2 + 0.5).half().contiguous(
            memory_format=torch.channels_last_3d)
        w = torch.randn(shape[1], generator=gen, device="cuda").half()
        b = torch.randn(shape[1], generator=gen, device="cuda").half()
        y = mod.gn_silu_cl.group_norm_silu_cl(x, w, b, 32, 1e-6)
        ref = F.silu(F.group_norm(x.double(), 32, w.double(), b.double(), 1e-6))
        err = (y.double() - ref).abs()
        ok = bool((err <= tol["atol"] + tol["rtol"] * ref.abs()).all())
        res["gn_silu_cl"].append({"shape": list(shape), "max_err": float(err.max()), "within": ok,
                                  "tolerance": tol})
        del x, y, ref, err
        torch.cuda.empty_cache()
    return res


def channels_last_weights(module: torch.nn.Module) -> int:
    """What SGLang's VAE loader does under SGLANG_DIFFUSION_VAE_CHANNELS_LAST_3D=1 (and by default for Wan, Qwen-Image,
    Cosmos3 and single-GPU LTX-2): every Conv3d weight converted to channels_last_3d."""
    from sglang.multimodal_gen.runtime.loader.component_loaders.vae_loader import (
        _convert_conv3d_weights_to_channels_last_3d,
    )

    return _convert_conv3d_weights_to_channels_last_3d(module, "")


def conv_bits(build) -> list[dict[str, Any]]:
    """Each distinct conv of the decoder once, on its own input shape: NCDHW (SGLang) vs NDHWC (fast path) bits."""
    built = build()
    seen: dict[tuple, dict[str, Any]] = {}
    hooks = []

    def hook(mod, args):
        x = args[0]
        key = (tuple(x.shape), tuple(mod.weight.shape))
        if key in seen:
            return
        a = F.conv3d(x.contiguous(), mod.weight, mod.bias, mod.stride, mod.padding, mod.dilation, mod.groups)
        xb = x.contiguous(memory_format=torch.channels_last_3d)
        wb = mod.weight.contiguous(memory_format=torch.channels_last_3d)
        b = F.conv3d(xb, wb, mod.bias, mod.stride, mod.padding, mod.dilation, mod.groups)
        d = (a.float() - b.float()).abs()
        seen[key] = {"x": list(x.shape), "w": list(mod.weight.shape), "bit_exact": bool(torch.equal(a, b)),
                     "max_abs": float(d.max()), "frac_differ": float((d > 0).float().mean())}

    for m in built.module.decoder.modules():
        if isinstance(m, torch.nn.Conv3d):
            hooks.append(m.register_forward_pre_hook(hook))
    with torch.no_grad():
        built.forward()
    for h in hooks:
        h.remove()
    del built
    torch.cuda.empty_cache()
    return list(seen.values())


def ltx2_profile(trials: int) -> dict[str, Any]:
    """SGLang's LTX-2 video VAE decode (LTXVideoVAEConfig, random weights, bf16, channels_last_3d conv weights as
    SGLang's loader sets them on one GPU) of latent [1,128,16,16,24] (121 x 512 x 768): kernel classes, off only."""
    from sglang.multimodal_gen.configs.models.vaes.ltx_video import LTXVideoVAEConfig
    from sglang.multimodal_gen.runtime.models.vaes.ltx_2_vae import AutoencoderKLLTX2Video

    from kda_lab.e2e.models import _first, init_weights

    cfg = LTXVideoVAEConfig()
    cfg.load_encoder = False
    with torch.device("cuda"):
        vae = AutoencoderKLLTX2Video(cfg)
    vae = vae.to(dtype=torch.bfloat16).eval()
    init_weights(vae, 29)
    n_cl = channels_last_weights(vae)
    z = torch.randn(1, 128, 16, 16, 24, device="cuda", dtype=torch.bfloat16)
    with torch.no_grad():
        fwd = lambda: _first(vae.decode(z))  # noqa: E731
        out = fwd()
        torch.cuda.synchronize()
        times = []
        for _ in range(trials):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            fwd()
            b.record()
            torch.cuda.synchronize()
            times.append(a.elapsed_time(b))

        class _Off:
            def install(self, serves):
                return []

            def uninstall(self):
                return []

        prof = profile(fwd, _Off(), False)
    return {"latent": [1, 128, 16, 16, 24], "out": list(out.shape), "conv3d_weights_channels_last": n_cl,
            "ms": times, "profile_ms": prof}


def decode_row(name: str, build, fast, trials: int, seed: int) -> dict[str, Any]:
    built = build()
    fwd = built.forward
    with torch.no_grad():
        fast.uninstall()
        off = fwd().float()
        fast.install(lambda d: True)
        on = fwd().float()
        fast.uninstall()
        rec: dict[str, Any] = {"row": name, "shape": list(off.shape), "max_abs_on_vs_off": float((on - off).abs().max()),
                               "bit_exact": bool(torch.equal(on, off))}
        ref = built.fp32_forward()
        rec["err_off_vs_fp32"] = float((off - ref).abs().max())
        rec["err_on_vs_fp32"] = float((on - ref).abs().max())
        rec["ref_absmax"] = float(ref.abs().max())
        del off, on, ref
        torch.cuda.empty_cache()
        t = timed(fwd, fast, trials, seed)
        rec["off_ms"], rec["on_ms"] = t["off"], t["on"]
        med_off, med_on = statistics.median(t["off"]), statistics.median(t["on"])
        rec["speedup"] = med_off / med_on
        rec["aa_spread"] = (max(t["off"]) - min(t["off"])) / med_off
        rec["profile_off_ms"] = profile(fwd, fast, False)
        rec["profile_on_ms"] = profile(fwd, fast, True)
        # SGLang's own channels_last_3d option (SGLANG_DIFFUSION_VAE_CHANNELS_LAST_3D=1 converts the conv weights)
        rec["sglang_cl_weights"] = channels_last_weights(built.module)
        t = timed(fwd, fast, trials, seed + 1)
        rec["cl_off_ms"], rec["cl_on_ms"] = t["off"], t["on"]
        rec["cl_speedup"] = statistics.median(t["off"]) / statistics.median(t["on"])
        rec["cl_profile_off_ms"] = profile(fwd, fast, False)
    del built
    torch.cuda.empty_cache()
    return rec


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=5)
    ap.add_argument("--issue-latent", action="store_true")
    ap.add_argument("--rows", nargs="*", default=None)
    ap.add_argument("--conv-bits", action="store_true", help="NCDHW vs NDHWC conv bits per distinct decoder conv")
    ap.add_argument("--ltx2", action="store_true", help="profile SGLang's LTX-2 video VAE decode (off only)")
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    args = ap.parse_args()
    from kda_lab.e2e import models, runtime

    runtime.init_sglang("cuda")
    mod = candidate()
    fast = mod.FAST_PATHS["hunyuanvideo_vae_decoder"]
    import importlib

    mods = {n: importlib.import_module(f"{mod.__name__}.{n}") for n in ("fast_path", "gn_silu_cl")}
    checks = kernel_checks(type("M", (), mods))
    rows = {
        "untiled_5x32x32": lambda: models._hunyuan_vae("cuda", False, (1, 16, 5, 32, 32), seed=13, tiled=False),
        "tiled_9x60x106": lambda: models._hunyuan_vae("cuda", False, (1, 16, 9, 60, 106), seed=19, tiled=True),
    }
    if args.issue_latent:
        rows["untiled_9x60x106"] = lambda: models._hunyuan_vae("cuda", False, (1, 16, 9, 60, 106), seed=23,
                                                                 tiled=False)
    results = []
    seed = random.randrange(2**31)
    for name, build in rows.items():
        if args.rows and name not in args.rows:
            continue
        t0 = time.time()
        try:
            results.append(decode_row(name, build, fast, args.trials, seed))
        except Exception as e:  # noqa: BLE001 - one row failing must not lose the others
            results.append({"row": name, "error": f"{type(e).__name__}: {e}"})
        print(f"{name}: {time.time() - t0:.0f} s", file=sys.stderr, flush=True)
    extra: dict[str, Any] = {}
    if args.conv_bits:
        try:
            extra["conv_bits"] = conv_bits(rows["untiled_5x32x32"])
        except Exception as e:  # noqa: BLE001
            extra["conv_bits_error"] = f"{type(e).__name__}: {e}"
    if args.ltx2:
        try:
            extra["ltx2"] = ltx2_profile(args.trials)
        except Exception as e:  # noqa: BLE001
            extra["ltx2"] = {"error": f"{type(e).__name__}: {e}"}
    env = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "cudnn": torch.backends.cudnn.version(),
           "seed": seed, "trials": args.trials}
    Path(args.out).mkdir(parents=True, exist_ok=True)
    (Path(args.out) / "fast_path_probe.json").write_text(json.dumps(
        {"env": env, "kernel_checks": checks, "rows": results, **extra}, indent=1))
    print(json.dumps(checks))
    print(f"{'row':<18} {'off ms':>9} {'on ms':>9} {'speedup':>8} {'A/A':>6} {'on-off':>9} {'err off':>9} {'err on':>9}")
    for r in results:
        if "error" in r:
            print(f"{r['row']:<18} ERROR {r['error'][:200]}")
            continue
        print(f"{r['row']:<18} {statistics.median(r['off_ms']):9.2f} {statistics.median(r['on_ms']):9.2f} "
              f"{r['speedup']:8.3f} {r['aa_spread']:6.3f} {r['max_abs_on_vs_off']:9.2e} {r['err_off_vs_fp32']:9.2e} "
              f"{r['err_on_vs_fp32']:9.2e}")
        print("   off:", {k: round(v, 1) for k, v in r["profile_off_ms"].items()})
        print("   on: ", {k: round(v, 1) for k, v in r["profile_on_ms"].items()})
        print(f"   SGLang with channels_last_3d conv weights: off {statistics.median(r['cl_off_ms']):.2f} ms, on "
              f"{statistics.median(r['cl_on_ms']):.2f} ms, {r['cl_speedup']:.3f}x;",
              {k: round(v, 1) for k, v in r["cl_profile_off_ms"].items()})
    if "conv_bits" in extra:
        cb = extra["conv_bits"]
        print(f"conv bits NCDHW vs NDHWC: {sum(c['bit_exact'] for c in cb)}/{len(cb)} distinct convs bit-exact; "
              f"max |diff| {max(c['max_abs'] for c in cb):.3g}")
    if "ltx2" in extra:
        lt = extra["ltx2"]
        print("ltx2:", lt.get("error") or f"{statistics.median(lt['ms']):.1f} ms, "
              + str({k: round(v, 1) for k, v in lt["profile_ms"].items()}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
