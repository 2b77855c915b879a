"""`kda new-task`: a stamped folder has every scaffold, converts captures, and fails validation until edited."""

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


def test_stamped_folder_needs_editing_then_validates(root: Path, tmp_path: Path):
    home = "h200_diffusion_fuse_scale_shift__multi_shape"  # where the family's test rows are written
    (root / "kernels" / home).mkdir()
    shutil.copy2(Path(__file__).resolve().parents[1] / "kernels" / home / "task.toml", root / "kernels" / home)
    cap = tmp_path / "caps.jsonl"
    cap.write_text("\n".join(json.dumps(c) for c in CAPTURE) + "\n")
    d = new_task("b200_diffusion_fuse_scale_shift__multi_shape", "fuse_scale_shift", "modulation", cap)
    for rel in ("prompt.md", "interface.md", "task.toml", "benchmark.py", "benchmark.csv", "solutions.jsonl",
                "src/register.py", "tests/test_correctness.py"):
        assert (d / rel).exists(), rel
    assert (root / "scripts/launch_kernels").glob("k*_b200_diffusion_fuse_scale_shift__multi_shape.sh")
    problems = validate_task_dir(d)
    assert any("TODO(stamp)" in p for p in problems)  # not valid until a human or agent edits it
    text = (d / "prompt.md").read_text()
    assert "B200" in text and "H200" not in text and "sm_90" not in text and "sm_100a" in text
    # Resolve the markers the way an editor would, then it validates.
    for name in ("prompt.md", "interface.md", "task.toml"):
        p = d / name
        lines = [ln for ln in p.read_text().splitlines() if "TODO(stamp)" not in ln or "model =" in ln]
        p.write_text("\n".join(ln.split("  # TODO(stamp)")[0] for ln in lines) + "\n")
    assert todo_markers(d) == []
    assert validate_task_dir(d) == []
    task = load_task(d)
    rows = {w.name: w for w in task.workloads}
    prod = {n for n, w in rows.items() if w.kind == "production"}
    assert prod == {"qwen_fuse_scale_shift_kernel_1x4096x3072", "wan_ti2v_fuse_scale_shift_kernel_1x18144x3072"}
    assert any(w.kind == "test" and "tiny" in w.tags for w in rows.values())  # the family's test rows came along
    wan = rows["wan_ti2v_fuse_scale_shift_kernel_1x18144x3072"]
    assert wan.args["scale"].strides == (334430208, 18432, 1) and wan.args["scale_constant"] == 0
    assert task.functions["fuse_scale_shift_kernel"].sglang.endswith("scale_shift_triton:fuse_scale_shift_kernel")


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
