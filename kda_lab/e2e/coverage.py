"""Which promoted kernels a default-tier request actually calls (issue #35 item 2), from e2e/rows.csv only.

A row's ``coverage_on`` counts, per swap target and fast path, the calls the overlay served with KDA code
and the calls it handed to SGLang (a lossless impl at the exact tier, a contract fallback, an SGLang fusion
that took the call site away). Per family and tier, the latest GPU row of each (row, tier) is read: a
family is **on** a tier's path when some row at that tier ran its KDA code, **off** when rows at that tier
were measured and none did, and unknown when no GPU row was measured at that tier.
"""

from __future__ import annotations

import json
from pathlib import Path

from kda_lab.ledger import e2e as e2e_ledger

DEFAULT_TIER = "lossless"


def latest_gpu_rows(root: Path) -> list[dict[str, str]]:
    """The latest GPU measurement per (row, quality, stage), superseded runs left out."""
    rows = e2e_ledger.read(root)
    superseded = {r["supersedes"] for r in rows if r.get("supersedes")}
    latest: dict[tuple[str, str, str], dict[str, str]] = {}
    for r in rows:
        if r["run_id"] in superseded or r["gpu_name"] in ("", "cpu") or r["status"] == "failed":
            continue
        latest[(r["row"], r["quality"], r["stage"])] = r
    return list(latest.values())


def served(root: Path) -> dict[str, dict[str, dict[str, int]]]:
    """{tier: {swap target or fast path: {"kda": calls, "sglang": calls, "rows": rows that called it}}}."""
    out: dict[str, dict[str, dict[str, int]]] = {}
    for r in latest_gpu_rows(root):
        calls = json.loads(r["coverage_on"]) if r.get("coverage_on") else {}
        tier = out.setdefault(r["quality"], {})
        for fn, c in calls.items():
            acc = tier.setdefault(fn, {"kda": 0, "sglang": 0, "rows": 0})
            acc["kda"] += int(c.get("kda", 0))
            acc["sglang"] += int(c.get("sglang", 0))
            acc["rows"] += 1
    return out


def family_state(root: Path, functions: tuple[str, ...], tier: str = DEFAULT_TIER) -> str:
    """ "on" / "off" / "unmeasured" for a family (its swap targets and fast paths) at ``tier``."""
    measured = any(r["quality"] == tier for r in latest_gpu_rows(root))
    if not measured:
        return "unmeasured"
    tier_calls = served(root).get(tier, {})
    return "on" if any(tier_calls.get(fn, {}).get("kda", 0) > 0 for fn in functions) else "off"


def flag(root: Path, family: str) -> str:
    """The text `kda tasks` / `kda report` print for a promoted family: "" when a default-tier request runs
    it.
    """
    from kda_kernels.registry import FAMILIES, FAST_PATH_FAMILIES

    fns = tuple(FAMILIES.get(family, ()))
    if family in FAST_PATH_FAMILIES:
        fns = (*fns, FAST_PATH_FAMILIES[family].name)
    state = family_state(root, fns)
    return {"on": "", "off": "off the default path", "unmeasured": "default path not measured"}[state]
