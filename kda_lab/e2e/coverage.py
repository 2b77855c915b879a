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

from kda_lab.e2e.latest import latest_rows
from kda_lab.ledger import e2e as e2e_ledger

DEFAULT_TIER = "lossless"


def _by_row_tier_stage(r: dict[str, str]) -> tuple[str, ...]:
    return r["row"], r["quality"], r["stage"]


def latest_gpu_rows(root: Path) -> list[dict[str, str]]:
    """The latest GPU measurement per (row, quality, stage), superseded runs left out. Not per GPU model:
    which code a request's call sites reach does not hang on it, and a row counted once per GPU would be
    summed twice in :func:`served`. Failed runs are skipped (no coverage); A/A rows ran no KDA code by
    construction: they say nothing of the path. Multi-worker rows (`kda e2e --sp N`) are left out: a worker
    serves the same call sites as one process, and counting them too would sum a row twice."""
    rows = [r for r in e2e_ledger.read(root) if not r.get("parallel")]
    return list(latest_rows(rows, _by_row_tier_stage, failed="skip")[0].values())


def served(root: Path, stage: str | None = None) -> dict[str, dict[str, dict[str, int]]]:
    """{tier: {swap target or fast path: {"kda": calls, "sglang": calls, "rows": rows that called it}}}, over
    the rows of ``stage`` (``module``, ``denoise_step``, ``decode``) or all of them."""
    out: dict[str, dict[str, dict[str, int]]] = {}
    for r in latest_gpu_rows(root):
        if stage is not None and r["stage"] != stage:
            continue
        calls = json.loads(r["coverage_on"]) if r.get("coverage_on") else {}
        tier = out.setdefault(r["quality"], {})
        for fn, c in calls.items():
            acc = tier.setdefault(fn, {"kda": 0, "sglang": 0, "rows": 0})
            acc["kda"] += int(c.get("kda", 0))
            acc["sglang"] += int(c.get("sglang", 0))
            acc["rows"] += 1
    return out


def cited_models(family: str) -> set[str]:
    """The models named by the production rows of ``family``'s home task."""
    from kda_lab.families.rows import home_task
    from kda_lab.task import load_task

    home = home_task(family)
    if home is None:
        return set()
    return {w.model for w in load_task(home.parent).workloads if w.kind == "production"}


def family_state(root: Path, functions: tuple[str, ...], models: set[str] | None = None,
                 tier: str = DEFAULT_TIER) -> tuple[str, list[str], list[str]]:
    """("on" | "off" | "partial" | "unmeasured", requests measured at ``tier`` that run ``models``, runnable
    requests of ``models`` not measured yet) for a family (its swap targets and fast paths). Without
    ``models`` every measured row counts and nothing is missing."""
    from kda_lab.e2e.recipes import RECIPES
    from kda_lab.e2e.request import RUNNABLE

    theirs = [rc.name for rc in RECIPES if rc.name in RUNNABLE and models and models & set(rc.task_models)]
    rows = [r for r in latest_gpu_rows(root) if r["quality"] == tier]
    if not rows:
        return "unmeasured", [], theirs
    if any(int(c.get("kda", 0)) > 0 for r in rows if r.get("coverage_on")
           for fn, c in json.loads(r["coverage_on"]).items() if fn in functions):
        return "on", [], []
    if models is None:
        return "off", [], []
    measured = {r["request"] for r in rows if r["stage"] != "module"}
    done, missing = [n for n in theirs if n in measured], [n for n in theirs if n not in measured]
    if missing:
        return ("partial" if done else "unmeasured"), done, missing
    return "off", done, []


def flag(root: Path, family: str) -> str:
    """The text `kda tasks` prints for a promoted family: "" when a default-tier row runs its code; else what
    the default-tier requests of the models its rows cite showed, and which of them are not measured yet."""
    from kda_kernels.registry import FAMILIES, FAST_PATH_FAMILIES

    fns = tuple(FAMILIES.get(family, ()))
    if family in FAST_PATH_FAMILIES:
        fns = (*fns, FAST_PATH_FAMILIES[family].name)
    state, done, missing = family_state(root, fns, cited_models(family))
    if state == "on":
        return ""
    if state == "off":
        return (f"off the default path: the {DEFAULT_TIER} requests of its models ({', '.join(done)}) never "
                "ran it")
    if state == "partial":
        return (f"not called by the {DEFAULT_TIER} requests measured ({', '.join(done)}); not measured yet: "
                f"{', '.join(missing)}")
    return "default path not measured" + (f" (requests: {', '.join(missing)})" if missing else "")
