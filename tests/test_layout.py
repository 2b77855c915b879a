"""The shape of ``kda_lab``: subpackages along the data flow, imports that only run one way, a torch-free task layer.

README's "Layout" section draws this; these tests keep the drawing true. The import graph is read from the
modules' source (deferred, function-level imports included), so a circle hidden in a function body counts.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO

PACKAGE = REPO / "kda_lab"
STAGES = ("task", "measure", "report", "launch", "interpret", "profile", "families", "e2e", "export")


def module_name(path: Path, root: Path) -> str:
    name = ".".join(path.relative_to(root).with_suffix("").parts)
    return name.removesuffix(".__init__")


def import_graph(package: Path) -> dict[str, set[str]]:
    """Module -> the kda_lab modules it imports anywhere in its body (``from pkg import sub`` names ``pkg.sub``)."""
    files = {module_name(p, package.parent): p for p in package.rglob("*.py") if "templates" not in p.parts}

    def resolve(name: str) -> str | None:
        while name and name not in files:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {m: set() for m in files}
    for mod, path in files.items():
        for node in ast.walk(ast.parse(path.read_text())):
            targets: list[str] = []
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("kda_lab"):
                targets = [f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in files else node.module
                           for a in node.names]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names if a.name.startswith("kda_lab")]
            for t in targets:
                r = resolve(t)
                if r and r != mod:
                    graph[mod].add(r)
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_kda_lab_has_no_import_circle() -> None:
    assert circles(import_graph(PACKAGE)) == []


def test_the_circle_finder_sees_a_deferred_circle(tmp_path: Path) -> None:
    """The check itself: two modules importing each other inside function bodies (the old plots <-> report)."""
    pkg = tmp_path / "kda_lab"
    (pkg / "report").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "report" / "__init__.py").write_text("")
    (pkg / "report" / "plots.py").write_text("def f():\n    from kda_lab.report.markdown import g\n")
    (pkg / "report" / "markdown.py").write_text("def g():\n    from kda_lab.report import plots\n")
    assert circles(import_graph(pkg)) == [["kda_lab.report.markdown", "kda_lab.report.plots"]]


def package_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """The module graph folded onto kda_lab's subpackages and top-level modules (``kda_lab.measure.env`` ->
    ``kda_lab.measure``): a circle here is two stages importing each other, whatever modules carry it."""
    def top(m: str) -> str:
        return ".".join(m.split(".")[:2])

    out: dict[str, set[str]] = {}
    for mod, targets in graph.items():
        out.setdefault(top(mod), set()).update(top(t) for t in targets if top(t) != top(mod))
    for targets in list(out.values()):
        for t in targets:
            out.setdefault(t, set())
    return out


def test_kda_lab_has_no_package_circle() -> None:
    # measure <-> e2e is gone: every ledger lives in kda_lab/ledger/, which imports no stage (issue 38, item 4)
    assert circles(package_graph(import_graph(PACKAGE))) == []


def test_the_package_circle_finder_sees_two_stages_importing_each_other(tmp_path: Path) -> None:
    """The check itself: no module-level circle, but measure -> e2e and e2e -> measure through other modules."""
    pkg = tmp_path / "kda_lab"
    for sub in ("measure", "e2e"):
        (pkg / sub).mkdir(parents=True)
        (pkg / sub / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "measure" / "box.py").write_text("from kda_lab.e2e import ledger\n")
    (pkg / "e2e" / "ledger.py").write_text("X = 1\n")
    (pkg / "e2e" / "command.py").write_text("def f():\n    from kda_lab.measure import env\n")
    (pkg / "measure" / "env.py").write_text("Y = 2\n")
    graph = import_graph(pkg)
    assert circles(graph) == []
    assert circles(package_graph(graph)) == [["kda_lab.e2e", "kda_lab.measure"]]


def test_stages_import_downward_only() -> None:
    """Leaves and the task layer never reach up into measuring, reporting, the interpreter or profiling."""
    graph = import_graph(PACKAGE)
    upper = ("kda_lab.measure", "kda_lab.report", "kda_lab.interpret", "kda_lab.profile", "kda_lab.cli",
             "kda_lab.testing", "kda_lab.e2e", "kda_lab.export")
    lower = [m for m in graph if m.startswith(("kda_lab.task", "kda_lab.families", "kda_lab.launch", "kda_lab.ledger"))
             or m in ("kda_lab.evidence", "kda_lab.stats", "kda_lab.paths", "kda_lab.sglang_source")]
    reaching_up = {m: sorted(t for t in graph[m] if t.startswith(upper)) for m in lower}
    assert {m: t for m, t in reaching_up.items() if t} == {}
    report_to_measure = {m: sorted(t for t in graph[m] if t.startswith("kda_lab.measure"))
                         for m in graph if m.startswith("kda_lab.report")}
    assert {m: t for m, t in report_to_measure.items() if t} == {}


@pytest.mark.parametrize("stage", STAGES)
def test_each_stage_is_a_package_with_a_docstring(stage: str) -> None:
    init = PACKAGE / stage / "__init__.py"
    assert init.exists(), f"kda_lab/{stage}/ is not a package"
    assert ast.get_docstring(ast.parse(init.read_text())), f"kda_lab/{stage}/__init__.py says nothing about the stage"


def test_no_flat_module_sprawl() -> None:
    """Only faces, entry points and leaves stay at the top of kda_lab; everything else lives in its stage."""
    top = sorted(p.stem for p in PACKAGE.glob("*.py"))
    assert top == ["__init__", "__main__", "baselines", "cli", "doctor", "evidence", "paths", "pytest_plugin",
                   "sglang_source", "stats", "testing"]


def test_task_layer_imports_no_torch() -> None:
    """`kda tasks` / `kda validate` start without torch: the byte model sizes dtypes from the workload table."""
    code = ("import sys, kda_lab.task, kda_lab.task.stamp, kda_lab.task.validate, kda_lab.report; "
            "print(sorted(m for m in ('torch', 'triton') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_dtype_bytes_agree_with_torch() -> None:
    import torch

    from kda_lab.measure.inputs import TORCH_DTYPES
    from kda_lab.task.workloads import DTYPE_BYTES, DTYPES

    assert set(DTYPE_BYTES) == set(DTYPES) == set(TORCH_DTYPES)
    assert {k: TORCH_DTYPES[k].itemsize for k in DTYPES} == DTYPE_BYTES
    assert torch.bfloat16.itemsize == DTYPE_BYTES["bfloat16"]


def test_public_faces_keep_their_names() -> None:
    """The imports task folders, tests and the exporter use keep working after the regrouping."""
    from kda_lab import interpret, ledger, profile, report, task

    for face, names in ((task, ("Task", "TaskError", "load_task", "load_candidate", "source_hash",
                                "validate_task_dir", "all_task_dirs")),
                        (report, ("write", "check", "collect", "register", "main", "TaskReport")),
                        (interpret, ("interpret_check", "install_shims", "InterpreterUnavailable", "NOT_CHECKED_EXIT")),
                        (profile, ("register", "launch")),
                        (ledger, ("validate_ledgers", "geomean", "runs"))):
        missing = [n for n in names if not hasattr(face, n)]
        assert not missing, f"{face.__name__} lost {missing}"
