"""Shared correctness tests, parametrized over a task's task.toml (each task's tests/ file is one line).

- CPU: the folder validates; SGLang's Triton baseline runs in the Triton interpreter on the rows tagged
  'tiny', in fp32 and fp16, against the oracle.
- GPU (marker ``gpu``, deselected on CPU with ``-m "not gpu"``): the candidate and the baseline on every row.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from kda_lab.families import contract
from kda_lab.task import load_task, validate_task_dir


def task_tests(test_file: str) -> dict[str, Callable[..., Any]]:
    if os.environ.get("TRITON_INTERPRET") == "1":  # CPU hosts (conftest.py); GPU runs keep SGLang as it is
        from kda_lab.interpret import install_shims

        install_shims()
    task = load_task(Path(test_file).resolve().parents[1])
    tiny = [w.name for w in task.workloads if "tiny" in w.tags]
    by_name = {w.name: w for w in task.workloads}

    def test_task_folder_is_valid() -> None:
        problems = validate_task_dir(task.path)
        assert not problems, "\n".join(problems)

    @pytest.mark.parametrize("dtype", ["float32", "float16"])
    @pytest.mark.parametrize("row", tiny)
    def test_sglang_triton_baseline_in_interpreter(row: str, dtype: str) -> None:
        from kda_lab.correctness import check_row
        from kda_lab.interpret import interpretable

        w = by_name[row]
        module, _, fn = task.functions[w.fn].sglang.partition(":")
        results = check_row(task, w.with_dtype(dtype), contract(task.family, w.fn),
                            {"baseline": interpretable(module, fn)}, seed=1, device="cpu")
        assert all(r.ok for r in results), "\n".join(r.describe() for r in results)

    @pytest.mark.gpu
    @pytest.mark.parametrize("row", [w.name for w in task.workloads])
    def test_candidate_on_gpu(row: str) -> None:
        from kda_lab.correctness import check_row
        from kda_lab.run import candidate_identity, cuda_device, resolve_entry

        device = cuda_device(task)
        w = by_name[row]
        cand = candidate_identity(task, register=False)
        impls = {"baseline": resolve_entry(task.functions[w.fn].entry), "candidate": cand.exports[w.fn]}
        results = check_row(task, w, contract(task.family, w.fn), impls, seed=7, device=device)
        assert all(r.ok for r in results if r.impl == "candidate"), "\n".join(r.describe() for r in results)

    tests = {
        "test_task_folder_is_valid": test_task_folder_is_valid,
        "test_candidate_on_gpu": test_candidate_on_gpu,
    }
    if tiny:
        tests["test_sglang_triton_baseline_in_interpreter"] = test_sglang_triton_baseline_in_interpreter
    return tests
