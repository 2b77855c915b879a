"""Whether a task folder keeps the lab's contract: files, task.toml schema, stamp markers, ledgers, candidate.

``kda validate`` and the per-task tests run :func:`validate_task_dir`; the stamper (:mod:`kda_lab.task.stamp`)
writes the ``TODO(stamp)`` markers this module refuses, so both import the marker from here.
"""

from __future__ import annotations

from pathlib import Path

from kda_lab import ledger
from kda_lab.task.family_checks import family_problems
from kda_lab.task.schema import REQUIRED_FILES, TaskError, load_candidate, load_task
from kda_lab.task.workloads import TensorSpec

TODO = "TODO(stamp)"


def todo_markers(task_dir: Path) -> list[str]:
    """Unresolved stamp markers in a task folder's hand-edited files."""
    found = []
    for name in ("prompt.md", "interface.md", "task.toml", "src/register.py"):
        p = task_dir / name
        if p.exists():
            for i, line in enumerate(p.read_text().splitlines(), start=1):
                if TODO in line:
                    found.append(f"{task_dir.name}/{name}:{i}: unresolved {TODO}")
    return found


def validate_task_dir(path: Path) -> list[str]:
    """Every contract check of one folder; returns problems (empty = valid). Never raises: whatever breaks
    while
    checking is a problem line (`kda validate` goes on with the next task)."""
    try:
        return _validate(Path(path))
    except Exception as e:  # noqa: BLE001 - a broken folder is reported, never a traceback
        return [f"{Path(path).name}: could not be validated: {type(e).__name__}: {e}"]


def _validate(path: Path) -> list[str]:
    problems: list[str] = []
    path = Path(path)
    for rel in REQUIRED_FILES:
        if not (path / rel).exists():
            problems.append(f"{path.name}: missing {rel}")
    try:
        task = load_task(path)
    except TaskError as e:
        return problems + [str(e)]
    for spec_name, spec in ((w.name, s) for w in task.workloads for s in w.tensor_specs().values()):
        if isinstance(spec, TensorSpec) and spec.dist == "const" and spec.mean == 0:
            problems.append(f"{path.name}: row {spec_name}: all-zero inputs are not allowed")
    problems += todo_markers(path)
    problems += family_problems(task)  # the family module and the stamped text vs task.toml
    prompt = (path / "prompt.md").read_text() if (path / "prompt.md").exists() else ""
    other = {"h200": ("B200", "b200", "sm_100"), "b200": ("H200", "h200", "sm_90")}[task.arch]
    leaked = [w for w in other if w in prompt]
    if leaked:
        problems.append(f"{path.name}: prompt.md of an {task.arch} task mentions {leaked}")
    problems += ledger.validate_ledgers(path)  # the same code the exporter runs before its gate
    if (path / "src/register.py").exists():
        try:
            load_candidate(task)
        except Exception as e:  # noqa: BLE001 - any import failure is a contract problem to report
            problems.append(f"{path.name}: src/register.py does not import cleanly: {type(e).__name__}: {e}")
    return problems
