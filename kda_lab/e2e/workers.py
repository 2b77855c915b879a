"""Worker processes of a multi-process `kda e2e` run (`--sp N` / `--tp N`, issue 42), started the way SGLang's
launcher starts its diffusion workers.

SGLang 0.5.23 (``runtime/launch_server.py``: ``_start_scheduler_processes``) starts one process per GPU from
the ``spawn`` context, all before any waits on the process group; each worker
(``runtime/managers/gpu_worker.py``: ``GPUWorker.init_device_and_model``) sets ``MASTER_ADDR`` (127.0.0.1 on
one node), ``MASTER_PORT``, ``LOCAL_RANK``, ``RANK`` and ``WORLD_SIZE``, caps torch's intra-op threads to its
share of the host's cores (``_worker_cpu_intra_op_threads``) and calls
``maybe_init_distributed_environment_and_model_parallel`` with the degrees of its ServerArgs, whose backend
SGLang's platform picks (NCCL on CUDA, gloo on the CPU). Here each worker does the same
(kda_lab.e2e.runtime.init_sglang), then runs every row of the job with the overlay off and on
(kda_lab.e2e.run.run_row, the row split as SGLang splits it: kda_lab.e2e.sharded), reads its
``kda_kernels.status()`` while the overlay is installed (:func:`status_digest`), and sends its records back
through a pipe; rank 0 also leaves its outputs in the run folder for the parent to compare with one process.

``KDA_E2E_WORKER_ENV`` (JSON, ``{"1": {"VAR": "value"}}``) adds variables to one worker's environment before
it imports anything (e.g. ``NCCL_DEBUG`` for one rank; the tests start one worker with
``KDA_KERNELS_DISABLE=1``).
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import time
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from pathlib import Path
from typing import Any

from kda_lab.e2e.parallel import Layout

WORKER_ENV = "KDA_E2E_WORKER_ENV"
WEIGHTS_WAIT_S = 900  # a TP worker waits this long for the parent's one-process weights


@dataclass(frozen=True)
class Job:
    """What every worker of one run does (pickled to the spawned processes)."""

    sp: int
    tp: int
    device: str  # "cpu" or "cuda" (worker r takes cuda:r)
    attention_backend: str | None
    rows: tuple[str, ...]
    tiny: bool
    blocks: int | None
    trials: int
    seed: int
    profile: bool
    quality: str
    aa: bool
    run_dir: str  # outputs of rank 0 and, under TP, the one-process weights the parent writes
    port: int
    dist_timeout: int = 600

    @property
    def layout(self) -> Layout:
        return Layout(self.sp, self.tp)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def rank_env(text: str | None) -> dict[int, dict[str, str]]:
    """``KDA_E2E_WORKER_ENV``'s value as {rank: {variable: value}}; ValueError naming what is wrong."""
    if not text:
        return {}
    try:
        raw = json.loads(text)
        out = {int(r): {str(k): str(v) for k, v in env.items()} for r, env in raw.items()}
    except (ValueError, AttributeError, TypeError) as e:
        raise ValueError(f"{WORKER_ENV} must be JSON like '{{\"1\": {{\"VAR\": \"value\"}}}}': {e}") from None
    return out


def weights_path(run_dir: str, row: str) -> Path:
    return Path(run_dir) / f"{row}.weights.pt"


def outputs_path(run_dir: str, row: str) -> Path:
    return Path(run_dir) / f"{row}.rank0.pt"


def spawn(job: Job, env: dict[int, dict[str, str]] | None = None) -> list[tuple[Any, Connection]]:
    """Start the job's workers (all before any of them waits on the group); [(process, its pipe)] by rank."""
    import multiprocessing as mp

    context = mp.get_context("spawn")
    out = []
    for rank in range(job.layout.world):
        reader, writer = context.Pipe(duplex=False)
        p = context.Process(target=worker_main, args=(rank, job, writer, (env or {}).get(rank, {})),
                            name=f"kda-e2e-worker-{rank}", daemon=True)
        p.start()
        writer.close()
        out.append((p, reader))
    return out


def stop(workers: list[tuple[Any, Connection]], grace_s: float = 0.0) -> None:
    """Join each worker for ``grace_s``, then terminate and if need be kill it (SGLang's launcher's order)."""
    for p, conn in workers:
        p.join(timeout=grace_s)
        if p.is_alive():
            p.terminate()
            p.join(timeout=10)
        if p.is_alive():
            p.kill()
            p.join(timeout=10)
        conn.close()


def collect(workers: list[tuple[Any, Connection]], timeout_s: float) -> list[dict[str, Any]]:
    """Every worker's report, by rank. A worker that exits without one, or the deadline, stops the others (as
    SGLang's launcher stops a worker group) and raises RuntimeError naming the worker."""
    reports: dict[int, dict[str, Any]] = {}
    deadline = time.monotonic() + timeout_s
    try:
        while len(reports) < len(workers):
            left = deadline - time.monotonic()
            waiting = [r for r in range(len(workers)) if r not in reports]
            if left <= 0:
                raise RuntimeError(f"workers {waiting} sent nothing in {timeout_s:.0f} s")
            handles = {workers[r][1]: r for r in waiting} | {workers[r][0].sentinel: r for r in waiting}
            for handle in wait(list(handles), timeout=left):
                rank = handles[handle]
                if rank in reports:
                    continue
                p, conn = workers[rank]
                if conn.poll():
                    try:
                        reports[rank] = conn.recv()
                        continue
                    except EOFError:
                        pass
                p.join(timeout=5)
                raise RuntimeError(f"worker {rank} exited (code {p.exitcode}) before it reported")
    finally:
        stop(workers, grace_s=30 if len(reports) == len(workers) else 0)
    return [reports[r] for r in range(len(workers))]


def status_digest(module: str) -> dict[str, Any]:
    """This worker's ``kda_kernels.status()`` while the overlay is installed: the promoted functions
    installed, those not installed with why (``unexplained``: neither unavailable on this device nor waiting
    for an SGLang module this process never imported, e.g. install() did nothing), the arch it dispatches to,
    the call sites rebound in the row's SGLang module and in all, and the fast paths' fallbacks."""
    import kda_kernels

    st = kda_kernels.status()
    prefix = "sglang.multimodal_gen.runtime.models." + module.partition(":")[0] + "."
    installed, excused, unexplained = [], {}, {}
    for fn, v in sorted(st.items()):
        if not v.get("promoted"):
            continue
        if v["installed"]:
            installed.append(fn)
        elif v.get("unavailable"):
            excused[fn] = str(v["unavailable"])[:100]
        elif v.get("pending_import"):  # a module name, or True for a fast path (its module is v["sglang"])
            wait = v["pending_import"] if isinstance(v["pending_import"], str) else v.get("sglang")
            excused[fn] = f"waits for {wait} to be imported"
        else:
            unexplained[fn] = ("; ".join(v.get("problems") or []) or "not installed")[:160]
    archs = sorted({v.get("installed_arch") or v.get("forced_arch") or "" for v in st.values()
                    if v["installed"]} - {""})
    return {
        "installed": installed, "not_installed": excused, "unexplained": unexplained, "arch": _arch(),
        "impl_arches": archs,
        "call_sites_in_module": sum(1 for v in st.values() for s in v.get("call_sites", [])
                                    if s.startswith(prefix)),
        "call_sites": sum(int(v.get("call_sites_rebound") or 0) for v in st.values()),
        "rebound": sum(len(v.get("rebound") or []) for v in st.values()),
        "fallbacks": {fn: v["fallbacks"] for fn, v in sorted(st.items()) if v.get("fallbacks")},
    }


def _arch() -> str:
    """The arch this worker's device dispatches to (KDA_FORCE_ARCH when set)."""
    import torch

    forced = os.environ.get("KDA_FORCE_ARCH")
    if forced:
        return f"{forced} (forced)"
    if not torch.cuda.is_available():
        return "cpu"
    from kda_kernels.dispatch import device_arch

    return str(device_arch(torch.cuda.current_device()))


def _digest(t: Any) -> str:
    """A hash of a tensor's bytes: every worker of a gathered output must hold the same."""
    import torch

    data = t.detach().contiguous().cpu().view(-1).view(torch.uint8).numpy().tobytes()
    return f"{tuple(t.shape)} {t.dtype} " + hashlib.sha256(data).hexdigest()[:16]


def worker_main(rank: int, job: Job, conn: Connection, env: dict[str, str]) -> None:
    """One worker: SGLang's distributed init for ``rank``, every row of the job, one report down ``conn``."""
    os.environ.update(env)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(job.port), LOCAL_RANK=str(rank),
                      RANK=str(rank), WORLD_SIZE=str(job.layout.world))
    report: dict[str, Any] = {"rank": rank, "env": sorted(env), "results": []}
    try:
        import torch

        if "OMP_NUM_THREADS" not in os.environ:  # GPUWorker: its share of the host's cores, at most 16
            torch.set_num_threads(max(1, min(16, (os.cpu_count() or 1) // job.layout.world)))
        device = job.device if job.device == "cpu" else f"cuda:{rank}"
        from kda_lab.e2e import parallel, runtime

        ready = runtime.init_sglang(device, job.attention_backend, job.layout, dist_timeout=job.dist_timeout)
        report.update(device=device, parallel=parallel.label(ready["server_args"]))
        for name in job.rows:
            report["results"].append(_run(rank, job, device, name))
    except Exception as e:  # noqa: BLE001 - the parent reports it with the worker's rank
        report["error"] = f"{type(e).__name__}: {e}"[:500]
    conn.send(report)
    conn.close()


def _run(rank: int, job: Job, device: str, name: str) -> dict[str, Any]:
    import torch

    from kda_lab.e2e import rows, sharded
    from kda_lab.e2e.models import Built
    from kda_lab.e2e.run import run_row

    row = next(r for r in rows.all_rows() if r.name == name)
    form = sharded.FORMS[name]
    seen: dict[str, Any] = {}

    def transform(built: Built) -> Built:
        if not device.startswith("cuda"):
            from kda_lab.e2e.runtime import native_custom_ops

            native_custom_ops(built.module)
        if job.tp > 1:  # the one-process weights, through SGLang's loaders (sharded.load_one_process_weights)
            path = weights_path(job.run_dir, name)
            deadline = time.monotonic() + WEIGHTS_WAIT_S
            while not path.exists():
                if time.monotonic() > deadline:
                    raise RuntimeError(f"no one-process weights at {path} after {WEIGHTS_WAIT_S} s")
                time.sleep(0.2)
            sharded.load_one_process_weights(built.module, torch.load(path, map_location=device))
        return form.make(built, device)

    def probe(off: Any, on: Any) -> None:
        seen["digest"] = status_digest(row.module)
        seen["outputs"] = {"off": _digest(off), "on": _digest(on)}
        if rank == 0:
            torch.save({"off": off.cpu(), "on": on.cpu()}, outputs_path(job.run_dir, name))

    rec = run_row(row, device, job.tiny, job.blocks, job.trials, job.seed, profile=job.profile,
                  quality=job.quality, graphs_ok=False, aa=job.aa, transform=transform, probe=probe)
    return {"record": rec, **seen}

