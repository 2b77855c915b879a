"""The latest row of each group in the e2e ledgers: one picker for the report's module and request tables
and for the coverage flags (kda_lab.e2e.report, kda_lab.e2e.coverage), so that "latest" means one thing.

Every caller drops superseded runs and CPU rows (counted) and reads the A/A runs or the A/B runs, never both;
what they group by, which stages they read and how a failed run weighs are the parameters.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable
from typing import Literal

from kda_lab.evidence import ARCH_CAPABILITY, evidence_arch
from kda_lab.ledger.e2e import aa_ran_kda, is_aa

Row = dict[str, str]
# How a non-ok run weighs against an earlier run of its group: "latest" (it replaces it, so the table shows
# that the row now fails), "skip" (never read: a failed run has no coverage to speak of), "after_ok" (it
# replaces only a non-ok run: a request's stages run in separate calls, and a failed retry must not hide the
# stage that ran).
Failed = Literal["latest", "skip", "after_ok"]


def gpu_label(r: Row) -> tuple[str, bool]:
    """(the arch a row's GPU identifies, whether that GPU makes evidence for a lab arch: H200 or B200)."""
    arch = evidence_arch(r["gpu_name"], r.get("gpu_cc") or None)
    return arch, arch in ARCH_CAPABILITY


def by_row_tier_gpu(r: Row) -> tuple[str, ...]:
    """A module row per tier, GPU model and worker layout: a tier never supersedes another, an H100 run
    never hides an H200's, a multi-GPU run (``parallel``, `kda e2e --sp N`) never a one-process run or one at
    another degree."""
    return r["row"], r["quality"], gpu_label(r)[0], r.get("parallel", "")


def by_request_stage(r: Row) -> tuple[str, ...]:
    """A request's stage per tier, GPU model and worker layout."""
    return r["request"], r["quality"], gpu_label(r)[0], r.get("parallel", ""), r["stage"]


def latest_rows(rows: Iterable[Row], key: Callable[[Row], tuple[str, ...]], *,
                stages: Collection[str] | None = None, aa: bool = False,
                failed: Failed = "latest") -> tuple[dict[tuple[str, ...], Row], int]:
    """({key: the latest GPU row of that group}, in the order each group first appears; the number of CPU rows
    that would have been read), over ``rows`` in ledger order. ``stages``: the stages read (all when None);
    ``aa``: the A/A runs instead of the A/B ones. An A/A row whose second arm ran KDA code is neither (the
    ledger refuses it on append; a row that got in anyway is not shown as the noise yardstick)."""
    rows = list(rows)
    superseded = {r["supersedes"] for r in rows if r.get("supersedes")}
    latest: dict[tuple[str, ...], Row] = {}
    cpu = 0
    for r in rows:
        if r["run_id"] in superseded or (stages is not None and r.get("stage", "module") not in stages):
            continue
        if is_aa(r) != aa or aa_ran_kda(r):
            continue
        if r["gpu_name"] in ("", "cpu"):
            cpu += 1
            continue
        ok = r["status"] == "ok"
        if failed == "skip" and r["status"] == "failed":
            continue
        k = key(r)
        if failed == "after_ok" and not ok and latest.get(k, {}).get("status") == "ok":
            continue
        latest[k] = r
    return latest, cpu
