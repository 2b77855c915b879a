"""What ``kda validate`` refuses about a task's family and its stamped text (called from
:func:`kda_lab.task.validate.validate_task_dir`):

- a family the lab does not know, or one with no module ``kda_lab/families/<family>.py`` (``kda check`` would
  die with ModuleNotFoundError in the launched worktree);
- a task function the family module's ``FUNCTIONS`` does not declare;
- unresolved ``TODO(stamp)`` markers in the family module and, for the task's functions, in the overlay's
  registry and contracts (``kda new-family`` writes them);
- template text that contradicts task.toml: the facade baseline sentence for a function whose ``entry`` is
  not the facade, the variance rule in a task whose functions are all ``exact`` (a copy or layout family, not
  a norm), a function of an ``EXACT`` family without ``exact = true``;
- the task's GPU named twice in prompt.md's title line.

Torch-free: the family module is read as source (its ``FUNCTIONS`` and ``EXACT`` literals), never imported.
"""

from __future__ import annotations

import ast
import re
from importlib.util import find_spec
from pathlib import Path
from typing import Any

from kda_lab import ARCH_CAPABILITY
from kda_lab.families import FAMILY_FUNCTIONS
from kda_lab.families.rows import drift

TODO = "TODO(stamp)"
FACADE_ENTRY = "sglang.kernels.ops.diffusion:"
FACADE_SENTENCE = "Baseline: SGLang 0.5.23 through the facade"
VARIANCE_RE = re.compile(r"variance|E\[x²\]")
GPU_NAMES = {arch: arch.upper() for arch in ARCH_CAPABILITY}


def family_source(family: str) -> Path | None:
    """The family module's file, found without importing it (None when there is none)."""
    try:
        spec = find_spec(f"kda_lab.families.{family}")
    except (ImportError, ValueError):
        return None
    return Path(spec.origin) if spec is not None and spec.origin else None


def module_literals(path: Path) -> dict[str, Any]:
    """Top-level ``FUNCTIONS`` keys (a dict literal) and ``EXACT`` of a family module, read from its
    source."""
    out: dict[str, Any] = {}
    for node in ast.parse(path.read_text()).body:
        target = node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1 else (
            node.target if isinstance(node, ast.AnnAssign) else None)
        if not isinstance(target, ast.Name) or node.value is None:
            continue
        if target.id == "FUNCTIONS" and isinstance(node.value, ast.Dict):
            out["FUNCTIONS"] = {k.value for k in node.value.keys if isinstance(k, ast.Constant)}
        elif target.id == "EXACT" and isinstance(node.value, ast.Constant):
            out["EXACT"] = bool(node.value.value)
    return out


def family_problems(task: Any) -> list[str]:
    """Every refusal of this module for a loaded task (empty: none)."""
    name, family = task.path.name, task.family
    if family not in FAMILY_FUNCTIONS:
        return [f"{name}: unknown family {family!r}: register it with `kda new-family {family} --sglang "
                f"module:function` or `--fast-path module:Class` (docs/workflow.md, \"Adding to the lab\")"]
    source = family_source(family)
    if source is None:
        return [f"{name}: family {family!r} has no module kda_lab/families/{family}.py (its oracle, "
                "FUNCTIONS, BYTE_MODELS): `kda check` cannot run; write it (or stamp it with "
                "`kda new-family`)"]
    problems = []
    literals = module_literals(source)
    declared = literals.get("FUNCTIONS")
    if declared is not None:
        missing = sorted(set(task.functions) - declared)
        if missing:
            problems.append(f"{name}: task.toml cites {missing}, which kda_lab/families/{family}.py "
                            f"FUNCTIONS does not declare ({sorted(declared)})")
    for i, line in enumerate(source.read_text().splitlines(), start=1):
        if TODO in line:
            problems.append(f"{name}: kda_lab/families/{family}.py:{i}: unresolved {TODO}")
    problems += registry_markers(task)
    problems += text_problems(task, bool(literals.get("EXACT", False)))
    why = drift(task.path / "task.toml", task.path.parent)  # test rows are written in the family's home only
    if why:
        problems.append(why)
    return problems


def registry_markers(task: Any) -> list[str]:
    """Unresolved TODO(stamp) lines that ``kda new-family`` wrote into the overlay's tables for this task's
    functions (kda_kernels/registry.py, kda_kernels/contracts.py): a line naming one of them."""
    from kda_lab.paths import repo_root

    found = []
    names = re.compile(r"\b(" + "|".join(map(re.escape, task.functions)) + r")\b") if task.functions else None
    for rel in ("kda_kernels/registry.py", "kda_kernels/contracts.py"):
        path = repo_root() / rel
        if names is None or not path.exists():
            continue
        for i, line in enumerate(path.read_text().splitlines(), start=1):
            if TODO in line and names.search(line):
                found.append(f"{task.path.name}: {rel}:{i}: unresolved {TODO}")
    return found


def text_problems(task: Any, family_exact: bool) -> list[str]:
    """prompt.md against task.toml: the baseline sentence, the numerics rule, exactness, the title line."""
    name = task.path.name
    prompt_path = task.path / "prompt.md"
    prompt = prompt_path.read_text() if prompt_path.exists() else ""
    problems = []
    off_facade = sorted(fn for fn, spec in task.functions.items() if not spec.entry.startswith(FACADE_ENTRY))
    if FACADE_SENTENCE in prompt and off_facade:
        problems.append(f"{name}: prompt.md says the baseline goes through SGLang's facade, but task.toml's "
                        f"entry of {off_facade} is not the facade: say what the baseline is")
    all_exact = bool(task.functions) and all(spec.exact for spec in task.functions.values())
    if all_exact and "norm" not in task.family and VARIANCE_RE.search(prompt):
        problems.append(f"{name}: prompt.md carries the variance rule (norm-style wording), but every "
                        f"function of this {task.family} task is exact = true: state the bit-exactness rule "
                        "instead")
    if family_exact:
        loose = sorted(fn for fn, spec in task.functions.items() if not spec.exact)
        if loose:
            problems.append(f"{name}: family {task.family} is EXACT (its module), but task.toml's {loose} "
                            "lack exact = true")
    title = prompt.splitlines()[0] if prompt else ""
    gpu = GPU_NAMES.get(task.arch, task.arch.upper())
    if len(re.findall(re.escape(gpu), title, flags=re.I)) > 1:
        problems.append(f"{name}: prompt.md's title names {gpu} more than once: {title!r}")
    return problems
