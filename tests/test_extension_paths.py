"""The three ways to add to the lab (docs/workflow.md, "Adding to the lab"), each end to end on a fresh
`git clone` of this repository, following only the documented commands:

1. a new task of a known family: `kda new-task` (and its twin on the other GPU, which takes its rows);
2. a new family for an SGLang function: `kda new-family NAME --sglang module:function`, then `kda new-task`;
3. a new module-level fast path for a model class: `kda new-family NAME --fast-path module:Class`, then
   `kda new-task`.

Each path: stamp, see `kda validate` refuse the unresolved markers, resolve them as a contributor would,
validate, `kda check --interpret` of the stamped baseline candidate, then launch: the launcher refuses the
uncommitted task and its "git add" hint, run as printed, commits everything the worktree needs; the relaunched
worktree validates.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow

RESIDUAL_GATE = "sglang.kernels.ops.diffusion.modulate.residual_gate_fp32:residual_gate_fp32"
LTX2_CONV = "sglang.multimodal_gen.runtime.models.vaes.ltx_2_vae:LTX2VideoCausalConv3d"


def env_for(repo: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KDA_", "GIT_", "CLAUDE"))}
    env.update(PYTHONPATH=str(repo), GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@t", GIT_COMMITTER_NAME="t",
               GIT_COMMITTER_EMAIL="t@t", GIT_CONFIG_NOSYSTEM="1", KDA_WORKTREE_BASE=str(repo.parent / "wt"),
               KDA_NO_CLAUDE="1", KDA_PYTHON=sys.executable, TRITON_INTERPRET="1")
    return env


def kda(repo: Path, *args: str, ok: bool = True, timeout: int = 600) -> subprocess.CompletedProcess[str]:
    r = subprocess.run([sys.executable, "-m", "kda_lab", *args], cwd=repo, env=env_for(repo),
                       capture_output=True, text=True, timeout=timeout)
    if ok:
        assert r.returncode == 0, f"kda {' '.join(args)}:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    return r


@pytest.fixture(scope="module")
def clone(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real clone of this repository's committed HEAD (what CI checks out)."""
    repo = tmp_path_factory.mktemp("ext") / "repo"
    subprocess.run(["git", "clone", "-q", str(REPO), str(repo)], check=True, capture_output=True)
    subprocess.run(["git", "-C", str(repo), "checkout", "-q", "-B", "main"], check=True, capture_output=True)
    return repo


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, f"{path.name}: {old!r} not found"
    path.write_text(text.replace(old, new, 1))


def resolve_prompt(task: Path) -> None:
    """What a contributor writes where the template left prose markers (the card's K, R and goal)."""
    for name in ("prompt.md", "interface.md"):
        p = task / name
        p.write_text(p.read_text().replace("TODO(stamp): ", "Resolved: "))


def first_block(toml: Path, kind: str) -> str:
    """The first [[workloads]] block of that kind in a task.toml."""
    blocks = toml.read_text().split("[[workloads]]")[1:]
    block = next(b for b in blocks if f'kind = "{kind}"' in b)
    return "[[workloads]]" + block.split("\n\n")[0].split("\n#")[0].rstrip() + "\n"


def launch(repo: Path, slug: str, run_id: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["scripts/launch_kda_kernel_task.sh", f"kernels/{slug}"], cwd=repo,
                          env={**env_for(repo), "KDA_RUN_ID": run_id}, capture_output=True, text=True,
                          timeout=600)


def commit_as_hinted_and_launch(repo: Path, slug: str) -> None:
    """The launcher refuses the uncommitted task; its printed `git add ...` (run as printed) stages everything
    the worktree needs; then the launch passes and the worktree validates with its own lab."""
    r = launch(repo, slug, "refused")
    assert r.returncode == 1 and "does not contain kernels/" in r.stderr, r.stderr
    hint = re.search(r"fix: .*?(git add [^&]+)&&", r.stderr)
    assert hint, r.stderr
    subprocess.run(shlex.split(hint.group(1)), cwd=repo, check=True, env=env_for(repo))
    subprocess.run(["git", "commit", "-qm", f"Add {slug}"], cwd=repo, check=True, env=env_for(repo))
    status = subprocess.run(["git", "status", "--porcelain"], cwd=repo, capture_output=True, text=True).stdout
    assert status == "", f"the hint left files behind:\n{status}"
    r = launch(repo, slug, "ok")
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    assert f"kda validate {slug}: ok" in r.stdout
    wt = repo.parent / "wt" / f"{slug}-ok"
    run_env = {k: v for k, v in env_for(repo).items() if k not in ("KDA_PYTHON", "PYTHONPATH")}
    v = subprocess.run([".venv/bin/kda", "validate", slug], cwd=wt, env=run_env, capture_output=True,
                       text=True)
    assert v.returncode == 0, v.stdout + v.stderr


def ruff_clean(repo: Path, out: str) -> None:
    """The files `kda new-family` created or modified pass the lab's ruff (line length included)."""
    files = re.findall(r"(?:created|modified) +(\S+\.py)$", out, flags=re.M)
    assert files
    ruff = Path(sys.executable).parent / "ruff"
    r = subprocess.run([str(ruff), "check", *files], cwd=repo, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-3000:]


def check_interpret(repo: Path, slug: str) -> str:
    r = kda(repo, "check", slug, "--interpret", "--no-record", "--dtypes", "float32", "--seeds", "1",
            ok=False)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "CPU interpreter verdict PASSED" in r.stdout, r.stdout[-3000:]
    return r.stdout


def refused(repo: Path, slug: str, *needles: str) -> None:
    r = kda(repo, "validate", slug, ok=False)
    assert r.returncode != 0, r.stdout
    for n in needles:
        assert n in r.stdout + r.stderr, (n, r.stdout[-3000:], r.stderr[-2000:])


def test_path_1_a_new_task_of_a_known_family(clone: Path) -> None:
    slug = "h200_diffusion_fuse_scale_shift__ext"
    kda(clone, "new-task", slug, "--family", "fuse_scale_shift", "--title", "H200 adaLN modulation, one row")
    task = clone / "kernels" / slug
    assert list((clone / "scripts/launch_kernels").glob(f"k*_{slug}.sh"))
    prompt = (task / "prompt.md").read_text()
    assert prompt.splitlines()[0].count("H200") == 1  # the title's H200 is not doubled
    assert "through the facade" in prompt and "variance" in prompt  # a facade function of a norm-style family
    edit(task / "task.toml", "# TODO(stamp): production rows (captures or derived)",
         first_block(REPO / "kernels/h200_diffusion_fuse_scale_shift__multi_shape/task.toml", "production"))
    refused(clone, slug, f"{slug}/prompt.md:", "unresolved TODO(stamp)")
    resolve_prompt(task)
    v = kda(clone, "validate", slug, ok=False)
    assert v.returncode == 0, v.stdout + v.stderr
    check_interpret(clone, slug)
    commit_as_hinted_and_launch(clone, slug)
    # the same task on the other GPU: its twin (docs/workflow.md, "Twins share rows"), which takes the rows
    # and tolerances written above (rows_from); its launched worktree finds them
    twin = "b200_diffusion_fuse_scale_shift__ext"
    kda(clone, "new-task", twin, "--family", "fuse_scale_shift", "--title", "B200 adaLN modulation, one row")
    toml = (clone / "kernels" / twin / "task.toml").read_text()
    assert f'rows_from = "{slug}"' in toml and "[[workloads]]" not in toml and "[tolerances]" not in toml
    refused(clone, twin, f"{twin}/prompt.md:", "unresolved TODO(stamp)")
    resolve_prompt(clone / "kernels" / twin)
    v = kda(clone, "validate", twin, ok=False)
    assert v.returncode == 0, v.stdout + v.stderr
    assert "test_ln_select01_tail_affine [float32] seed 0: ok" in check_interpret(clone, twin)  # a home row
    commit_as_hinted_and_launch(clone, twin)


RESIDUAL_ORACLE = '''def residual_gate_fp32_oracle(a: Args) -> tuple[torch.Tensor, ...]:
    """fp64: x + gate * update (SGLang rounds once, from fp32, to x's dtype)."""
    return (a["x"].double() + a["gate"].double() * a["update"].double(),)
'''
RESIDUAL_ROWS = '''[[workloads]]
name = "test_gate_per_batch"
fn = "residual_gate_fp32"
kind = "test"
tags = ["tiny"]
source = "test: a [B, 1, D] gate over [B, S, D], odd sizes"
[workloads.args]
x = { shape = [2, 5, 33], dtype = "float32" }
update = { shape = [2, 5, 33], dtype = "float32" }
gate = { shape = [2, 1, 33], dtype = "float32" }
'''


def test_path_2_a_new_family_for_an_sglang_function(clone: Path) -> None:
    out = kda(clone, "new-family", "residual_gate", "--sglang", RESIDUAL_GATE).stdout
    for rel in ("kda_lab/families/residual_gate.py", "kda_kernels/registry.py", "kda_kernels/contracts.py",
                "kda_kernels/diffusion/residual_gate/__init__.py", "tests/families/test_residual_gate.py"):
        assert rel in out and (clone / rel).is_file(), rel
    ruff_clean(clone, out)
    # the exporter's check accepts the new, unpromoted family, with or without its generated __init__.py
    init = clone / "kda_kernels/diffusion/residual_gate/__init__.py"
    generated = init.read_text()
    init.unlink()
    r = subprocess.run([sys.executable, "-m", "kda_lab", "export", "--check"], cwd=clone,
                       env=env_for(clone), capture_output=True, text=True, timeout=600)
    assert "residual_gate" not in r.stdout, r.stdout
    init.write_text(generated)
    slug = "h200_residual_gate__ext"
    kda(clone, "new-task", slug, "--family", "residual_gate", "--title", "fp32 residual gate")
    task = clone / "kernels" / slug
    fam = clone / "kda_lab/families/residual_gate.py"
    resolve_prompt(task)
    edit(task / "task.toml", "# TODO(stamp): production rows (captures or derived)", '''[[workloads]]
name = "wan_residual_gate_L4096"
fn = "residual_gate_fp32"
kind = "production"
model = "Wan"
preset = "wan"
source = "derived: a 4096-token block"
[workloads.args]
x = { shape = [1, 4096, 1536], dtype = "bfloat16" }
update = { shape = [1, 4096, 1536], dtype = "bfloat16" }
gate = { shape = [1, 1, 1536], dtype = "float32" }
''')
    refused(clone, slug, "kda_lab/families/residual_gate.py:", "kda_kernels/registry.py:",
            "kda_kernels/contracts.py:")
    text = fam.read_text()
    text = re.sub(r"def residual_gate_fp32_oracle.*?\n\n\n", RESIDUAL_ORACLE + "\n\n", text, flags=re.S)
    fam.write_text(text.replace("# TODO(stamp): check them against the code.", "")
                   .replace("TODO(stamp): ", ""))
    for rel in ("kda_kernels/registry.py", "kda_kernels/contracts.py"):
        p = clone / rel
        p.write_text("\n".join(ln for ln in p.read_text().splitlines() if "TODO(stamp)" not in ln) + "\n")
    # the family's first task is where its test rows are written (kda_lab.families.rows)
    write_test_rows(task / "task.toml", RESIDUAL_ROWS)
    v = kda(clone, "validate", slug, ok=False)
    assert v.returncode == 0, v.stdout + v.stderr
    assert "test_gate_per_batch [float32] seed 0: ok" in check_interpret(clone, slug)
    # the stamped family test file runs and passes (oracle vs SGLang, and a wrong impl rejected)
    t = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                        "tests/families/test_residual_gate.py"], cwd=clone, env=env_for(clone),
                       capture_output=True, text=True, timeout=600)
    assert t.returncode == 0 and "3 passed" in t.stdout, t.stdout[-3000:] + t.stderr[-2000:]
    commit_as_hinted_and_launch(clone, slug)


REFLECT_MODULE = '''"""reflect_pad3d: the reflection pad of LTX-2's causal conv3d (an exact copy)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from kda_lab.families.base import Args, FunctionContract


def reflect_pad3d_oracle(a: Args) -> tuple[torch.Tensor, ...]:
    """fp64 gather of the reflected source index along H and W."""
    x, (wl, wr, hl, hr) = a["x"].double(), a["pad"]
    def idx(n: int, before: int, after: int) -> torch.Tensor:
        i = torch.arange(-before, n + after).abs()
        return torch.where(i > n - 1, 2 * (n - 1) - i, i)
    y = x.index_select(3, idx(x.shape[3], hl, hr))
    return (y.index_select(4, idx(x.shape[4], wl, wr)),)


def sglang_reflect_pad3d(x: torch.Tensor, pad: list[int]) -> torch.Tensor:
    """LTX2VideoCausalConv3d's reflect pad of H and W in NDHWC order (C unpadded), verbatim."""
    wl, wr, hl, hr = pad
    return F.pad(x.permute(0, 2, 3, 4, 1), (0, 0, wl, wr, hl, hr), mode="reflect").permute(0, 4, 1, 2, 3)


FUNCTIONS = {
    "reflect_pad3d": FunctionContract(name="reflect_pad3d", oracle=reflect_pad3d_oracle),
}
BYTE_MODELS = {"reflect_pad3d": (("x",), ("x",))}
EXACT = True
BASELINES = {"reflect_pad3d": "kda_lab.families.reflect_pad3d:sglang_reflect_pad3d"}
'''


REFLECT_ROWS = '''[[workloads]]
name = "test_reflect_odd"
fn = "reflect_pad3d"
kind = "test"
tags = ["tiny"]
source = "test: odd H and W, pad 1"
[workloads.args]
x = { shape = [1, 3, 2, 5, 7], dtype = "float32" }
pad = [1, 1, 1, 1]
'''


def write_test_rows(toml: Path, rows: str) -> None:
    """What a user does in a family's first task: the stamped TODO for its test rows replaced by the rows."""
    text = toml.read_text()
    start = text.index("# TODO(stamp): test rows")
    end = text.index("\n", start) + 1
    toml.write_text(text[:start] + rows + text[end:])


def test_path_3_a_new_fast_path_for_a_model_class(clone: Path) -> None:
    out = kda(clone, "new-family", "reflect_pad3d", "--fast-path", LTX2_CONV, "--exact").stdout
    for rel in ("kda_lab/families/reflect_pad3d.py", "kda_lab/families/__init__.py",
                "kda_kernels/registry.py", "kda_kernels/diffusion/reflect_pad3d/__init__.py",
                "tests/families/test_reflect_pad3d.py"):
        assert rel in out and (clone / rel).is_file(), rel
    ruff_clean(clone, out)
    assert '"ltx2_video_causal_conv3d"' in (clone / "kda_kernels/registry.py").read_text()
    assert "FAST_PATHS = (\"ltx2_video_causal_conv3d\",)" in (
        clone / "kda_kernels/diffusion/reflect_pad3d/__init__.py").read_text()
    (clone / "kda_lab/families/reflect_pad3d.py").write_text(REFLECT_MODULE)
    slug = "h200_vae_ltx2_reflect_pad__ext"
    kda(clone, "new-task", slug, "--family", "reflect_pad3d", "--title", "LTX-2 VAE reflection pad")
    task = clone / "kernels" / slug
    toml = (task / "task.toml").read_text()
    # the exact defaults: exact = true, zero tolerances
    assert toml.count("exact = true") == 1 and "float32 = { atol = 0.0, rtol = 0.0 }" in toml
    prompt = (task / "prompt.md").read_text()
    assert "Baseline: SGLang 0.5.23 through the facade" not in prompt and "bit-identical" in prompt
    assert "variance" not in prompt and "sglang_reflect_pad3d" in prompt  # the baseline the family declares
    resolve_prompt(task)
    write_test_rows(task / "task.toml", REFLECT_ROWS)
    edit(task / "task.toml", "# TODO(stamp): production rows (captures or derived)", '''[[workloads]]
name = "ltx2_reflect_1x128x3x64x64"
fn = "reflect_pad3d"
kind = "production"
model = "LTX-2"
preset = "ltx2"
source = "derived: a 128-channel decoder block"
[workloads.args]
x = { shape = [1, 128, 3, 64, 64], dtype = "bfloat16" }
pad = [1, 1, 1, 1]
''')
    v = kda(clone, "validate", slug, ok=False)
    assert v.returncode == 0, v.stdout + v.stderr
    assert "test_reflect_odd [float32] seed 0: ok" in check_interpret(clone, slug)
    # the validate refusals, each on a deliberately wrong edit of this valid task
    prompt_path = task / "prompt.md"
    good = prompt_path.read_text()
    prompt_path.write_text(good.replace("# Task: ", "# Task: H200 ", 1))
    refused(clone, slug, "names H200 more than once")
    prompt_path.write_text(good + "\n- Baseline: SGLang 0.5.23 through the facade, as everywhere.\n")
    refused(clone, slug, "is not the facade")
    prompt_path.write_text(good + "\n- centered (two-pass) variance.\n")
    refused(clone, slug, "variance rule")
    prompt_path.write_text(good)
    edit(task / "task.toml", "exact = true", "exact = false")
    refused(clone, slug, "is EXACT")
    edit(task / "task.toml", "exact = false", "exact = true")
    fam = clone / "kda_lab/families/reflect_pad3d.py"
    fam.rename(fam.with_suffix(".bak"))
    refused(clone, slug, "has no module kda_lab/families/reflect_pad3d.py")
    fam.with_suffix(".bak").rename(fam)
    edit(fam, '"reflect_pad3d": FunctionContract', '"reflect_pad3d_x": FunctionContract')
    refused(clone, slug, "which kda_lab/families/reflect_pad3d.py FUNCTIONS does not declare")
    edit(fam, '"reflect_pad3d_x": FunctionContract', '"reflect_pad3d": FunctionContract')
    v = kda(clone, "validate", slug, ok=False)
    assert v.returncode == 0, v.stdout + v.stderr
    commit_as_hinted_and_launch(clone, slug)


def test_new_family_refuses_what_it_cannot_register(clone: Path) -> None:
    for args, needle in (
        (["norm_infer", "--sglang", RESIDUAL_GATE], "exists already"),
        (["Bad-Name", "--sglang", RESIDUAL_GATE], "lower_snake_case"),
        (["gate2", "--sglang", "sglang.kernels.ops.diffusion.modulate.residual_gate_fp32:no_such_fn"],
         "defines no function no_such_fn"),
        (["gate3", "--sglang", "sglang.kernels.ops.diffusion.norm.norm_triton:norm_infer"],
         "already a function"),
        (["pad4", "--fast-path", "sglang.multimodal_gen.runtime.models.vaes.ltx_2_vae:NoSuchClass"],
         "defines no class NoSuchClass"),
    ):
        r = kda(clone, "new-family", *args, ok=False)
        assert r.returncode == 2 and needle in r.stderr, (args, r.stderr)
    assert subprocess.run(["git", "status", "--porcelain"], cwd=clone, capture_output=True,
                          text=True).stdout == ""  # a refusal writes nothing
