"""`kda e2e`: build SGLang's model rows, run them with the overlay off and on, record and print the result."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from kda_lab.e2e.run import record, run_row, stamp, start
from kda_lab.measure.gpu_select import add_arguments as add_gpu_arguments
from kda_lab.measure.gpu_select import select_gpu

DEFAULT_BLOCKS = 2  # DiT depth per stack on the GPU by default (sized for one < 9 min run of every row)


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


def cmd_e2e(args: argparse.Namespace) -> int:
    import torch

    from kda_lab.e2e import parallel, runtime, tiering
    from kda_lab.e2e import rows as e2e_rows

    try:
        quality = tiering.check_quality(args.quality)
        layout = parallel.check(args.sp, args.tp)
    except ValueError as e:
        print(f"kda e2e: {e}", file=sys.stderr)
        return 2
    if layout is not None and not args.list:  # worker processes, as SGLang's launcher starts them (issue 42)
        from kda_lab.e2e import multi

        try:
            rows = e2e_rows.select(args.rows, args.model)
        except KeyError as e:
            print(f"kda e2e: {e.args[0]}", file=sys.stderr)
            return 2
        blocks = args.blocks if args.blocks is not None else (None if args.full else DEFAULT_BLOCKS)
        code, results = multi.run(args, layout, quality, rows, blocks)
        if results:
            print(table(results))
        return code
    if args.request or args.list_requests:
        from kda_lab.e2e import request

        return request.cmd_request(args, quality)
    try:
        rows = e2e_rows.select(args.rows, args.model)
    except KeyError as e:
        print(f"kda e2e: {e.args[0]}", file=sys.stderr)
        return 2
    not_vae = [r.name for r in rows if r.kind != "vae"]
    if args.conv_floor and not_vae:
        print(f"kda e2e: --conv-floor measures VAE decode rows; not one: {', '.join(not_vae)}", file=sys.stderr)
        return 2
    if args.list:
        from kda_lab.e2e.sharded import FORMS

        for r in rows:
            if layout is None or r.name in FORMS:
                split = f"  [{'/'.join(FORMS[r.name].degrees)}: {FORMS[r.name].how}]" if r.name in FORMS else ""
                print(f"{r.name:<26} {r.model:<18} {r.module:<52} {r.cites}{split}")
        return 0
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if args.gpu is not None:  # --gpu INDEX|UUID: that GPU, refused when busy (kda_lab.measure.gpu_select)
        device = str(select_gpu(args.gpu, args.allow_busy))
    if device == "meta" and not args.conv_floor:
        print("kda e2e: --device meta runs no data: it only counts a decode's convolutions (--conv-floor)",
              file=sys.stderr)
        return 2
    tiny = args.tiny or device == "cpu"
    blocks = args.blocks if args.blocks is not None else (None if args.full else DEFAULT_BLOCKS)
    try:
        runtime.init_sglang("cpu" if device == "meta" else device, args.attention_backend)  # meta: the host's
    except Exception as e:  # noqa: BLE001 - a missing import dep or a broken SGLang: one clear line, exit 2
        hint = "" if isinstance(e, runtime.MissingModelDeps) else " (on the GPU box: carry .gpu-stage-c, docs/e2e.md)"
        print(f"kda e2e: FAIL cannot set up SGLang's runtime on {device}: {type(e).__name__}: {e}{hint}",
              file=sys.stderr)
        return 2
    seed, env, run_id = start(device, args.seed)
    if args.conv_floor:
        return _conv_floor(rows, device, tiny, quality, seed, env, run_id, args.out)
    results = []
    for r in rows:
        print(f"kda e2e: {r.name} ({r.model}, {r.module}) ...", file=sys.stderr, flush=True)
        rec = run_row(r, device, tiny, blocks, args.trials, seed, profile=not args.no_profile, quality=quality,
                      aa=args.aa)
        stamp(rec, run_id, env, args.supersedes)
        results.append(rec)
    record(results, run_id, args.no_record, args.out)
    print(f"kda e2e: run {run_id} on {env.get('gpu_name')} ({'tiny' if tiny else 'production'} sizes, "
          f"quality {quality}, DiT blocks {blocks or 'full'}, {args.trials} trials)"
          f"{'' if args.no_record else ', appended to e2e/rows.csv'}")
    print(table(results))
    return 1 if any(r["status"] != "ok" for r in results) else 0


def _conv_floor(rows: list[Any], device: str, tiny: bool, quality: str, seed: int, env: dict[str, Any],
                run_id: str, out: str | None) -> int:
    """``--conv-floor`` (VAE rows only, checked by the caller): each row's convolutions replayed alone; JSON under
    ``--out``/$OUT, nothing appended to e2e/rows.csv."""
    from kda_lab.e2e import conv_floor

    out_dir = os.environ.get("OUT") if out is None else out
    status = 0
    for r in rows:
        print(f"kda e2e: conv floor of {r.name} ({r.model}) ...", file=sys.stderr, flush=True)
        try:
            rec = conv_floor.measure_row(r, device, tiny, quality, seed)
        except Exception as e:  # noqa: BLE001 - one row's failure is reported, the others still run
            print(f"kda e2e: {r.name}: conv floor FAILED: {type(e).__name__}: {e}"[:500], file=sys.stderr)
            status = 1
            continue
        rec.update(run_id=run_id, seed=seed, tiny=int(tiny), env=env)
        if out_dir:
            Path(out_dir).mkdir(parents=True, exist_ok=True)
            (Path(out_dir) / f"conv-floor-{r.name}-{run_id}.json").write_text(json.dumps(rec, indent=1,
                                                                                        default=str))
        results = [conv_floor.ConvResult(conv_floor.ConvCall(**x["call"]), x["count"],
                                         {v: conv_floor.VariantTime(**t) for v, t in x["times"].items()})
                   for x in rec["results"]]
        print(f"== conv floor: {r.name} at {quality} on {rec['gpu_name']} ({'tiny' if tiny else 'production'}; "
              f"decode: {rec['decode_conv_calls']} conv calls, {rec['decode_conv_gflop']:.0f} GFLOP)")
        print(conv_floor.table(results, rec["summary"]))
    return status


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
    p.add_argument("--stage", choices=("denoise_step", "decode"),
                   help="with --request: run one stage only (a request too long for one call; the report "
                        "puts the latest row of each stage together)")
    p.add_argument("--rows", nargs="+", help="e2e row names (--list shows them)")
    p.add_argument("--sp", type=int, metavar="N",
                   help="N worker processes with SGLang's sequence parallelism (--sp-degree N; one per GPU, gloo "
                        "processes on a CPU): rows with a parallel form (--list --sp N), judged against one process")
    p.add_argument("--tp", type=int, metavar="N", help="N worker processes with SGLang's tensor parallelism "
                   "(--tp-size N); with --sp, sp x tp workers")
    p.add_argument("--list", action="store_true", help="list the rows and the production rows they cite")
    p.add_argument("--trials", type=int, default=5)
    p.add_argument("--aa", action="store_true",
                   help="A/A: both arms with the overlay off (the run's noise; rows marked A/A in `timing`)")
    p.add_argument("--tiny", action="store_true", help="tiny configurations (the default on a CPU)")
    p.add_argument("--blocks", type=int, help=f"DiT stack depth (default {DEFAULT_BLOCKS})")
    p.add_argument("--full", action="store_true", help="DiTs at their full depth (whole transformer)")
    p.add_argument("--device", help="cuda or cpu (default: cuda when available)")
    add_gpu_arguments(p)  # --gpu INDEX|UUID, --allow-busy
    p.add_argument("--attention-backend", help="SGLang attention backend (default: torch_sdpa on CPU, SGLang's "
                   "own choice on a GPU; e.g. torch_sdpa when the GPU's flash-attention package is missing)")
    p.add_argument("--seed", type=int, help="input/order seed (default random, recorded)")
    p.add_argument("--conv-floor", action="store_true",
                   help="VAE rows: capture one decode's convolutions and time each alone under cuDNN settings "
                        "(the conv floor; JSON to --out/$OUT, not recorded in e2e/rows.csv)")
    p.add_argument("--no-profile", action="store_true", help="skip the torch profiler pass")
    p.add_argument("--no-record", action="store_true", help="do not append to e2e/rows.csv")
    p.add_argument("--out", help="also write the results as JSON here (default $OUT when set)")
    p.add_argument("--supersedes", metavar="RUN_ID", help="this run replaces an earlier, mistaken run")
    p.set_defaults(func=cmd_e2e)
