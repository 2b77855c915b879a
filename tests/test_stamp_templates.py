"""The stamper's per-family text (issue 38): the GPU once in the title, the baseline sentence and numerics
rule that fit the family, exact defaults, captured strides kept, capture sources under dev/, tolerances
taken from the family's existing task; and validate's family refusals on a deliberately wrong task."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kda_lab.task import validate_task_dir
from kda_lab.task.family_checks import family_problems, text_problems
from kda_lab.task.schema import load_task
from kda_lab.task.stamp import (
    EXACT_RULE,
    NORM_RULE,
    PLAIN_RULE,
    _spec_toml,
    baseline_line,
    capture_source,
    family_tolerances,
    heading,
    numerics_rule,
    rows_from_captures,
)

FSS = "h200_diffusion_fuse_scale_shift__multi_shape"


def test_the_gpu_is_named_once_in_the_title() -> None:
    assert heading("H200", "H200 adaLN modulation") == "H200 adaLN modulation"
    assert heading("H200", "adaLN modulation") == "H200 adaLN modulation"


def test_baseline_sentence_and_numerics_rule_follow_the_family() -> None:
    assert "through the facade" in baseline_line(("fuse_scale_shift_kernel",))
    off = baseline_line(("replicate_pad3d",))
    assert "through the facade" not in off and "kda_lab.families.replicate_pad3d:hunyuan_causal_pad" in off
    assert numerics_rule("replicate_pad3d") == EXACT_RULE  # EXACT family: a copy
    assert numerics_rule("norm_infer") == NORM_RULE and numerics_rule("group_norm_silu") == NORM_RULE
    assert numerics_rule("int8_scaled_mm") == PLAIN_RULE and numerics_rule("rotary_embedding") == PLAIN_RULE


def test_captured_strides_are_kept_and_contiguous_ones_dropped() -> None:
    view = _spec_toml({"shape": [2, 3, 4], "dtype": "torch.float32", "strides": [24, 4, 1]})
    dense = _spec_toml({"shape": [2, 3, 4], "dtype": "torch.float32", "strides": [12, 4, 1]})
    assert "strides = [24, 4, 1]" in view and "strides" not in dense


def test_capture_sources_name_the_task_folders_dev_file(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KDA_ROOT", str(tmp_path))
    (tmp_path / "kda_lab").mkdir()
    task = tmp_path / "kernels" / "h200_x__y"
    (task / "dev").mkdir(parents=True)
    cap = task / "dev" / "caps.jsonl"
    cap.write_text(json.dumps({"model": "qwen", "kernel": "scale_shift.fuse_scale_shift_kernel", "args": [
        {"shape": [1, 8, 16], "dtype": "torch.bfloat16", "strides": [256, 32, 1]},
        {"shape": [1, 1, 16], "dtype": "torch.bfloat16"}, {"shape": [1, 1, 16], "dtype": "torch.bfloat16"}],
        "kwargs": {}}) + "\n")
    assert capture_source(cap, task) == "dev/caps.jsonl"
    block = rows_from_captures(cap, "fuse_scale_shift", task)[0]
    assert 'source = "captured:dev/caps.jsonl:1"' in block and "strides = [256, 32, 1]" in block


def test_tolerances_come_from_the_familys_task() -> None:
    table = family_tolerances("fuse_scale_shift", "b200")
    assert table is not None and "[tolerances]" in table
    assert "kernels/b200_diffusion_fuse_scale_shift" in table
    assert family_tolerances("no_such_family", "h200") is None


def test_validate_refuses_an_unknown_family_and_wrong_text(lab_copy: Path) -> None:
    toml = lab_copy / "task.toml"
    good = toml.read_text()
    toml.write_text(good.replace('family = "fuse_scale_shift"', 'family = "no_such_family"'))
    assert any("unknown family 'no_such_family'" in p for p in validate_task_dir(lab_copy))
    toml.write_text(good)
    task = load_task(lab_copy)
    assert family_problems(task) == []
    prompt = lab_copy / "prompt.md"
    prompt.write_text(prompt.read_text().replace("# Task: H200 ", "# Task: H200 on an H200: ", 1))
    assert any("names H200 more than once" in p for p in text_problems(task, family_exact=False))
    # an EXACT family whose task does not say exact = true
    assert any("is EXACT" in p for p in text_problems(task, family_exact=True))
