"""``e2e/rows.csv``: the append-only ledger of `kda e2e` runs (one row per model row, tier and stage per run).

Same discipline as the task ledgers (kda_lab.ledger): a fixed header, a hash chain over every row (``chain`` =
sha256 of the previous chain and this row's content, kda_lab.ledger's helper), and the committed file must be a
prefix of the working copy and every committed version must extend the one before it (kda_lab.ledger's
validate_against_git and validate_git_history, the rules of the task ledgers). `kda validate` runs it. Mistakes are fixed by a run that names the run
it supersedes, never by editing.
"""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import Any

from kda_lab.ledger import (
    LedgerError,
    _chain,
    _row_content,
    chained_csv,
    validate_against_git,
    validate_git_history,
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
E2E_COLUMNS: tuple[str, ...] = (
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
    return rows_from_text(p.read_text()) if p.exists() else []


def read_legacy(root: Path) -> list[dict[str, str]]:
    """The frozen pre-tier rows, each marked ``quality = "exact (legacy)"`` and ``stage = "module"``."""
    return [{**r, "quality": "exact (legacy)", "stage": "module", "request": "", "steps": ""}
            for r in read(root, LEGACY_FILE)]


def rows_from_text(text: str) -> list[dict[str, str]]:
    """:func:`read` of an e2e ledger's text."""
    return list(csv.DictReader(io.StringIO(text))) if text else []


def append(root: Path, rows: list[dict[str, Any]]) -> None:
    """Append rows (unknown keys rejected), extending the hash chain; creates e2e/benchmark.csv if needed."""
    p = path(root)
    existing = read(root)
    prev = existing[-1]["chain"] if existing else ""
    def known_status(row: dict[str, Any]) -> None:
        if row.get("status") not in STATUSES:
            raise LedgerError(f"status {row.get('status')!r} not in {STATUSES}")
        if row.get("quality") not in QUALITIES:
            raise LedgerError(f"quality {row.get('quality')!r} not in {QUALITIES}")
        if row.get("stage", "module") not in STAGES:
            raise LedgerError(f"stage {row.get('stage')!r} not in {STAGES}")

    text = chained_csv(E2E_COLUMNS, rows, prev, header=not p.exists() or p.stat().st_size == 0,
                       name=f"{E2E_DIR}/{E2E_FILE}", check=known_status)
    p.parent.mkdir(parents=True, exist_ok=True)
    with p.open("a", newline="") as f:
        f.write(text)


def validate(root: Path) -> list[str]:
    """Both e2e ledgers (the frozen legacy one and the tiered one): header, statuses, tiers, numbers, environment
    columns, hash chain, a cut last line, and append-only against the whole git history and HEAD (the task
    ledgers' rules)."""
    return _validate(root, LEGACY_FILE, LEGACY_COLUMNS) + _validate(root, E2E_FILE, E2E_COLUMNS)


def _validate(root: Path, file: str, columns: tuple[str, ...]) -> list[str]:
    p = path(root, file)
    if not p.exists():
        return []
    text = p.read_text()
    problems: list[str] = []
    if not text or text.splitlines()[0] != ",".join(columns):
        return [f"{E2E_DIR}/{file}: header differs from kda_lab.e2e.ledger's columns for it"]
    prev = ""
    for i, row in enumerate(csv.DictReader(io.StringIO(text)), start=2):
        where = f"{E2E_DIR}/{file}:{i}"
        if None in row or any(v is None for v in row.values()):
            problems.append(f"{where}: wrong number of fields")
            return problems
        if row["status"] not in STATUSES:
            problems.append(f"{where}: status {row['status']!r} not in {STATUSES}")
        if "quality" in columns and row["quality"] not in QUALITIES:
            problems.append(f"{where}: quality {row['quality']!r} not in {QUALITIES}")
        for c in (c for c in FLOATS if c in columns):
            if row[c]:
                try:
                    float(row[c])
                except ValueError:
                    problems.append(f"{where}: {c}={row[c]!r} is not a number")
        missing = [c for c in ENV if not row[c]]
        if missing:
            problems.append(f"{where}: environment columns empty: {missing}")
        if row["chain"] != _chain(prev, _row_content(row, columns)):
            problems.append(f"{where}: hash chain broken (a row was edited, removed or reordered)")
            return problems
        prev = row["chain"]
    if not text.endswith("\n"):
        problems.append(f"{E2E_DIR}/{file}: the last line is cut (no newline at the end of the file)")
    return problems + validate_git_history(p) + validate_against_git(p)
