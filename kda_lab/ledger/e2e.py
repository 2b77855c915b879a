"""``e2e/rows.csv``: the append-only ledger of `kda e2e` runs (one row per model row, tier and stage per run).

Same discipline as the task ledgers (kda_lab.ledger): a fixed header, a hash chain over every row (``chain`` =
sha256 of the previous chain and this row's content), and the committed file must be a prefix of the working
copy and every committed version must extend the one before it (validate_against_git and validate_git_history,
the rules of the task ledgers); kda_lab.ledger.store holds all of that. `kda validate` runs it. Mistakes are
fixed by a run that names the run it supersedes, never by editing. `kda e2e` (kda_lab.e2e) appends here.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from kda_lab.ledger.store import (
    LedgerError,
    append_versioned_csv,
    as_newest,
    csv_rows,
    read_text,
    schema_records,
    validate_csv,
    validate_versioned_csv,
)

E2E_DIR = "e2e"
# Frozen: the runs before quality tiers (module forwards with no tier, no loader transforms; every promoted kernel
# served). Validated as it stands, shown in the report as "exact (legacy)", never appended to.
LEGACY_FILE = "benchmark.csv"
LEGACY_COLUMNS: tuple[str, ...] = (
    "ts", "run_id", "arch", "row", "model", "module", "kind", "cites", "config", "shape", "dtype", "blocks", "tiny",
    "timing", "trials", "seed",
    "off_device_ms", "off_device_p10_ms", "off_device_p90_ms", "on_device_ms", "on_device_p10_ms", "on_device_p90_ms",
    "speedup",
    "off_eager_ms", "off_eager_p10_ms", "off_eager_p90_ms", "on_eager_ms", "on_eager_p10_ms", "on_eager_p90_ms",
    "eager_speedup",
    "agree", "max_abs_err", "tolerance",
    "kernel_ms_off", "kernel_ms_on", "shares_off", "shares_on",
    "promoted", "overlay", "status", "error",
    "gpu_name", "gpu_cc", "driver", "torch", "triton", "cuda", "sglang", "transformers", "diffusers",
    "git_commit", "git_dirty", "command", "supersedes", "chain",
)
E2E_FILE = "rows.csv"
# quality: the SGLang request tier the row ran at (a row at one tier never supersedes one at another);
# stage: "module" (one forward), or a request's "denoise_step" / "decode" (request: the recipe's model name; steps:
# the transformer forwards per request that the step row's time is multiplied by); coverage_*: per swap target /
# fast path, calls served by KDA and by SGLang; fusions: SGLang's quality-gated fusions and VAE fast paths mounted;
# top_kernels_*: the stage's kernels outside GEMM and attention by device time; split_* / conv_tflops_* (VAE rows):
# device ms per decode bucket (kernels.vae_split) and the convolutions' FLOPs over their device time.
_E1: tuple[str, ...] = (
    "ts", "run_id", "arch", "row", "model", "module", "kind", "quality", "stage", "request", "steps",
    "cites", "config", "shape", "dtype", "blocks", "tiny", "timing", "trials", "seed",
    "off_device_ms", "off_device_p10_ms", "off_device_p90_ms", "on_device_ms", "on_device_p10_ms", "on_device_p90_ms",
    "speedup",
    "off_eager_ms", "off_eager_p10_ms", "off_eager_p90_ms", "on_eager_ms", "on_eager_p10_ms", "on_eager_p90_ms",
    "eager_speedup",
    "agree", "max_abs_err", "tolerance",
    "kernel_ms_off", "kernel_ms_on", "shares_off", "shares_on", "top_kernels_off", "top_kernels_on",
    "split_off", "split_on", "conv_tflops_off", "conv_tflops_on",
    "coverage_off", "coverage_on", "fusions",
    "promoted", "overlay", "status", "error",
    "gpu_name", "gpu_cc", "driver", "torch", "triton", "cuda", "sglang", "transformers", "diffusers",
    "git_commit", "git_dirty", "command", "supersedes", "chain",
)


def _after(schema: tuple[str, ...], anchor: str, added: tuple[str, ...]) -> tuple[str, ...]:
    k = schema.index(anchor) + 1
    return schema[:k] + added + schema[k:]


# v2 (issue 42): parallel: the worker layout of a multi-process run (`kda e2e --sp N` / `--tp N`,
# kda_lab.e2e.parallel: "sp=2 kv_gather=2", "tp=2"; "" = one process, every older row), a row at one layout never
# supersedes one at another; workers: JSON, per worker its kda_kernels.status() digest (installed functions, arch,
# call sites rebound, fast-path fallbacks), its agreement and its output against one process (kda_lab.e2e.workers).
_E2 = _after(_after(_E1, "stage", ("parallel",)), "overlay", ("workers",))
E2E_SCHEMAS: tuple[tuple[str, ...], ...] = (_E1, _E2)
E2E_COLUMNS: tuple[str, ...] = E2E_SCHEMAS[-1]
SCHEMA_NAME = "kda_lab.ledger.e2e.E2E_COLUMNS"
FLOATS = tuple(c for c in E2E_COLUMNS if c.endswith("_ms") or c.startswith("conv_tflops")
               or c in ("speedup", "eager_speedup", "max_abs_err"))
STATUSES = ("ok", "disagree", "failed")
QUALITIES = ("exact", "lossless", "high")
STAGES = ("module", "denoise_step", "decode")
ENV = ("gpu_name", "torch", "sglang", "git_commit", "command")


def path(root: Path, file: str = E2E_FILE) -> Path:
    return Path(root) / E2E_DIR / file


def read(root: Path, file: str = E2E_FILE) -> list[dict[str, str]]:
    p = path(root, file)
    return rows_from_text(read_text(p), file) if p.exists() else []


def read_legacy(root: Path) -> list[dict[str, str]]:
    """The frozen pre-tier rows, each marked ``quality = "exact (legacy)"`` and ``stage = "module"``."""
    return [{**r, "quality": "exact (legacy)", "stage": "module", "request": "", "steps": ""}
            for r in read(root, LEGACY_FILE)]


def rows_from_text(text: str, file: str = E2E_FILE) -> list[dict[str, str]]:
    """:func:`read` of an e2e ledger's text: every row over the newest schema (the columns a row's schema lacks
    are ""); the frozen legacy file has one schema of its own. A record that does not parse is a LedgerError."""
    if file == LEGACY_FILE:
        return csv_rows(text)
    records, problems = schema_records(text, E2E_SCHEMAS, file, SCHEMA_NAME)
    if problems:
        raise LedgerError(f"{E2E_DIR}/{file}: {problems[0]} (run `kda validate`)")
    return [as_newest(columns, fields, E2E_COLUMNS) for _, columns, fields in records]


AA_MARK = " A/A"  # the end of an A/A row's `timing`: both arms ran with the overlay off (kda e2e --aa)


def is_aa(row: dict[str, Any]) -> bool:
    return str(row.get("timing") or "").endswith(AA_MARK)


def kda_calls(coverage: Any) -> int:
    """Calls the overlay served with KDA code, from a row's ``coverage_on`` (its JSON text or the dict)."""
    try:
        calls = json.loads(coverage) if isinstance(coverage, str) else (coverage or {})
    except ValueError:
        return 0
    return sum(int(c.get("kda", 0)) for c in calls.values()) if isinstance(calls, dict) else 0


def installed_families(row: dict[str, Any]) -> dict[str, str]:
    """{swap target: family} of the targets the overlay had installed in a row's run, from its ``overlay``
    (``fn:installed ...; ``, run._overlay_text) and ``promoted`` (``fn=family:hash ...``, run._promoted_text)."""
    installed = {part.partition(":")[0] for part in str(row.get("overlay") or "").split("; ")
                 if part.partition(" ")[0].endswith(":installed")}
    family = {fn: rest.partition(":")[0] for fn, _, rest in
              (item.partition("=") for item in str(row.get("promoted") or "").split())}
    return {fn: family[fn] for fn in installed if fn in family}


def aa_ran_kda(row: dict[str, Any]) -> bool:
    """An A/A row whose second arm ran KDA code: not an A/A measurement (refused on append, never read as one)."""
    return is_aa(row) and kda_calls(row.get("coverage_on")) > 0


def _row_problem(row: dict[str, Any]) -> str:
    if row.get("status") not in STATUSES:
        return f"status {row.get('status')!r} not in {STATUSES}"
    if row.get("quality") not in QUALITIES:
        return f"quality {row.get('quality')!r} not in {QUALITIES}"
    if (row.get("stage") or "module") not in STAGES:
        return f"stage {row.get('stage')!r} not in {STAGES}"
    if aa_ran_kda(row):
        return "an A/A row's second arm ran KDA code: it is not an A/A measurement"
    return _layout_problem(row.get("parallel") or "", row.get("workers") or "")


PARALLEL = re.compile(r"(sp=\d+( (kv_gather|ulysses|ring)=\d+)*)?( ?tp=\d+)?")


def _layout_problem(parallel: str, workers: str) -> str:
    """A multi-worker row names its layout (kda_lab.e2e.parallel.label) and holds one JSON record per worker."""
    if not parallel:
        return "workers recorded on a one-process row (no parallel layout)" if workers else ""
    if not PARALLEL.fullmatch(parallel):
        return f"parallel {parallel!r} is not a worker layout like 'sp=2 kv_gather=2' or 'tp=2'"
    try:
        records = json.loads(workers)
    except ValueError:
        records = None
    if not isinstance(records, list) or not records or not all(isinstance(w, dict) for w in records):
        return f"a {parallel} row needs its workers column: a JSON list, one record per worker"
    return ""


def append(root: Path, rows: list[dict[str, Any]]) -> None:
    """Append rows to e2e/rows.csv (unknown keys rejected), extending the hash chain under the ledger lock
    (kda_lab.ledger.store); creates the file if needed. The legacy ledger is never appended to."""
    def check(row: dict[str, Any]) -> None:
        why = _row_problem(row)
        if why:
            raise LedgerError(why)

    append_versioned_csv(path(root), E2E_SCHEMAS, rows, name=f"{E2E_DIR}/{E2E_FILE}", fixed=SCHEMA_NAME,
                         check=check)


def validate(root: Path) -> list[str]:
    """Both e2e ledgers (the frozen legacy one and the tiered one): header, statuses, tiers and stages, numbers,
    environment columns, duplicate rows of a run, hash chain, a cut last line, and append-only against the whole git
    history and HEAD (the task ledgers' rules, kda_lab.ledger.store)."""
    def legacy_status(row: dict[str, str]) -> str:
        return "" if row["status"] in STATUSES else f"status {row['status']!r} not in {STATUSES}"

    legacy_floats = tuple(c for c in FLOATS if c in LEGACY_COLUMNS)
    return (validate_csv(path(root, LEGACY_FILE), LEGACY_COLUMNS, f"{E2E_DIR}/{LEGACY_FILE}", legacy_floats, ENV,
                         check=legacy_status, unique=("run_id", "row"))
            + validate_versioned_csv(path(root), E2E_SCHEMAS, f"{E2E_DIR}/{E2E_FILE}", SCHEMA_NAME, FLOATS, ENV,
                                     check=_row_problem, unique=("run_id", "row", "quality", "stage", "parallel")))
