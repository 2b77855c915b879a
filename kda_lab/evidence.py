"""Which ledger rows are evidence for a task: the GPU that measured them, and whole-table runs.

One module for the exporter's gate (``kda_lab.export.gate``), ``kda report``/``kda tasks``
and the harness's arch notice, so they cannot disagree. Imports neither torch nor pandas.

GPU identity: an ``h200`` row must come from a GPU whose *name* says H200 (``b200``: B200) with that arch's
compute capability. The capability alone is not enough: an H100 is (9, 0) too. Rows from any other GPU are
recorded under that GPU's own arch (``h100``, ``a100``, ...) and never count.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from typing import Any

from kda_lab import ARCH_CAPABILITY

# The GPU models whose measurements count for a lab arch. Word boundaries: a GH200 (Grace Hopper, an
# H100-class GPU) is not an H200, a GB200 is not a B200.
ARCH_GPU_NAME: dict[str, re.Pattern[str]] = {
    "h200": re.compile(r"(?<![A-Z0-9])H200(?![0-9])"),
    "b200": re.compile(r"(?<![A-Z0-9])B200(?![0-9])"),
}
_MODEL = re.compile(r"(?<![A-Z0-9])([A-Z]{1,3}\d{2,4})(?![0-9])")


def gpu_model_arch(gpu_name: str) -> str:
    """The arch a GPU name identifies: ``h200``/``b200`` for the lab's GPUs, else the model in lower case
    (``NVIDIA H100 80GB HBM3`` -> ``h100``), ``cpu`` for the CPU, ``gpu:<name>`` when no model is visible."""
    name = (gpu_name or "").strip()
    if not name or name.lower() == "cpu":
        return "cpu"
    upper = name.upper()
    for arch, pattern in ARCH_GPU_NAME.items():
        if pattern.search(upper):
            return arch
    m = _MODEL.search(upper.replace("NVIDIA", " "))
    return m.group(1).lower() if m else "gpu:" + re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")


def _capability(gpu_cc: str | tuple[int, int] | None) -> tuple[int, int] | None:
    if isinstance(gpu_cc, tuple):
        return gpu_cc
    try:
        major, minor = str(gpu_cc).split(".")
        return int(major), int(minor)
    except ValueError:
        return None


def evidence_arch(gpu_name: str, gpu_cc: str | tuple[int, int] | None) -> str:
    """The arch a measurement on this GPU counts for (the ``arch`` the harness records).

    A lab arch only when the name identifies it and the capability agrees; otherwise the GPU's own model
    (``h100``), so its rows are recorded and never counted for ``h200``."""
    model = gpu_model_arch(gpu_name)
    if model in ARCH_CAPABILITY and _capability(gpu_cc) != ARCH_CAPABILITY[model]:
        cc = _capability(gpu_cc)
        return f"{model}?sm{cc[0]}{cc[1]}" if cc else f"{model}?"
    return model


def counts_for(arch: str, row_arch: str, gpu_name: str, gpu_cc: str | None = None) -> bool:
    """A ledger row recorded as ``row_arch`` on ``gpu_name`` is evidence for ``arch``.

    Rows written before the harness derived the arch from the GPU name carry the capability's arch
    (an H100 was recorded as ``h200``): the name decides, so such rows do not count either."""
    if row_arch != arch or gpu_model_arch(gpu_name) != arch:
        return False
    return gpu_cc in (None, "") or _capability(gpu_cc) == ARCH_CAPABILITY.get(arch)


def bench_row_counts(row: Mapping[str, Any], arch: str) -> bool:
    return counts_for(arch, str(row.get("arch") or ""), str(row.get("gpu_name") or ""), str(row.get("gpu_cc") or ""))


def solution_counts(row: Mapping[str, Any], arch: str) -> bool:
    return counts_for(arch, str(row.get("arch") or ""), str(row.get("gpu") or ""))


def solution_from_another_gpu(row: Mapping[str, Any], arch: str) -> bool:
    """A solutions.jsonl row measured on a GPU whose rows do not count for ``arch`` (an H100 that ran an h200
    task, whether recorded as ``h100`` or, by the old harness, as ``h200``). CPU rows (registrations, interpreter
    verdicts: gpu ``cpu``, ``cpu-interpreter``) are no GPU's measurement."""
    gpu = str(row.get("gpu") or "")
    return bool(gpu) and not gpu.lower().startswith("cpu") and not solution_counts(row, arch)


def a_gpu(arch: str) -> str:
    """"an H200", "a B200": the GPU an arch's evidence needs, for messages."""
    model = arch.upper()
    return ("an " if model[:1] in "AEFHILMNORSX" else "a ") + model


def not_evidence_notice(task_arch: str, gpu_name: str, recorded_arch: str) -> str | None:
    """The one line `kda check`/`kda bench` print when this GPU's rows will not count, else None."""
    if recorded_arch == task_arch:
        return None
    return (f"NOT EVIDENCE: this GPU is {gpu_name} (recorded as arch {recorded_arch!r}); these rows are kept in "
            f"the ledger but do not count for {task_arch} (promotion, `kda report`): run on "
            f"{a_gpu(task_arch)} for evidence")


# ------------------------------------------------------------------------------------ whole-table runs

def finite_speedup(row: Mapping[str, Any]) -> float | None:
    try:
        v = float(row.get("speedup") or "nan")
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) and v > 0 else None


def table_gaps(run_rows: Iterable[Mapping[str, Any]], production: Mapping[str, str]) -> tuple[list[str], list[str]]:
    """(missing, non-finite): the production rows (name -> function) a run does not cover with a finite
    speedup. A run is whole-table when both lists are empty."""
    got: dict[str, Mapping[str, Any]] = {}
    for r in run_rows:
        if r.get("row_kind") == "production" and production.get(str(r.get("row"))) == r.get("function"):
            got[str(r["row"])] = r
    missing = [name for name in production if name not in got]
    nonfinite = [name for name in production if name in got and finite_speedup(got[name]) is None]
    return missing, nonfinite


def describe_gaps(missing: list[str], nonfinite: list[str], total: int, limit: int = 12) -> str:
    def names(xs: list[str]) -> str:
        return ", ".join(xs[:limit]) + (f", ... ({len(xs) - limit} more)" if len(xs) > limit else "")

    parts = []
    if missing:
        parts.append(f"{len(missing)} of {total} production rows missing: {names(missing)}")
    if nonfinite:
        parts.append(f"{len(nonfinite)} without a finite speedup: {names(nonfinite)}")
    return "; ".join(parts)


# ------------------------------------------------------------------------------------ correctness checks

CHECK_SEEDS = 2  # a task's seed count when task.toml does not set ``seeds``
_LEGACY_NOTE = re.compile(r"(?:^|; )rows (\d+); seeds (\d+)(?:;|$)")


def check_failed(row: Mapping[str, Any]) -> bool:
    """A solutions.jsonl ``check`` row whose candidate failed (status incorrect, or a failed count)."""
    failed = (row.get("evidence") or {}).get("failed")
    return row.get("status") == "incorrect" or (isinstance(failed, int) and failed > 0)


def check_coverage_gap(row: Mapping[str, Any], production: Iterable[str], all_rows: int, seeds: int) -> str:
    """'' when a ``check`` row covered every production row (names) with at least ``seeds`` seeds; else why not.

    Rows the harness records name the rows they ran (``evidence.rows``) and their seed count
    (``evidence.seeds``). Older rows say ``rows N; seeds S`` in their note only: they count when N is every row
    of the task (``all_rows``: the whole table is what a check without --rows runs) and S is enough."""
    ev = row.get("evidence") or {}
    names, n_seeds = ev.get("rows"), ev.get("seeds")
    if names is None and n_seeds is None:
        m = _LEGACY_NOTE.search(str(row.get("note") or ""))
        if not m:
            return "it does not say which rows and how many seeds it ran"
        n, s = int(m.group(1)), int(m.group(2))
        if s < seeds:
            return f"it ran {s} seed(s) per row, the task asks for {seeds}"
        if n < all_rows:
            return f"it ran {n} of the task's {all_rows} rows (a --rows subset)"
        return ""
    if not isinstance(n_seeds, int) or n_seeds < seeds:
        return f"it ran {n_seeds} seed(s) per row, the task asks for {seeds}"
    covered = set(names) if isinstance(names, list) else set()
    missing = [p for p in production if p not in covered]
    if missing:
        return (f"it did not run {len(missing)} production row(s) ({', '.join(missing[:5])}"
                f"{', ...' if len(missing) > 5 else ''}): a --rows subset")
    return ""
