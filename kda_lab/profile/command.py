"""``kda profile TASK --row ROW [--impl baseline|candidate|both]``: Nsight Compute on one row -> a digest.

On the GPU box, for each side (the SGLang baseline through its public entry point, the candidate through
``src/register.py``'s EXPORTS) this runs::

    ncu --clock-control none --profile-from-start off --target-processes all --set full --import-source yes \\
        -f -o kernels/<task>/ncu/<row>.<impl> python -m kda_lab.profile --launch <task> --row <row> --impl <impl>

The launched process builds the row's inputs with the harness's own generator (``kda_lab.measure.inputs.make_inputs``,
``contract.prepared``), resolves the callable exactly as ``kda bench`` does (``resolve_entry`` /
``candidate_identity``), makes warm-up calls on a separate input set (JIT builds and autotuning happen
there, outside the profiled range), then makes one call between ``cudaProfilerStart``/``Stop``: only the kernels
of that call are profiled. ``KDA_LINEINFO=1`` is set for the launched process; CUDA candidates may honour it
by compiling with ``-lineinfo`` (source-level view in ``ncu-ui``).

The reports are exported with ``ncu --import R --csv --page raw``, parsed by :mod:`kda_lab.profile.ncu`, and the digest
is written to ``kernels/<task>/profile/<row>.md``. The raw ``.ncu-rep`` files stay in ``kernels/<task>/ncu/``
(ignored by git). ``--copy-to DIR`` also writes two files there (on the box: ``--copy-to $OUT``, so they come
back): ``profile-<row>.md`` (the digest) and ``profile-<row>.tgz`` (digest, ``.ncu-rep`` reports and CSV exports
under their repository paths). ``--from-csv`` rebuilds a digest from CSV exports anywhere, without a GPU.
Docs: docs/report.md ("Profiling").
"""

from __future__ import annotations

import argparse
import datetime as _dt
import glob
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

IMPLS = ("baseline", "candidate")
LAUNCH_TAG = "kda-profile-launch: "
DOCS_HINT = ("Run it on the GPU box (docs/gpu-box.md): here `git rev-parse HEAD > .kda-git-commit`, then on the box "
             "`bash scripts/gpu_box.sh \"profile {task} --row {row} "
             "--copy-to $OUT\"`; see docs/report.md (Profiling). A digest can be rebuilt here from CSV exports "
             "brought back from the box: `kda profile {task} --row {row} --from-csv baseline=PATH candidate=PATH`.")


class ProfileError(RuntimeError):
    """A profile that cannot run here (no ncu, no GPU, ncu failure); the message says what to do."""


# ------------------------------------------------------------------------------------------------ helpers

def find_ncu(explicit: str | None = None) -> str | None:
    """``--ncu``, else PATH, else the usual CUDA/Nsight install folders."""
    if explicit:
        return explicit if (os.path.isfile(explicit) and os.access(explicit, os.X_OK)) else None
    found = shutil.which("ncu")
    if found:
        return found
    candidates = []
    for var in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(var):
            candidates.append(os.path.join(os.environ[var], "bin", "ncu"))
    candidates.append("/usr/local/cuda/bin/ncu")
    candidates += sorted(glob.glob("/opt/nvidia/nsight-compute/*/ncu"))[::-1]
    candidates += sorted(glob.glob("/usr/local/cuda*/nsight-compute*/ncu"))[::-1]
    for c in candidates:
        if os.path.isfile(c) and os.access(c, os.X_OK):
            return c
    return None


def ncu_version(ncu: str) -> str:
    try:
        out = subprocess.run([ncu, "--version"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.TimeoutExpired):
        return ""
    m = re.search(r"Version\s+([0-9][0-9.]*)", out)
    return m.group(1) if m else out.strip().splitlines()[-1] if out.strip() else ""


def check_gpu(task: Any, allow_other_arch: bool = False) -> str:
    """The GPU's name if this host can profile ``task``; raises ProfileError otherwise."""
    try:
        import torch
    except ImportError as e:  # pragma: no cover - torch is a hard dependency of the lab
        raise ProfileError(f"torch is not importable: {e}") from e
    if not torch.cuda.is_available():
        raise ProfileError("kda profile needs an NVIDIA GPU and this host has none (torch.cuda.is_available() is "
                           "False). " + DOCS_HINT.format(task=task.slug, row="ROW"))
    cc = torch.cuda.get_device_capability(0)
    if cc != task.capability and not allow_other_arch:
        raise ProfileError(f"{task.slug} is an {task.arch} task (compute capability {task.capability}); this GPU is "
                           f"{torch.cuda.get_device_name(0)} {cc}: its profile would not describe {task.arch}.")
    return torch.cuda.get_device_name(0)


def _ledger_medians(task_path: Path, row: str, arch: str) -> dict[str, float]:
    """The row's latest ledger times from the task's own GPU: an H100's rows (same capability as the H200)
    and CPU rows are not this task's numbers, so the digest never quotes them beside the profile."""
    from kda_lab import ledger
    from kda_lab.evidence import bench_row_counts

    latest: dict[str, str] | None = None
    for rows in ledger.runs(ledger.read_benchmark_rows(task_path)).values():
        for r in rows:
            if r["row"] == row and bench_row_counts(r, arch):
                latest = r
    out: dict[str, float] = {}
    if latest:
        if latest.get("baseline_us"):
            out["baseline"] = float(latest["baseline_us"])
        if latest.get("mode") == "bench" and latest.get("candidate_us"):
            out[f"candidate {latest['candidate_id']}"] = float(latest["candidate_us"])
    return out


def digest_path(task_path: Path, row: str) -> Path:
    return task_path / "profile" / f"{row}.md"


def _rel(path: Path) -> str:
    from kda_lab.paths import repo_root

    try:
        return path.resolve().relative_to(repo_root().resolve()).as_posix()
    except ValueError:
        return str(path)


def build_digest(task: Any, row: str, csv_texts: dict[str, str], *, seed: int | None, warmup: int | None,
                 captured: str = "", candidate: str = "", files: dict[str, str] | None = None) -> str:
    from kda_lab.profile import ncu

    (w,) = task.rows([row])
    spec = task.functions[w.fn]
    kernels = {impl: ncu.parse_csv(text) for impl, text in csv_texts.items()}
    info = ncu.DigestInput(
        task=task.slug, row=row, function=w.fn, model=w.model, shape=w.shape_signature(),
        model_bytes=float(spec.byte_model.bytes(w)), seed=seed, warmup=warmup, captured=captured,
        candidate=candidate, ledger_us=_ledger_medians(task.path, row, task.arch), files=files or {},
        command=f"kda profile {task.slug} --row {row} --impl {'both' if len(csv_texts) > 1 else next(iter(csv_texts))}",
    )
    return ncu.render_digest(info, kernels)


# ------------------------------------------------------------------------------------------------ GPU path

def _run_ncu(ncu: str, task: Any, row: str, impl: str, rep_base: Path, args: argparse.Namespace) -> dict[str, Any]:
    from kda_lab.paths import repo_root

    root = repo_root()
    cmd = [ncu, "--clock-control", "none", "--profile-from-start", "off", "--target-processes", "all",
           "--set", args.ncu_set, "--import-source", "yes", *args.ncu_arg, "-f", "-o", str(rep_base),
           sys.executable, "-m", "kda_lab.profile", "--launch", task.slug, "--row", row, "--impl", impl,
           "--seed", str(args.seed), "--warmup", str(args.warmup)]
    if args.allow_other_arch:
        cmd.append("--allow-other-arch")
    env = dict(os.environ, KDA_LINEINFO="1", KDA_ROOT=str(root),
               PYTHONPATH=os.pathsep.join(p for p in (str(root), os.environ.get("PYTHONPATH", "")) if p))
    print(f"== {impl}: {shlex.join(cmd)}", flush=True)
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=root, timeout=args.timeout)
    except subprocess.TimeoutExpired as e:
        raise ProfileError(f"ncu on {impl} ran past {args.timeout} s; try --set basic or a smaller row") from e
    output = (proc.stdout or "") + (proc.stderr or "")
    if "ERR_NVGPUCTRPERM" in output:
        raise ProfileError("ncu may not read the GPU performance counters as this user (ERR_NVGPUCTRPERM): run as "
                           "root, or load the driver with NVreg_RestrictProfilingToAdminUsers=0 (docs/report.md).")
    launch: dict[str, Any] = {}
    for line in output.splitlines():
        if line.startswith(LAUNCH_TAG):
            launch = json.loads(line[len(LAUNCH_TAG):])
    rep = rep_base.with_name(rep_base.name + ".ncu-rep")
    if "No kernels were profiled" in output:
        raise ProfileError(f"ncu captured no kernel for {impl}: the profiled call launched nothing on the GPU")
    if proc.returncode != 0 or not rep.exists():
        tail = "\n".join(output.splitlines()[-25:])
        raise ProfileError(f"ncu failed on {impl} (exit {proc.returncode}); last lines:\n{tail}")
    exported = subprocess.run([ncu, "--import", str(rep), "--csv", "--page", "raw"], capture_output=True,
                              text=True, timeout=args.timeout)
    if exported.returncode != 0:
        raise ProfileError(f"ncu --import {rep} --csv failed: {exported.stderr.strip()[-2000:]}")
    launch["csv"] = exported.stdout
    launch["rep"] = rep
    return launch


def run_profile(args: argparse.Namespace) -> Path:
    from kda_lab.task import load_task

    task = load_task(args.task)
    task.rows([args.row])  # unknown rows fail here, before any GPU work
    impls = IMPLS if args.impl == "both" else (args.impl,)
    out = digest_path(task.path, args.row)

    if args.from_csv:
        texts: dict[str, str] = {}
        for item in args.from_csv:
            impl, sep, path = item.partition("=")
            if not sep or impl not in IMPLS:
                raise ProfileError(f"--from-csv takes IMPL=PATH with IMPL in {IMPLS}, got {item!r}")
            texts[impl] = Path(path).read_text()
        text = build_digest(task, args.row, texts, seed=None, warmup=None,
                            captured="from CSV exports " + ", ".join(Path(p.partition('=')[2]).name
                                                                     for p in args.from_csv))
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text)
        print(f"wrote {_rel(out)}")
        return out

    ncu = find_ncu(args.ncu)
    if ncu is None:
        raise ProfileError("Nsight Compute (`ncu`) was not found on this host (PATH, $CUDA_HOME/bin, "
                           "/usr/local/cuda/bin, /opt/nvidia/nsight-compute). "
                           + DOCS_HINT.format(task=task.slug, row=args.row))
    gpu = check_gpu(task, args.allow_other_arch)
    version = ncu_version(ncu)
    rep_dir = task.path / "ncu"
    rep_dir.mkdir(parents=True, exist_ok=True)
    texts, files, launches = {}, {}, {}
    with tempfile.TemporaryDirectory(prefix="kda-profile-") as tmp:
        csvs: dict[str, Path] = {}
        for impl in impls:
            res = _run_ncu(ncu, task, args.row, impl, rep_dir / f"{args.row}.{impl}", args)
            texts[impl] = res.pop("csv")
            files[impl] = _rel(res.pop("rep"))
            launches[impl] = res
            csvs[impl] = Path(tmp) / f"{args.row}.{impl}.raw.csv"
            csvs[impl].write_text(texts[impl])
        cand = launches.get("candidate", {})
        candidate = (f"{cand.get('id')} (source {cand.get('source_hash')})"
                     + (", the SGLang baseline passthrough" if cand.get("is_baseline") else "")) if cand else ""
        today = _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%d")
        captured = f"{today} on {gpu}" + (f", ncu {version}" if version else "")
        text = build_digest(task, args.row, texts, seed=args.seed, warmup=args.warmup, captured=captured,
                            candidate=candidate, files=files)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text)
        print(f"wrote {_rel(out)}")
        if args.copy_to:
            for impl in impls:
                shutil.copy2(csvs[impl], rep_dir / f"{args.row}.{impl}.csv")
            members = [out] + [rep_dir / f"{args.row}.{impl}{ext}" for impl in impls for ext in (".ncu-rep", ".csv")]
            pack(Path(args.copy_to), task.slug, args.row, out, members)
    return out


def pack(dest: Path, slug: str, row: str, digest: Path, members: list[Path]) -> tuple[Path, Path]:
    """Two files for the trip back from the box: the digest, and a tarball of digest + reports + CSV exports
    with repository-relative paths (``tar xzf profile-<row>.tgz -C <checkout>`` puts them in place)."""
    import tarfile

    from kda_lab.paths import repo_root

    root = repo_root()
    dest.mkdir(parents=True, exist_ok=True)
    md = dest / f"profile-{row}.md"
    shutil.copy2(digest, md)
    tgz = dest / f"profile-{row}.tgz"
    with tarfile.open(tgz, "w:gz") as tar:
        for m in members:
            if m.exists():
                tar.add(m, arcname=m.resolve().relative_to(root.resolve()).as_posix())
    print(f"packed {md.name} and {tgz.name} into {dest} (back here: tar xzf {tgz.name} -C <checkout>; {slug})")
    return md, tgz


def cmd_profile(args: argparse.Namespace) -> int:
    try:
        path = run_profile(args)
    except ProfileError as e:
        print(f"kda profile: {e}", file=sys.stderr)
        return 2
    text = path.read_text()
    start = text.find("## Summary")
    end = text.find("## ", start + 3)
    if start >= 0:
        print(text[start:end if end > 0 else None].rstrip())
    return 0


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "profile", help="Nsight Compute on one row, baseline and/or candidate (GPU box): kernels/<task>/profile/<row>.md",
        description="Profile one row with Nsight Compute and write a digest next to the task. Needs ncu and the "
                    "task's GPU (the GPU box), except with --from-csv. See docs/report.md.")
    p.add_argument("task")
    p.add_argument("--row", required=True, help="row name from task.toml (`kda tasks --rows`)")
    p.add_argument("--impl", choices=(*IMPLS, "both"), default="both")
    p.add_argument("--seed", type=int, default=0, help="input seed for make_inputs (default 0)")
    p.add_argument("--warmup", type=int, default=3, help="warm-up calls before the profiled one (default 3)")
    p.add_argument("--set", dest="ncu_set", default="full", help="ncu section set (default: full)")
    p.add_argument("--ncu", help="path to ncu (default: PATH, $CUDA_HOME/bin, /usr/local/cuda/bin, /opt/nvidia/...)")
    p.add_argument("--ncu-arg", action="append", default=[], metavar="ARG", help="extra ncu argument (repeatable)")
    p.add_argument("--timeout", type=int, default=900, help="seconds per ncu run (default 900)")
    p.add_argument("--copy-to", metavar="DIR",
                   help="also write DIR/profile-<row>.md and DIR/profile-<row>.tgz (digest, .ncu-rep, CSV) ($OUT on the box)")
    p.add_argument("--from-csv", nargs="+", metavar="IMPL=PATH",
                   help="no GPU: rebuild the digest from `ncu --csv` exports (raw or details page)")
    p.add_argument("--allow-other-arch", action="store_true", help=argparse.SUPPRESS)
    p.set_defaults(func=cmd_profile)


# ------------------------------------------------------------------------------------------------ launched side

def launch(task_name: str, row: str, impl: str, seed: int, warmup: int, allow_other_arch: bool = False) -> None:
    """Inside ncu: warm up, then exactly one call of ``impl`` on ``row`` between cudaProfilerStart/Stop."""
    import torch

    from kda_lab.families import contract
    from kda_lab.measure.inputs import make_inputs
    from kda_lab.measure.run import candidate_identity, cuda_device, resolve_entry
    from kda_lab.task import load_task

    task = load_task(task_name)
    (w,) = task.rows([row])
    device = cuda_device(task, allow_other_arch)
    c = contract(task.family, w.fn)
    info: dict[str, Any] = {"impl": impl, "row": row, "lineinfo": os.environ.get("KDA_LINEINFO", "")}
    if impl == "baseline":
        fn = resolve_entry(task.functions[w.fn].entry)
    else:
        cand = candidate_identity(task, register=False)
        fn = cand.exports[w.fn]
        info.update(id=cand.id, source_hash=cand.source_hash, is_baseline=cand.is_baseline)
    print(LAUNCH_TAG + json.dumps(info, sort_keys=True), flush=True)
    warm = c.prepared(make_inputs(w, device, seed * 7919 + 1))
    args = c.prepared(make_inputs(w, device, seed * 7919))
    with torch.no_grad():
        for _ in range(warmup):
            fn(**warm)
        torch.cuda.synchronize()
        torch.cuda.profiler.start()
        torch.cuda.nvtx.range_push(f"kda:{impl}:{row}")
        fn(**args)
        torch.cuda.nvtx.range_pop()
        torch.cuda.synchronize()
        torch.cuda.profiler.stop()


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m kda_lab.profile",
                                description="the process ncu launches for `kda profile` (use `kda profile` instead)")
    p.add_argument("--launch", required=True, metavar="TASK")
    p.add_argument("--row", required=True)
    p.add_argument("--impl", choices=IMPLS, required=True)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--allow-other-arch", action="store_true")
    a = p.parse_args(argv)
    from kda_lab.measure.run import RunError
    from kda_lab.task import TaskError

    try:
        launch(a.launch, a.row, a.impl, a.seed, a.warmup, a.allow_other_arch)
    except (RunError, TaskError) as e:
        print(f"kda profile launch: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
