"""`kda e2e --sp N` / `--tp N` (issue 42): the selected rows in N worker processes started the way SGLang
starts its diffusion workers (kda_lab.e2e.workers), overlay off and on in every worker, judged against one
process and recorded as one ledger row per e2e row.

The parent process checks the request (degrees, rows, SGLang's own resolution of the layout), starts the
workers, computes each row's one-process reference meanwhile (the same parallel form, kda_lab.e2e.sharded, in
a world of one; under TP it also hands the workers its weights), then judges every worker's report:

- the worker ran the row (status ok) and its overlay installed what it installs here: every promoted function
  is installed, unavailable on its device, or waiting for an SGLang module the worker never imported; a worker
  whose ``kda_kernels.status()`` shows one not installed for another reason (``install()`` did nothing, a rank
  without the patch) fails the row;
- every worker holds the same gathered output, and overlay off and on agree within the row's tolerance in
  each;
- worker 0's output equals the one-process output bit for bit, else by the model-level criterion against the
  one-process forward in fp32 (kda_lab.e2e.measure.model_agreement): splitting the sequence or the weights
  reorders sums.

The row carries ``parallel`` (the degrees SGLang resolved) and ``workers`` (per worker: its status digest, its
agreement, its times, and how its output compares): a row at one layout never supersedes a row at another.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from kda_lab.e2e.parallel import Layout, LayoutError

COLLECT_S = 3600.0  # the longest the parent waits for every worker's report


class RunError(RuntimeError):
    """A run that cannot start (exit 2, nothing recorded)."""


def check_request(args: argparse.Namespace, layout: Layout, rows: list[Any], device: str) -> dict[str, Any]:
    """{row: its parallel form}: every check that needs no SGLang import (RunError with the line to print)."""
    import torch

    from kda_lab.e2e import sharded

    if args.request or args.list_requests or args.stage:
        raise RunError("--sp/--tp run module rows; whole requests (--request, --stage) run in one process "
                       "only (their stages build SGLang's own pipeline, which no worker layout reaches yet)")
    if args.gpu is not None:
        raise RunError("--gpu picks one GPU; worker r of --sp/--tp takes cuda:r (pick the GPUs with "
                       "CUDA_VISIBLE_DEVICES)")
    forms = {}
    for r in rows:
        try:
            forms[r.name] = sharded.form(r.name, layout.sp, layout.tp)
        except KeyError as e:
            raise RunError(e.args[0]) from None
        if device == "cpu" and not r.cpu_forward:
            raise RunError(f"{r.name}: SGLang's CPU forward of this module needs sgl_kernel's CPU ops; it "
                           "runs split across workers on GPUs only")
    if device.startswith("cuda") and torch.cuda.device_count() < layout.world:
        raise RunError(f"{layout.asked} needs {layout.world} GPUs (one per worker), this host has "
                       f"{torch.cuda.device_count()}")
    return forms


def check_layout(args: argparse.Namespace, layout: Layout, forms: dict[str, Any], tiny: bool,
                 device: str) -> Any:
    """SGLang's ServerArgs for the layout, after the checks that need SGLang (its own validation of the
    degrees, the heads each row splits); LayoutError with the line to print."""
    from kda_lab.e2e import parallel

    sglang_args = parallel.resolve(layout, device, args.attention_backend)
    for name, f in forms.items():
        heads = f.heads(tiny)
        if heads:
            parallel.check_heads(sglang_args, name, heads)
    return sglang_args


def reference(row: Any, form: Any, device: str, tiny: bool, blocks: int | None, quality: str,
              weights: Path | None) -> dict[str, Any]:
    """The row's one-process output of the same parallel form (overlay off, at ``quality``) and its fp32
    forward; writes the module's weights to ``weights`` first (TP workers load them)."""
    import torch

    from kda_lab.e2e import measure, runtime, tiering

    built = row.build(device, tiny, blocks)
    if weights is not None:
        torch.save(built.module.state_dict(), weights.with_suffix(".part"))
        os.replace(weights.with_suffix(".part"), weights)  # a worker never reads half a file
    if not device.startswith("cuda"):
        runtime.native_custom_ops(built.module)
    f = form.make(built, device)
    retier, forward = tiering.applier(row.kind, f, quality)
    measure.overlay(False)
    retier()
    with torch.no_grad():
        out = forward().detach().cpu()
        fp32 = f.fp32_forward().detach().cpu() if f.fp32_forward is not None else None
    del built, f
    return {"out": out, "fp32": fp32}


# TP sums each row-parallel layer's output from per-worker partial sums rounded to the compute dtype
# (SGLang's all-reduce of bf16 partials): one more rounding per such layer than one process. Up to twice one
# process's own distance to the fp32 forward is taken for that; a model that is not the one-process model (a
# wrong weight shard) would be off by the output's own scale (not measured). Measured: the tiny FLUX.1 DiT at
# TP 2 on the CPU, 1.6x.
TP_ERR_RATIO = 2.0


def vs_one_process(ref: dict[str, Any], out: Any, tp: int = 1) -> tuple[bool, str]:
    """Worker 0's overlay-off output against one process: bit for bit, else the model-level criterion
    (measure.MODEL_ERR_RATIO; under TP, :data:`TP_ERR_RATIO`)."""
    import torch

    from kda_lab.e2e.measure import MODEL_ERR_RATIO, model_agreement

    one = ref["out"]
    if out.shape != one.shape:
        return False, f"shape {list(out.shape)} vs one process {list(one.shape)}"
    if torch.equal(out, one):
        return True, "bit for bit"
    if ref["fp32"] is None:
        err = float((out.double() - one.double()).abs().max())
        return False, f"max abs err {err:.3g} and no fp32 forward to judge it"
    return model_agreement(one, out, ref["fp32"], TP_ERR_RATIO if tp > 1 else MODEL_ERR_RATIO)


def judge(name: str, reports: list[dict[str, Any]], ref: dict[str, Any] | None, rank0: dict[str, Any] | None,
          label: str, tp: int = 1) -> dict[str, Any]:
    """One ledger row from every worker's result for row ``name``: worker 0's measurement, ``parallel``,
    ``workers``, and status/agree/error over all workers (module docstring)."""
    results = [next((x for x in rep["results"] if x["record"]["row"] == name), None) for rep in reports]
    base = dict(results[0]["record"]) if results[0] else {"row": name}
    first = results[0] or {}
    installed0 = first.get("digest", {}).get("installed")
    output0 = first.get("outputs", {}).get("off")
    failures: list[str] = []  # a worker that did not run the row, or ran it without the overlay
    differences: list[str] = []  # outputs that do not agree
    workers = []
    for rank, (rep, res) in enumerate(zip(reports, results, strict=True)):
        if res is None:
            failures.append(f"worker {rank}: {rep.get('error') or 'no result'}")
            workers.append({"rank": rank, "status": "failed", "error": rep.get("error", "")})
            continue
        rec, dig = res["record"], res.get("digest") or {}
        same = (res.get("outputs") or {}).get("off") == output0
        workers.append({"rank": rank, "device": rep.get("device", ""), "status": rec["status"],
                        "agree": rec.get("agree", ""), "off_ms": rec.get("off_device_ms"),
                        "on_ms": rec.get("on_device_ms"), "same_output_as_worker_0": same, **dig})
        if rec["status"] == "failed":
            failures.append(f"worker {rank}: {rec.get('error', '')}")
        elif not dig:
            failures.append(f"worker {rank}: no kda_kernels.status() read (the overlay-on forward never ran)")
        elif dig["unexplained"]:
            failures.append(f"worker {rank}: overlay not installed: " + "; ".join(
                f"{fn} ({why})" for fn, why in sorted(dig["unexplained"].items())[:3]))
        elif dig["installed"] != installed0:
            failures.append(f"worker {rank}: installed {len(dig['installed'])} functions, worker 0 "
                            f"{len(installed0 or [])}")
        if rec.get("agree") != 1 and rec["status"] != "failed":
            differences.append(f"worker {rank}: overlay off and on disagree ({rec.get('tolerance', '')})")
        if not same:
            differences.append(f"worker {rank}: its gathered output differs from worker 0's")
    one_text = "not compared (worker 0 left no output)"
    if ref is not None and rank0 is not None:
        ok, one_text = vs_one_process(ref, rank0["off"], tp)
        if not ok:
            differences.append(f"worker 0 vs one process: {one_text}")
    workers[0]["one_process"] = one_text
    status = "failed" if failures else ("disagree" if differences else "ok")
    base.update(parallel=label, workers=json.dumps(workers, sort_keys=True, default=str),
                agree=int(not differences and not failures), status=status,
                tolerance=f"{base.get('tolerance', '')}; vs one process: {one_text}".lstrip("; "))
    if failures or differences:
        base["error"] = "; ".join(failures + differences)[:1000]
    return base


def run(args: argparse.Namespace, layout: Layout, quality: str, rows: list[Any], blocks: int | None
        ) -> tuple[int, list[dict[str, Any]]]:
    """The whole multi-worker run: (exit code, the rows recorded); 2: refused, nothing recorded; 1: a row not
    ok (or the run broke off: nothing recorded). ``blocks``: DiT depth on a GPU (kda_lab.e2e.command)."""
    import torch

    from kda_lab.e2e import parallel, runtime, workers
    from kda_lab.e2e.run import record, stamp, start

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    tiny = args.tiny or device == "cpu"
    try:
        env = workers.rank_env(os.environ.get(workers.WORKER_ENV))
        forms = check_request(args, layout, rows, device)
        runtime.init_sglang(device, args.attention_backend)
        label = parallel.label(check_layout(args, layout, forms, tiny, device)) or f"sp={layout.sp}"
    except (RunError, LayoutError, ValueError) as e:
        print(f"kda e2e: {e}", file=sys.stderr)
        return 2, []
    seed, env_cols, run_id = start(device, args.seed)
    run_dir = Path(tempfile.mkdtemp(prefix=f"kda-e2e-{run_id}-"))
    job = workers.Job(sp=layout.sp, tp=layout.tp, device=device, attention_backend=args.attention_backend,
                      rows=tuple(r.name for r in rows), tiny=tiny, blocks=blocks, trials=args.trials,
                      seed=seed, profile=not args.no_profile, quality=quality, aa=args.aa,
                      run_dir=str(run_dir), port=workers.free_port())
    print(f"kda e2e: {layout.world} workers ({label}) on {device}, rows {', '.join(job.rows)}",
          file=sys.stderr, flush=True)
    procs = workers.spawn(job, env)  # the parent computes the one-process references while they start
    try:
        refs = {r.name: reference(r, forms[r.name], device, tiny, blocks, quality,
                                  workers.weights_path(str(run_dir), r.name) if layout.tp > 1 else None)
                for r in rows}
        reports = workers.collect(procs, COLLECT_S)
        results = []
        for r in rows:
            out0 = workers.outputs_path(str(run_dir), r.name)
            rank0 = torch.load(out0) if out0.exists() else None
            rec = judge(r.name, reports, refs[r.name], rank0, reports[0].get("parallel") or label, layout.tp)
            stamp(rec, run_id, env_cols, args.supersedes)
            results.append(rec)
    except RuntimeError as e:
        print(f"kda e2e: FAIL {e}; nothing recorded", file=sys.stderr)
        return 1, []
    finally:
        workers.stop(procs)  # those still running after a failure; the others have exited
        shutil.rmtree(run_dir, ignore_errors=True)
    record(results, run_id, args.no_record, args.out)
    print(f"kda e2e: run {run_id}, {layout.world} workers ({label}) on {env_cols.get('gpu_name')} "
          f"({'tiny' if tiny else 'production'} sizes, quality {quality}, {args.trials} trials)"
          f"{'' if args.no_record else ', appended to e2e/rows.csv'}")
    for rec in results:
        if rec.get("error"):
            print(f"kda e2e: {rec['row']}: {rec['error']}", file=sys.stderr)
    return (1 if any(r["status"] != "ok" for r in results) else 0), results
