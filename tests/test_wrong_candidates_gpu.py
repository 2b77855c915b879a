"""On the GPU, `kda check` rejects the deliberately wrong candidates that the CPU check rejects
(tests/test_interpret_candidate.py): one ulp off on an exact function, wrong on one row only, a fallback that
recurses once installed. Each runs the real `run_check` on a temporary copy of its task (nothing is recorded).

Run on an H200 (marker gpu): python3 -m pytest -m gpu tests/test_wrong_candidates_gpu.py -q
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from kda_lab.task import load_task
from tests.test_interpret_candidate import (
    FSS,
    ONE_ULP_OFF_EXACT,
    RECURSING_FALLBACK,
    ROTARY,
    WRONG_ON_ONE_ROW,
    task_copy,
)

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0),
                       reason="needs an H200 (compute capability 9.0): the tasks are h200 tasks"),
]


def gpu_check(slug: str, register: str | None, rows: list[str], tmp_path: Path,
              monkeypatch: pytest.MonkeyPatch) -> tuple[list[str], list[str]]:
    from kda_lab.measure.run import run_check

    task_copy(tmp_path / "lab", slug, register, monkeypatch)
    lines: list[str] = []
    report = run_check(load_task(slug), rows=rows, seeds=2, seed=11, record=False, show=lines.append)
    return sorted({r.row for r in report.failed("candidate")}), lines


def test_the_baseline_candidate_passes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    failed, lines = gpu_check(FSS, None, ["test_tail_bc_modulation", "qwen_muladd_L4096"], tmp_path, monkeypatch)
    assert failed == [], "\n".join(lines)


def test_one_ulp_off_on_an_exact_function_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rows = ["hunyuanvideo_rope_B1_T27030_H24_D128", "test_rope_tiny_token_view"]
    failed, lines = gpu_check(ROTARY, ONE_ULP_OFF_EXACT, rows, tmp_path, monkeypatch)
    assert failed == sorted(rows), "\n".join(lines)
    assert "not bit-identical to SGLang" in "\n".join(lines)


def test_wrong_on_one_row_only_fails_that_row(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rows = ["test_tail_bc_modulation", "test_scalar_scale", "qwen_muladd_L4096"]
    failed, lines = gpu_check(FSS, WRONG_ON_ONE_ROW, rows, tmp_path, monkeypatch)
    assert failed == ["test_tail_bc_modulation"], "\n".join(lines)


def test_fallback_that_recurses_once_installed_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    failed, lines = gpu_check(FSS, RECURSING_FALLBACK, ["qwen_muladd_L4096"], tmp_path, monkeypatch)
    assert failed == ["qwen_muladd_L4096"], "\n".join(lines)
    assert "RecursionError" in "\n".join(lines)
