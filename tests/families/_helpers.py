"""What several family test files share (``tests/families/test_<family>.py``, one per family of
``kda_lab.families.FAMILY_FUNCTIONS``): a family's task and its rows by name, and the lab's real checker
(``kda_lab.measure.correctness.check_row``, what ``kda check`` runs per row) on one row, on the CPU."""

from __future__ import annotations

import functools
import subprocess
import sys
from collections.abc import Callable
from typing import Any

from kda_lab.families import contract
from kda_lab.measure.correctness import RowResult, check_row
from kda_lab.task import Task, load_candidate, load_task
from kda_lab.task.workloads import Workload
from tests.conftest import REPO

ARCHES = ("h200", "b200")


@functools.cache
def diffusion_task(family: str, arch: str = "h200") -> Task:
    """The family's multi-shape task for ``arch`` (its test rows live in the h200 one, its home)."""
    return load_task(f"{arch}_diffusion_{family}__multi_shape")


def rows(task: Task) -> dict[str, Workload]:
    return {w.name: w for w in task.workloads}


def check(task: Task, row: str, impls: dict[str, Callable[..., Any]], seed: int = 3) -> list[RowResult]:
    """Every impl on the task's row ``row`` through the checker, on the CPU: one result per impl."""
    w = rows(task)[row]
    return check_row(task, w, contract(task.family, w.fn), impls, seed=seed, device="cpu")


def ok(task: Task, row: str, fn: Callable[..., Any], seed: int = 3) -> bool:
    """Whether the checker passes ``fn`` on the row."""
    return all(r.ok for r in check(task, row, {"impl": fn}, seed))


def assert_reference_task_entry_resolves(task: Task) -> None:
    """A reference task (one function, one production row) names an entry that resolves without a GPU."""
    from kda_lab.measure.run import resolve_entry

    (fn,) = task.functions
    assert callable(resolve_entry(task.functions[fn].entry))
    assert [w.kind for w in task.workloads].count("production") == 1
    assert task.workloads[0].source.startswith("derived: lab reference-task definition")


def assert_baseline_map_matches_task_toml(task: Task) -> None:
    """The task's SGLang modules are the registry's (kda_kernels.lazy_baseline resolves fallbacks there), and
    the candidate exports every function: the passthrough (BASELINE = True) or a real candidate (no
    BASELINE)."""
    from kda_kernels import TARGETS

    module = load_candidate(task)
    defining = {t.function: t.module for t in TARGETS}
    assert {fn: spec.sglang.partition(":")[0] for fn, spec in task.functions.items()} == {
        fn: defining[fn] for fn in task.functions}
    assert set(module.EXPORTS) == set(task.functions) and getattr(module, "BASELINE", True) is True


def assert_register_imports_lazily(family: str) -> None:
    """Importing the family's register.py (every arch) loads none of SGLang's norm kernel modules (no GPU, no
    CuTe DSL), in a fresh process."""
    code = (
        "import sys\n"
        "from kda_lab.task import load_task, load_candidate\n"
        f"for a in {ARCHES!r}:\n"
        f"    load_candidate(load_task(f'{{a}}_diffusion_{family}__multi_shape'))\n"
        "bad = [m for m in sys.modules if m.startswith('sglang.kernels.ops.diffusion.norm') or "
        "m.startswith('cutlass')]\n"
        "assert not bad, bad\n"
        "print('ok')\n"
    )
    r = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and r.stdout.strip().endswith("ok"), r.stderr[-2000:]


STAGE_DIR_ENV = "KDA_GPU_STAGE_DIR"  # the folder holding .gpu-stage-d1 (default: this checkout's root)


def staged_sgl_kernel_source(relpath: str) -> str | None:
    """The text of ``sgl_kernel/<relpath>`` in the staged sgl-kernel core (``.gpu-stage-d1``, the wheel the
    box installs: scripts/gpu_stage_sgl_kernel.sh), read from its archive without installing it; None where
    nothing is staged (the caller skips). ``KDA_GPU_STAGE_DIR`` points at another checkout's stage."""
    import os
    import tarfile
    from pathlib import Path

    folder = Path(os.environ.get(STAGE_DIR_ENV) or REPO) / ".gpu-stage-d1"
    parts = sorted(folder.glob("sgl-kernel.tar.xz.part*"))
    if len(parts) != 1:  # the core is one chunk; more (or none) is not a stage this helper reads
        return None
    with tarfile.open(parts[0], mode="r:xz") as tar:
        member = tar.extractfile(f"sgl_kernel/{relpath}")
        return None if member is None else member.read().decode()


def signature_in(source: str, name: str) -> Any:
    """The signature of the module-level function ``name`` in ``source`` (read with ``ast``, never run)."""
    import ast
    import inspect

    node = next(n for n in ast.parse(source).body if isinstance(n, ast.FunctionDef) and n.name == name)
    a = node.args
    P = inspect.Parameter
    positional = a.posonlyargs + a.args
    defaults = [P.empty] * (len(positional) - len(a.defaults)) + [ast.unparse(d) for d in a.defaults]
    params = [P(arg.arg, P.POSITIONAL_OR_KEYWORD, default=d)
              for arg, d in zip(positional, defaults, strict=True)]
    params += [P(arg.arg, P.KEYWORD_ONLY, default=P.empty if d is None else ast.unparse(d))
               for arg, d in zip(a.kwonlyargs, a.kw_defaults, strict=True)]
    return inspect.Signature(params)
