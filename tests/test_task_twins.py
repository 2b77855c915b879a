"""Twins share rows (kda_lab.task.twins): a task.toml with ``rows_from = "<home>"`` takes its home's rows and
tolerances at load time, for every reader; each wrong ``rows_from`` is one line of `kda validate`."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kda_lab.families.rows import drift, drifted, home_task
from kda_lab.task import load_task, validate_task_dir
from tests.conftest import REPO

HOME = "h200_diffusion_norm_infer__multi_shape"
TWIN = "b200_diffusion_norm_infer__multi_shape"
MID = "h200_mid__x"  # a second twin, for chains and cycles
OWN_ROW = '''
[[workloads]]
name = "b200_only_onepass_M8"
fn = "triton_one_pass_rms_norm"
kind = "production"
model = "Z-Image"
preset = "zimage"
source = "captured:b200_diffusion_norm_infer__multi_shape.jsonl:7"
[workloads.args]
x = { shape = [8, 128], dtype = "bfloat16" }
w = { shape = [128], dtype = "bfloat16" }
eps = 1e-06
'''


def header(text: str, slug: str, arch: str, rows_from: str) -> str:
    """A task.toml's text up to its tolerances (slug, arch, family, title, notes, functions), as a twin of
    ``rows_from``."""
    head = text[:text.index("# |out - oracle|")]
    head = head.replace(f'slug = "{HOME}"', f'slug = "{slug}"').replace('arch = "h200"', f'arch = "{arch}"')
    pin = 'sglang_version = "0.5.23"\n'
    return head.replace(pin, f'{pin}rows_from = "{rows_from}"\n')


@pytest.fixture
def lab(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A lab root (KDA_ROOT) with the norm_infer home and its b200 folder written as a twin of it."""
    root = tmp_path / "lab"
    (root / "kda_lab").mkdir(parents=True)
    for slug in (HOME, TWIN):
        shutil.copytree(REPO / "kernels" / slug, root / "kernels" / slug,
                        ignore=shutil.ignore_patterns("__pycache__", "dev", "ncu", "profile"))
    home_text = (root / "kernels" / HOME / "task.toml").read_text()
    (root / "kernels" / TWIN / "task.toml").write_text(header(home_text, TWIN, "b200", HOME))
    monkeypatch.setenv("KDA_ROOT", str(root))
    return root / "kernels"


def test_a_twin_takes_its_homes_rows_and_tolerances(lab: Path) -> None:
    home, twin = load_task(lab / HOME), load_task(lab / TWIN)
    assert (twin.arch, twin.rows_from, home.rows_from) == ("b200", HOME, "")
    assert twin.workloads == home.workloads and twin.tolerances == home.tolerances
    assert any(w.kind == "test" for w in twin.workloads)  # the family's test rows came with them
    assert validate_task_dir(lab / TWIN) == []
    assert drift(lab / TWIN / "task.toml", lab) is None and drifted(lab) == []  # a twin cannot drift
    assert home_task("norm_infer", lab) == lab / HOME / "task.toml"


def test_a_twin_adds_the_production_rows_its_home_lacks(lab: Path) -> None:
    with (lab / TWIN / "task.toml").open("a") as f:
        f.write(OWN_ROW)
    home, twin = load_task(lab / HOME), load_task(lab / TWIN)
    assert [w.name for w in twin.workloads] == [w.name for w in home.workloads] + ["b200_only_onepass_M8"]
    assert validate_task_dir(lab / TWIN) == []


def test_every_reader_sees_the_twins_rows(lab: Path) -> None:
    """The report and the exporter read task.toml themselves (no torch): they put the rows together the same
    way."""
    from kda_lab.report.model import load_task_report

    with (lab / TWIN / "task.toml").open("a") as f:
        f.write(OWN_ROW)
    production = [w.name for w in load_task(lab / TWIN).workloads if w.kind == "production"]
    assert [row for row, _ in load_task_report(lab / TWIN, {}).production] == production
    from kda_lab.export.task import load_task_meta

    meta = load_task_meta(lab / TWIN)
    assert list(meta.checked) == production and meta.all_rows == len(load_task(lab / TWIN).workloads)


def _write(lab: Path, slug: str, text: str) -> None:
    (lab / slug).mkdir(exist_ok=True)
    (lab / slug / "task.toml").write_text(text)


def _twin_text(lab: Path, rows_from: str) -> str:
    return header((lab / HOME / "task.toml").read_text(), TWIN, "b200", rows_from)


def _missing(lab: Path) -> None:
    _write(lab, TWIN, _twin_text(lab, "h200_no_such_task"))


def _chain(lab: Path) -> None:
    _write(lab, MID, header((lab / HOME / "task.toml").read_text(), MID, "h200", HOME))
    _write(lab, TWIN, _twin_text(lab, MID))


def _cycle(lab: Path) -> None:
    _write(lab, MID, header((lab / HOME / "task.toml").read_text(), MID, "h200", TWIN))
    _write(lab, TWIN, _twin_text(lab, MID))


def _itself(lab: Path) -> None:
    _write(lab, TWIN, _twin_text(lab, TWIN))


def _test_row(lab: Path) -> None:
    _write(lab, TWIN, _twin_text(lab, HOME) + OWN_ROW.replace('kind = "production"', 'kind = "test"'))


def _redefined_row(lab: Path) -> None:
    _write(lab, TWIN, _twin_text(lab, HOME) + OWN_ROW.replace("b200_only_onepass_M8", "zimage_onepass_M4096"))


def _tolerances(lab: Path) -> None:
    _write(lab, TWIN, _twin_text(lab, HOME) + "[tolerances]\nbfloat16 = { atol = 1.0, rtol = 1.0 }\n")


def _other_family(lab: Path) -> None:
    other = "h200_diffusion_fuse_scale_shift__multi_shape"
    _write(lab, other, (REPO / "kernels" / other / "task.toml").read_text())
    _write(lab, TWIN, _twin_text(lab, other))


REFUSALS = {
    "home missing": (_missing, "rows_from names 'h200_no_such_task', which is not a task here"),
    "chain": (_chain, f"rows_from names {MID}, which takes its rows from {HOME} itself: name the home"),
    "cycle": (_cycle, f"rows_from makes a cycle ({TWIN} -> {MID} -> {TWIN})"),
    "itself": (_itself, f"rows_from makes a cycle ({TWIN} -> {TWIN})"),
    "own test row": (_test_row, "yet it declares the test row 'b200_only_onepass_M8': a twin adds only"),
    "redefined row": (_redefined_row, f"yet it declares row 'zimage_onepass_M4096', a row of {HOME} too"),
    "own tolerances": (_tolerances, "yet it declares [tolerances]: a twin takes them from its home"),
    "other family": (_other_family, "a 'fuse_scale_shift' task; this task's family is 'norm_infer'"),
}


@pytest.mark.parametrize("case", sorted(REFUSALS))
def test_a_wrong_rows_from_is_one_line_of_kda_validate(lab: Path, case: str) -> None:
    breaks, message = REFUSALS[case]
    breaks(lab)
    problems = validate_task_dir(lab / TWIN)
    assert len(problems) == 1 and message in problems[0] and "\n" not in problems[0], problems
    assert problems[0].startswith(f"{lab / TWIN / 'task.toml'}")


def test_the_cli_names_the_refusal(lab: Path) -> None:
    _chain(lab)
    r = subprocess.run([sys.executable, "-m", "kda_lab", "validate", TWIN], capture_output=True, text=True,
                       env={**os.environ, "KDA_ROOT": str(lab.parent)}, cwd=REPO, timeout=300)
    assert r.returncode == 1, r.stdout + r.stderr
    assert r.stdout.splitlines()[0] == f"INVALID {TWIN}"
    assert f"which takes its rows from {HOME} itself" in r.stdout.splitlines()[1]


def test_the_lab_twins_load_with_their_homes_rows() -> None:
    """Every twin of the tree: its rows are its home's, then its own production rows."""
    twins = [load_task(p.parent) for p in sorted((REPO / "kernels").glob("*/task.toml"))]
    twins = [t for t in twins if t.rows_from]
    for t in twins:
        home = load_task(REPO / "kernels" / t.rows_from)
        assert t.workloads[:len(home.workloads)] == home.workloads and t.tolerances == home.tolerances
        assert all(w.kind == "production" for w in t.workloads[len(home.workloads):]), t.slug
