"""`kda e2e`: build SGLang's model rows, run them with the overlay off and on, record and print the result."""

from __future__ import annotations

import argparse
import datetime as _dt
import gc
import json
import os
import secrets
import shutil
import sys
import traceback
from pathlib import Path
from typing import Any

from kda_lab.measure.gpu_select import add_arguments as add_gpu_arguments
from kda_lab.measure.gpu_select import select_gpu

DEFAULT_BLOCKS = 2  # DiT depth per stack on the GPU by default (sized for one < 9 min run of every row)


def _versions() -> dict[str, str]:
    from importlib import metadata

    out = {}
    for dist in ("transformers", "diffusers"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = ""
    return out


def run_row(row: Any, device: str, tiny: bool, blocks: int | None, trials: int, seed: int,
            profile: bool, quality: str = "lossless", stage: str = "module", graphs_ok: bool = True) -> dict[str, Any]:
    """Measure one row at SGLang request ``quality``; every failure becomes a row with status 'failed' and the
    error (never a traceback). ``stage``: a request's stage (``kda_lab.e2e.request``), timed eagerly."""
    import torch

    from kda_lab.e2e import measure, runtime, tiering

    rec: dict[str, Any] = {"row": row.name, "model": row.model, "module": row.module, "kind": row.kind,
                           "quality": quality, "stage": stage,
                           "cites": row.cites, "dtype": measure.DTYPE_NAMES.get(row.dtype, str(row.dtype)),
                           "tiny": int(tiny), "trials": trials, "seed": seed,
                           "blocks": "" if row.kind != "dit" else (blocks if blocks is not None else "full")}
    cuda = device.startswith("cuda")
    built = None
    try:
        built = row.build(device, tiny, blocks)
        rec["config"] = json.dumps(built.config, sort_keys=True, default=str)
        rec["shape"] = built.shape
        if not cuda:
            runtime.native_custom_ops(built.module)
        retier, forward = tiering.applier(row.kind, built, quality)
        measure.AFTER_SWITCH[:] = [retier]
        prom = measure.promoted()
        with torch.no_grad():
            if not cuda and not row.cpu_forward:
                measure.overlay(True)
                st = measure.promoted()
                measure.overlay(False)
                rec.update(status="ok", timing="construction only (cpu)", agree="",
                           overlay=_overlay_text(st, row), promoted=_promoted_text(prom),
                           error="SGLang's CPU forward of this module needs sgl_kernel's CPU ops")
                return rec
            from kda_kernels.dispatch import trace_impl_calls

            measure.overlay(False)
            rec["fusions"] = json.dumps(tiering.fusions(built.module, row.kind), sort_keys=True)
            with trace_impl_calls() as ran_off:
                ref = forward().detach().clone()
            rec["coverage_off"] = json.dumps(ran_off.calls, sort_keys=True)
            measure.overlay(True)
            st = measure.promoted()
            with trace_impl_calls() as ran:  # judged by the kernels that ran in this model, not every promotion
                out = forward().detach().clone()
            rec["coverage_on"] = json.dumps(ran.calls, sort_keys=True)
            measure.overlay(False)
            if quality == "exact":  # SGLang's promise for the exact tier, kept through the overlay: bit for bit
                tol = measure.Tolerance(0.0, 0.0, "exact tier: bit for bit")
            else:
                tol = measure.family_tolerance(ran, row.dtype)
            ok, err = tol.check(ref, out)
            tol_text = f"atol={tol.atol:g} rtol={tol.rtol:g} ({tol.source}; ran: {' '.join(sorted(ran)) or 'none'})"
            if not ok and built.fp32_forward is not None and quality != "exact":
                ok, tol_text = measure.model_agreement(ref, out, built.fp32_forward())
            rec.update(agree=int(ok), max_abs_err=err, tolerance=tol_text,
                       overlay=_overlay_text(st, row), promoted=_promoted_text(prom))
            del ref, out
            t = measure.time_states(forward, trials, seed, cuda, graphs_ok=graphs_ok)
            rec["timing"] = t.method
            for state in ("off", "on"):
                dev, eag = t.device_ms[state] or t.eager_ms[state], t.eager_ms[state]
                rec[f"{state}_device_ms"] = measure.quantile(dev, 0.5)
                rec[f"{state}_device_p10_ms"] = measure.quantile(dev, 0.1)
                rec[f"{state}_device_p90_ms"] = measure.quantile(dev, 0.9)
                rec[f"{state}_eager_ms"] = measure.quantile(eag, 0.5)
                rec[f"{state}_eager_p10_ms"] = measure.quantile(eag, 0.1)
                rec[f"{state}_eager_p90_ms"] = measure.quantile(eag, 0.9)
            rec["speedup"] = rec["off_device_ms"] / rec["on_device_ms"]
            rec["eager_speedup"] = rec["off_eager_ms"] / rec["on_eager_ms"]
            if profile:
                from kda_lab.e2e.kernels import shares, top_kernels, vae_split

                for state in ("off", "on"):
                    with measure.ConvFlops(built.module) as flops:
                        times = measure.profile_times(forward, state == "on", cuda)
                    if row.kind == "vae":  # the decode split and the conv floor (issue #36)
                        split = vae_split(times)
                        rec[f"split_{state}"] = json.dumps(split, sort_keys=True)
                        if split.get("conv"):
                            rec[f"conv_tflops_{state}"] = flops.flops / (split["conv"] * 1e-3) / 1e12
                    rec[f"shares_{state}"] = json.dumps({k: round(v, 4) for k, v in shares(times).items()},
                                                        sort_keys=True)
                    rec[f"kernel_ms_{state}"] = sum(times.values()) / 1e3
                    rec[f"top_kernels_{state}"] = json.dumps(top_kernels(times))
        rec["status"] = "ok" if ok else "disagree"
    except Exception as e:  # noqa: BLE001 - one row's failure is reported, the others still run
        rec.update(status="failed", error=f"{type(e).__name__}: {e}"[:500])
        if os.environ.get("KDA_E2E_TRACEBACK"):
            traceback.print_exc()
    finally:
        from kda_lab.e2e.measure import AFTER_SWITCH, overlay

        AFTER_SWITCH.clear()
        overlay(False)
        del built
        gc.collect()
        if cuda:
            torch.cuda.empty_cache()
    return rec


def _promoted_text(prom: dict[str, Any]) -> str:
    return " ".join(f"{fn}={v['family']}:{v['source_hash']}" for fn, v in sorted(prom.items()))


def _overlay_text(st: dict[str, Any], row: Any) -> str:
    """Installed functions and the call sites rebound inside this row's SGLang module."""
    mod = "sglang.multimodal_gen.runtime.models." + row.module.partition(":")[0]
    parts = []
    for fn, v in sorted(st.items()):
        sites = [s for s in v["call_sites"] if s.startswith(mod + ".")]
        parts.append(f"{fn}:{'installed' if v['installed'] else 'not installed'}"
                     + (f" ({len(sites)} call site(s) in {row.module.partition(':')[0]})" if sites else ""))
    return "; ".join(parts)


def table(rows: list[dict[str, Any]]) -> str:
    def f(v: Any, fmt: str) -> str:
        return "-" if v in (None, "") else format(v, fmt)

    lines = [f"{'row':<26} {'status':<9} {'off ms':>10} {'on ms':>10} {'speedup':>8} {'eager x':>8} {'agree':>5}  "
             f"{'max err':>9}  device-time shares (overlay off)"]
    for r in rows:
        shares = json.loads(r["shares_off"]) if r.get("shares_off") else {}
        cats = [(k, v) for k, v in shares.items() if not k.startswith("family:")]
        fams = [(k.removeprefix("family:"), v) for k, v in shares.items() if k.startswith("family:")]
        top = ", ".join(f"{k} {v:.0%}" for k, v in sorted(cats, key=lambda kv: -kv[1])[:3])
        if shares:  # every swap-target family's share: what the overlay could ever gain here (Amdahl)
            top += "; swap targets: " + (", ".join(f"{k} {v:.1%}" for k, v in sorted(fams, key=lambda kv: -kv[1]))
                                         or "none")
        lines.append(f"{r['row']:<26} {r['status']:<9} {f(r.get('off_device_ms'), '.3f'):>10} "
                     f"{f(r.get('on_device_ms'), '.3f'):>10} {f(r.get('speedup'), '.3f'):>8} "
                     f"{f(r.get('eager_speedup'), '.3f'):>8} {str(r.get('agree', '-')):>5}  "
                     f"{f(r.get('max_abs_err'), '.2e'):>9}  {top or r.get('error', '')[:60]}")
    return "\n".join(lines)


def _build_promoted() -> None:
    """install() never compiles (a missing build leaves SGLang's kernel in place), so "on" would time SGLang on
    both sides: build every promoted CUDA extension first (a lab command may compile; a serving process may not)."""
    import kda_kernels

    for key, r in kda_kernels.build().items():
        state = ("already built" if r.get("was_built") else f"built in {r['seconds']:.1f} s") if r["ok"] else \
            f"FAIL {r['error'][-300:]} (overlay-on rows will time SGLang's kernel for this family)"
        print(f"kda e2e: {key} extension {r['extension']}: {state}", file=sys.stderr, flush=True)


def cmd_e2e(args: argparse.Namespace) -> int:
    import torch

    from kda_lab.e2e import ledger, models, runtime, tiering
    from kda_lab.measure import env as envmod
    from kda_lab.paths import repo_root

    try:
        quality = tiering.check_quality(args.quality)
    except ValueError as e:
        print(f"kda e2e: {e}", file=sys.stderr)
        return 2
    if args.request or args.list_requests:
        from kda_lab.e2e import request

        return request.cmd_request(args, quality)
    try:
        rows = models.select(args.rows, args.model)
    except KeyError as e:
        print(f"kda e2e: {e.args[0]}", file=sys.stderr)
        return 2
    if args.list:
        for r in rows:
            print(f"{r.name:<26} {r.model:<18} {r.module:<52} {r.cites}")
        return 0
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if args.gpu is not None:  # --gpu INDEX|UUID: that GPU, refused when busy (kda_lab.measure.gpu_select)
        device = str(select_gpu(args.gpu, args.allow_busy))
    tiny = args.tiny or device == "cpu"
    blocks = args.blocks if args.blocks is not None else (None if args.full else DEFAULT_BLOCKS)
    try:
        runtime.init_sglang(device, args.attention_backend)
    except Exception as e:  # noqa: BLE001 - a missing import dep or a broken SGLang: one clear line, exit 2
        print(f"kda e2e: FAIL cannot set up SGLang's runtime on {device}: {type(e).__name__}: {e} "
              "(on the GPU box: carry .gpu-stage-c, docs/e2e.md)", file=sys.stderr)
        return 2
    if device.startswith("cuda"):
        _build_promoted()
    seed = args.seed if args.seed is not None else secrets.randbelow(2**31)
    env = envmod.capture(repo_root(), device if device.startswith("cuda") else None)
    run_id = _dt.datetime.now(_dt.UTC).strftime("%Y%m%d-%H%M%S-") + secrets.token_hex(3)
    results = []
    for r in rows:
        print(f"kda e2e: {r.name} ({r.model}, {r.module}) ...", file=sys.stderr, flush=True)
        rec = run_row(r, device, tiny, blocks, args.trials, seed, profile=not args.no_profile, quality=quality)
        rec.update(run_id=run_id, arch=env.get("arch", ""), supersedes=args.supersedes or "",
                   **{k: env.get(k, "") for k in ("gpu_name", "gpu_cc", "driver", "torch", "triton", "cuda",
                                                  "sglang", "git_commit", "git_dirty", "command")}, **_versions())
        results.append(rec)
    if not args.no_record:
        ledger.append(repo_root(), results)
    out_dir = os.environ.get("OUT") if args.out is None else args.out
    if out_dir:
        Path(out_dir).mkdir(parents=True, exist_ok=True)
        (Path(out_dir) / f"e2e-{run_id}.json").write_text(json.dumps(results, indent=1, default=str))
        if not args.no_record:  # the GPU box has no git: the lead copies this back over e2e/rows.csv
            shutil.copy2(ledger.path(repo_root()), Path(out_dir) / "e2e-rows.csv")
    print(f"kda e2e: run {run_id} on {env.get('gpu_name')} ({'tiny' if tiny else 'production'} sizes, "
          f"quality {quality}, DiT blocks {blocks or 'full'}, {args.trials} trials)"
          f"{'' if args.no_record else ', appended to e2e/rows.csv'}")
    print(table(results))
    return 1 if any(r["status"] != "ok" for r in results) else 0


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("e2e", help="SGLang's own DiT/VAE modules timed with the overlay off vs on",
                              description="Build SGLang 0.5.23's model classes with seeded random weights at "
                                          "production sizes, run them with kda_kernels uninstalled and installed "
                                          "(interleaved), check agreement, profile, append e2e/rows.csv. "
                                          "See docs/e2e.md.")
    p.add_argument("--model", nargs="+", help="model names (substring, e.g. wan hunyuan flux)")
    p.add_argument("--quality", default="lossless", metavar="TIER",
                   help="SGLang request quality tier: exact, lossless (SGLang's default) or high")
    p.add_argument("--request", metavar="MODEL",
                   help="time one whole default request of MODEL (denoising steps + VAE decode; --list-requests)")
    p.add_argument("--list-requests", action="store_true", help="list the models with a request recipe")
    p.add_argument("--rows", nargs="+", help="e2e row names (--list shows them)")
    p.add_argument("--list", action="store_true", help="list the rows and the production rows they cite")
    p.add_argument("--trials", type=int, default=5)
    p.add_argument("--tiny", action="store_true", help="tiny configurations (the default on a CPU)")
    p.add_argument("--blocks", type=int, help=f"DiT stack depth (default {DEFAULT_BLOCKS})")
    p.add_argument("--full", action="store_true", help="DiTs at their full depth (whole transformer)")
    p.add_argument("--device", help="cuda or cpu (default: cuda when available)")
    add_gpu_arguments(p)  # --gpu INDEX|UUID, --allow-busy
    p.add_argument("--attention-backend", help="SGLang attention backend (default: torch_sdpa on CPU, SGLang's "
                   "own choice on a GPU; e.g. torch_sdpa when the GPU's flash-attention package is missing)")
    p.add_argument("--seed", type=int, help="input/order seed (default random, recorded)")
    p.add_argument("--no-profile", action="store_true", help="skip the torch profiler pass")
    p.add_argument("--no-record", action="store_true", help="do not append to e2e/rows.csv")
    p.add_argument("--out", help="also write the results as JSON here (default $OUT when set)")
    p.add_argument("--supersedes", metavar="RUN_ID", help="this run replaces an earlier, mistaken run")
    p.set_defaults(func=cmd_e2e)
