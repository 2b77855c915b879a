"""Test rows have one home: the family's h200 task.toml (kda_lab.families.rows). A twin takes them from there
with the production rows (rows_from, tests/test_task_twins.py); every other task of the family carries exactly
those rows, and `kda new-task` copies their blocks from there."""

from __future__ import annotations

import sys
import tomllib
from pathlib import Path

from kda_lab.families import FAMILY_FUNCTIONS
from kda_lab.families.rows import drifted, family_test_blocks, family_test_rows, home_task

HOME = '''family = "demo"

[[workloads]]
name = "prod"
fn = "f"
kind = "production"
[workloads.args]
x = { shape = [4, 8], dtype = "bfloat16" }

# the odd-size row: a tail in both dimensions
[[workloads]]
name = "test_odd"
fn = "f"
kind = "test"
tags = ["tiny"]
[workloads.args]
x = { shape = [3, 5], dtype = "float32" }
'''


def lab(tmp_path: Path, twin_rows: str) -> Path:
    kernels = tmp_path / "kernels"
    for slug, text in (("h200_demo__x", HOME), ("b200_demo__x", HOME.replace(HOME[HOME.index("# the odd"):],
                                                                                twin_rows))):
        (kernels / slug).mkdir(parents=True)
        (kernels / slug / "task.toml").write_text(text)
    return kernels


def test_every_task_carries_its_familys_home_test_rows() -> None:
    assert drifted() == []
    for family in FAMILY_FUNCTIONS:
        home = home_task(family)
        assert home is not None and home.parent.name.startswith("h200_"), family
        rows = family_test_rows(family)
        assert tomllib.loads(family_test_blocks(family))["workloads"] == rows != [], family


def test_blocks_are_copied_with_their_comments_and_a_drifted_twin_is_named(tmp_path: Path) -> None:
    kernels = lab(tmp_path, HOME[HOME.index("# the odd"):])
    assert home_task("demo", kernels).parent.name == "h200_demo__x"
    blocks = family_test_blocks("demo", kernels)
    assert blocks.startswith("[[workloads]]\nname = \"test_odd\"") and "prod" not in blocks
    assert drifted(kernels) == []
    # the deliberately wrong twin: the same row with another shape
    kernels = lab(tmp_path / "wrong", HOME[HOME.index("# the odd"):].replace("[3, 5]", "[3, 6]"))
    (problem,) = drifted(kernels)
    assert problem.startswith("b200_demo__x: its test rows differ from h200_demo__x's")


def test_a_family_without_a_task_has_no_rows(tmp_path: Path) -> None:
    (tmp_path / "kernels").mkdir()
    kernels = tmp_path / "kernels"
    assert home_task("demo", kernels) is None
    assert family_test_rows("demo", kernels) == [] and family_test_blocks("demo", kernels) == ""


def test_kda_validate_refuses_a_twin_whose_test_rows_drifted(tmp_path: Path) -> None:
    import os
    import shutil
    import subprocess

    repo = Path(__file__).resolve().parents[1]
    (tmp_path / "kda_lab").mkdir()  # marks the lab root for kda_lab.paths
    # a b200 task that keeps its own rows (not rows_from: its task.toml says why), so its copy can drift
    for arch in ("h200", "b200"):
        slug = f"{arch}_diffusion_fuse_scale_shift__multi_shape"
        shutil.copytree(repo / "kernels" / slug, tmp_path / "kernels" / slug,
                        ignore=shutil.ignore_patterns("__pycache__", "dev", "ncu", "profile"))
    twin = tmp_path / "kernels/b200_diffusion_fuse_scale_shift__multi_shape/task.toml"
    text = twin.read_text()
    at = text.index("shape = [", text.index('kind = "test"'))
    twin.write_text(text[:at] + "shape = [99, " + text[at + len("shape = ["):])
    r = subprocess.run([sys.executable, "-m", "kda_lab", "validate", twin.parent.name],
                       env={**os.environ, "KDA_ROOT": str(tmp_path)}, capture_output=True, text=True,
                       timeout=300)
    why = "its test rows differ from h200_diffusion_fuse_scale_shift__multi_shape's"
    assert r.returncode != 0 and why in r.stdout, r.stdout + r.stderr
