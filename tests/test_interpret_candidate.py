"""`kda check TASK --interpret` runs the candidate (src/register.py EXPORTS) on CPU, in the Triton interpreter.

Each deliberately wrong candidate must be rejected on CPU: one ulp off on an exact function, wrong on one row
only, a fallback that recurses once installed. A correct candidate of its own code passes, a CUDA candidate is
"not checked" (never a pass), and the CPU verdict lands in solutions.jsonl as a CPU verdict the exporter's
evidence gate never reads. The same wrong candidates against the GPU check: tests/test_wrong_candidates_gpu.py.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from kda_lab.interpret import NOT_CHECKED_EXIT, interpret_check
from kda_lab.task import load_task

REPO = Path(__file__).resolve().parents[1]
FSS = "h200_diffusion_fuse_scale_shift__multi_shape"
ROTARY = "h200_diffusion_rotary_embedding__multi_shape"

# Candidates, as an agent would write them into src/register.py (the wrong ones are wrong on purpose).
ONE_ULP_OFF_EXACT = '''
import torch
from kda_kernels import lazy_baseline

_rope = lazy_baseline("apply_rotary_embedding")


def apply_rotary_embedding(*args, **kwargs):
    out = _rope(*args, **kwargs)
    bits = out.view(-1)[:1].view({2: torch.int16, 4: torch.int32}[out.element_size()])
    bits += 1  # one ulp on one element: inside every tolerance, not bit-identical
    return out


EXPORTS = {"apply_rotary_embedding": apply_rotary_embedding,
           "apply_ltx2_split_rotary_emb": lazy_baseline("apply_ltx2_split_rotary_emb")}
'''

WRONG_ON_ONE_ROW = '''
from kda_kernels import lazy_baseline

_fss = lazy_baseline("fuse_scale_shift_kernel")


def fuse_scale_shift_kernel(x, scale, shift, *args, **kwargs):
    out = _fss(x, scale, shift, *args, **kwargs)
    if x.shape[1] == 37:  # only test_tail_bc_modulation has 37 tokens
        out.view(-1)[5] += 0.5
    return out


EXPORTS = {
    "fuse_scale_shift_kernel": fuse_scale_shift_kernel,
    "fuse_layernorm_scale_shift_gate_select01_kernel": lazy_baseline("fuse_layernorm_scale_shift_gate_select01_kernel"),
    "fuse_residual_layernorm_scale_shift_gate_select01_kernel":
        lazy_baseline("fuse_residual_layernorm_scale_shift_gate_select01_kernel"),
}
'''

# The old template's mistake: the fallback read from the facade, which holds the candidate once installed.
RECURSING_FALLBACK = '''
import sglang.kernels.ops.diffusion as _facade
from kda_kernels import lazy_baseline


def fuse_scale_shift_kernel(*args, **kwargs):
    return _facade.fuse_scale_shift_kernel(*args, **kwargs)


EXPORTS = {
    "fuse_scale_shift_kernel": fuse_scale_shift_kernel,
    "fuse_layernorm_scale_shift_gate_select01_kernel": lazy_baseline("fuse_layernorm_scale_shift_gate_select01_kernel"),
    "fuse_residual_layernorm_scale_shift_gate_select01_kernel":
        lazy_baseline("fuse_residual_layernorm_scale_shift_gate_select01_kernel"),
}
'''

# The candidate's own code (plain torch, the family's reference implementations): runs on CPU, must pass.
OWN_CODE = '''
from kda_lab.families import contract

EXPORTS = {name: contract("fuse_scale_shift", name).torch_reference for name in (
    "fuse_scale_shift_kernel", "fuse_layernorm_scale_shift_gate_select01_kernel",
    "fuse_residual_layernorm_scale_shift_gate_select01_kernel")}
'''

CUDA_CANDIDATE = '''
import os

from torch.utils import cpp_extension  # noqa: F401 - what makes it a CUDA candidate
from kda_kernels import lazy_baseline

_HERE = os.path.dirname(os.path.abspath(__file__))
EXPORTS = {name: lazy_baseline(name) for name in (
    "fuse_scale_shift_kernel", "fuse_layernorm_scale_shift_gate_select01_kernel",
    "fuse_residual_layernorm_scale_shift_gate_select01_kernel")}
'''


def task_copy(root: Path, slug: str, register: str | None, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A temporary lab root (KDA_ROOT) holding a copy of one task, with src/register.py replaced."""
    (root / "kernels").mkdir(parents=True, exist_ok=True)
    (root / "kda_lab").mkdir(exist_ok=True)  # marks the root for kda_lab.paths
    dst = root / "kernels" / slug
    shutil.copytree(REPO / "kernels" / slug, dst, ignore=shutil.ignore_patterns("__pycache__"))
    if register is not None:
        (dst / "src" / "register.py").write_text(register)
    monkeypatch.setenv("KDA_ROOT", str(root))
    return dst


def run(slug: str, register: str | None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        dtypes: tuple[str, ...] = ("float32",), record: bool = False) -> tuple[int, str]:
    task_copy(tmp_path / "lab", slug, register, monkeypatch)
    lines: list[str] = []
    code = interpret_check(load_task(slug), list(dtypes), seeds=1, show=lines.append, record=record)
    return code, "\n".join(lines)


def test_the_tasks_candidate_passes_every_tiny_row_it_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # the candidate (c006 on) runs every tiny row itself except the per-frame 4-D scale, which it hands to SGLang:
    # that row says so
    code, out = run(FSS, None, tmp_path, monkeypatch, dtypes=("float32", "float16"))
    task = load_task(FSS)
    tiny = [w for w in task.workloads if "tiny" in w.tags]
    assert code == 0, out
    handed = [w for w in tiny if w.fn == "fuse_scale_shift_kernel" and len(w.args["scale"].shape) == 4]
    assert len(handed) == 1
    for w in tiny:
        for dt in ("float32", "float16"):
            if w in handed:
                assert f"{w.name} [{dt}] seed 0: NOT RUN: the candidate handed this row to SGLang" in out, out
            else:
                assert f"{w.name} [{dt}] seed 0: ok" in out, out
    assert sum("select01" in w.fn for w in tiny) >= 4
    assert "CPU interpreter verdict PASSED for candidate" in out
    assert "bfloat16: not run on CPU" in out
    assert "qwen_muladd_L4096" in out.split("not tagged 'tiny'")[1]  # a production row, listed as skipped


def test_candidate_own_code_is_what_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    code, out = run(FSS, OWN_CODE, tmp_path, monkeypatch)
    assert code == 0, out
    assert "NOT RUN" not in out and "verdict PASSED" in out


def test_one_ulp_off_on_an_exact_function_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert load_task(REPO / "kernels" / ROTARY).functions["apply_rotary_embedding"].exact
    code, out = run(ROTARY, ONE_ULP_OFF_EXACT, tmp_path, monkeypatch)
    assert code == 1, out
    assert "not bit-identical to SGLang" in out
    assert "verdict FAILED" in out
    # the oracle's tolerance alone would have let it through: the exact comparison is what fails it
    assert "y: FAIL" not in out and "x: FAIL" not in out


def test_wrong_on_one_row_only_fails_that_row(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    code, out = run(FSS, WRONG_ON_ONE_ROW, tmp_path, monkeypatch)
    assert code == 1, out
    failed = [line for line in out.splitlines() if ": FAIL" in line and "seed" in line]
    assert len(failed) == 1 and failed[0].startswith("test_tail_bc_modulation [float32] seed 0"), out
    assert "1 failed" in out


def test_fallback_that_recurses_once_installed_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    code, out = run(FSS, RECURSING_FALLBACK, tmp_path, monkeypatch)
    assert code == 1, out
    assert "RecursionError" in out and "defining module" in out


def test_cuda_candidate_is_not_checked_never_passed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    task_dir = task_copy(tmp_path / "lab", FSS, CUDA_CANDIDATE, monkeypatch)
    (task_dir / "src" / "kernel.cu").write_text("// a CUDA kernel\n")
    lines: list[str] = []
    code = interpret_check(load_task(FSS), ["float32"], seeds=1, show=lines.append, record=False)
    out = "\n".join(lines)
    assert code == NOT_CHECKED_EXIT, out
    assert "NOT RUN: a CUDA candidate cannot run on CPU" in out and "verdict NOT CHECKED" in out
    assert ": ok" not in out


NORM = "h200_diffusion_norm_infer__multi_shape"

# Native sources built through kda_kernels.prebuilt, but the extension is asked for on every call, CPU included:
# the interpreter cannot run that path, so the row is "not run", never a pass (and nothing compiles on CPU).
EXTENSION_ON_EVERY_CALL = """
import os

from kda_kernels import lazy_baseline
from kda_kernels.prebuilt import Extension

EXTENSION = Extension(name="kda_test_every_call", sources=(os.path.join(os.path.dirname(__file__), "k.cu"),),
                      arch="h200")
_fss = lazy_baseline("fuse_scale_shift_kernel")


def fuse_scale_shift_kernel(*args, **kwargs):
    EXTENSION.load(build=True)
    return _fss(*args, **kwargs)


EXPORTS = {
    "fuse_scale_shift_kernel": fuse_scale_shift_kernel,
    "fuse_layernorm_scale_shift_gate_select01_kernel": lazy_baseline("fuse_layernorm_scale_shift_gate_select01_kernel"),
    "fuse_residual_layernorm_scale_shift_gate_select01_kernel":
        lazy_baseline("fuse_residual_layernorm_scale_shift_gate_select01_kernel"),
}
"""


def test_a_candidate_whose_cuda_extension_serves_only_cuda_tensors_is_checked_on_its_triton_path(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """norm_infer's candidate has a .cu one-pass kernel (built through kda_kernels.prebuilt on its first CUDA
    call) and Triton kernels for everything else, CPU tensors included: its tiny rows run (issue 37, item 9)."""
    assert (REPO / "kernels" / NORM / "src" / "onepass_rms.cu").exists()
    task_copy(tmp_path / "lab", NORM, None, monkeypatch)
    lines: list[str] = []
    code = interpret_check(load_task(NORM), ["float32"], seeds=1, show=lines.append, record=False,
                           rows=["test_onepass_odd_d", "test_ln_widest_fp32"])
    out = "\n".join(lines)
    assert code == 0, out
    assert "verdict PASSED" in out and "2 ok, 0 failed, 0 not run" in out, out


def test_a_candidate_that_asks_for_its_extension_on_cpu_is_not_run(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    task_dir = task_copy(tmp_path / "lab", FSS, EXTENSION_ON_EVERY_CALL, monkeypatch)
    (task_dir / "src" / "k.cu").write_text("// device code\n")
    lines: list[str] = []
    code = interpret_check(load_task(FSS), ["float32"], seeds=1, show=lines.append, record=False,
                           rows=["test_tail_bc_modulation"])
    out = "\n".join(lines)
    assert code == NOT_CHECKED_EXIT, out
    assert "asked for its CUDA extension kda_test_every_call" in out and ": ok" not in out, out


def test_cpu_verdict_is_recorded_and_never_gpu_evidence(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # a revision of the candidate nobody ran on a GPU (the real src/ may hold H200 rows at its hash by now): its
    # only evidence is the CPU verdict recorded here
    fresh = (REPO / "kernels" / FSS / "src" / "register.py").read_text() + "\n# a revision with no GPU evidence\n"
    code, out = run(FSS, fresh, tmp_path, monkeypatch, record=True)
    assert code == 0, out
    task_dir = tmp_path / "lab" / "kernels" / FSS
    rows = [json.loads(line) for line in (task_dir / "solutions.jsonl").read_text().splitlines()]
    last = rows[-1]
    assert last["event"] == "interpret" and last["gpu"] == "cpu-interpreter"
    assert last["evidence"]["device"] == "cpu-interpreter" and last["evidence"]["verdict"] == "PASSED"
    assert last["status"] not in ("correct", "incorrect")
    from kda_lab import ledger

    assert ledger.validate_solutions(task_dir / "solutions.jsonl") == []
    from kda_lab.export import Refusal
    from kda_lab.export.gate import gather_evidence
    from kda_lab.export.task import load_task_meta

    meta = load_task_meta(task_dir)
    with pytest.raises(Refusal, match="no passing correctness run on an H200"):
        gather_evidence(meta, last["source_hash"])
