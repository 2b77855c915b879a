"""`kda new-task`: a stamped folder has every scaffold, converts captures, and fails validation until edited; a
second arch of an existing task is stamped as its twin (rows_from)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kda_lab.task import load_task, validate_task_dir
from kda_lab.task.stamp import StampError, new_task
from kda_lab.task.validate import todo_markers
from tests.conftest import REPO

CAPTURE = [
    {"arch": "b200", "model": "qwen", "kernel": "scale_shift.fuse_scale_shift_kernel",
     "args": [{"shape": [1, 4096, 3072], "dtype": "bfloat16", "strides": [12582912, 3072, 1], "contiguous": True},
              {"shape": [1, 1, 3072], "dtype": "bfloat16", "strides": [18432, 3072, 1], "contiguous": True},
              {"shape": [1, 4096, 3072], "dtype": "bfloat16", "strides": [12582912, 3072, 1], "contiguous": True}],
     "kwargs": {"scale_constant": 0}},
    {"arch": "b200", "model": "wan-ti2v", "kernel": "scale_shift.fuse_scale_shift_kernel",
     "args": [{"shape": [1, 18144, 3072], "dtype": "bfloat16", "strides": [55738368, 3072, 1], "contiguous": True},
              {"shape": [1, 18144, 3072], "dtype": "float32", "strides": [334430208, 18432, 1], "contiguous": False},
              {"shape": [1, 18144, 3072], "dtype": "bfloat16", "strides": [55738368, 3072, 1], "contiguous": True}],
     "kwargs": {"scale_constant": 0}},
    {"arch": "b200", "model": "qwen", "kernel": "old_name.removed_kernel", "args": [], "kwargs": {}},
]


@pytest.fixture
def root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "kernels").mkdir()
    (tmp_path / "kda_lab").mkdir()
    monkeypatch.setenv("KDA_ROOT", str(tmp_path))
    return tmp_path


HOME = "h200_diffusion_fuse_scale_shift__multi_shape"  # where the family's test rows are written


def with_home(root: Path) -> None:
    (root / "kernels" / HOME).mkdir()
    shutil.copy2(REPO / "kernels" / HOME / "task.toml", root / "kernels" / HOME)


def resolve_markers(d: Path) -> None:
    """Resolve the stamp markers the way an editor would."""
    for name in ("prompt.md", "interface.md", "task.toml"):
        p = d / name
        lines = [ln for ln in p.read_text().splitlines() if "TODO(stamp)" not in ln or "model =" in ln]
        p.write_text("\n".join(ln.split("  # TODO(stamp)")[0] for ln in lines) + "\n")
    assert todo_markers(d) == []


def test_stamped_folder_needs_editing_then_validates(root: Path, tmp_path: Path):
    with_home(root)
    cap = tmp_path / "caps.jsonl"
    cap.write_text("\n".join(json.dumps(c) for c in CAPTURE) + "\n")
    slug = "b200_diffusion_fuse_scale_shift__wan"  # no task of another arch by that name: not a twin
    d = new_task(slug, "fuse_scale_shift", "modulation", cap)
    for rel in ("prompt.md", "interface.md", "task.toml", "benchmark.py", "benchmark.csv", "solutions.jsonl",
                "src/register.py", "tests/test_correctness.py"):
        assert (d / rel).exists(), rel
    assert list((root / "scripts/launch_kernels").glob(f"k*_{slug}.sh"))
    problems = validate_task_dir(d)
    assert any("TODO(stamp)" in p for p in problems)  # not valid until a human or agent edits it
    text = (d / "prompt.md").read_text()
    assert "B200" in text and "H200" not in text and "sm_90" not in text and "sm_100a" in text
    resolve_markers(d)  # then it validates
    assert validate_task_dir(d) == []
    task = load_task(d)
    assert task.rows_from == "" and "rows_from" not in (d / "task.toml").read_text()
    rows = {w.name: w for w in task.workloads}
    prod = {n for n, w in rows.items() if w.kind == "production"}
    assert prod == {"qwen_fuse_scale_shift_kernel_1x4096x3072", "wan_ti2v_fuse_scale_shift_kernel_1x18144x3072"}
    assert any(w.kind == "test" and "tiny" in w.tags for w in rows.values())  # the family's test rows came along
    wan = rows["wan_ti2v_fuse_scale_shift_kernel_1x18144x3072"]
    assert wan.args["scale"].strides == (334430208, 18432, 1) and wan.args["scale_constant"] == 0
    assert task.functions["fuse_scale_shift_kernel"].sglang.endswith("scale_shift_triton:fuse_scale_shift_kernel")


def test_a_second_arch_of_a_task_is_stamped_as_its_twin(root: Path, tmp_path: Path):
    """b200_<name> next to h200_<name> of the family takes the home's rows and tolerances (rows_from); of the
    captured calls it keeps only those none of the home's rows makes."""
    with_home(root)
    b200_only = {**CAPTURE[0], "args": [{**a, "shape": [1, 777, 3072], "strides": [2386944, 3072, 1]}
                                        if a["shape"][1] == 4096 else a
                                        for a in CAPTURE[0]["args"]]}
    cap = tmp_path / "caps.jsonl"
    cap.write_text("\n".join(json.dumps(c) for c in [*CAPTURE, b200_only]) + "\n")
    d = new_task("b200_diffusion_fuse_scale_shift__multi_shape", "fuse_scale_shift", "modulation", cap)
    toml = (d / "task.toml").read_text()
    assert f'rows_from = "{HOME}"' in toml and "[tolerances]" not in toml and 'kind = "test"' not in toml
    assert "# Capture lines 1, 2: calls the home's rows make already (left out)." in toml
    assert "H200" not in (d / "prompt.md").read_text() and "rows_from" in (d / "prompt.md").read_text()
    resolve_markers(d)
    assert validate_task_dir(d) == []
    home, twin = load_task(root / "kernels" / HOME), load_task(d)
    assert twin.rows_from == HOME and twin.tolerances == home.tolerances
    assert twin.workloads[:-1] == home.workloads  # the home's rows, then the one call only this capture holds
    assert twin.workloads[-1].name == "qwen_fuse_scale_shift_kernel_1x777x3072"
    assert twin.workloads[-1].source.endswith("caps.jsonl:4")


def test_refusals(root: Path):
    with pytest.raises(StampError, match="arch prefix"):
        new_task("a100_x", "fuse_scale_shift")
    with pytest.raises(StampError, match="unknown family"):
        new_task("h200_x", "softmax")
    new_task("h200_x", "fuse_scale_shift")
    with pytest.raises(StampError, match="exists"):
        new_task("h200_x", "fuse_scale_shift")


def test_cli_new_task(root: Path):
    r = subprocess.run([sys.executable, "-m", "kda_lab", "new-task", "h200_y", "--family", "norm_infer"],
                       capture_output=True, text=True, cwd=REPO, timeout=300)
    assert r.returncode == 0, r.stderr
    assert (root / "kernels/h200_y/task.toml").exists()


def test_capture_arguments_are_named_from_sglangs_own_definition():
    """On a CPU host apply_rotary_embedding is a (*args, **kwargs) fallback; names must come from the source."""
    from kda_lab.task.stamp import sglang_parameters

    assert sglang_parameters("apply_rotary_embedding") == ["x", "cos", "sin", "interleaved"]
