"""Where family tests live: every family of ``kda_lab.families.FAMILY_FUNCTIONS`` has exactly one test file,
``tests/families/test_<family>.py``, and that file defines at least one test named for a wrong implementation
(``wrong`` or ``rejected`` in its name: an implementation the family's checker must reject). ``kda
new-family`` stamps such a file; the negative cases below show the check failing for a family without one."""

from __future__ import annotations

import ast
from collections.abc import Iterable
from pathlib import Path

import pytest

import kda_lab.families as families
from kda_lab.task import new_family
from tests.conftest import REPO

FOLDER = REPO / "tests" / "families"
NOT_A_FAMILY = {"test_layout_of_family_tests.py"}  # test files here that are about no one family
WRONG_WORDS = ("wrong", "rejected")


def defined_tests(source: str) -> list[str]:
    """The names of the tests a module defines (module-level test_* functions, test_* methods of Test*)."""
    names = []
    for node in ast.parse(source).body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name.startswith("test"):
            names.append(node.name)
        elif isinstance(node, ast.ClassDef) and node.name.startswith("Test"):
            names += [f.name for f in node.body
                      if isinstance(f, ast.FunctionDef | ast.AsyncFunctionDef) and f.name.startswith("test")]
    return names


def layout_problems(family_names: Iterable[str], folder: Path, old_folder: Path) -> list[str]:
    """What breaks the rule for these families, one line each (empty when none)."""
    family_names = list(family_names)
    problems = []
    for family in family_names:
        path = folder / f"test_{family}.py"
        if not path.is_file():
            problems.append(f"{family}: no tests/families/{path.name} (kda new-family stamps one)")
            continue
        if not any(word in name for name in defined_tests(path.read_text()) for word in WRONG_WORDS):
            problems.append(f"{family}: tests/families/{path.name} defines no test of a wrong implementation "
                            f"(one with {' or '.join(map(repr, WRONG_WORDS))} in its name)")
        second = old_folder / f"test_families_{family}.py"
        if second.exists():
            problems.append(f"{family}: a second test file tests/{second.name}; "
                            f"move its tests into {path.name}")
    known = {f"test_{f}.py" for f in family_names} | NOT_A_FAMILY
    for path in sorted(folder.glob("test_*.py")):
        if path.name not in known:
            problems.append(f"tests/families/{path.name}: no family {path.stem.removeprefix('test_')!r} "
                            "in FAMILY_FUNCTIONS")
    return problems


def test_every_family_has_one_test_file_with_a_wrong_implementation() -> None:
    assert set(families.FAMILY_FUNCTIONS) == set(families.FAMILIES)
    assert set(families.MODEL_FAMILIES) <= set(families.FAMILY_FUNCTIONS)
    assert layout_problems(families.FAMILY_FUNCTIONS, FOLDER, REPO / "tests") == []


def test_a_family_added_without_a_test_file_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(families.FAMILY_FUNCTIONS, "residual_gate", ("residual_gate_fp32",))
    assert layout_problems(families.FAMILY_FUNCTIONS, FOLDER, REPO / "tests") == [
        "residual_gate: no tests/families/test_residual_gate.py (kda new-family stamps one)"]


def test_a_family_file_without_a_wrong_implementation_fails(tmp_path: Path) -> None:
    (tmp_path / "test_alpha.py").write_text("def test_oracle_hand_computed():\n    pass\n\n\n"
                                            "def helper_wrong():\n    pass\n")
    (tmp_path / "test_beta.py").write_text("class TestBeta:\n    def test_swapped_args_are_rejected(self):\n"
                                           "        pass\n")
    (tmp_path / "test_gamma.py").write_text("def test_wrong_eps():\n    pass\n")
    (tmp_path / "test_families_gamma.py").write_text("def test_more():\n    pass\n")
    problems = layout_problems(["alpha", "beta", "gamma"], tmp_path / "families_not_here", tmp_path)
    assert len(problems) == 3 and all("no tests/families/" in p for p in problems)
    problems = layout_problems(["alpha", "beta", "gamma"], tmp_path, tmp_path)
    assert problems == [
        "alpha: tests/families/test_alpha.py defines no test of a wrong implementation "
        "(one with 'wrong' or 'rejected' in its name)",
        "gamma: a second test file tests/test_families_gamma.py; move its tests into test_gamma.py",
        "tests/families/test_families_gamma.py: no family 'families_gamma' in FAMILY_FUNCTIONS",
    ]


def test_the_stamped_family_test_file_passes_the_rule(tmp_path: Path) -> None:
    (tmp_path / "test_residual_gate.py").write_text(new_family.test_file_text("residual_gate"))
    assert layout_problems(["residual_gate"], tmp_path, tmp_path) == []
