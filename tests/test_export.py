"""`kda export` (kda_lab.export): the evidence gate, promotion, determinism, --check, --revert, --list.

Each test builds a temporary lab (kernels/<slug>/ with task.toml, src/ and ledgers written through
kda_lab.ledger, plus a copy of kda_kernels), a real git repository whose commits hold the sources each ledger row
names, and runs the exporter with --root pointing at it.
"""

from __future__ import annotations

import hashlib
import importlib.util
import itertools
import json
import subprocess
import sys
from pathlib import Path

import pytest

from kda_kernels.registry import FAMILIES
from kda_lab.export import command
from kda_lab.export.check import check, recompute_manifest
from kda_lab.export.overlay import MANIFEST, read_manifests, render_family_init, write_family_init
from kda_lab.export.task import load_task_meta, source_files
from kda_lab.task.schema import hash_files

_spec = importlib.util.spec_from_file_location("kda_overlay_fixtures", Path(__file__).with_name("test_overlay_fixtures.py"))
fx = importlib.util.module_from_spec(_spec)
sys.modules.setdefault("kda_overlay_fixtures", fx)
_spec.loader.exec_module(fx)

ledger = pytest.importorskip("kda_lab.ledger")
KDA_EXPORT = (sys.executable, "-m", "kda_lab", "export")  # the command line, in a fresh interpreter

SLUG = "h200_diffusion_fuse_scale_shift__multi_shape"
FAMILY = "fuse_scale_shift"
FNS = ("fuse_scale_shift_kernel", "fuse_layernorm_scale_shift_gate_select01_kernel",
       "fuse_residual_layernorm_scale_shift_gate_select01_kernel")
SGL = "sglang.kernels.ops.diffusion.modulate.scale_shift_triton"


# The fixture's production table (row name, function): the third function has no production rows.
TABLE = [("fuse_scale_shift_kernel-row0", FNS[0]), ("fuse_scale_shift_kernel-row1", FNS[0]),
         ("fuse_layernorm_scale_shift_gate_select01_kernel-row2", FNS[1])]


def _task_toml(slug=SLUG, arch="h200", sglang_override=None):
    """A task.toml kda_lab.task.load_task accepts (the exporter reads tasks with it), the rows without tensors:
    nothing here runs them."""
    lines = [f'slug = "{slug}"', f'arch = "{arch}"', f'family = "{FAMILY}"', 'title = "fixture"', "",
             "[tolerances]", "float32 = { atol = 1e-5, rtol = 1e-5 }", ""]
    for fn in FNS:
        target = sglang_override if (sglang_override and fn == FNS[0]) else f"{SGL}:{fn}"
        lines += ["[[functions]]", f'name = "{fn}"', f'sglang = "{target}"', f'entry = "{SGL}:{fn}"', "reads = []",
                  "writes = []", ""]
    for name, fn in TABLE:
        lines += ["[[workloads]]", f'name = "{name}"', f'fn = "{fn}"', 'kind = "production"', "args = {}",
                  'model = "fixture"', 'preset = "fixture"', 'source = "fixture"', ""]
    lines += ["[[workloads]]", 'name = "a-test-row"', f'fn = "{FNS[0]}"', 'kind = "test"', "args = {}", ""]
    return "\n".join(lines)


KERNEL = fx.IMPL_HEADER + fx.IMPLS["fuse_scale_shift_kernel"] + fx.IMPLS["fuse_layernorm_scale_shift_gate_select01_kernel"] \
    + fx.IMPLS["fuse_residual_layernorm_scale_shift_gate_select01_kernel"]
REGISTER = """\"\"\"Fixture candidate: fp32 torch references.\"\"\"
from .kernel import (
    CALLS,
    fuse_layernorm_scale_shift_gate_select01_kernel,
    fuse_residual_layernorm_scale_shift_gate_select01_kernel,
    fuse_scale_shift_kernel,
)

EXPORTS = {
    "fuse_scale_shift_kernel": fuse_scale_shift_kernel,
    "fuse_layernorm_scale_shift_gate_select01_kernel": fuse_layernorm_scale_shift_gate_select01_kernel,
    "fuse_residual_layernorm_scale_shift_gate_select01_kernel": fuse_residual_layernorm_scale_shift_gate_select01_kernel,
}
__all__ = ["CALLS", "EXPORTS"]
"""


@pytest.fixture
def lab(tmp_path):
    root = fx.copy_package(tmp_path / "lab")
    task = root / "kernels" / SLUG
    (task / "src").mkdir(parents=True)
    (task / "task.toml").write_text(_task_toml())
    (task / "src" / "kernel.py").write_text(KERNEL)
    (task / "src" / "register.py").write_text(REGISTER)
    (task / "benchmark.csv").write_text(ledger.header_line() + "\n")
    (task / "solutions.jsonl").write_text("")
    git(root, "init", "-q", "-b", "main")
    commit(root)
    return root


def git(root, *args) -> str:
    return subprocess.run(["git", "-C", str(root), "-c", "user.name=t", "-c", "user.email=t@t", *args],
                          check=True, capture_output=True, text=True).stdout.strip()


def commit(root, message="lab state") -> str:
    """Commit everything (the sources a row is about to name) and return HEAD: what the harness records."""
    git(root, "add", "-A")
    git(root, "commit", "-q", "--allow-empty", "-m", message)
    return git(root, "rev-parse", "HEAD")


def src_hash(root, slug=SLUG):
    from kda_lab.task import source_hash

    return source_hash(root / "kernels" / slug / "src")


ALL_ROWS = [name for name, _ in TABLE] + ["a-test-row"]
_CHECKS = itertools.count(1)  # each check row its own run id (validate refuses a run recorded twice)


def add_check(root, h, status="correct", gpu="NVIDIA H200", arch="h200", failed=0, slug=SLUG, rows=None, seeds=2,
              git_commit=None, run_id=None):
    """A check row as the harness writes it: every row (or ``rows``) x ``seeds``, at a commit holding src/."""
    rows = ALL_ROWS if rows is None else rows
    ledger.append_solution(root / "kernels" / slug, id="c001", parent=None, status=status, event="check", source_hash=h,
                           arch=arch, gpu=gpu, evidence={"run_id": run_id or f"chk-{status}-{next(_CHECKS)}", "passed": 24,
                                                         "failed": failed, "rows": rows, "seeds": seeds},
                           git_commit=git_commit or commit(root), command="kda check", note="")


def add_bench(root, h, speedups, run_id="run-1", arch="h200", supersedes="", ts="2026-11-20T10:00:00Z", slug=SLUG,
              gpu="NVIDIA H200", mode="bench", rows=None, git_commit=None):
    """One run: ``speedups[i]`` for TABLE's i-th row (``rows``: only those indices), at a commit holding src/."""
    git_commit = git_commit or commit(root)
    out = []
    for i in (range(len(speedups)) if rows is None else rows):
        name, fn = TABLE[i]
        out.append({"ts": ts, "run_id": run_id, "task": slug, "arch": arch, "mode": mode, "candidate_id": "c001",
                    "source_hash": h, "function": fn, "row": name, "row_kind": "production",
                    "speedup": speedups[i], "gpu_name": gpu, "gpu_cc": "9.0", "driver": "570", "torch": "2.9",
                    "triton": "3.6.0", "cuda": "12.8", "sglang": "0.5.23", "overlay": "off", "git_commit": git_commit,
                    "command": "kda bench", "supersedes": supersedes})
    ledger.append_benchmark_rows(root / "kernels" / slug, out)


GOOD = [1.3, 1.1, 1.05]


def run(root, *args, capsys=None):
    rc = command.main(["--root", str(root), *args])
    out = capsys.readouterr() if capsys else None
    return rc, (out.out + out.err) if out else ""


def tree_digest(root):
    base = root / "kda_kernels"
    return {p.relative_to(base).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(base.rglob("*")) if p.is_file() and "__pycache__" not in p.parts}


def impl_dir(root):
    return root / "kda_kernels" / "diffusion" / FAMILY / "_impls" / "h200"


def family_init(root):
    return (root / "kda_kernels" / "diffusion" / FAMILY / "__init__.py").read_text()


# --------------------------------------------------------------------------------------------- refusals

def test_refuses_without_evidence(lab, capsys):
    before = tree_digest(lab)
    rc, out = run(lab, SLUG, capsys=capsys)
    assert rc == 1 and "no passing correctness run on an H200" in out
    assert tree_digest(lab) == before


def test_refuses_cpu_only_correctness_and_missing_bench(lab, capsys):
    h = src_hash(lab)
    add_check(lab, h, gpu="cpu")
    rc, out = run(lab, SLUG, capsys=capsys)
    assert rc == 1 and "no passing correctness run on an H200" in out
    add_check(lab, h)
    rc, out = run(lab, SLUG, capsys=capsys)
    assert rc == 1 and "no benchmark run" in out


def test_refuses_a_source_hash_mismatch(lab, capsys):
    h = src_hash(lab)
    add_check(lab, h)
    add_bench(lab, h, GOOD)
    (lab / "kernels" / SLUG / "src" / "kernel.py").write_text(KERNEL + "\n# tweaked after the benchmark\n")
    rc, out = run(lab, SLUG, capsys=capsys)
    assert rc == 1 and h in out and "src/ changed since" in out
    assert not impl_dir(lab).exists()


@pytest.mark.parametrize("speedups,why", [
    ([0.99, 0.995, 0.99], "geomean 0.992x"),
    ([1.5, 0.96, 1.0], "worst 0.960x"),
])
def test_refuses_a_failing_gate(lab, capsys, speedups, why):
    h = src_hash(lab)
    add_check(lab, h)
    add_bench(lab, h, speedups)
    rc, out = run(lab, SLUG, capsys=capsys)
    assert rc == 1 and why in out


def test_refuses_other_arch_superseded_runs_and_a_later_failing_check(lab, capsys):
    h = src_hash(lab)
    add_check(lab, h)
    add_bench(lab, h, GOOD, run_id="on-b200", arch="b200")
    rc, out = run(lab, SLUG, capsys=capsys)
    assert rc == 1 and "no benchmark run" in out
    add_bench(lab, h, GOOD, run_id="run-1")
    add_bench(lab, h, [0.5, 0.5, 0.5], run_id="run-2", supersedes="run-1")
    rc, out = run(lab, SLUG, capsys=capsys)
    assert rc == 1 and "run-2 fails the gate" in out
    add_bench(lab, h, GOOD, run_id="run-3")
    add_check(lab, h, status="incorrect", failed=3)
    rc, out = run(lab, SLUG, capsys=capsys)
    assert rc == 1 and "a correctness check of this hash FAILED (run chk-incorrect" in out


def test_refuses_a_copy_that_does_not_import_as_a_package(lab, capsys):
    reg = lab / "kernels" / SLUG / "src" / "register.py"
    reg.write_text(REGISTER.replace("from .kernel import", "from kernel import"))
    h = src_hash(lab)
    add_check(lab, h)
    add_bench(lab, h, GOOD)
    before = tree_digest(lab)
    rc, out = run(lab, SLUG, capsys=capsys)
    assert rc == 1 and "does not import" in out and "relatively" in out
    assert tree_digest(lab) == before, "a refused export must leave the overlay as it was"


def test_refuses_the_baseline_passthrough_candidate(lab, capsys):
    reg = lab / "kernels" / SLUG / "src" / "register.py"
    reg.write_text(REGISTER + "\nBASELINE = True\n")
    h = src_hash(lab)
    add_check(lab, h)
    add_bench(lab, h, GOOD)  # an A/A-like run can come out >= 1.0 by noise
    rc, out = run(lab, SLUG, capsys=capsys)
    assert rc == 1 and "BASELINE = True" in out
    assert not impl_dir(lab).exists()


def test_a_function_forwarded_to_sglang_is_never_promoted(lab, capsys):
    # Its rows time SGLang against itself: a 1.001x there is noise, and status() must not call it rebound.
    reg = lab / "kernels" / SLUG / "src" / "register.py"
    reg.write_text(REGISTER.replace("from .kernel import (", "from kda_kernels import lazy_baseline\n\nfrom .kernel import (")
                   .replace('"fuse_scale_shift_kernel": fuse_scale_shift_kernel,',
                            '"fuse_scale_shift_kernel": lazy_baseline("fuse_scale_shift_kernel"),'))
    h = src_hash(lab)
    add_check(lab, h)
    add_bench(lab, h, GOOD)
    rc, out = run(lab, SLUG, capsys=capsys)
    assert rc == 0, out
    manifest = json.loads((impl_dir(lab) / MANIFEST).read_text())
    assert set(manifest["functions"]) == {"fuse_layernorm_scale_shift_gate_select01_kernel"}
    assert "SGLang's own function" in manifest["not_promoted"]["fuse_scale_shift_kernel"]
    assert "KDA_OPTIMIZED_fuse_scale_shift_kernel = False" in family_init(lab)
    assert check(lab, out=lambda s: None) == 0  # the stamps recompute with the reason kept


def test_task_toml_must_name_the_overlays_sglang_target(lab, capsys):
    (lab / "kernels" / SLUG / "task.toml").write_text(_task_toml(sglang_override="sglang.somewhere:fuse_scale_shift_kernel"))
    rc, out = run(lab, SLUG, capsys=capsys)
    assert rc == 1 and "but the overlay swaps" in out


# ---------------------------------------------------------------------------------- promote / revert

def test_hash_matches_the_labs_source_hash(lab):
    src = lab / "kernels" / SLUG / "src"
    assert hash_files(src, source_files(src)) == src_hash(lab)


def test_promotes_with_evidence_then_reexports_identically_then_reverts(lab, capsys):
    initial_init = family_init(lab)
    h = src_hash(lab)
    add_check(lab, h)
    add_bench(lab, h, GOOD)
    rc, out = run(lab, SLUG, capsys=capsys)
    assert rc == 0, out
    d = impl_dir(lab)
    src = lab / "kernels" / SLUG / "src"
    for rel in ("register.py", "kernel.py"):
        assert (d / rel).read_bytes() == (src / rel).read_bytes()
    manifest = json.loads((d / MANIFEST).read_text())
    assert manifest["source_hash"] == h and manifest["generated"] == ["__init__.py"]
    assert set(manifest["functions"]) == {"fuse_scale_shift_kernel", "fuse_layernorm_scale_shift_gate_select01_kernel"}
    assert "no production rows" in manifest["not_promoted"]["fuse_residual_layernorm_scale_shift_gate_select01_kernel"]
    init = family_init(lab)
    assert "KDA_OPTIMIZED_fuse_scale_shift_kernel = True" in init
    assert "KDA_OPTIMIZED_fuse_residual_layernorm_scale_shift_gate_select01_kernel = False" in init
    assert f'KDA_TASK_fuse_scale_shift_kernel: dict[str, str] = {{"h200": "{SLUG}"}}' in init
    bench_commit = ledger.read_benchmark_rows(lab / "kernels" / SLUG)[-1]["git_commit"]
    assert f'KDA_COMMIT_fuse_scale_shift_kernel: dict[str, str] = {{"h200": "{bench_commit}"}}' in init
    assert 'KDA_DATE_fuse_scale_shift_kernel: dict[str, str] = {"h200": "2026-11-20"}' in init
    assert 'KDA_SPEEDUP_fuse_scale_shift_kernel: dict[str, float] = {"h200": 1.1958}' in init  # sqrt(1.3 * 1.1)
    assert 'KDA_ARCHES_fuse_scale_shift_kernel: tuple[str, ...] = ("h200",)' in init
    promotes = [r for r in ledger.read_solutions(lab / "kernels" / SLUG) if r["event"] == "promote"]
    assert len(promotes) == 1 and promotes[0]["status"] == "promoted" and promotes[0]["source_hash"] == h
    assert promotes[0]["evidence"]["run_id"] == "run-1"
    assert check(lab, out=lambda s: None) == 0
    # the generated family module is valid, ruff-clean python
    ruff = Path(sys.executable).with_name("ruff")
    if ruff.exists():
        # generated family code is exempt from the line limit (pyproject.toml per-file-ignores: E501)
        p = subprocess.run([str(ruff), "check", "--no-cache", "--extend-ignore", "E501",
                            str(lab / "kda_kernels/diffusion" / FAMILY / "__init__.py")],
                           capture_output=True, text=True, cwd=fx.REPO)
        assert p.returncode == 0, p.stdout

    digest = tree_digest(lab)
    rc, out = run(lab, SLUG, capsys=capsys)
    assert rc == 0 and "ledger unchanged" in out
    assert tree_digest(lab) == digest, "re-exporting the same inputs must rewrite byte-identical files"
    assert len([r for r in ledger.read_solutions(lab / "kernels" / SLUG) if r["event"] == "promote"]) == 1

    rc, out = run(lab, "--revert", SLUG, capsys=capsys)
    assert rc == 0, out
    assert not d.exists()
    assert family_init(lab) == initial_init
    reverts = [r for r in ledger.read_solutions(lab / "kernels" / SLUG) if r["event"] == "revert"]
    assert len(reverts) == 1 and reverts[0]["source_hash"] == h
    assert check(lab, out=lambda s: None) == 0
    rc, out = run(lab, "--revert", SLUG, capsys=capsys)
    assert rc == 1 and "nothing exported" in out


def test_check_catches_a_stale_or_edited_copy(lab, capsys):
    h = src_hash(lab)
    add_check(lab, h)
    add_bench(lab, h, GOOD)
    assert run(lab, SLUG, capsys=capsys)[0] == 0
    (lab / "kernels" / SLUG / "src" / "kernel.py").write_text(KERNEL + "\n# v2\n")
    rc, out = run(lab, "--check", capsys=capsys)
    assert rc == 1 and "STALE" in out
    (lab / "kernels" / SLUG / "src" / "kernel.py").write_text(KERNEL)
    assert run(lab, "--check", capsys=capsys)[0] == 0
    with (impl_dir(lab) / "kernel.py").open("a") as f:
        f.write("# hotfix in the copy\n")
    rc, out = run(lab, "--check", capsys=capsys)
    assert rc == 1 and "edited after export" in out
    (impl_dir(lab) / "kernel.py").write_text(KERNEL)
    init = lab / "kda_kernels" / "diffusion" / FAMILY / "__init__.py"
    init.write_text(init.read_text().replace("= True", "= False", 1))
    rc, out = run(lab, "--check", capsys=capsys)
    assert rc == 1 and "hand-edited" in out


def test_list_shows_tasks_and_stamps(lab, capsys):
    h = src_hash(lab)
    rc, out = run(lab, "--list", capsys=capsys)
    assert rc == 0 and SLUG in out and h in out and "not exported" in out and "no evidence" in out
    add_check(lab, h)
    add_bench(lab, h, GOOD)
    run(lab, SLUG, capsys=capsys)
    rc, out = run(lab, "--list", capsys=capsys)
    assert rc == 0 and "current" in out and "1.196x" in out


def test_cli_end_to_end_then_the_overlay_installs_the_export(lab):
    h = src_hash(lab)
    add_check(lab, h)
    add_bench(lab, h, GOOD)
    p = subprocess.run([*KDA_EXPORT, "--root", str(lab), SLUG], capture_output=True, text=True, cwd=fx.REPO)
    assert p.returncode == 0, p.stderr
    assert "promoted fuse_scale_shift_kernel: 1.196x" in p.stdout
    r = fx.run_py(lab, """
    mods = import_call_sites()
    import kda_kernels
    st = kda_kernels.install(strict=True)
    with torch.no_grad():
        a, b, c = torch.randn(2, 8, 32), torch.randn(2, 1, 32), torch.randn(2, 8, 32)
        ok = torch.allclose(mods[EW].MulAdd().forward_cuda(a, b, c, k=1), c + a * (1 + b), atol=1e-5)
    emit({"st": st["fuse_scale_shift_kernel"], "sel": st["fuse_residual_layernorm_scale_shift_gate_select01_kernel"],
          "ok": ok, "calls": calls("fuse_scale_shift")})
    """, env={"KDA_FORCE_ARCH": "h200"})
    assert r["ok"] and r["calls"] == {"fuse_scale_shift_kernel": 1}
    assert r["st"]["installed"] and r["st"]["stamps"]["task"] == {"h200": SLUG}
    bench_commit = ledger.read_benchmark_rows(lab / "kernels" / SLUG)[-1]["git_commit"]
    assert r["st"]["stamps"]["speedup"] == {"h200": 1.1958} and r["st"]["stamps"]["commit"] == {"h200": bench_commit}
    assert not r["sel"]["promoted"] and not r["sel"]["installed"]


# ------------------------------------------------------------------------------------------- real tree

def test_the_real_tree_is_generated_and_consistent():
    """The committed kda_kernels tree is exactly what the exporter generates from its exported copies."""
    assert check(fx.REPO, out=print) == 0
    for family in FAMILIES:
        path = fx.REPO / "kda_kernels" / "diffusion" / family / "__init__.py"
        assert path.read_text() == render_family_init(family, read_manifests(fx.REPO, family))


def test_documented_flags_exist():
    """Every `kda export` flag named in its docs is one the parser accepts (no documented-but-missing flags)."""
    import re

    known = {a for action in command.parser()._actions for a in action.option_strings}
    for doc in (fx.REPO / "docs/export.md", fx.REPO / "patches/README.md"):
        lines = [line for line in doc.read_text().splitlines() if "kda export" in line]
        assert lines, f"{doc.name} names no `kda export` command"
        for line in lines:
            for flag in re.findall(r"(?<![\w-])--[a-z][a-z-]+", line):
                assert flag in known, f"{doc.name}: {flag} is not a `kda export` option"


def test_a_later_run_without_production_rows_keeps_the_evidence(lab, capsys):
    """An end-to-end or test-rows-only run at the same hash (mode bench) is not a benchmark of the production
    table: it neither replaces nor invalidates the evidence run (seen for real with the VAE-block rows)."""
    h = src_hash(lab)
    add_check(lab, h)
    add_bench(lab, h, GOOD, run_id="run-1")
    ledger.append_benchmark_rows(lab / "kernels" / SLUG, [{
        "run_id": "e2e-1", "task": SLUG, "arch": "h200", "mode": "bench", "candidate_id": "c001", "source_hash": h,
        "function": "e2e:block", "row": "block", "row_kind": "test", "speedup": 0.5, "gpu_name": "NVIDIA H200",
        "gpu_cc": "9.0", "driver": "570", "torch": "2.9", "triton": "3.6.0", "cuda": "12.8", "sglang": "0.5.23",
        "overlay": "off", "git_commit": "feedc0de", "command": "e2e"}])
    rc, out = run(lab, SLUG, capsys=capsys)
    assert rc == 0, out
    rc, out = run(lab, "--check", capsys=capsys)
    assert rc == 0, out


# ------------------------------------------------------------------- evidence that cannot be forged (#10)

H100 = "NVIDIA H100 80GB HBM3"


def _promote(lab, capsys):
    h = src_hash(lab)
    add_check(lab, h)
    add_bench(lab, h, GOOD)
    rc, out = run(lab, SLUG, capsys=capsys)
    assert rc == 0, out
    return h


def test_an_h100_is_not_h200_evidence(lab, capsys):
    """An H100 has the H200's capability (9, 0): before the GPU name decided, its rows were recorded as arch
    h200 and promoted an h200 task. Neither the old-style rows (arch h200) nor new ones (arch h100) count."""
    h = src_hash(lab)
    add_check(lab, h, gpu=H100)  # what the old harness wrote on an H100
    add_check(lab, h, gpu=H100, arch="h100")  # what it writes now
    rc, out = run(lab, SLUG, capsys=capsys)
    assert rc == 1 and "no passing correctness run on an H200" in out
    add_check(lab, h)
    add_bench(lab, h, GOOD, run_id="h100-old", gpu=H100)
    add_bench(lab, h, GOOD, run_id="h100-new", gpu=H100, arch="h100")
    rc, out = run(lab, SLUG, capsys=capsys)
    assert rc == 1 and "no benchmark run on an H200" in out
    add_bench(lab, h, [0.5, 0.5, 0.5], run_id="h200")
    rc, out = run(lab, SLUG, capsys=capsys)
    assert rc == 1 and "h200 fails the gate" in out, "the H200 run decides, whatever the H100 runs say"
    add_bench(lab, h, GOOD, run_id="h200-good")
    assert run(lab, SLUG, capsys=capsys)[0] == 0
    # a later H100 run does not replace the H200 one
    add_bench(lab, h, [0.5, 0.5, 0.5], run_id="h100-later", gpu=H100)
    rc, out = run(lab, "--check", capsys=capsys)
    assert rc == 0, out
    # a failing check on an H100 never counts, but it blocks the hash: the overlay runs the h200 impls on every
    # capability-(9,0) GPU (docs/overlay.md), so a wrong result there is a wrong result
    add_check(lab, h, status="incorrect", failed=5, gpu=H100)
    rc, out = run(lab, "--check", capsys=capsys)
    assert rc == 1 and "a correctness check of this hash FAILED" in out, out


def test_a_partial_run_never_promotes(lab, capsys):
    """A one-row run at 1.30x after a whole-table run at 0.80x promoted "1.300x over 1 production rows"."""
    h = src_hash(lab)
    add_check(lab, h)
    add_bench(lab, h, [0.8, 0.8, 0.8], run_id="full")
    add_bench(lab, h, [1.3], run_id="one-row")
    rc, out = run(lab, SLUG, capsys=capsys)
    assert rc == 1 and "full fails the gate" in out and "geomean 0.800x" in out
    assert not impl_dir(lab).exists()


def test_the_gate_names_missing_and_non_finite_rows(lab, capsys):
    h = src_hash(lab)
    add_check(lab, h)
    add_bench(lab, h, [1.3, 1.3, 1.3], rows=[0], run_id="one-row")
    rc, out = run(lab, SLUG, capsys=capsys)
    assert rc == 1 and "no benchmark run covers the whole production table" in out
    assert "2 of 3 production rows missing" in out and TABLE[1][0] in out and TABLE[2][0] in out
    add_bench(lab, h, [1.3, float("nan"), 1.2], run_id="with-nan")  # an empty speedup cell in the ledger
    rc, out = run(lab, SLUG, capsys=capsys)
    assert rc == 1 and "latest run with-nan" in out and f"1 without a finite speedup: {TABLE[1][0]}" in out
    add_bench(lab, h, [1.3, 1.1, 1.05], run_id="whole")
    rc, out = run(lab, SLUG, capsys=capsys)
    assert rc == 0 and "over 2 production rows" in out, out


def test_only_a_like_run_may_supersede(lab, capsys):
    """A one-row A/A run superseding a failing full run revived an older passing one."""
    h = src_hash(lab)
    add_check(lab, h)
    add_bench(lab, h, GOOD, run_id="old-pass")
    add_bench(lab, h, [0.8, 0.8, 0.8], run_id="new-fail")
    add_bench(lab, h, [1.0], rows=[0], run_id="aa-one-row", mode="aa", supersedes="new-fail")
    rc, out = run(lab, SLUG, capsys=capsys)
    assert rc == 1 and "ledgers do not validate" in out
    assert "only a run of the same mode may supersede" in out and "only a run over the same rows" in out
    assert not impl_dir(lab).exists()


def test_a_same_mode_same_rows_supersede_still_works(lab, capsys):
    h = src_hash(lab)
    add_check(lab, h)
    add_bench(lab, h, [0.8, 0.8, 0.8], run_id="mistaken")
    add_bench(lab, h, GOOD, run_id="redo", supersedes="mistaken")
    rc, out = run(lab, SLUG, capsys=capsys)
    assert rc == 0, out
    manifest = json.loads((impl_dir(lab) / MANIFEST).read_text())
    assert manifest["evidence"]["bench"]["run_id"] == "redo"


def _exporter_cli(lab, *args):
    p = subprocess.run([*KDA_EXPORT, "--root", str(lab), *args], capture_output=True, text=True, cwd=fx.REPO)
    assert "Traceback" not in p.stderr + p.stdout, p.stderr
    return p.returncode, p.stdout + p.stderr


def test_export_refuses_a_broken_chain(lab):
    h = src_hash(lab)
    add_check(lab, h)
    add_bench(lab, h, [0.8, 0.8, 0.8])
    p = lab / "kernels" / SLUG / "benchmark.csv"
    p.write_text(p.read_text().replace(",0.8,", ",1.8,"))  # a better speedup written over history
    rc, out = _exporter_cli(lab, SLUG)
    assert rc == 1 and "do not validate" in out and "hash chain broken" in out


@pytest.mark.parametrize("damage", ["cut-solutions", "cut-benchmark", "bad-json"])
def test_check_reports_damaged_ledgers_as_fail_lines(lab, capsys, damage):
    _promote(lab, capsys)
    assert _exporter_cli(lab, "--check")[0] == 0
    task = lab / "kernels" / SLUG
    name = "benchmark.csv" if damage == "cut-benchmark" else "solutions.jsonl"
    text = (task / name).read_text()
    (task / name).write_text(text[:-25] if damage != "bad-json" else text + '{"id": "c9", "status": \n')
    rc, out = _exporter_cli(lab, "--check")
    assert rc == 1 and "FAIL kernels/" in out and name in out, out
    rc, out = _exporter_cli(lab, "--list")  # the other readers refuse cleanly too
    assert rc in (0, 1)
    rc, out = _exporter_cli(lab, SLUG)
    assert rc == 1 and "refused" in out


def _git(root, *args):
    return subprocess.run(["git", "-C", str(root), "-c", "user.name=t", "-c", "user.email=t@t", *args],
                          check=True, capture_output=True, text=True).stdout


def test_check_catches_a_truncated_ledger_against_git(lab, capsys):
    """Rows dropped from the end keep the chain valid: only git can tell, in the working copy or committed."""
    h = _promote(lab, capsys)
    add_bench(lab, h, [0.9, 0.9, 0.9], run_id="later")  # a later failing run: the evidence no longer holds
    _git(lab, "init", "-q")
    _git(lab, "add", "-A")
    _git(lab, "commit", "-qm", "lab")
    rc, out = run(lab, "--check", capsys=capsys)
    assert rc == 1 and "evidence no longer holds" in out
    p = lab / "kernels" / SLUG / "benchmark.csv"
    full = p.read_text()
    p.write_text("".join(full.splitlines(keepends=True)[:-3]))  # drop the failing run
    rc, out = run(lab, "--check", capsys=capsys)
    assert rc == 1 and "append-only" in out, out
    _git(lab, "commit", "-qam", "drop the bad run")  # committing the truncation does not help
    rc, out = run(lab, "--check", capsys=capsys)
    assert rc == 1 and "dropped committed rows" in out, out


def test_check_recomputes_the_stamps_from_the_ledger(lab, capsys):
    """A forged KDA_SPEEDUP (manifest edited, family __init__ regenerated from it) passed --check."""
    _promote(lab, capsys)
    mpath = impl_dir(lab) / MANIFEST
    honest = mpath.read_text()
    for path, forged in ((("functions", "fuse_scale_shift_kernel", "speedup"), 1.9),
                         (("evidence", "bench", "commit"), "c0ffee"),
                         (("functions", "fuse_scale_shift_kernel", "rows"), 102),
                         (("evidence", "bench", "run_id"), "no-such-run")):
        m = json.loads(honest)
        node = m
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = forged
        mpath.write_text(json.dumps(m, indent=2, sort_keys=True) + "\n")
        write_family_init(lab, FAMILY)  # the stamps now agree with the forged manifest
        rc, out = run(lab, "--check", capsys=capsys)
        assert rc == 1 and "KDA_EXPORT.json" in out, (path, out)
        if path[-1] != "run_id":
            assert f"{'.'.join(path)} is {forged!r}" in out, out
    # promoting a function the ledger keeps on SGLang is a forgery too
    m = json.loads(honest)
    m["functions"]["fuse_residual_layernorm_scale_shift_gate_select01_kernel"] = {"speedup": 1.5, "worst": 1.5, "rows": 1}
    mpath.write_text(json.dumps(m, indent=2, sort_keys=True) + "\n")
    write_family_init(lab, FAMILY)
    rc, out = run(lab, "--check", capsys=capsys)
    assert rc == 1 and "fuse_residual_layernorm_scale_shift_gate_select01_kernel" in out
    mpath.write_text(honest)
    write_family_init(lab, FAMILY)
    assert run(lab, "--check", capsys=capsys)[0] == 0


def test_the_committed_group_norm_promotion_passes_the_new_rules():
    """The real H200 GroupNorm export: its run is whole-table (102 rows) on an NVIDIA H200, and every stamp
    recomputes from the rows it names (its rows predate the overlay column: they count, see the README)."""
    slug = "h200_diffusion_group_norm_silu__multi_shape"
    task = load_task_meta(fx.REPO / "kernels" / slug)
    m = json.loads((fx.REPO / "kda_kernels/diffusion/group_norm_silu/_impls/h200" / MANIFEST).read_text())
    assert len(task.production) == 102 and m["evidence"]["bench"]["n_rows"] == 102
    assert recompute_manifest(task, m) == m


def test_hash_matches_for_a_candidate_that_imports_a_hashed_helper(lab, tmp_path, monkeypatch):
    # the helper ships in kda_kernels, not in src/: both hashes must cover it, or such a candidate never exports
    from kda_lab.task import schema

    src = lab / "kernels" / SLUG / "src"
    (src / "launch.py").write_text("from kda_kernels.launch_cache import LaunchCache\n")
    helper = tmp_path / "launch_cache.py"
    helper.write_text("# version 1\n")
    monkeypatch.setattr(schema, "_helper_path", lambda name: helper)
    h = src_hash(lab)
    assert hash_files(src, source_files(src)) == h
    helper.write_text("# version 2\n")  # a changed helper is new code under the same src/
    assert src_hash(lab) != h
    assert hash_files(src, source_files(src)) == src_hash(lab)
