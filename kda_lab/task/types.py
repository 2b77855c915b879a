"""The types of task.toml's values, checked before anything reads them (torch-free; the exporter runs it too).

Each wrong type is one line naming the key, what it holds and what it must hold: ``arch = ["h200"]``, ``atol =
"tiny"`` or ``tolerances = 3`` are a problem to report, never a traceback.
"""

from __future__ import annotations

from typing import Any

_STR, _INT, _NUM, _BOOL, _LIST, _TABLE = (
    "a string",
    "an integer",
    "a number",
    "true or false",
    "a list",
    "a table",
)


def _is(value: Any, kind: str) -> bool:
    if kind == _STR:
        return isinstance(value, str)
    if kind == _INT:
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == _NUM:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if kind == _BOOL:
        return isinstance(value, bool)
    if kind == _LIST:
        return isinstance(value, list)
    return isinstance(value, dict)


TOP = {
    "slug": _STR,
    "arch": _STR,
    "family": _STR,
    "title": _STR,
    "sglang_version": _STR,
    "notes": _STR,
    "seeds": _INT,
    "rows_from": _STR,
    "functions": _LIST,
    "tolerances": _TABLE,
    "workloads": _LIST,
}
FUNCTION = {
    "name": _STR,
    "sglang": _STR,
    "entry": _STR,
    "reads": _LIST,
    "writes": _LIST,
    "exact": _BOOL,
    "note": _STR,
}
WORKLOAD = {
    "name": _STR,
    "fn": _STR,
    "kind": _STR,
    "args": _TABLE,
    "model": _STR,
    "preset": _STR,
    "source": _STR,
    "tags": _LIST,
    "bench": _BOOL,
    "note": _STR,
}
TOLERANCE = {"atol": _NUM, "rtol": _NUM}


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _table(where: str, table: dict[str, Any], types: dict[str, str]) -> list[str]:
    return [
        f"{where}{key} = {_shown(table[key])} must be {kind}"
        for key, kind in types.items()
        if key in table and not _is(table[key], kind)
    ]


def type_problems(raw: Any, where: str) -> list[str]:
    """Every value of a parsed task.toml whose type is wrong (empty: the types are right)."""
    if not isinstance(raw, dict):
        return [f"{where}: not a table"]
    problems = _table(f"{where}: ", raw, TOP)
    if _is(raw.get("seeds"), _INT) and raw["seeds"] < 1:
        problems.append(f"{where}: seeds = {raw['seeds']} must be >= 1")
    for i, f in enumerate(raw.get("functions") or [] if _is(raw.get("functions", []), _LIST) else []):
        if not isinstance(f, dict):
            problems.append(f"{where}: functions[{i}] = {_shown(f)} must be a table ([[functions]])")
            continue
        problems += _table(f"{where}: functions[{i}] ({f.get('name')!r}): ", f, FUNCTION)
        for key in ("reads", "writes"):
            if _is(f.get(key), _LIST) and not all(isinstance(x, str) for x in f[key]):
                problems.append(f"{where}: functions[{i}].{key} must be a list of argument names (strings)")
    if _is(raw.get("tolerances", {}), _TABLE):
        for dtype, tol in raw.get("tolerances", {}).items():
            if not isinstance(tol, dict):
                problems.append(
                    f"{where}: tolerances.{dtype} = {_shown(tol)} must be a table {{atol = .., rtol = ..}}"
                )
                continue
            problems += _table(f"{where}: tolerances.{dtype}.", tol, TOLERANCE)
    for i, w in enumerate(raw.get("workloads") or [] if _is(raw.get("workloads", []), _LIST) else []):
        if not isinstance(w, dict):
            problems.append(f"{where}: workloads[{i}] = {_shown(w)} must be a table ([[workloads]])")
            continue
        problems += _table(f"{where}: workloads[{i}] ({w.get('name')!r}): ", w, WORKLOAD)
        if _is(w.get("tags"), _LIST) and not all(isinstance(t, str) for t in w["tags"]):
            problems.append(f"{where}: workloads[{i}].tags must be a list of strings")
    return problems
