"""`kda e2e --request MODEL`: one whole default request of a served model, overlay off and on, by stage.

A request is the recipe's denoising steps of the full-depth DiT (``kda_lab.e2e.recipes``: steps, and two DiT
forwards per step where classifier-free guidance runs them one after the other) followed by the VAE decode of
the denoised latent, at the request's quality tier (default ``lossless``, SGLang's), eagerly as SGLang runs
these pipelines by default (none of the recipes here turns breakable CUDA graphs on by default; the LTX-2
two-stage pipeline, which does, has no recipe runner yet). Text encoding is left out: it runs once per request
in the text encoder, which the overlay does not touch.

One DiT forward is timed (``stage = denoise_step``, interleaved off/on trials, CUDA events around the eager
forward, so host-bound gaps count) and multiplied by the forwards per request (``steps`` column); the decode
is timed whole (``stage = decode``). Each stage row carries its own agreement, coverage, shares and top
kernels outside GEMM and attention. The request's numbers are derived from the two rows (:func:`summarize`),
never stored twice.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any

import torch

from kda_lab.e2e import models, recipes
from kda_lab.e2e.models import Row

DENOISE, DECODE = "denoise_step", "decode"
RUNNABLE = ("qwen_image", "zimage_turbo", "zimage", "flux1_dev", "hunyuanvideo", "ltx2", "fastwan22_ti2v_5b")


def dit_row(r: recipes.Recipe) -> Row:
    """The DiT of recipe ``r`` at its default size, one forward as the denoising loop runs it."""
    build = {
        "qwen_image": models.build_qwen,
        "zimage_turbo": models.build_zimage,
        "zimage": models.build_zimage,
        "flux1_dev": models.build_flux,
        "hunyuanvideo": functools.partial(models.build_hunyuan, latent=r.latent),
        "ltx2": functools.partial(models.build_ltx2, batch=r.dit_batch, text_tokens=r.text_tokens),
        "fastwan22_ti2v_5b": functools.partial(models.build_wan, arch_over=r.dit_arch, latent=r.latent),
    }[r.name]
    # Wan, HunyuanVideo and Qwen-Image: SGLang's CPU forward needs sgl_kernel's CPU ops
    # (models.Row.cpu_forward)
    return Row(
        f"{r.name}_{DENOISE}",
        r.name,
        "dit",
        r.dit_module,
        torch.bfloat16,
        "",
        build,
        cpu_forward=r.name not in ("qwen_image", "hunyuanvideo", "fastwan22_ti2v_5b"),
    )


def vae_row(r: recipes.Recipe) -> Row:
    """The recipe's decode of its own denoised latent (``Recipe.latent``), built as SGLang's loader builds it.
    """
    from kda_lab.e2e import vae_rows

    spec = vae_rows.REQUEST_VAES[r.name]
    return Row(
        f"{r.name}_{DECODE}",
        r.name,
        "vae",
        r.vae_module,
        r.decode_dtype,
        "",
        vae_rows.vae_row(
            spec.pipeline_config, spec.checkpoint, spec.tiny_key, r.latent, spec.tiny_latent, spec.seed
        ),
    )


def forwards(r: recipes.Recipe) -> int:
    """DiT forwards per request: steps x forwards per step (sequential CFG runs two)."""
    return r.steps * r.dit_forwards_per_step


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The request from its stage rows: per state denoise = step x forwards, request = denoise + decode; the
    request speedup and each stage's share of the off request."""
    by = {r["stage"]: r for r in rows if r.get("status") == "ok" and r.get("off_device_ms") not in (None, "")}
    if DENOISE not in by or DECODE not in by:
        return {}
    n = int(by[DENOISE]["steps"])
    out: dict[str, Any] = {"forwards": n}
    for state in ("off", "on"):
        step = float(by[DENOISE][f"{state}_device_ms"])
        dec = float(by[DECODE][f"{state}_device_ms"])
        out[state] = {"step_ms": step, "denoise_ms": step * n, "decode_ms": dec, "request_ms": step * n + dec}
    out["speedup"] = out["off"]["request_ms"] / out["on"]["request_ms"]
    out["denoise_speedup"] = out["off"]["denoise_ms"] / out["on"]["denoise_ms"]
    out["decode_speedup"] = out["off"]["decode_ms"] / out["on"]["decode_ms"]
    out["decode_share_off"] = out["off"]["decode_ms"] / out["off"]["request_ms"]
    return out


def list_text() -> str:
    lines = []
    for r in recipes.RECIPES:
        state = "" if r.name in RUNNABLE else "  (no runner yet)"
        lines.append(
            f"{r.name:<20} {r.steps:>3} steps x {r.dit_forwards_per_step} forward(s), {r.tokens} tokens, "
            f"{r.height}x{r.width}x{r.frames}, decode {str(r.decode_dtype).removeprefix('torch.')}{state}"
        )
    return "\n".join(lines)


def cmd_request(args: argparse.Namespace, quality: str) -> int:
    import torch

    from kda_lab.e2e import runtime
    from kda_lab.e2e.run import run_row, stamp, start
    from kda_lab.ledger import e2e as e2e_ledger
    from kda_lab.paths import repo_root

    if args.request == "list" or args.list_requests:
        print(list_text())
        return 0
    r = recipes.BY_NAME.get(args.request)
    if r is None or r.name not in RUNNABLE:
        known = ", ".join(n for n in RUNNABLE)
        why = "has no runner yet" if r is not None else "has no request recipe"
        print(f"kda e2e: {args.request!r} {why}; requests: {known}", file=sys.stderr)
        return 2
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    tiny = args.tiny or device == "cpu"
    try:
        runtime.init_sglang(device, args.attention_backend)
    except Exception as e:  # noqa: BLE001 - one clear line, exit 2
        print(
            f"kda e2e: FAIL cannot set up SGLang's runtime on {device}: {type(e).__name__}: {e}",
            file=sys.stderr,
        )
        return 2
    seed, env, run_id = start(device, args.seed)
    results = []
    stages = [(DENOISE, dit_row(r), forwards(r)), (DECODE, vae_row(r), 1)]
    for stage, row, steps in [x for x in stages if args.stage in (None, x[0])]:
        print(f"kda e2e: request {r.name}, {stage} ({row.module}) ...", file=sys.stderr, flush=True)
        rec = run_row(row, device, tiny, args.blocks, args.trials, seed, profile=not args.no_profile,
                      quality=quality, stage=stage, graphs_ok=False, aa=args.aa)
        stamp(rec, run_id, env, args.supersedes)
        rec.update(request=r.name, steps=steps)
        results.append(rec)
    if not args.no_record:
        e2e_ledger.append(repo_root(), results)
    out_dir = os.environ.get("OUT") if args.out is None else args.out
    summary = summarize(results)
    if out_dir:
        Path(out_dir).mkdir(parents=True, exist_ok=True)
        (Path(out_dir) / f"e2e-{run_id}.json").write_text(
            json.dumps({"rows": results, "request": summary}, indent=1, default=str)
        )
        if not args.no_record:
            shutil.copy2(e2e_ledger.path(repo_root()), Path(out_dir) / "e2e-rows.csv")
    print(
        f"kda e2e: request {r.name} run {run_id} on {env.get('gpu_name')} "
        f"({'tiny' if tiny else 'production'}, "
        f"quality {quality}, {forwards(r)} DiT forwards, DiT blocks {args.blocks or 'full'}, {args.trials} "
        f"{'A/A trials: the overlay off in both arms' if args.aa else ''}"
        f"trials)"
    )
    print(request_table(r.name, summary, results))
    return 1 if any(x["status"] != "ok" for x in results) else 0


def request_table(name: str, s: dict[str, Any], rows: list[dict[str, Any]]) -> str:
    if not s:
        bad = "; ".join(f"{x['stage']}: {x['status']} {x.get('error', '')[:120]}" for x in rows)
        return f"{name}: no request total ({bad})"
    lines = [f"{'':<10} {'step ms':>9} {'denoise ms':>11} {'decode ms':>10} {'request ms':>11}"]
    for state in ("off", "on"):
        v = s[state]
        lines.append(
            f"{'overlay ' + state:<10} {v['step_ms']:>9.2f} {v['denoise_ms']:>11.1f} {v['decode_ms']:>10.1f} "
            f"{v['request_ms']:>11.1f}"
        )
    lines.append(
        f"speedup: request {s['speedup']:.3f}x, denoise {s['denoise_speedup']:.3f}x, decode "
        f"{s['decode_speedup']:.3f}x; decode is {s['decode_share_off']:.0%} of the request (overlay off)"
    )
    return "\n".join(lines)
