"""patches/sglang_kda_kernels.patch against SGLang v0.5.23's python/sglang/__init__.py (the released file).

The released file is read from the wheel named by ``KDA_SGLANG_WHEEL`` (``pip download --no-deps
sglang==0.5.23``) or else from the installed sglang 0.5.23, verified against its wheel RECORD hash and the
pinned sha256: both are the wheel's bytes. The patch is applied with ``git apply`` in a temporary git repo,
and ``import sglang`` is run with the patched file on the path (a symlinked copy of the installed package).
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kda_lab.export import Refusal
from kda_lab.export.patch import pinned_release_init, render_patch

_spec = importlib.util.spec_from_file_location("kda_overlay_fixtures", Path(__file__).with_name("test_overlay_fixtures.py"))
fx = importlib.util.module_from_spec(_spec)
sys.modules.setdefault("kda_overlay_fixtures", fx)
_spec.loader.exec_module(fx)


PATCH = fx.REPO / "patches" / "sglang_kda_kernels.patch"
KDA_EXPORT = (sys.executable, "-m", "kda_lab", "export")
REL = "python/sglang/__init__.py"


def release_init() -> str:
    wheel = os.environ.get("KDA_SGLANG_WHEEL")
    if not wheel and not fx.sglang_available():
        pytest.skip("needs sglang 0.5.23 installed or KDA_SGLANG_WHEEL=<sglang-0.5.23 wheel>")
    if not wheel:
        from importlib import metadata

        try:
            metadata.distribution("sglang")
        except metadata.PackageNotFoundError:
            pytest.skip("sglang is on the path without its dist-info (e.g. unpacked on the GPU box): "
                        "set KDA_SGLANG_WHEEL")
    text, _ = pinned_release_init(Path(wheel) if wheel else None)
    return text


def git(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@t", GIT_COMMITTER_NAME="t",
               GIT_COMMITTER_EMAIL="t@t")
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, env=env)


@pytest.fixture
def checkout(tmp_path):
    """A git repo whose python/sglang/__init__.py is v0.5.23's, committed."""
    repo = tmp_path / "sglang"
    (repo / "python" / "sglang").mkdir(parents=True)
    (repo / REL).write_text(release_init())
    assert git(repo, "init", "-q").returncode == 0
    git(repo, "add", "-A")
    assert git(repo, "commit", "-qm", "v0.5.23 python/sglang/__init__.py").returncode == 0
    return repo


def test_patch_is_what_regen_produces_for_the_release():
    assert PATCH.read_text() == render_patch(release_init()), \
        "patches/sglang_kda_kernels.patch is stale: run `kda export --regen-patch`"


def test_regen_patch_cli_reproduces_the_committed_patch(tmp_path, checkout):
    out = tmp_path / "regen.patch"
    p = subprocess.run([*KDA_EXPORT, "--regen-patch", "--out", str(out)], capture_output=True, text=True,
                       cwd=fx.REPO)
    if fx.sglang_available():
        assert p.returncode == 0, p.stderr
        assert out.read_text() == PATCH.read_text()
    out2 = tmp_path / "checkout.patch"
    p = subprocess.run([*KDA_EXPORT, "--regen-patch", "--sglang-init", str(checkout), "--out", str(out2)],
                       capture_output=True, text=True, cwd=fx.REPO)
    assert p.returncode == 0, p.stderr
    assert out2.read_text() == PATCH.read_text()


def test_patch_applies_cleanly_and_reverts(checkout):
    original = (checkout / REL).read_bytes()
    assert git(checkout, "apply", "--check", str(PATCH)).returncode == 0
    p = git(checkout, "apply", str(PATCH))
    assert p.returncode == 0, p.stderr
    patched = (checkout / REL).read_text()
    assert patched.startswith(original.decode()) and "kda_kernels.install(defer=True)" in patched
    compile(patched, REL, "exec")
    assert git(checkout, "apply", "--check", str(PATCH)).returncode != 0, "applying twice must be refused"
    p = git(checkout, "apply", "-R", str(PATCH))
    assert p.returncode == 0, p.stderr
    assert (checkout / REL).read_bytes() == original


def test_regen_refuses_an_already_patched_or_foreign_file(tmp_path, checkout):
    git(checkout, "apply", str(PATCH))
    with pytest.raises(Refusal, match="already contains"):
        render_patch((checkout / REL).read_text())
    whl = tmp_path / "fake.whl"
    import zipfile

    with zipfile.ZipFile(whl, "w") as z:
        z.writestr("sglang/__init__.py", "# not the release\n")
    with pytest.raises(Refusal, match="is not sglang 0.5.23's"):
        pinned_release_init(whl)


def _patched_site(tmp_path: Path, checkout: Path) -> Path:
    """site/sglang/: symlinks to the installed package's entries, with the patched __init__.py."""
    assert git(checkout, "apply", str(PATCH)).returncode == 0
    installed = Path(importlib.util.find_spec("sglang").origin).parent
    site = tmp_path / "site"
    pkg = site / "sglang"
    pkg.mkdir(parents=True)
    for entry in installed.iterdir():
        if entry.name not in ("__init__.py", "__pycache__"):
            (pkg / entry.name).symlink_to(entry)
    (pkg / "__init__.py").write_text((checkout / REL).read_text())
    return site


def _path(*dirs: Path) -> str:
    """The patched package first; any PYTHONPATH already set (e.g. the GPU box's ~/kda-site) after it."""
    extra = [os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else []
    return os.pathsep.join([*map(str, dirs), *extra])


IMPORT_PATCHED = """
import sglang
assert sglang.__file__.startswith(os.environ["PATCHED_SITE"]), sglang.__file__
"""


@fx.needs_sglang
def test_import_sglang_with_the_patched_file_installs_the_overlay(tmp_path, checkout):
    site = _patched_site(tmp_path, checkout)
    root = fx.make_tree(tmp_path / "tree", {"fuse_scale_shift": fx.FULL["fuse_scale_shift"],
                                            "rotary_embedding": {"apply_rotary_embedding": 1.3}})
    r = fx.run_py(root, [IMPORT_PATCHED, """
    import kda_kernels
    before = kda_kernels.status()
    runtime = sorted(m for m in sys.modules if m.startswith(("sglang.kernels.ops", "sglang.multimodal_gen")))
    mods = import_call_sites()
    st = kda_kernels.status()
    emit({"pending": sorted(k for k, v in before.items() if v["pending_import"]),
          "installed_at_import": sorted(k for k, v in before.items() if v["installed"]), "runtime": runtime,
          "installed": sorted(k for k, v in st.items() if v["installed"]),
          "still_pending": sorted(k for k, v in st.items() if v["pending_import"] and v["promoted"]),
          "muladd": kda(mods[EW].fuse_scale_shift_kernel), "rope": kda(mods[RU].apply_rotary_embedding),
          "leak": [n for n in vars(sglang) if "kda" in n]})
    """], env={"PYTHONPATH": _path(site, root), "PATCHED_SITE": str(site), "KDA_FORCE_ARCH": "h200"})
    promoted = ["apply_rotary_embedding", "fuse_layernorm_scale_shift_gate_select01_kernel",
                "fuse_residual_layernorm_scale_shift_gate_select01_kernel", "fuse_scale_shift_kernel"]
    # `import sglang` imports none of SGLang's diffusion runtime: each swap waits for SGLang to import its module
    assert r["runtime"] == [] and r["installed_at_import"] == [] and r["pending"] == promoted, r
    assert r["installed"] == promoted and r["still_pending"] == []
    assert r["muladd"] and r["rope"]
    assert r["leak"] == [], "the patch must not leave names in the sglang namespace"


PATCHED_IMPORT_LOGGED = """
import logging
records = []
class H(logging.Handler):
    def emit(self, record):
        records.append(record.getMessage())
logging.getLogger("kda_kernels").addHandler(H())
warnings.simplefilter(os.environ.get("WARN_FILTER", "always"))
with warnings.catch_warnings(record=os.environ.get("WARN_FILTER") != "error") as w:
    import sglang
assert sglang.__file__.startswith(os.environ["PATCHED_SITE"]), sglang.__file__
status = None
if sys.modules.get("kda_kernels") is not None and hasattr(sys.modules["kda_kernels"], "status"):
    status = {k: v["problems"] for k, v in sys.modules["kda_kernels"].status().items() if v["problems"]}
emit({"records": records, "warnings": [str(x.message) for x in (w or []) if "kda" in str(x.message)],
      "ok": hasattr(sglang, "gen"), "kda_loaded": sys.modules.get("kda_kernels") is not None, "status": status})
"""


@fx.needs_sglang
def test_patched_import_without_or_with_a_broken_overlay(tmp_path, checkout):
    site = _patched_site(tmp_path, checkout)
    env = {"PYTHONPATH": _path(site), "PATCHED_SITE": str(site)}
    # not installed: `import kda_kernels` raises ModuleNotFoundError for kda_kernels itself -> silent
    r = fx.run_py(None, ['sys.modules["kda_kernels"] = None', PATCHED_IMPORT_LOGGED], env=env, cwd=tmp_path)
    assert r["ok"] and r["records"] == [] and r["warnings"] == [] and not r["kda_loaded"]
    # installed but broken, in three ways: each is reported (logged), and sglang still imports
    for tag, body in {"runtime": "raise RuntimeError('broken overlay')\n",
                      "import_error": "from kda_kernels import _no_such_name  # broken overlay\n",
                      "missing_dependency": "import kda_no_such_dependency_xyz  # broken overlay\n"}.items():
        broken = tmp_path / f"broken_{tag}"
        (broken / "kda_kernels").mkdir(parents=True)
        (broken / "kda_kernels" / "__init__.py").write_text(body)
        r = fx.run_py(None, PATCHED_IMPORT_LOGGED, env={**env, "PYTHONPATH": _path(site, broken)}, cwd=tmp_path)
        assert r["ok"], (tag, r)
        assert any("kda_kernels failed to import" in m for m in r["records"]), (tag, r["records"])


@fx.needs_sglang
def test_patched_import_never_raises_under_error_filters(tmp_path, checkout):
    """python -W error (pytest filterwarnings=error): an install() with problems still lets `import sglang`
    succeed; the problem is logged and in status()."""
    site = _patched_site(tmp_path, checkout)
    root = fx.make_tree(tmp_path / "tree", {"fuse_scale_shift": {"fuse_scale_shift_kernel": 1.2}})
    fx.add_promotion(root, "rotary_embedding", "h200", {"apply_rotary_embedding": 1.3},
                     register='raise ImportError("fixture: this impl needs a missing extension")\n')
    r = fx.run_py(root, [PATCHED_IMPORT_LOGGED.replace("    import sglang\n", "    import sglang\n"
        # SGLang's and torch's own import-time warnings are not under test; KdaKernelsWarning (a RuntimeWarning)
        # stays an error while SGLang imports the module whose deferred swap fails
        "    for c in (DeprecationWarning, UserWarning, FutureWarning): warnings.filterwarnings('ignore', category=c)\n"
        "    import_call_sites()\n")],
                  env={"PYTHONPATH": _path(site, root), "PATCHED_SITE": str(site), "KDA_FORCE_ARCH": "h200",
                       "WARN_FILTER": "error"})
    assert r["ok"] and r["kda_loaded"]
    assert any("apply_rotary_embedding" in m and "failed to import" in m for m in r["records"]), r["records"]
    assert any("failed to import" in p for p in r["status"]["apply_rotary_embedding"]), r["status"]
