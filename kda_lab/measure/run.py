"""The two lab runs: ``check`` (correctness against the oracle) and ``bench`` (interleaved device timing).

Both sides are called identically: the SGLang baseline (SGLang's original function, even where the
kda_kernels overlay is installed: :func:`resolve_baseline`), the candidate through ``src/register.py``'s
EXPORTS, each as ``fn(**args)`` on the same argument sets. Results go to the task's ledgers; rows measured
on a GPU that is not the task's arch are recorded under that GPU's arch and said not to count.
"""

from __future__ import annotations

import gc
import json
import os
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import import_module
from typing import Any

import torch

from kda_lab import ledger
from kda_lab.evidence import gpu_model_arch, not_evidence_notice
from kda_lab.families import contract, family_module
from kda_lab.families.peers import PeerUnavailable, peers_of
from kda_lab.measure.correctness import RowResult, check_row
from kda_lab.measure.env import capture
from kda_lab.measure.inputs import clone_args, make_inputs, rotation_count
from kda_lab.measure.notify import notify
from kda_lab.measure.progress import progress
from kda_lab.paths import repo_root
from kda_lab.stats import aa_spread
from kda_lab.task import FunctionSpec, Task, TaskError, load_candidate, source_hash
from kda_lab.task.byte_model import tbps
from kda_lab.task.flop_model import DENSE_HALF_PEAK_TFLOPS, tflops, workload_flops
from kda_lab.task.workloads import Workload


class RunError(RuntimeError):
    """A run that cannot happen here (wrong device, missing dependency); the message says how to fix it."""


def resolve_entry(entry: str) -> Callable[..., Any]:
    module, _, name = entry.partition(":")
    try:
        return getattr(import_module(module), name)
    except ImportError as e:
        raise RunError(f"cannot import SGLang entry point {entry}: {e}. Install the pinned SGLang "
                       "(`pip install --no-deps sglang==0.5.23`, see README) or run on the GPU box.") from e


def _kda_callees(fn: Callable[..., Any]) -> list[str]:
    """What ``fn``'s code (nested functions included) reaches that is a KDA object: module globals it reads and
    names it imports inside the function. SGLang's apply_group_norm_silu does ``from ...group_norm_silu_triton
    import triton_group_norm_silu`` at call time, and the overlay rebinds that module attribute: the original
    wrapper would time KDA's kernel. Only modules already imported are looked at (nothing is imported here)."""
    import dis
    import importlib.util

    from kda_kernels.dispatch import is_kda_object

    code = getattr(fn, "__code__", None)
    glb = getattr(fn, "__globals__", None)
    if code is None or not isinstance(glb, dict):
        return []
    found: set[str] = set()
    stack = [code]
    while stack:
        c = stack.pop()
        stack += [k for k in c.co_consts if hasattr(k, "co_code")]
        module, level = None, 0
        for ins in dis.get_instructions(c):
            if ins.opname in ("LOAD_GLOBAL", "LOAD_NAME") and is_kda_object(glb.get(ins.argval)):
                found.add(str(ins.argval))
            elif ins.opname == "LOAD_CONST" and isinstance(ins.argval, int):
                level = ins.argval  # IMPORT_NAME's level is the constant loaded two instructions before
            elif ins.opname == "IMPORT_NAME":
                try:
                    module = importlib.util.resolve_name("." * level + ins.argval, glb.get("__package__")) \
                        if level else ins.argval
                except (ImportError, ValueError):
                    module = None
            elif ins.opname == "IMPORT_FROM" and module:
                mod = sys.modules.get(module)
                if mod is not None and is_kda_object(mod.__dict__.get(ins.argval)):
                    found.add(f"{ins.argval} (imported from {module})")
    return sorted(found)


def resolve_baseline(spec: FunctionSpec) -> Callable[..., Any]:
    """SGLang's original ``spec.name``: through ``kda_kernels.baseline`` for the overlay's swap targets (never
    the KDA object the facade holds once the overlay is installed), else the task's entry point. Refuses
    (RunError) when what it finds is, or calls, a KDA object: that run would time KDA against itself."""
    from kda_kernels.dispatch import is_kda_object
    from kda_kernels.registry import BY_FUNCTION

    if spec.name in BY_FUNCTION:
        import kda_kernels

        try:
            fn = kda_kernels.baseline(spec.name)
        except (ImportError, AttributeError) as e:
            raise RunError(f"cannot import SGLang's {BY_FUNCTION[spec.name].sglang}: {e}. Install the pinned SGLang "
                           "(`pip install --no-deps sglang==0.5.23`, see README) or run on the GPU box.") from e
    else:
        fn = resolve_entry(spec.entry)
    if is_kda_object(fn):
        raise RunError(f"the baseline for {spec.name} resolves to a KDA object ({spec.entry}), not SGLang's "
                       "original: a run would time KDA against itself. kda_kernels.uninstall() or "
                       "KDA_KERNELS_DISABLE=1 before `import sglang`.")
    inner = _kda_callees(fn)
    if inner:
        raise RunError(f"SGLang's {spec.name} calls {', '.join(inner)}, which the kda_kernels overlay has replaced "
                       "in this process: its baseline would time KDA code. Run with KDA_KERNELS_DISABLE=1 (or "
                       "kda_kernels.uninstall() first).")
    return fn


def new_run_id() -> str:
    return time.strftime("%Y%m%d-%H%M%S", time.gmtime()) + "-" + uuid.uuid4().hex[:6]


def cuda_device(task: Task, allow_other_arch: bool = False) -> torch.device:
    """The GPU to run on. Another capability is refused (the candidate targets the task's); a GPU of the same
    capability that is not the task's model (an H100 for an h200 task) runs, and its rows are recorded under
    its own arch, which never counts (kda_lab.evidence)."""
    if not torch.cuda.is_available():
        raise RunError(f"{task.slug} needs a CUDA GPU ({task.arch}); on CPU use `kda check {task.slug} --interpret` "
                       "for the interpreter checks, and the GPU box for evidence (docs/gpu-box.md)")
    dev = torch.device("cuda", torch.cuda.current_device())
    cc = torch.cuda.get_device_capability(dev)
    if cc != task.capability and not allow_other_arch:
        raise RunError(f"{task.slug} is an {task.arch} task (compute capability {task.capability}); this GPU is "
                       f"{torch.cuda.get_device_name(dev)} {cc}. Its numbers would not be evidence for {task.arch}.")
    return dev


def announce_arch(task: Task, env: dict[str, str], show: Callable[[str], None]) -> None:
    notice = not_evidence_notice(task.arch, env["gpu_name"], env["arch"])
    if notice:
        show(notice)


UNRECORDED = "unrecorded"  # the id of a new source hash in a run that records nothing (--no-record)


@dataclass
class Candidate:
    id: str
    source_hash: str
    status: str
    exports: dict[str, Callable[..., Any]]
    is_baseline: bool


def candidate_identity(task: Task, register: bool = True) -> Candidate:
    """The candidate in src/ and its lineage id (a new id is registered when its source hash is new)."""
    module = load_candidate(task)
    h = source_hash(task.src_dir)
    is_baseline = bool(getattr(module, "BASELINE", False))
    rows = ledger.read_solutions(task.path)
    same = [r for r in rows if r["source_hash"] == h]
    if same:
        return Candidate(same[-1]["id"], h, same[-1]["status"], module.EXPORTS, is_baseline)
    ids = [r["id"] for r in rows]
    status = "baseline" if is_baseline else "proposed"
    if not register:  # an id is handed out only by recording it: a later recorded run may take the next one
        return Candidate(UNRECORDED, h, status, module.EXPORTS, is_baseline)
    new_id = f"c{len(set(ids)):03d}"
    if register:
        env = capture(repo_root(), torch.device("cuda") if torch.cuda.is_available() else None)
        ledger.append_solution(task.path, id=new_id, parent=ids[-1] if ids else None, status=status, event="register",
                               source_hash=h, arch=task.arch, gpu=env["gpu_name"], evidence={},
                               git_commit=env["git_commit"], command=env["command"],
                               note="SGLang baseline passthrough" if is_baseline else "")
    return Candidate(new_id, h, status, module.EXPORTS, is_baseline)


# ------------------------------------------------------------------------------------------------ check

@dataclass
class CheckReport:
    results: list[RowResult] = field(default_factory=list)
    not_evidence: str = ""  # why this check can never count for promotion ('' when it can)

    def failed(self, impl: str) -> list[RowResult]:
        return [r for r in self.results if r.impl == impl and not r.ok]

    def passed(self, impl: str) -> list[RowResult]:
        return [r for r in self.results if r.impl == impl and r.ok]

    @property
    def exit_code(self) -> int:
        """0 passed, 1 failed, 3 nothing checked (no seed ran: never a pass)."""
        if self.failed("candidate"):
            return 1
        return 0 if self.passed("candidate") else 3


def check_status(report: CheckReport, cand: Candidate) -> str:
    """The solutions.jsonl status of a check: incorrect on any failure, correct only when something ran."""
    if report.failed("candidate"):
        return "incorrect"
    return "correct" if report.passed("candidate") else cand.status


def run_check(task: Task, rows: list[str] | None = None, seeds: int | None = None, seed: int | None = None,
              device: torch.device | None = None, record: bool = True, show: Callable[[str], None] = print) -> CheckReport:
    """Every row (or ``rows``) x ``seeds`` seeds (default: the task's seed count). Recorded either way; a run
    over fewer rows or seeds than every production row x the task's seeds is said to be NOT EVIDENCE, and the
    exporter never counts it (kda_lab.evidence.check_coverage_gap)."""
    from kda_lab.evidence import check_coverage_gap

    seeds = task.seeds if seeds is None else seeds
    if seeds < 0:
        raise TaskError(f"--seeds {seeds}: give a count >= 1 (the task asks for {task.seeds})")
    workloads = task.rows(rows)
    device = device or cuda_device(task)
    cand = candidate_identity(task, register=record)
    base_seed = seed if seed is not None else int.from_bytes(os.urandom(3), "little")
    report = CheckReport()
    for w in progress(workloads, desc=f"check {task.slug}"):
        c = contract(task.family, w.fn)
        impls = {"baseline": resolve_baseline(task.functions[w.fn]), "candidate": cand.exports[w.fn]}
        for s in range(seeds):
            report.results += check_row(task, w, c, impls, base_seed + s, device, installed=cand.exports)
        gc.collect()
        if device.type == "cuda":
            torch.cuda.empty_cache()
    for r in report.results:
        if not r.ok:
            show(r.describe())
    status = check_status(report, cand)
    verdict = {"correct": "PASSED", "incorrect": "FAILED"}.get(status, "NOT CHECKED")
    base_bad = sorted({r.row for r in report.failed("baseline")})
    env = capture(repo_root(), device)
    announce_arch(task, env, show)
    show(f"{task.slug}: candidate {cand.id} ({cand.source_hash}) "
         f"{verdict}: {len(report.passed('candidate'))} ok, "
         f"{len(report.failed('candidate'))} failed over {len(workloads)} rows x {seeds} seeds (base seed {base_seed})")
    if base_bad:
        show(f"SGLang baseline disagrees with the oracle beyond tolerance on: {', '.join(base_bad)}")
    names = [w.name for w in workloads]
    production = [w.name for w in task.workloads if w.kind == "production"]
    check_row_ev = {"evidence": {"rows": names, "seeds": seeds}}
    report.not_evidence = check_coverage_gap(check_row_ev, production, len(task.workloads), task.seeds)
    if report.not_evidence:
        show(f"NOT EVIDENCE: {report.not_evidence}; recorded, but only a check of every production row with "
             f"{task.seeds} seeds counts for promotion (`kda check {task.slug}` without --rows/--seeds)")
    if record:
        run_id = new_run_id()
        note = f"base seed {base_seed}; rows {len(workloads)}; seeds {seeds}"
        if base_bad:
            note += f"; SGLang baseline beyond tolerance on {','.join(base_bad)}"
        if report.not_evidence:
            note += f"; not evidence: {report.not_evidence}"
        ledger.append_solution(
            task.path, id=cand.id, parent=None, status=status, event="check",
            source_hash=cand.source_hash, arch=env["arch"], gpu=env["gpu_name"],
            evidence={"run_id": run_id, "passed": len(report.passed("candidate")),
                      "failed": len(report.failed("candidate")), "rows": names, "seeds": seeds},
            git_commit=env["git_commit"], command=env["command"], note=note)
    notify("check", {"task": task.slug, "candidate": cand.id, "passed": status == "correct",
                     "failed_rows": sorted({r.row for r in report.failed("candidate")}), "baseline_off_oracle": base_bad})
    return report


# ------------------------------------------------------------------------------------------------ bench

def _fmt_us(v: float | None) -> str:
    return "" if v is None else f"{v:.2f}"


OracleCache = dict[tuple[str, int, str], tuple[torch.Tensor, ...]]


def checked_peers(task: Task, w: Workload, seed: int, device: torch.device, arg_set: dict[str, Any],
                  oracle_cache: OracleCache | None = None
                  ) -> tuple[dict[str, dict[str, Any]], dict[str, Callable[..., Any]]]:
    """Each public peer of ``w``'s function: its verdict on this row, and the peers that may be timed.

    A peer is timed only after it matched the fp64 oracle on this row (task tolerances; never bitwise vs SGLang).
    ``oracle_cache``: one oracle evaluation for all of the row's peers (:func:`check_row`)."""
    verdicts: dict[str, dict[str, Any]] = {}
    timed: dict[str, Callable[..., Any]] = {}
    for peer in peers_of(family_module(task.family), w.fn):
        info: dict[str, Any] = {"version": peer.version}
        verdicts[peer.name] = info
        why = peer.applies(arg_set)
        if why:
            info.update(verdict="n/a", why=why)
            continue
        try:
            fn = peer.load()
        except PeerUnavailable as e:
            info.update(verdict="unavailable", why=str(e))
            continue
        info.update(oracle_verdict(task, w, peer.name, fn, seed, device, oracle_cache))
        if info["verdict"] == "ok":
            timed[peer.name] = fn
    return verdicts, timed


def oracle_verdict(task: Task, w: Workload, name: str, fn: Callable[..., Any], seed: int, device: torch.device,
                   oracle_cache: OracleCache | None = None) -> dict[str, Any]:
    """A peer's verdict on row ``w`` against the fp64 oracle (task tolerances; never bitwise vs SGLang): "ok" or
    "wrong" (with why), each with its largest absolute error against the oracle (``max_err``), or "n/a" when it
    raises (an assert on shape/dtype)."""
    (res,) = check_row(task, w, contract(task.family, w.fn), {name: fn}, seed, device, baseline_impl=name,
                       oracle_cache=oracle_cache)
    if res.error.startswith("raised"):
        return {"verdict": "n/a", "why": res.error[:200]}
    worst = max((c.max_abs for c in res.comparisons), default=None)
    if not res.ok:
        return {"verdict": "wrong", "why": res.error or res.describe()[:200], "max_err": worst}
    return {"verdict": "ok", "max_err": worst}


def compile_verdict(task: Task, w: Workload, fn: Callable[..., Any], seed: int, device: torch.device,
                    oracle_cache: OracleCache | None = None) -> dict[str, Any]:
    """torch.compile of the family's eager reference, checked on row ``w`` like a public peer before it is timed:
    the report counts compile as a peer only on rows where this verdict is ok (``ledger.COMPILE_PEER`` in the
    ``peers`` column)."""
    return {"version": torch.__version__,
            **oracle_verdict(task, w, ledger.COMPILE_PEER, fn, seed, device, oracle_cache)}


def best_peer(verdicts: dict[str, dict[str, Any]]) -> tuple[str, float] | None:
    timed = [(name, v["us"]) for name, v in verdicts.items() if v.get("verdict") == "ok" and v.get("us")]
    return min(timed, key=lambda t: t[1]) if timed else None


def impl_arg_sets(impls: list[str], arg_sets: list[dict[str, Any]], mutates: tuple[str, ...]
                  ) -> dict[str, list[dict[str, Any]]]:
    """The input sets each timed implementation replays. Read-only functions share one list. A function that
    writes its inputs in place gets private clones per implementation: on the shared sets of an in-place
    function (fused_inplace_qknorm_rope) the H200 timed SGLang's kernel 5-14 % faster whenever the torch.compile
    peer also wrote them (dev/bias_probe.py of the qknorm task, 2026-11-27), so one side's writes moved the
    other's times."""
    if not mutates:
        return {name: arg_sets for name in impls}
    return {name: arg_sets if i == 0 else [clone_args(a) for a in arg_sets] for i, name in enumerate(impls)}


def bench_row(task: Task, w: Workload, cand: Candidate, mode: str, trials: int, seed: int, compile_peer: bool,
              device: torch.device, public_peers: bool = True) -> dict[str, Any]:
    from kda_lab.measure.timing import GraphTimer, copy_yardstick, host_time_us, time_interleaved

    c = contract(task.family, w.fn)
    spec = task.functions[w.fn]
    baseline = resolve_baseline(spec)
    props = torch.cuda.get_device_properties(device)
    l2 = int(getattr(props, "L2_cache_size", 60 << 20))
    sets = rotation_count(w, l2)
    arg_sets = [c.prepared(make_inputs(w, device, seed * 7919 + i)) for i in range(sets)]
    impls: dict[str, Callable[..., Any]] = {"baseline": baseline}
    if mode == "bench":
        impls["candidate"] = cand.exports[w.fn]
    elif mode == "aa":
        impls["candidate"] = baseline  # the same baseline, captured and timed as a second side
    verdicts: dict[str, dict[str, Any]] = {}
    oracle_cache: OracleCache = {}  # the row's oracle, once for the compile peer and every public peer
    if compile_peer and c.torch_reference is not None and mode != "aa":
        # A fresh dynamo cache per row: the reference's code object is shared across rows, and past
        # dynamo's recompile limit (8) torch.compile silently falls back to eager.
        torch._dynamo.reset()
        compiled = torch.compile(c.torch_reference, dynamic=False)
        # checked before it is timed, like the public peers: a compile time only counts beside an ok verdict
        verdicts[ledger.COMPILE_PEER] = compile_verdict(task, w, compiled, seed, device, oracle_cache)
        if verdicts[ledger.COMPILE_PEER]["verdict"] == "ok":
            impls["compile"] = compiled
    if public_peers and mode != "aa":
        public, timed_peers = checked_peers(task, w, seed, device, arg_sets[0], oracle_cache)
        verdicts.update(public)
        impls.update({f"peer:{name}": fn for name, fn in timed_peers.items()})
    oracle_cache.clear()  # every verdict is in: the fp64 outputs (3 GB on a 75600-token attention row) go
    nbytes = spec.byte_model.bytes(w)
    sets_of = impl_arg_sets(list(impls), arg_sets, c.mutates)
    with torch.no_grad():
        timers = {name: GraphTimer(lambda a, f=fn: f(**a), sets_of[name]) for name, fn in impls.items()}
        timers["copy"] = copy_yardstick(nbytes, sets, device)
        times = time_interleaved(timers, trials, seed)
        host = {name: host_time_us(lambda a, f=fn: f(**a), sets_of[name]) for name, fn in impls.items()
                if name in ("baseline", "candidate")}
    s = times.summaries
    for name, info in verdicts.items():
        if f"peer:{name}" in s:
            info["us"] = s[f"peer:{name}"].median
    if "compile" in s:  # the compile peer is the fastest correct peer where it is fastest (best_peer below)
        verdicts[ledger.COMPILE_PEER]["us"] = s["compile"].median
    best = best_peer(verdicts)
    base_us = s["baseline"].median
    cand_us = s["candidate"].median if "candidate" in s else None
    measured = cand_us if cand_us is not None else base_us
    row = {
        "function": w.fn, "row": w.name, "row_kind": w.kind, "model": w.model, "preset": w.preset,
        "dtype": w.primary().dtype, "shape": w.shape_signature(), "bytes": nbytes,
        "baseline_us": base_us, "baseline_p10_us": s["baseline"].p10, "baseline_p90_us": s["baseline"].p90,
        "candidate_us": cand_us, "candidate_p10_us": s["candidate"].p10 if cand_us else None,
        "candidate_p90_us": s["candidate"].p90 if cand_us else None,
        "speedup": base_us / cand_us if cand_us else None,
        "compile_us": s["compile"].median if "compile" in s else None,
        "speedup_vs_compile": s["compile"].median / measured if "compile" in s else None,
        "copy_us": s["copy"].median, "sol": s["copy"].median / measured,
        "candidate_tbps": tbps(nbytes, cand_us), "baseline_tbps": tbps(nbytes, base_us),
        "host_baseline_us": host["baseline"], "host_candidate_us": host.get("candidate"),
        "trials": trials, "input_sets": sets, "seed": seed,
        "peers": json.dumps(verdicts, sort_keys=True) if verdicts else "",
        "best_peer": best[0] if best else "", "best_peer_us": best[1] if best else None,
        "speedup_vs_best_peer": best[1] / measured if best else None,
    }
    del timers, arg_sets
    gc.collect()
    torch.cuda.empty_cache()
    return row


def run_bench(task: Task, mode: str = "bench", rows: list[str] | None = None, trials: int = 20,
              seed: int | None = None, compile_peer: bool = True, public_peers: bool = True, record: bool = True,
              include_test_rows: bool = False, allow_other_arch: bool = False, supersedes: str | None = None,
              show: Callable[[str], None] = print) -> list[dict[str, Any]]:
    if mode not in ledger.BENCHMARK_MODES:
        raise TaskError(f"mode {mode!r} not in {ledger.BENCHMARK_MODES}")
    kinds = ("production", "test") if include_test_rows else ("production",)
    workloads = [w for w in task.rows(rows, kinds=kinds) if w.bench]
    if supersedes:
        check_supersedes(task, supersedes, mode, workloads)
    device = cuda_device(task, allow_other_arch)
    cand = candidate_identity(task, register=record)
    for fn in dict.fromkeys(w.fn for w in workloads):  # refuse before measuring; imports sglang (the patch may
        resolve_baseline(task.functions[fn])           # install the overlay then: captured below)
    env = capture(repo_root(), device)
    if supersedes:
        check_supersedes(task, supersedes, mode, workloads, env)
    seed = seed if seed is not None else int.from_bytes(os.urandom(3), "little")
    run_id = new_run_id()
    out: list[dict[str, Any]] = []
    for w in progress(workloads, desc=f"bench {task.slug} ({mode})"):
        row = bench_row(task, w, cand, mode, trials, seed, compile_peer, device, public_peers)
        row.update(run_id=run_id, task=task.slug, arch=env["arch"], mode=mode,
                   candidate_id="baseline" if mode != "bench" else cand.id, source_hash=cand.source_hash,
                   **{k: env[k] for k in ledger.ENV_COLUMNS}, git_dirty=env["git_dirty"], supersedes=supersedes or "",
                   gpu_uuid=env.get("gpu_uuid", ""))
        out.append(row)
    summary = ledger.summarize_run(out)
    show(format_table(out, mode))
    flops = {w.name: f for w in workloads if (f := workload_flops(task.family, w)) is not None}
    if flops:
        show(format_compute(out, flops, env["arch"]))
    if mode == "aa":
        spread = aa_spread([r["speedup"] for r in out if r["row_kind"] == "production"])
        show(f"A/A: geomean {spread['geomean']:.4f}, per-row range {spread['min']:.4f}..{spread['max']:.4f} "
             f"(max deviation {spread['max_dev']:.2%}); expect 0.97-1.03")
    elif mode == "bench":
        show(f"geomean speedup {summary['geomean']:.3f}x over {summary['n_rows']} production rows; "
             f"worst {summary['worst']:.3f}x ({summary['worst_row']})")
    if record:
        ledger.append_benchmark_rows(task.path, out)
        if mode == "bench":
            ledger.append_solution(
                task.path, id=cand.id, parent=None, status="benchmarked", event="bench", source_hash=cand.source_hash,
                arch=env["arch"], gpu=env["gpu_name"],
                evidence={"run_id": run_id, "geomean": summary["geomean"], "worst": summary["worst"]},
                git_commit=env["git_commit"], command=env["command"], note=f"{summary['n_rows']} production rows")
        show(f"recorded run {run_id} in {task.path.name}/benchmark.csv")
    announce_arch(task, env, show)  # under the table and the summary: the last line a reader sees
    notify("bench", {"task": task.slug, "mode": mode, "run_id": run_id, "candidate": cand.id,
                     "geomean": summary["geomean"], "worst": summary["worst"], "worst_row": summary["worst_row"],
                     "gpu": env["gpu_name"]})
    return out


def check_supersedes(task: Task, target: str, mode: str, workloads: list[Workload],
                     env: dict[str, str] | None = None) -> None:
    """Refuse, before measuring, a --supersedes the ledger validation would reject: only a run of the same
    mode, on the same arch and GPU model, over the same rows may supersede another (kda_lab.ledger)."""
    old = [r for r in ledger.read_benchmark_rows(task.path) if r["run_id"] == target]
    if not old:
        raise TaskError(f"--supersedes {target}: no such run in {task.slug}/benchmark.csv")
    if old[0]["mode"] != mode:
        raise TaskError(f"--supersedes {target}: that run is mode {old[0]['mode']!r}, this one {mode!r}; only a run "
                        "of the same mode may supersede another")
    mine = {(w.fn, w.name) for w in workloads}
    theirs = {(r["function"], r["row"]) for r in old}
    if mine != theirs:
        missing = sorted(n for _, n in theirs - mine)
        extra = sorted(n for _, n in mine - theirs)
        raise TaskError(f"--supersedes {target}: that run covers {len(theirs)} rows, this one {len(mine)} (missing "
                        f"{missing[:5]}, extra {extra[:5]}); only a run over the same rows may supersede another "
                        "(pass the same --rows / --test-rows)")
    if env is not None and (old[0]["arch"], gpu_model_arch(old[0]["gpu_name"])) != (
            env["arch"], gpu_model_arch(env["gpu_name"])):
        raise TaskError(f"--supersedes {target}: that run was measured as {old[0]['arch']} on {old[0]['gpu_name']}, "
                        f"this GPU is {env['gpu_name']} ({env['arch']}); only a run on the same arch and GPU model "
                        "may supersede another")


SUSPECT_SOL = 0.98  # above this on large rows a result is suspect: docs/benchmark-method.md
LARGE_ROW_BYTES = 64e6


def peer_cell(row: dict[str, Any], name: str) -> str:
    """One peer's cell: its time, or why it has none (wrong on this row, not applicable, not installed)."""
    info = json.loads(row["peers"]).get(name) if row.get("peers") else None
    if info is None:
        return ""
    if info.get("verdict") == "ok":
        return _fmt_us(info.get("us"))
    return {"wrong": "WRONG", "n/a": "n/a", "unavailable": "absent"}.get(info.get("verdict"), "?")


def format_table(rows: list[dict[str, Any]], mode: str) -> str:
    """The run's table; '!' marks sol above SUSPECT_SOL on large rows (read-heavy kernels can legitimately
    pass a 1:1 copy by a few percent: 3 reads + 1 write measured 4.43 vs 4.29 TB/s on the H200).
    One column per public peer (us, WRONG, n/a or absent) and "vs peer": the best correct peer's time over
    the measured side's (candidate, or SGLang in a baseline-only run; > 1 means the peer is slower)."""
    # torch.compile has its own column (its time, or WRONG / n/a from its verdict)
    peer_names = sorted({n for r in rows if r.get("peers") for n in json.loads(r["peers"])} - {ledger.COMPILE_PEER})
    head = (f"{'row':<34} {'MB':>8} {'base us':>9} {'cand us':>9} {'speedup':>8} {'compile':>9} "
            + "".join(f"{n[:10]:>11}" for n in peer_names) + (f" {'vs peer':>8}" if peer_names else "")
            + f" {'TB/s':>6} {'sol':>6} {'host b/c us':>13}")
    lines = [head, "-" * len(head)]
    for r in rows:
        tb = r["candidate_tbps"] if r["candidate_tbps"] is not None else r["baseline_tbps"]
        sp = f"{r['speedup']:.3f}" if r["speedup"] else "-"
        vs = f"{r['speedup_vs_best_peer']:.3f}" if r.get("speedup_vs_best_peer") else "-"
        lines.append(
            f"{r['row'][:34]:<34} {r['bytes'] / 1e6:>8.2f} {r['baseline_us']:>9.2f} {_fmt_us(r['candidate_us']):>9} "
            f"{sp:>8} {_fmt_us(r['compile_us']) or peer_cell(r, ledger.COMPILE_PEER):>9} "
            + "".join(f"{peer_cell(r, n):>11}" for n in peer_names) + (f" {vs:>8}" if peer_names else "")
            + f" {tb:>6.2f} {r['sol']:>5.2f}"
            f"{'!' if r['sol'] > SUSPECT_SOL and r['bytes'] >= LARGE_ROW_BYTES else ' '} "
            f"{r['host_baseline_us']:>6.1f}/{_fmt_us(r['host_candidate_us']):>6}")
    return "\n".join(lines)


def format_compute(rows: list[dict[str, Any]], flops: dict[str, float], arch: str) -> str:
    """The run's compute table, for a family with a FLOP model (kda_lab.task.flop_model): per row the FLOPs of one
    call, and TFLOP/s with its share of the arch's dense half-precision peak for SGLang, the candidate and every
    peer timed after an ok oracle verdict (torch.compile included)."""
    peak = DENSE_HALF_PEAK_TFLOPS.get(arch)
    peer_names = sorted({n for r in rows if r.get("peers") for n, v in json.loads(r["peers"]).items()
                         if v.get("verdict") == "ok" and v.get("us")})

    def cell(us: float | None, f: float) -> str:
        t = tflops(f, us)
        if t is None:
            return "-"
        return f"{t:.0f} ({t / peak:.0%})" if peak else f"{t:.0f}"

    sides = ["SGLang", "candidate"] + peer_names
    head = f"{'row':<40} {'GFLOP':>9} " + "".join(f"{n[:14]:>15}" for n in sides)
    lines = [f"TFLOP/s (share of the {arch} dense bf16/fp16 peak, {peak:.0f} TFLOP/s)" if peak else
             f"TFLOP/s ({arch}: no dense peak on record)", head, "-" * len(head)]
    for r in rows:
        f = flops.get(r["row"])
        if f is None:
            continue
        peers = json.loads(r["peers"]) if r.get("peers") else {}
        us = [r["baseline_us"], r["candidate_us"]] + [
            peers.get(n, {}).get("us") if peers.get(n, {}).get("verdict") == "ok" else None for n in peer_names]
        lines.append(f"{r['row'][:40]:<40} {f / 1e9:>9.1f} " + "".join(f"{cell(u, f):>15}" for u in us))
    return "\n".join(lines)
