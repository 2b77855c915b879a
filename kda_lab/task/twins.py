"""Twins share rows: ``rows_from = "<home slug>"`` in a task.toml takes the home task's rows and tolerances.

The b200 and h200 tasks of a family mostly run the same production calls. Each row is written once, in the
home's task.toml (the family's ``h200`` task); its twin on the other GPU names the home and declares only
what is its own: slug, arch, title, notes, functions (the baseline ``entry`` differs per arch) and the
production rows that only its GPU runs. :func:`with_home_rows` is the one place a twin's rows are put
together; every reader of a task.toml goes through it (``kda_lab.task.schema.parse_task``, so ``kda check``,
``kda bench``, the task tests and ``kda validate``; the report; the exporter; ``kda e2e``'s tolerances), so
data still flows one way, task.toml -> workloads.

Semantics of a twin (``rows_from`` set):

- the home is ``kernels/<rows_from>/task.toml`` next to the twin, a task of the same family that declares its
  own rows: a home is never a twin itself (no chains, hence no cycles);
- shared, from the home: ``[tolerances]`` and every ``[[workloads]]`` row, production and test, in the home's
  order (the row's ``source`` is the home's: the capture it was written from);
- the twin's own ``[[workloads]]`` are production rows the home lacks (calls that only its GPU makes); they
  follow the home's. A twin declares no ``[tolerances]`` and no test rows (both come with the home's rows),
  and no row named like one of the home's: a twin adds rows, it never redefines one.

Each refusal is one line (a :class:`TwinError`); ``kda validate`` prints it. Torch-free.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

ROWS_FROM = "rows_from"
SHARED_TABLES = ("tolerances",)  # besides the rows: what a twin takes from its home and may not declare


class TwinError(ValueError):
    """A ``rows_from`` that cannot be honoured (a missing home, a chain or cycle, a twin that redeclares)."""


def _read(toml: Path) -> dict[str, Any] | None:
    """The parsed file, or None where it is missing or not TOML."""
    try:
        return tomllib.loads(toml.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError):
        return None


def _cycle_or_chain(twin: str, home: str, home_raw: dict[str, Any], kernels: Path) -> str:
    """Why a home that is itself a twin is refused: the cycle it closes, else the chain it starts."""
    seen, nxt = [twin, home], home_raw[ROWS_FROM]
    while isinstance(nxt, str):
        if nxt in seen:
            return f"rows_from makes a cycle ({' -> '.join([*seen, nxt])}): a home declares its own rows"
        seen.append(nxt)
        raw = _read(kernels / nxt / "task.toml")
        nxt = raw.get(ROWS_FROM) if raw else None
    return (f"rows_from names {home}, which takes its rows from {home_raw[ROWS_FROM]} itself: name the home "
            f"that declares the rows (a twin's home is never a twin)")


def home_of(raw: dict[str, Any], task_dir: Path) -> tuple[str, dict[str, Any]] | None:
    """(home slug, the home's parsed task.toml) of a twin; None for a task that declares its own rows."""
    home = raw.get(ROWS_FROM)
    if home is None:
        return None
    where = f"{task_dir / 'task.toml'}"
    if not isinstance(home, str) or not home:
        raise TwinError(f"{where}: rows_from = {home!r} must be the slug of the task whose rows it takes")
    if home == task_dir.name:
        raise TwinError(f"{where}: rows_from makes a cycle ({home} -> {home}): a task cannot take its rows "
                        "from itself")
    toml = task_dir.parent / home / "task.toml"
    if not toml.is_file():
        raise TwinError(f"{where}: rows_from names {home!r}, which is not a task here (no "
                        f"{task_dir.parent.name}/{home}/task.toml)")
    home_raw = _read(toml)
    if home_raw is None:
        raise TwinError(f"{where}: rows_from names {home}, whose task.toml does not parse (kda validate "
                        f"{home})")
    if ROWS_FROM in home_raw:
        raise TwinError(f"{where}: {_cycle_or_chain(task_dir.name, home, home_raw, task_dir.parent)}")
    if home_raw.get("family") != raw.get("family"):
        raise TwinError(f"{where}: rows_from names {home}, a {home_raw.get('family')!r} task; this task's "
                        f"family is {raw.get('family')!r}")
    return home, home_raw


def with_home_rows(raw: dict[str, Any], task_dir: Path) -> dict[str, Any]:
    """The task.toml ``raw`` of the task in ``task_dir`` with its home's rows and tolerances in place (a task
    without ``rows_from`` comes back as it is). Raises :class:`TwinError`."""
    found = home_of(raw, task_dir)
    if found is None:
        return raw
    home, home_raw = found
    where = f"{task_dir / 'task.toml'}: rows_from = {home!r}"
    for table in SHARED_TABLES:
        if table in raw:
            raise TwinError(f"{where}, yet it declares [{table}]: a twin takes them from its home with the "
                            "rows (delete the table here, or drop rows_from)")
    own = raw.get("workloads", [])
    if not isinstance(own, list) or not all(isinstance(w, dict) for w in own):
        return raw  # the type check names it (kda_lab.task.types)
    home_rows = home_raw.get("workloads", [])
    home_names = {w.get("name") for w in home_rows if isinstance(w, dict)}
    for w in own:
        if w.get("kind") != "production":
            raise TwinError(f"{where}, yet it declares the {w.get('kind')} row {w.get('name')!r}: a twin "
                            "adds only production rows its home lacks (test rows are written in the home)")
        if w.get("name") in home_names:
            raise TwinError(f"{where}, yet it declares row {w.get('name')!r}, a row of {home} too: a twin "
                            "adds rows, it never redefines one of its home's")
    merged = {**raw, "workloads": [*home_rows, *own]}
    for table in SHARED_TABLES:
        if table in home_raw:
            merged[table] = home_raw[table]
    return merged


def load_raw(task_dir: Path) -> dict[str, Any]:
    """``kernels/<slug>/task.toml`` parsed, a twin's home rows in place. Raises OSError, TOMLDecodeError,
    UnicodeDecodeError (the file) or :class:`TwinError` (its rows_from)."""
    raw = tomllib.loads((task_dir / "task.toml").read_text(encoding="utf-8"))
    return with_home_rows(raw, task_dir)


def twin_home(slug: str, family: str, kernels: Path, home_arch: str = "h200") -> str | None:
    """The task a new task ``slug`` would take its rows from: the task of another arch with the same name
    after the arch prefix and the same family that declares its own rows (``home_arch``'s first), or None."""
    arch, _, rest = slug.partition("_")
    found = []
    for toml in sorted(kernels.glob(f"*_{rest}/task.toml")):
        other = toml.parent.name
        if other == slug or other.partition("_")[2] != rest or other.partition("_")[0] == arch:
            continue
        raw = _read(toml)
        if raw is not None and raw.get("family") == family and ROWS_FROM not in raw:
            found.append(other)
    return next((s for s in found if s.startswith(f"{home_arch}_")), found[0] if found else None)
