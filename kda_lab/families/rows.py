"""A family's test rows, read from its home task's task.toml: the one place they are written.

Every task of a family carries the family's test rows (tails, odd sizes, strided views; ``kind = "test"``).
They are maintained in the family's home task, the ``h200`` one (the first task of the family otherwise). A
twin of the home on the other GPU takes them, with the production rows, through ``rows_from``
(:mod:`kda_lab.task.twins`; ``kda new-task`` writes that for a second arch of an existing task). Any other
task of the family gets the home's test-row blocks copied verbatim by ``kda new-task``, comments included, and
:func:`drifted` names such a task whose test rows differ from the home's (tests/test_families_rows.py holds
the tree to it; a twin cannot drift). A new family has no home task yet: its first task is stamped with a TODO
where its test rows go.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

from kda_lab.paths import kernels_dir

HOME_ARCH = "h200"
ROWS_FROM = "rows_from"  # kda_lab.task.twins' key (not imported from there: kda_lab.task imports this module)
_BLOCK = re.compile(r"^\[\[workloads\]\]\s*$", re.M)


def home_task(family: str, kernels: Path | None = None) -> Path | None:
    """The task.toml holding ``family``'s test rows: its ``h200`` task, else its first task, else None (a
    twin, which takes its rows from another task through ``rows_from``, is never the home)."""
    found = []
    for toml in sorted((kernels or kernels_dir()).glob("*/task.toml")):
        try:
            raw = tomllib.loads(toml.read_text())
        except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError):
            continue
        if raw.get("family") == family and ROWS_FROM not in raw:
            found.append(toml)
    return next((t for t in found if t.parent.name.startswith(f"{HOME_ARCH}_")), found[0] if found else None)


def family_test_rows(family: str, kernels: Path | None = None) -> list[dict[str, Any]]:
    """The raw ``kind = "test"`` workloads of the family's home task ([] without one)."""
    home = home_task(family, kernels)
    if home is None:
        return []
    return [w for w in tomllib.loads(home.read_text()).get("workloads", []) if w.get("kind") == "test"]


def family_test_blocks(family: str, kernels: Path | None = None) -> str:
    """The home task's ``[[workloads]]`` blocks of kind "test", as written there ('' without a home task). A
    block runs from its ``[[workloads]]`` line to the next one (its comments and ``[workloads.args]`` table
    with it); a comment block that introduces the next row belongs to that row."""
    home = home_task(family, kernels)
    if home is None:
        return ""
    text = home.read_text()
    return "\n".join(text[a:b] for a, b in family_test_spans(text))


def _without_trailing_comments(block: str) -> str:
    """A block less the comment lines at its end (they introduce the next block or close the file)."""
    lines = block.rstrip().splitlines()
    while lines and (not lines[-1].strip() or lines[-1].lstrip().startswith("#")):
        lines.pop()
    return "\n".join(lines) + "\n"


def family_test_spans(text: str) -> list[tuple[int, int]]:
    """(start, end) of each ``kind = "test"`` block of a task.toml's text (trailing comments left out)."""
    starts = [m.start() for m in _BLOCK.finditer(text)]
    spans = []
    for i, start in enumerate(starts):
        end = starts[i + 1] if i + 1 < len(starts) else len(text)
        block = _without_trailing_comments(text[start:end])
        if tomllib.loads(block)["workloads"][0].get("kind") == "test":
            spans.append((start, start + len(block.rstrip("\n")) + 1))
    return spans


def drift(toml: Path, kernels: Path | None = None) -> str | None:
    """Why the task at ``toml`` does not carry exactly its family home's test rows (None: it does, it is the
    home, it is a twin that takes them from a home through ``rows_from``, or its family has none)."""
    raw = tomllib.loads(toml.read_text())
    family = raw.get("family")
    if ROWS_FROM in raw:  # its test rows are the home's own (kda_lab.task.twins refuses a twin's test rows)
        return None
    home = home_task(family, kernels) if family else None
    if home is None or home.resolve() == toml.resolve():
        return None
    own = [w for w in raw.get("workloads", []) if w.get("kind") == "test"]
    if own == family_test_rows(family, kernels):
        return None
    return (f"{toml.parent.name}: its test rows differ from {home.parent.name}'s, the family's home (copy "
            f"the home's kind = \"test\" blocks; they are written there only)")


def drifted(kernels: Path | None = None) -> list[str]:
    """Every task whose test rows are not exactly its family home's."""
    return [why for toml in sorted((kernels or kernels_dir()).glob("*/task.toml"))
            if (why := drift(toml, kernels)) is not None]
