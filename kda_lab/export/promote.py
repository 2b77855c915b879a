"""Promotion and its undoing: ``kda export <slug>`` copies a task's src/ into the overlay once the gate
passes (the copy imported in a fresh interpreter, the manifest and the family stamps written, a ``promote``
row logged), ``kda export --revert <slug>`` removes it (a ``revert`` row). A refused export leaves the overlay
as it was."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from kda_kernels.registry import BY_FUNCTION, FAST_PATH_FAMILIES
from kda_lab import ledger
from kda_lab.export import Refusal
from kda_lab.export.gate import gather_evidence
from kda_lab.export.overlay import (
    GENERATED_INIT,
    MANIFEST,
    build_manifest,
    family_dir,
    file_sha,
    write_family_init,
)
from kda_lab.export.task import TaskMeta, load_task_meta, source_files, task_dir
from kda_lab.paths import PACKAGE_ROOT
from kda_lab.task import source_hash
from kda_lab.task.schema import hash_files

# The starts of the reasons _why_not_exported gives (not a ledger verdict): --check keeps them when it
# recomputes a manifest's stamps from the ledger rows.
EXPORTS_REASONS = ("EXPORTS has no callable", "a wrapper needs EXPORTS[", "register.py has no FAST_PATHS[",
                   "EXPORTS[")


def _git(root: Path, *args: str) -> str:
    try:
        return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True,
                              check=True).stdout.strip()
    except (subprocess.CalledProcessError, FileNotFoundError):
        return ""


def _smoke_import(root: Path, family: str, arch: str) -> dict[str, Any]:
    """Import the exported copy as the overlay will (a fresh interpreter, the copy's package path)."""
    mod = f"kda_kernels.diffusion.{family}._impls.{arch}.register"
    code = (
        "import importlib, json, sys\n"
        f"m = importlib.import_module({mod!r})\n"
        "e = getattr(m, 'EXPORTS', None)\n"
        "assert isinstance(e, dict), 'register.py must define EXPORTS = {sglang_function_name: callable}'\n"
        "fp = getattr(m, 'FAST_PATHS', None) or {}\n"
        "own = sorted(k for k, v in e.items() if getattr(v, 'kda_sglang_function', None) == k)\n"
        "paths = sorted(k for k, v in fp.items() if callable(getattr(v, 'install', None))\n"
        "               and callable(getattr(v, 'uninstall', None)))\n"
        "print(json.dumps({'exports': sorted(k for k, v in e.items() if callable(v)), 'sglang_own': own,\n"
        "                  'fast_paths': paths, 'baseline': bool(getattr(m, 'BASELINE', False))}))\n"
    )
    path = os.pathsep.join([str(root), str(PACKAGE_ROOT), os.environ.get("PYTHONPATH", "")])
    env = dict(os.environ, PYTHONPATH=path)
    env.pop("KDA_FORCE_ARCH", None)
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=root, env=env)
    if p.returncode != 0:
        tail = (p.stderr or p.stdout).strip().splitlines()[-5:]
        raise Refusal(f"the exported copy does not import as {mod} (import siblings relatively, "
                      f"`from .kernel import ...`; importing must not need a GPU):\n  " + "\n  ".join(tail))
    return json.loads(p.stdout.strip().splitlines()[-1])


def _why_not_exported(task: TaskMeta, fn: str, smoke: dict[str, Any]) -> str:
    """Why the exported copy (``smoke``: what importing it found) does not promote ``fn`` whatever its rows
    say; '' when it exports its own code for it."""
    if task.family in FAST_PATH_FAMILIES:
        if fn not in smoke.get("fast_paths", ()):
            return f"register.py has no FAST_PATHS[{fn!r}] with install() and uninstall()"
        return ""
    needed = BY_FUNCTION[fn].unpacks_into or fn
    if needed in smoke.get("sglang_own", ()):
        # The candidate forwards this function to SGLang: its rows measure SGLang against itself (noise).
        return f"EXPORTS[{needed!r}] is SGLang's own function (lazy_baseline): nothing to promote"
    if needed not in smoke["exports"]:
        return (f"EXPORTS has no callable {needed!r}" if needed == fn else
                f"a wrapper needs EXPORTS[{needed!r}] (the tensor-level function it unpacks into)")
    return ""


def _nothing_to_promote(task: TaskMeta, not_promoted: dict[str, str]) -> Refusal:
    return Refusal(f"{task.slug}: nothing to promote: "
                   + "; ".join(f"{k}: {v}" for k, v in not_promoted.items()))


def _last_export_event(task: TaskMeta) -> dict[str, Any] | None:
    events = [r for r in ledger.read_solutions(task.path)
              if r.get("event") in ("promote", "revert") and r.get("arch") == task.arch]
    return events[-1] if events else None


def export(root: Path, slug: str, note: str = "", out=print, command: str = "") -> int:
    """Promote ``slug`` (Refusal when the gate or the exported copy says no); ``command``: the command line
    the promote row records."""
    task = load_task_meta(task_dir(root, slug))
    if not task.src.is_dir():
        raise Refusal(f"{task.slug}: no src/ folder")
    h = source_hash(task.src)
    ev = gather_evidence(task, h)
    if not ev.functions:
        raise _nothing_to_promote(task, ev.not_promoted)
    files = source_files(task.src)
    if hash_files(task.src, files) != h:
        raise Refusal("internal: the files export copies differ from what kda_lab.task.source_hash covers "
                      "(update source_files)")
    fam = family_dir(root, task.family)
    dest = fam / "_impls" / task.arch
    if dest.exists():
        other = dest / MANIFEST
        held = json.loads(other.read_text()).get("slug") if other.exists() else None
        if held not in (task.slug, None):
            raise Refusal(f"{dest} holds the export of {held}; revert it first")
    backup = Path(tempfile.mkdtemp(prefix="kda-export-backup-"))
    init_path = fam / "__init__.py"
    old_init = init_path.read_text() if init_path.exists() else None
    if dest.exists():
        shutil.move(str(dest), str(backup / "prev"))
    try:
        dest.mkdir(parents=True)
        for rel in files:
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(task.src / rel, dest / rel)
        generated = []
        if "__init__.py" not in files:
            (dest / "__init__.py").write_text(GENERATED_INIT.format(slug=task.slug))
            generated.append("__init__.py")
        smoke = _smoke_import(root, task.family, task.arch)
        if smoke["baseline"]:
            raise Refusal(f"{task.slug}: src/ is the SGLang baseline passthrough (BASELINE = True); "
                          "there is nothing to promote")
        for fn in list(ev.functions):
            why = _why_not_exported(task, fn, smoke)
            if why:
                ev.not_promoted[fn] = why
                del ev.functions[fn]
        if not ev.functions:
            raise _nothing_to_promote(task, ev.not_promoted)
        manifest = build_manifest(task, ev, {rel: file_sha(task.src / rel) for rel in files}, generated)
        (dest / MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
        write_family_init(root, task.family)
    except BaseException:
        shutil.rmtree(dest, ignore_errors=True)
        if (backup / "prev").exists():
            shutil.move(str(backup / "prev"), str(dest))
        if old_init is not None:
            init_path.write_text(old_init)
        raise
    finally:
        shutil.rmtree(backup, ignore_errors=True)
    out(f"exported {task.slug} ({h}) -> {dest.relative_to(root)}")
    for fn, s in ev.functions.items():
        out(f"  promoted {fn}: {s['speedup']:.3f}x geomean over {s['rows']} production rows "
            f"(worst {s['worst']:.3f}x)")
    for fn, why in ev.not_promoted.items():
        out(f"  kept on SGLang: {fn}: {why}")
    last = _last_export_event(task)
    if last and last.get("event") == "promote" and last.get("source_hash") == h:
        out("  ledger unchanged (this source hash was already the promoted one)")
        return 0
    checked, bench = manifest["evidence"]["check"], manifest["evidence"]["bench"]
    ledger.append_solution(
        task.path, id=manifest["candidate_id"], parent=None, status="promoted", event="promote",
        source_hash=h, arch=task.arch, gpu=bench["gpu_name"] or ev.check.get("gpu"),
        evidence={"run_id": ev.run_id, "passed": checked["passed"], "failed": checked["failed"],
                  "geomean": bench["geomean"], "worst": bench["worst"]},
        git_commit=_git(root, "rev-parse", "HEAD"), command=command or f"kda export {slug}",
        note=(f"exported to {dest.relative_to(root).as_posix()}: {', '.join(ev.functions)}"
              + (f"; kept on SGLang: {', '.join(ev.not_promoted)}" if ev.not_promoted else "")
              + (f"; {note}" if note else "")))
    out(f"  appended a promote row to {task.slug}/solutions.jsonl")
    _build_ahead(root, task, out)
    return 0


def _build_ahead(root: Path, task: TaskMeta, out=print) -> None:
    """Build the promoted impl's CUDA extension now (install() never compiles), where torch has CUDA;
    elsewhere say where it must be built. Runs in a fresh interpreter so the freshly written package is the
    one imported."""
    probe = ("import importlib, torch; m = importlib.import_module("
             f"'kda_kernels.diffusion.{task.family}._impls.{task.arch}.register'); "
             "print(('none' if m.__dict__.get('EXTENSION') is None else 'cuda' if torch.cuda.is_available() "
             "else 'nocuda'))")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")])}
    p = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, cwd=root)
    what = p.stdout.strip().splitlines()[-1] if p.returncode == 0 and p.stdout.strip() else "error"
    if what == "none":
        return
    if what != "cuda":
        why = "torch has no CUDA" if what == "nocuda" else p.stderr.strip()[-300:]
        out(f"  CUDA extension not built here ({why}): run `python -m kda_kernels build` on each serving "
            "machine (install() never compiles)")
        return
    build = ["-m", "kda_kernels", "build", "--family", task.family, "--arch", task.arch]
    b = subprocess.run([sys.executable, *build], capture_output=True, text=True, env=env, cwd=root)
    for line in (b.stdout + b.stderr).strip().splitlines():
        out(f"  {line}")


def revert(root: Path, slug: str, status: str = "benchmarked", note: str = "", out=print,
           command: str = "") -> int:
    """Remove ``slug``'s exported copy, regenerate its family's stamps and log a ``revert`` row (``status``:
    the candidate's status in it; ``command``: the command line it records)."""
    task = load_task_meta(task_dir(root, slug))
    dest = family_dir(root, task.family) / "_impls" / task.arch
    mpath = dest / MANIFEST
    if not mpath.exists():
        raise Refusal(f"{slug}: nothing exported at {dest.relative_to(root)}")
    manifest = json.loads(mpath.read_text())
    if manifest.get("slug") != slug:
        raise Refusal(f"{dest.relative_to(root)} holds {manifest.get('slug')!r}, not {slug!r}")
    shutil.rmtree(dest)
    write_family_init(root, task.family)
    bench = manifest["evidence"]["bench"]
    ledger.append_solution(
        task.path, id=manifest.get("candidate_id"), parent=None, status=status, event="revert",
        source_hash=manifest["source_hash"], arch=task.arch, gpu=bench.get("gpu_name") or "",
        evidence={"run_id": bench.get("run_id"), "geomean": bench.get("geomean"),
                  "worst": bench.get("worst")},
        git_commit=_git(root, "rev-parse", "HEAD"), command=command or f"kda export --revert {slug}",
        note=f"reverted {dest.relative_to(root).as_posix()}" + (f"; {note}" if note else ""))
    out(f"reverted {slug}: removed {dest.relative_to(root)}, {task.family} stamps regenerated, revert logged")
    return 0
