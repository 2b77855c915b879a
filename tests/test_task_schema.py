"""task.toml schema and folder contract: the real task validates; each kind of breakage is rejected."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from kda_lab.task import TaskError, load_task, validate_task_dir


def test_real_task_is_valid(lab_copy: Path):
    assert validate_task_dir(lab_copy) == []
    task = load_task(lab_copy)
    prod = [w for w in task.workloads if w.kind == "production"]
    assert len(prod) == 15 and all(w.model and w.preset and w.source.startswith("captured:") for w in prod)


BREAKAGES = {
    "unknown arch": (r'arch = "h200"', 'arch = "h300"', "arch 'h300'"),
    "slug mismatch": (r'slug = "h200_diffusion_fuse_scale_shift__multi_shape"', 'slug = "h200_other"', "differs from the folder"),
    "foreign function": (r'name = "fuse_scale_shift_kernel"', 'name = "norm_infer"', "is not a fuse_scale_shift function"),
    "production row without provenance": (r'model = "Qwen-Image"\n', "", "needs model, preset and source"),
    "unknown dtype": (r'dtype = "float16" }\nscale', 'dtype = "half" }\nscale', "dtype 'half'"),
    "missing tolerance": (r'float16 = \{ atol = 8e-3, rtol = 2e-3 \}\n', "", "without a tolerance"),
    "unknown key": (r'family = "fuse_scale_shift"', 'family = "fuse_scale_shift"\nspeedup = 2.0', "unknown keys"),
    "byte model names a missing arg": (r'reads = \["x", "scale", "shift"\]', 'reads = ["x", "scale", "shift", "gain"]', "byte model names 'gain'"),
    "wrong sglang pin": (r'sglang_version = "0.5.23"', 'sglang_version = "0.5.22"', "lab pin"),
    "bad toml": (r'\[tolerances\]', "[tolerances", "not valid TOML"),
}


@pytest.mark.parametrize("case", sorted(BREAKAGES))
def test_broken_task_toml_is_rejected(lab_copy: Path, case: str):
    pattern, repl, message = BREAKAGES[case]
    p = lab_copy / "task.toml"
    text, n = re.subn(pattern, repl, p.read_text(), count=1)
    assert n == 1, f"fixture pattern for {case!r} no longer matches task.toml"
    p.write_text(text)
    with pytest.raises(TaskError, match=message):
        load_task(lab_copy)
    assert validate_task_dir(lab_copy)


def test_missing_files_and_wrong_arch_prompt_are_rejected(lab_copy: Path):
    (lab_copy / "interface.md").unlink()
    with (lab_copy / "prompt.md").open("a") as f:
        f.write("\nAlso try it on a B200.\n")
    problems = validate_task_dir(lab_copy)
    assert any("missing interface.md" in p for p in problems)
    assert any("mentions ['B200']" in p for p in problems)


def test_register_exports_must_match_functions(lab_copy: Path):
    reg = lab_copy / "src" / "register.py"
    text = reg.read_text()
    entry = '    "fuse_scale_shift_kernel": fuse_scale_shift_kernel,\n'
    assert entry in text  # the edit below must really drop an EXPORTS key
    reg.write_text(text.replace(entry, ""))
    assert any("EXPORTS keys must equal" in p for p in validate_task_dir(lab_copy))


def test_zero_inputs_are_rejected(lab_copy: Path):
    p = lab_copy / "task.toml"
    p.write_text(p.read_text().replace('x = { shape = [1, 16, 64], dtype = "bfloat16" }',
                                       'x = { shape = [1, 16, 64], dtype = "bfloat16", dist = "const", mean = 0.0 }'))
    assert any("all-zero inputs" in x for x in validate_task_dir(lab_copy))


def test_the_source_hash_covers_the_kda_kernels_helpers_a_candidate_imports(tmp_path, monkeypatch):
    """A candidate that runs kda_kernels.launch_cache on its host path is measured with it: a changed helper is a
    new source hash (new evidence), while a candidate that does not import it keeps its hash."""
    from kda_lab.task import schema

    helper = tmp_path / "launch_cache.py"
    helper.write_text("VERSION = 1\n")
    monkeypatch.setattr(schema, "_helper_path", lambda name: helper if name == "launch_cache" else None)
    uses, plain = tmp_path / "uses" / "src", tmp_path / "plain" / "src"
    for d, body in ((uses, "from kda_kernels.launch_cache import runs_here\n"), (plain, "import torch\n")):
        d.mkdir(parents=True)
        (d / "register.py").write_text(body + "EXPORTS = {}\n")
    before = schema.source_hash(uses), schema.source_hash(plain)
    helper.write_text("VERSION = 2\n")
    assert schema.source_hash(uses) != before[0]
    assert schema.source_hash(plain) == before[1]
