"""scripts/export_kda_kernels/export.py: the evidence gate, promotion, determinism, --check, --revert, --list.

Each test builds a temporary lab (kernels/<slug>/ with task.toml, src/ and ledgers written through
kda_lab.ledger, plus a copy of kda_kernels) and runs the exporter with --root pointing at it.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

_spec = importlib.util.spec_from_file_location("kda_overlay_fixtures", Path(__file__).with_name("test_overlay_fixtures.py"))
fx = importlib.util.module_from_spec(_spec)
sys.modules.setdefault("kda_overlay_fixtures", fx)
_spec.loader.exec_module(fx)

ex = fx.load_exporter()
ledger = pytest.importorskip("kda_lab.ledger")

SLUG = "h200_diffusion_fuse_scale_shift__multi_shape"
FAMILY = "fuse_scale_shift"
FNS = ("fuse_scale_shift_kernel", "fuse_layernorm_scale_shift_gate_select01_kernel",
       "fuse_residual_layernorm_scale_shift_gate_select01_kernel")
SGL = "sglang.kernels.ops.diffusion.modulate.scale_shift_triton"


# The fixture's production table (row name, function): the third function has no production rows.
TABLE = [("fuse_scale_shift_kernel-row0", FNS[0]), ("fuse_scale_shift_kernel-row1", FNS[0]),
         ("fuse_layernorm_scale_shift_gate_select01_kernel-row2", FNS[1])]


def _task_toml(slug=SLUG, arch="h200", sglang_override=None):
    lines = [f'slug = "{slug}"', f'arch = "{arch}"', f'family = "{FAMILY}"', 'title = "fixture"', ""]
    for fn in FNS:
        target = sglang_override if (sglang_override and fn == FNS[0]) else f"{SGL}:{fn}"
        lines += ["[[functions]]", f'name = "{fn}"', f'sglang = "{target}"', ""]
    for name, fn in TABLE:
        lines += ["[[workloads]]", f'name = "{name}"', f'fn = "{fn}"', 'kind = "production"', ""]
    lines += ["[[workloads]]", 'name = "a-test-row"', f'fn = "{FNS[0]}"', 'kind = "test"', ""]
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
    return root


def src_hash(root, slug=SLUG):
    from kda_lab.task import source_hash

    return source_hash(root / "kernels" / slug / "src")


def add_check(root, h, status="correct", gpu="NVIDIA H200", arch="h200", failed=0, slug=SLUG):
    ledger.append_solution(root / "kernels" / slug, id="c001", parent=None, status=status, event="check", source_hash=h,
                           arch=arch, gpu=gpu, evidence={"run_id": f"chk-{status}", "passed": 24, "failed": failed},
                           git_commit="0123abc", command="kda check", note="")


def add_bench(root, h, speedups, run_id="run-1", arch="h200", supersedes="", ts="2026-11-20T10:00:00Z", slug=SLUG,
              gpu="NVIDIA H200", mode="bench", rows=None):
    """One run: ``speedups[i]`` for TABLE's i-th row (``rows``: only those indices)."""
    out = []
    for i in (range(len(speedups)) if rows is None else rows):
        name, fn = TABLE[i]
        out.append({"ts": ts, "run_id": run_id, "task": slug, "arch": arch, "mode": mode, "candidate_id": "c001",
                    "source_hash": h, "function": fn, "row": name, "row_kind": "production",
                    "speedup": speedups[i], "gpu_name": gpu, "gpu_cc": "9.0", "driver": "570", "torch": "2.9",
                    "triton": "3.6.0", "cuda": "12.8", "sglang": "0.5.23", "overlay": "off", "git_commit": "feedc0de",
                    "command": "kda bench", "supersedes": supersedes})
    ledger.append_benchmark_rows(root / "kernels" / slug, out)


GOOD = [1.3, 1.1, 1.05]


def run(root, *args, capsys=None):
    rc = ex.main(["--root", str(root), *args])
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
    assert rc == 1 and "latest GPU correctness check is 'incorrect'" in out


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


def test_task_toml_must_name_the_overlays_sglang_target(lab, capsys):
    (lab / "kernels" / SLUG / "task.toml").write_text(_task_toml(sglang_override="sglang.somewhere:fuse_scale_shift_kernel"))
    rc, out = run(lab, SLUG, capsys=capsys)
    assert rc == 1 and "but the overlay swaps" in out


# ---------------------------------------------------------------------------------- promote / revert

def test_hash_matches_the_labs_source_hash(lab):
    src = lab / "kernels" / SLUG / "src"
    assert ex.hash_files(src, ex.source_files(src)) == src_hash(lab)


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
    manifest = json.loads((d / ex.MANIFEST).read_text())
    assert manifest["source_hash"] == h and manifest["generated"] == ["__init__.py"]
    assert set(manifest["functions"]) == {"fuse_scale_shift_kernel", "fuse_layernorm_scale_shift_gate_select01_kernel"}
    assert "no production rows" in manifest["not_promoted"]["fuse_residual_layernorm_scale_shift_gate_select01_kernel"]
    init = family_init(lab)
    assert "KDA_OPTIMIZED_fuse_scale_shift_kernel = True" in init
    assert "KDA_OPTIMIZED_fuse_residual_layernorm_scale_shift_gate_select01_kernel = False" in init
    assert f'KDA_TASK_fuse_scale_shift_kernel: dict[str, str] = {{"h200": "{SLUG}"}}' in init
    assert 'KDA_COMMIT_fuse_scale_shift_kernel: dict[str, str] = {"h200": "feedc0de"}' in init
    assert 'KDA_DATE_fuse_scale_shift_kernel: dict[str, str] = {"h200": "2026-11-20"}' in init
    assert 'KDA_SPEEDUP_fuse_scale_shift_kernel: dict[str, float] = {"h200": 1.1958}' in init  # sqrt(1.3 * 1.1)
    assert 'KDA_ARCHES_fuse_scale_shift_kernel: tuple[str, ...] = ("h200",)' in init
    promotes = [r for r in ledger.read_solutions(lab / "kernels" / SLUG) if r["event"] == "promote"]
    assert len(promotes) == 1 and promotes[0]["status"] == "promoted" and promotes[0]["source_hash"] == h
    assert promotes[0]["evidence"]["run_id"] == "run-1"
    assert ex.check(lab, out=lambda s: None) == 0
    # the generated family module is valid, ruff-clean python
    ruff = Path(sys.executable).with_name("ruff")
    if ruff.exists():
        p = subprocess.run([str(ruff), "check", "--no-cache", str(lab / "kda_kernels/diffusion" / FAMILY / "__init__.py")],
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
    assert ex.check(lab, out=lambda s: None) == 0
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
    p = subprocess.run([sys.executable, str(fx.EXPORTER), "--root", str(lab), SLUG], capture_output=True, text=True)
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
    assert r["st"]["stamps"]["speedup"] == {"h200": 1.1958} and r["st"]["stamps"]["commit"] == {"h200": "feedc0de"}
    assert not r["sel"]["promoted"] and not r["sel"]["installed"]


# ------------------------------------------------------------------------------------------- real tree

def test_the_real_tree_is_generated_and_consistent():
    """The committed kda_kernels tree is exactly what the exporter generates from its exported copies."""
    assert ex.check(fx.REPO, out=print) == 0
    for family in ex.FAMILIES:
        path = fx.REPO / "kda_kernels" / "diffusion" / family / "__init__.py"
        assert path.read_text() == ex.render_family_init(family, ex.read_manifests(fx.REPO, family))


def test_documented_flags_exist():
    """Every export.py flag named in the READMEs is one the parser accepts (no documented-but-missing flags)."""
    import re

    known = {a for action in ex.parser()._actions for a in action.option_strings}
    for readme in (fx.REPO / "scripts/export_kda_kernels/README.md", fx.REPO / "patches/README.md"):
        text = readme.read_text()
        for line in text.splitlines():
            if "export.py" in line:
                for flag in re.findall(r"(?<![\w-])--[a-z][a-z-]+", line):
                    assert flag in known, f"{readme.name}: {flag} is not an export.py option"


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
