"""One e2e row measured end to end (build, tier, agreement, timing, profile) and the overlay's build step:
shared by `kda e2e`'s module rows (kda_lab.e2e.command) and its whole requests (kda_lab.e2e.request)."""

from __future__ import annotations

import gc
import json
import os
import sys
import traceback
from collections.abc import Callable
from typing import Any

ENV_COLUMNS = ("gpu_name", "gpu_cc", "driver", "torch", "triton", "cuda", "sglang", "git_commit", "git_dirty",
               "command")


def start(device: str, seed: int | None) -> tuple[int, dict[str, Any], str]:
    """(seed, environment, run id) of a new run: the promoted extensions built first on a GPU."""
    import datetime as _dt
    import secrets

    from kda_lab.measure import env as envmod
    from kda_lab.paths import repo_root

    if device.startswith("cuda"):
        _build_promoted()
    seed = seed if seed is not None else secrets.randbelow(2**31)
    env = envmod.capture(repo_root(), device if device.startswith("cuda") else None)
    run_id = _dt.datetime.now(_dt.UTC).strftime("%Y%m%d-%H%M%S-") + secrets.token_hex(3)
    return seed, env, run_id


def stamp(rec: dict[str, Any], run_id: str, env: dict[str, Any], supersedes: str | None) -> dict[str, Any]:
    """A measured row with its run, the environment columns and the import versions."""
    rec.update(run_id=run_id, arch=env.get("arch", ""), supersedes=supersedes or "",
               **{k: env.get(k, "") for k in ENV_COLUMNS}, **_versions())
    return rec


def record(results: list[dict[str, Any]], run_id: str, no_record: bool, out: str | None) -> None:
    """Append a run's rows to e2e/rows.csv (unless ``no_record``) and write them as JSON under ``out`` ($OUT when
    None), with a copy of the ledger: the GPU box has no git, so the lead copies it back over e2e/rows.csv."""
    import shutil
    from pathlib import Path

    from kda_lab.ledger import e2e as e2e_ledger
    from kda_lab.paths import repo_root

    if not no_record:
        e2e_ledger.append(repo_root(), results)
    out_dir = os.environ.get("OUT") if out is None else out
    if out_dir:
        Path(out_dir).mkdir(parents=True, exist_ok=True)
        (Path(out_dir) / f"e2e-{run_id}.json").write_text(json.dumps(results, indent=1, default=str))
        if not no_record:
            shutil.copy2(e2e_ledger.path(repo_root()), Path(out_dir) / "e2e-rows.csv")


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
            profile: bool, quality: str = "lossless", stage: str = "module", graphs_ok: bool = True,
            aa: bool = False, transform: Callable[[Any], Any] | None = None,
            probe: Callable[[Any, Any], None] | None = None) -> dict[str, Any]:
    """Measure one row at SGLang request ``quality``; every failure becomes a row with status 'failed' and the
    error (never a traceback). ``stage``: a request's stage (``kda_lab.e2e.request``), timed eagerly. ``aa``:
    both arms with the overlay off (its ``timing`` ends in ``A/A``: the run's noise, not a speedup).
    ``transform``: the built row as it runs instead (a worker's split inputs, kda_lab.e2e.sharded); ``probe``:
    called with the overlay-off and overlay-on outputs of the agreement forwards while the overlay is still
    installed (a worker reads ``kda_kernels.status()`` there, kda_lab.e2e.workers)."""
    import torch

    from kda_lab.e2e import measure, runtime, tiering
    from kda_lab.ledger.e2e import AA_MARK

    measure.A_A[0] = aa

    rec: dict[str, Any] = {"row": row.name, "model": row.model, "module": row.module, "kind": row.kind,
                           "quality": quality, "stage": stage,
                           "cites": row.cites, "dtype": measure.DTYPE_NAMES.get(row.dtype, str(row.dtype)),
                           "tiny": int(tiny), "trials": trials, "seed": seed,
                           "blocks": "" if row.kind != "dit" else (blocks if blocks is not None else "full")}
    cuda = device.startswith("cuda")
    built = None
    try:
        built = row.build(device, tiny, blocks)
        if transform is not None:
            built = transform(built)
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
            from kda_lab.e2e.conv_floor import ConvFlops

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
            if probe is not None:
                probe(ref, out)
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
            rec["timing"] = t.method + (AA_MARK if aa else "")
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
                from kda_lab.e2e.kernels import idle_families, shares, top_kernels, vae_split

                # the same forward calls the same targets in both arms; the trace sees them with the overlay on
                idle = idle_families(ran.calls, {fn: v["family"] for fn, v in st.items() if v.get("installed")})
                for state in ("off", "on"):
                    with ConvFlops(built.module) as flops:
                        times = measure.profile_times(forward, state == "on", cuda)
                    if row.kind == "vae":  # the decode split and the conv floor (issue #36)
                        split = vae_split(times, idle)
                        rec[f"split_{state}"] = json.dumps(split, sort_keys=True)
                        if split.get("conv"):
                            rec[f"conv_tflops_{state}"] = flops.flops / (split["conv"] * 1e-3) / 1e12
                    rec[f"shares_{state}"] = json.dumps({k: round(v, 4) for k, v in shares(times, idle).items()},
                                                        sort_keys=True)
                    rec[f"kernel_ms_{state}"] = sum(times.values()) / 1e3
                    rec[f"top_kernels_{state}"] = json.dumps(top_kernels(times, idle=idle))
        rec["status"] = "ok" if ok else "disagree"
    except Exception as e:  # noqa: BLE001 - one row's failure is reported, the others still run
        rec.update(status="failed", error=f"{type(e).__name__}: {e}"[:500])
        if os.environ.get("KDA_E2E_TRACEBACK"):
            traceback.print_exc()
    finally:
        from kda_lab.e2e.measure import AFTER_SWITCH, overlay

        AFTER_SWITCH.clear()
        overlay(False)
        measure.A_A[0] = False
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


def _build_promoted() -> None:
    """install() never compiles (a missing build leaves SGLang's kernel in place), so "on" would time SGLang
    on
    both sides: build every promoted CUDA extension first (a lab command may compile; a serving process may
    not).
    """
    import kda_kernels

    for key, r in kda_kernels.build().items():
        state = ("already built" if r.get("was_built") else f"built in {r['seconds']:.1f} s") if r["ok"] else \
            f"FAIL {r['error'][-300:]} (overlay-on rows will time SGLang's kernel for this family)"
        print(f"kda e2e: {key} extension {r['extension']}: {state}", file=sys.stderr, flush=True)


