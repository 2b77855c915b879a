"""A task as the exporter sees it: :func:`kda_lab.task.load_task` (the loader every stage uses), checked
against the overlay's swap targets (``kda_kernels.registry``), and the files an export copies."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from kda_kernels.registry import ARCH_CAPABILITY, BY_FUNCTION, FAMILIES, FAST_PATH_FAMILIES, SGLANG_VERSION
from kda_lab.export import Refusal
from kda_lab.task import TaskError, load_task
from kda_lab.task.schema import hashed_source

OVERLAY_FAMILIES: tuple[str, ...] = (*FAMILIES, *FAST_PATH_FAMILIES)


@dataclass(frozen=True)
class TaskMeta:
    slug: str
    arch: str
    family: str
    functions: tuple[str, ...]
    path: Path
    production: dict[str, str] = field(default_factory=dict)  # timed production row name -> function
    checked: tuple[str, ...] = ()  # every production row name (what an evidence check must have run)
    all_rows: int = 0  # rows of every kind (what a check without --rows runs)
    seeds: int = 2  # seeds per row an evidence check must have run (task.toml ``seeds``)

    @property
    def src(self) -> Path:
        return self.path / "src"


def load_task_meta(task_dir: Path) -> TaskMeta:
    """The task of ``task_dir`` (kda_lab.task's rules: a TaskError is a Refusal with its message), each
    function one the overlay swaps at the SGLang target task.toml names (or a kernel of the family's fast
    path)."""
    path = task_dir / "task.toml"
    if not path.exists():
        raise Refusal(f"{task_dir}: no task.toml")
    try:
        task = load_task(task_dir)
    except TaskError as e:
        raise Refusal(str(e)) from None
    family = task.family
    if family not in OVERLAY_FAMILIES:
        raise Refusal(f"{path}: family {family!r} has no overlay swap targets (kda_kernels ships the SGLang "
                      f"diffusion families {sorted(FAMILIES)} and the fast paths of "
                      f"{sorted(FAST_PATH_FAMILIES)})")
    if task.arch not in ARCH_CAPABILITY:
        raise Refusal(f"{path}: arch {task.arch!r} not in {sorted(ARCH_CAPABILITY)}")
    names = []
    for name, spec in task.functions.items():
        if family in FAST_PATH_FAMILIES:  # the fast path's kernels: SGLang has no function of them to swap
            fp = FAST_PATH_FAMILIES[family]
            if name not in fp.kernels:
                raise Refusal(f"{path}: {name!r} is not a kernel of the fast path {fp.name} {fp.kernels}")
            names.append(name)
            continue
        if name not in FAMILIES[family]:
            raise Refusal(f"{path}: {name!r} is not a {family} function {FAMILIES[family]}")
        if spec.sglang != BY_FUNCTION[name].sglang:
            raise Refusal(f"{path}: {name} names SGLang {spec.sglang!r}, but the overlay swaps "
                          f"{BY_FUNCTION[name].sglang!r} (SGLang {SGLANG_VERSION})")
        names.append(name)
    rows = task.rows(kinds=("production",))
    production = {w.name: w.fn for w in rows if w.bench and w.fn in names}
    return TaskMeta(task.slug, task.arch, family, tuple(names), task_dir, production,
                    tuple(w.name for w in rows), len(task.workloads), task.seeds)


def task_dirs(root: Path) -> list[Path]:
    k = root / "kernels"
    return sorted(p.parent for p in k.glob("*/task.toml")) if k.is_dir() else []


def task_dir(root: Path, slug: str) -> Path:
    d = root / "kernels" / slug
    if not (d / "task.toml").exists():
        known = ", ".join(p.name for p in task_dirs(root)) or "none"
        raise Refusal(f"no task {slug!r} under {root / 'kernels'}; known: {known}")
    return d


def source_files(src: Path) -> list[str]:
    """The files of src/ an export copies: those the source hash covers (kda_lab.task.schema.hashed_source);
    the export checks that kda_lab.task.schema.hash_files over this list is the task's source hash."""
    return [p.relative_to(src).as_posix() for p in sorted(src.rglob("*"))
            if not p.is_dir() and hashed_source(p.relative_to(src))]
