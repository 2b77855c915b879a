"""The read-only commands: ``kda export --check`` (every exported copy as exported, its task's sources
unchanged, its ledgers valid, its evidence still holding, its manifest's stamps recomputed from the ledger
rows it names, the family ``__init__.py`` as generated) and ``kda export --list`` (tasks, verdicts,
stamps)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from kda_kernels.registry import ARCH_CAPABILITY, FAMILIES, FAST_PATH_FAMILIES
from kda_lab import ledger
from kda_lab.export import Refusal
from kda_lab.export.gate import gather_evidence, manifest_evidence
from kda_lab.export.overlay import (
    MANIFEST,
    build_manifest,
    family_dir,
    file_sha,
    read_manifests,
    render_family_init,
)
from kda_lab.export.promote import EXPORTS_REASONS
from kda_lab.export.task import OVERLAY_FAMILIES, TaskMeta, load_task_meta, task_dirs
from kda_lab.task import TaskError, source_hash
from kda_lab.task.schema import hashed_source, read_task_toml
from kda_lab.task.types import type_problems

_ABSENT = object()


def _differences(expected: Any, actual: Any, path: str = "") -> list[str]:
    if isinstance(expected, dict) and isinstance(actual, dict):
        out: list[str] = []
        for k in sorted(set(expected) | set(actual)):
            where = f"{path}.{k}" if path else k
            out += _differences(expected.get(k, _ABSENT), actual.get(k, _ABSENT), where)
        return out
    if expected == actual:
        return []
    shown = "absent" if actual is _ABSENT else repr(actual)
    return [f"{path} is {shown}, the ledger rows give {'nothing' if expected is _ABSENT else repr(expected)}"]


def recompute_manifest(task: TaskMeta, m: dict[str, Any]) -> dict[str, Any]:
    """KDA_EXPORT.json as the exporter would write it from the ledger rows ``m`` names (Refusal if those rows
    are not evidence). The file list is the manifest's own (checked against the copy separately)."""
    ev = manifest_evidence(task, m)
    claimed_not = m.get("not_promoted") or {}
    for fn in list(ev.functions):
        if fn not in (m.get("functions") or {}) and str(claimed_not.get(fn, "")).startswith(EXPORTS_REASONS):
            ev.not_promoted[fn] = claimed_not[fn]
            del ev.functions[fn]
    return build_manifest(task, ev, m.get("files") or {}, list(m.get("generated") or []))


def _check_manifest(root: Path, d: Path, m: dict[str, Any], problems: list[str]) -> None:
    where = d.relative_to(root).as_posix()
    present = {p.relative_to(d).as_posix() for p in d.rglob("*")
               if p.is_file() and hashed_source(p.relative_to(d))} - {MANIFEST, *m.get("generated", [])}
    if present != set(m["files"]):
        listed = set(m["files"])
        problems.append(f"{where}: files differ from the export manifest "
                        f"(extra {sorted(present - listed)}, missing {sorted(listed - present)})")
    edited = [rel for rel, sha in m["files"].items() if (d / rel).exists() and file_sha(d / rel) != sha]
    if edited:
        problems.append(f"{where}: edited after export: {edited}")
    task_dir = root / "kernels" / m["slug"]
    if not (task_dir / "src").is_dir():
        problems.append(f"{where}: its task kernels/{m['slug']}/src is missing")
        return
    task = load_task_meta(task_dir)
    ledger_problems = ledger.validate_ledgers(task.path)
    if ledger_problems:
        problems += [f"kernels/{task.slug}: ledger: {p}" for p in ledger_problems]
        return  # nothing below can be trusted
    current = source_hash(task_dir / "src")
    if current != m["source_hash"]:
        problems.append(f"{where}: STALE: exported {m['source_hash']}, kernels/{m['slug']}/src is now "
                        f"{current} (re-export after check+bench, or revert)")
    try:
        gather_evidence(task, m["source_hash"])
    except Refusal as e:
        problems.append(f"{where}: evidence no longer holds: {e}")
    try:
        expected = recompute_manifest(task, m)
    except Refusal as e:
        problems.append(f"{where}/{MANIFEST}: its stamps cannot be recomputed: {e}")
        return
    problems += [f"{where}/{MANIFEST}: {x}" for x in _differences(expected, m)]


def check(root: Path, out=print) -> int:
    """Every exported copy: files as exported, task sources unchanged, ledgers valid, evidence still holding,
    the manifest's stamps recomputed from the ledger rows it names, family __init__.py as generated."""
    problems: list[str] = []
    for family in OVERLAY_FAMILIES:
        fam = family_dir(root, family)
        init = fam / "__init__.py"
        manifests: dict[str, dict[str, Any]] = {}
        impls = fam / "_impls"
        arch_dirs = sorted(p for p in impls.iterdir() if p.is_dir() and p.name != "__pycache__") \
            if impls.is_dir() else []
        for d in arch_dirs:
            where = d.relative_to(root).as_posix()
            mpath = d / MANIFEST
            if d.name not in ARCH_CAPABILITY:
                problems.append(f"{where}: not an arch folder ({sorted(ARCH_CAPABILITY)})")
                continue
            if not mpath.exists():
                problems.append(f"{where}: no {MANIFEST} (not written by the exporter)")
                continue
            try:
                m = json.loads(mpath.read_text())
                manifests[d.name] = m
                _check_manifest(root, d, m, problems)
            except (json.JSONDecodeError, KeyError, TypeError, AttributeError) as e:
                problems.append(f"{where}/{MANIFEST}: unreadable ({type(e).__name__}: {e})")
            except Refusal as e:
                problems.append(f"{where}: {e}")
        if not manifests and not init.exists():
            continue  # an unpromoted family (kda new-family) that has no generated __init__.py yet
        try:
            expected = render_family_init(family, manifests)
        except (KeyError, TypeError, AttributeError) as e:
            problems.append(f"{family}: the manifests do not render a family __init__.py "
                            f"({type(e).__name__}: {e})")
            continue
        if not init.exists() or init.read_text() != expected:
            problems.append(f"{init.relative_to(root).as_posix()}: differs from what the exporter generates "
                            "(hand-edited or out of date; run the export again)")
    problems += task_toml_problems(root)
    for p in problems:
        out(f"FAIL {p}")
    if not problems:
        out("ok: every exported copy matches its task's current sources; its stamps recompute from the "
            "ledger rows it names; the evidence still holds; family stamps are generated")
    return 1 if problems else 0


def task_toml_problems(root: Path) -> list[str]:
    """Every task.toml under kernels/ that does not parse or holds a value of the wrong type (`kda validate`
    says more; --check refuses to say ok over a task the lab cannot read)."""
    problems: list[str] = []
    for d in task_dirs(root):
        where = (d / "task.toml").relative_to(root).as_posix()
        try:
            problems += type_problems(read_task_toml(d, where), where)
        except TaskError as e:
            problems.append(str(e))
    return problems


def list_tasks(root: Path, out=print) -> int:
    out(f"{'task':<52} {'arch':<5} {'family':<18} {'src hash':<17} {'exported':<17} state")
    for d in task_dirs(root):
        try:
            t = load_task_meta(d)
        except Refusal as e:
            msg = ("not an overlay task (no SGLang diffusion swap targets)"
                   if "no overlay swap targets" in str(e) else f"invalid: {e}")
            out(f"{d.name:<52} {msg}")
            continue
        h = source_hash(t.src) if t.src.is_dir() else "-"
        m = read_manifests(root, t.family).get(t.arch)
        exported = m["source_hash"] if m and m.get("slug") == t.slug else "-"
        try:
            ev = gather_evidence(t, h)
            verdict = f"evidence ok ({', '.join(ev.functions) or 'no function passes'})"
        except Refusal as e:
            verdict = f"no evidence: {str(e).split(': ', 1)[-1].splitlines()[0]}"
        state = ("current" if exported == h else "STALE") if exported != "-" else "not exported"
        out(f"{t.slug:<52} {t.arch:<5} {t.family:<18} {h:<17} {exported:<17} {state}; {verdict}")
    out("")
    out("overlay stamps (kda_kernels/diffusion/<family>/__init__.py):")
    for family in OVERLAY_FAMILIES:
        manifests = read_manifests(root, family)
        fast = FAST_PATH_FAMILIES.get(family)
        for fn in (*FAMILIES.get(family, ()), *((fast.name,) if fast else ())):
            arches = [a for a in sorted(manifests) if fn in manifests[a].get("functions", {})]
            desc = ", ".join(f"{a}: {manifests[a]['functions'][fn]['speedup']:.3f}x ({manifests[a]['slug']})"
                             for a in arches) or "SGLang baseline"
            out(f"  {family:<18} {fn:<58} {desc}")
    return 0
