"""external/manifest.toml (schema) and scripts/fetch_external.sh (against local file:// git repositories).

The script is run for real: a throwaway upstream repository with two commits and a tag stands in for GitHub,
a temporary manifest (KDA_EXTERNAL_MANIFEST) names it, and the fetch goes to a temporary folder
(KDA_EXTERNAL_DIR). Nothing here touches the network or the repository's own external/src/.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest

from kda_lab.families import FAMILIES

REPO = Path(__file__).resolve().parents[1]
MANIFEST = REPO / "external" / "manifest.toml"
SCRIPT = REPO / "scripts" / "fetch_external.sh"
LICENSES = {"Apache-2.0", "MIT", "BSD-2-Clause", "BSD-3-Clause"}
# The seven diffusion families (kda_kernels/registry.py); FAMILIES also holds the single-shape reference tasks.
SEVEN = ("qknorm_rope", "norm_infer", "group_norm_silu", "rotary_embedding", "fuse_scale_shift",
         "norm_tanh_mul_add", "norm_scale_shift")
GIT_ENV = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.invalid", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@example.invalid", "GIT_CONFIG_GLOBAL": "/dev/null", "GIT_CONFIG_NOSYSTEM": "1"}


# ------------------------------------------------------------------------------------------------ manifest

def sources() -> list[dict]:
    return tomllib.loads(MANIFEST.read_text())["source"]


def test_manifest_schema() -> None:
    data = tomllib.loads(MANIFEST.read_text())
    assert data["schema"] == 1
    names = [s["name"] for s in data["source"]]
    assert len(names) == len(set(names))
    for s in data["source"]:
        where = s.get("name", "?")
        assert re.fullmatch(r"[a-z0-9][a-z0-9_-]*", s["name"]), where
        assert s["url"].startswith("https://github.com/"), where
        assert s.get("commit") or s.get("tag"), f"{where}: needs a commit or a tag"
        if s.get("commit"):
            assert re.fullmatch(r"[0-9a-f]{40}", s["commit"]), f"{where}: commit must be 40 hex digits"
            assert s.get("verified"), f"{where}: say how the commit was verified"
        else:
            assert s.get("pin_note"), f"{where}: a tag-only pin must say why (pin_note)"
        assert s["license"] in LICENSES, where
        assert s["families"] and set(s["families"]) <= set(SEVEN), where
        files = s["files"]
        assert files and set(files) <= set(s["families"]) | {"all"}, f"{where}: files keys must be its families"
        for fam in s["families"]:
            assert fam in files or "all" in files, f"{where}: no files for {fam}"
        for paths in files.values():
            assert paths
            for p in paths:
                assert p and not p.startswith("/") and ".." not in Path(p).parts, f"{where}: bad path {p!r}"
        assert s.get("why"), where


def test_manifest_covers_every_family_and_the_named_references() -> None:
    assert set(SEVEN) <= set(FAMILIES)
    covered = {f for s in sources() for f in s["families"]}
    assert covered == set(SEVEN)
    urls = {s["url"] for s in sources()}
    for repo in ("sgl-project/sglang", "NVIDIA/cutlass", "Dao-AILab/quack", "flashinfer-ai/flashinfer",
                 "triton-lang/triton", "linkedin/Liger-Kernel"):
        assert f"https://github.com/{repo}" in urls
    sglang = next(s for s in sources() if s["name"] == "sglang")
    assert sglang["tag"] == "v0.5.23" and set(sglang["families"]) == set(SEVEN)


def test_sglang_paths_exist_in_the_installed_wheel() -> None:
    """The SGLang entry's files are the pinned release's: they exist in the installed sglang 0.5.23."""
    import importlib.util

    sglang_pkg = importlib.util.find_spec("sglang")
    if sglang_pkg is None or not sglang_pkg.submodule_search_locations:
        pytest.skip("sglang not installed")
    pkg = Path(next(iter(sglang_pkg.submodule_search_locations)))
    s = next(s for s in sources() if s["name"] == "sglang")
    missing = [p for ps in s["files"].values() for p in ps
               if not (pkg.parent / p.removeprefix("python/")).exists()]
    assert not missing


def test_fetched_sources_are_ignored_by_git() -> None:
    r = subprocess.run(["git", "-C", str(REPO), "check-ignore", "-q", "external/src/sglang/x.py"])
    assert r.returncode == 0, "external/src/ must be in .gitignore"


# ------------------------------------------------------------------------------------------------ script

def git(cwd: Path, *args: str) -> str:
    env = dict(os.environ, **GIT_ENV)
    return subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True, text=True).stdout.strip()


@pytest.fixture
def upstream(tmp_path: Path) -> dict[str, str]:
    """A local repository: commit one (tagged v1) with a/x.py + README, commit two adds a/y.py."""
    up = tmp_path / "upstream"
    up.mkdir()
    git(up, "init", "-q")
    git(up, "config", "uploadpack.allowFilter", "true")
    (up / "a").mkdir()
    (up / "a" / "x.py").write_text("print('one')\n")
    (up / "README").write_text("readme\n")
    git(up, "add", "-A")
    git(up, "commit", "-qm", "one")
    git(up, "tag", "-a", "v1", "-m", "v1")
    first = git(up, "rev-parse", "HEAD")
    (up / "a" / "y.py").write_text("print('two')\n")
    git(up, "add", "-A")
    git(up, "commit", "-qm", "two")
    return {"url": up.as_uri(), "first": first, "second": git(up, "rev-parse", "HEAD")}


@pytest.fixture
def dest(tmp_path: Path) -> Iterator[Path]:
    d = tmp_path / "src"
    yield d
    if d.exists():  # fetched trees are read-only: make them removable for pytest's cleanup
        for p in [d, *d.rglob("*")]:
            if not p.is_symlink():
                p.chmod(p.stat().st_mode | stat.S_IWUSR)
        shutil.rmtree(d)


def manifest(tmp_path: Path, *entries: str) -> Path:
    m = tmp_path / "manifest.toml"
    m.write_text("schema = 1\n" + "\n".join(entries))
    return m


def entry(name: str, url: str, *, commit: str = "", tag: str = "", files: tuple[str, ...] = ("a/x.py",)) -> str:
    pin = (f'commit = "{commit}"\n' if commit else "") + (f'tag = "{tag}"\n' if tag else "")
    paths = ", ".join(f'"{p}"' for p in files)
    return (f'[[source]]\nname = "{name}"\nurl = "{url}"\n{pin}license = "MIT"\nfamilies = ["norm_infer"]\n'
            f'why = "test"\n[source.files]\nnorm_infer = [{paths}]\n')


def run(m: Path, d: Path, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, KDA_EXTERNAL_MANIFEST=str(m), KDA_EXTERNAL_DIR=str(d), **GIT_ENV)
    return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, env=env, timeout=120)


def no_write_bits(root: Path) -> list[str]:
    return [str(p) for p in [root, *root.rglob("*")] if not p.is_symlink() and p.stat().st_mode & 0o222]


def test_fetches_a_pinned_commit_read_only_and_is_idempotent(tmp_path: Path, upstream, dest) -> None:
    m = manifest(tmp_path, entry("up", upstream["url"], commit=upstream["first"], files=("a/x.py", "a/y.py")))
    r = run(m, dest)
    assert r.returncode == 0, r.stderr
    tree = dest / "up"
    assert (tree / "a" / "x.py").read_text() == "print('one')\n"
    assert not (tree / "a" / "y.py").exists()  # the pinned (older) commit, not the tip
    assert "listed file missing" in r.stderr and "a/y.py" in r.stderr
    assert git(tree, "rev-parse", "HEAD") == upstream["first"]
    pin = (tree / ".kda-pin").read_text()
    assert f"resolved={upstream['first']}" in pin and "missing_files=1" in pin
    assert no_write_bits(tree) == []
    before = (tree / ".kda-pin").stat().st_mtime_ns
    again = run(m, dest)
    assert again.returncode == 0 and f"up: up to date ({upstream['first']})" in again.stdout
    assert (tree / ".kda-pin").stat().st_mtime_ns == before
    listed = run(m, dest, "--list")
    assert listed.returncode == 0 and f"yes ({upstream['first'][:12]})" in listed.stdout


def test_changed_pin_refetches_over_the_read_only_tree(tmp_path: Path, upstream, dest) -> None:
    assert run(manifest(tmp_path, entry("up", upstream["url"], commit=upstream["first"])), dest).returncode == 0
    m2 = manifest(tmp_path, entry("up", upstream["url"], commit=upstream["second"]))
    r = run(m2, dest)
    assert r.returncode == 0, r.stderr
    assert (dest / "up" / "a" / "y.py").exists() and no_write_bits(dest / "up") == []


def test_tag_pins_and_tag_commit_agreement(tmp_path: Path, upstream, dest) -> None:
    r = run(manifest(tmp_path, entry("bytag", upstream["url"], tag="v1")), dest)
    assert r.returncode == 0, r.stderr
    assert git(dest / "bytag", "rev-parse", "HEAD") == upstream["first"]
    ok = run(manifest(tmp_path, entry("both", upstream["url"], commit=upstream["first"], tag="v1")), dest)
    assert ok.returncode == 0, ok.stderr
    bad = run(manifest(tmp_path, entry("wrong", upstream["url"], commit=upstream["second"], tag="v1")), dest)
    assert bad.returncode != 0 and "tag v1 is" in bad.stderr
    assert not (dest / "wrong").exists() and not list(dest.glob(".tmp-*"))


def test_sparse_checks_out_only_listed_files(tmp_path: Path, upstream, dest) -> None:
    r = run(manifest(tmp_path, entry("sp", upstream["url"], commit=upstream["second"], files=("a/y.py",))), dest,
            "--sparse")
    assert r.returncode == 0, r.stderr
    files = sorted(p.relative_to(dest / "sp").as_posix() for p in (dest / "sp").rglob("*")
                   if p.is_file() and ".git" not in p.parts)
    assert files == [".kda-pin", "a/y.py"]


def test_select_by_name_and_reject_unknown(tmp_path: Path, upstream, dest) -> None:
    m = manifest(tmp_path, entry("one", upstream["url"], commit=upstream["first"]),
                 entry("two", upstream["url"], commit=upstream["second"]))
    r = run(m, dest, "two")
    assert r.returncode == 0 and (dest / "two").exists() and not (dest / "one").exists()
    bad = run(m, dest, "three")
    assert bad.returncode != 0 and "no entry named 'three'" in bad.stderr


def test_bad_pins_and_unreachable_upstream_fail(tmp_path: Path, upstream, dest) -> None:
    short = run(manifest(tmp_path, entry("s", upstream["url"], commit="abc123")), dest)
    assert short.returncode != 0 and "40 lowercase hex" in short.stderr
    gone = run(manifest(tmp_path, entry("g", (tmp_path / "nope").as_uri(), commit="0" * 40)), dest)
    assert gone.returncode != 0 and "git fetch" in gone.stderr and not (dest / "g").exists()


def test_refuses_a_destination_git_would_commit(tmp_path: Path, upstream) -> None:
    checkout = tmp_path / "checkout"
    checkout.mkdir()
    git(checkout, "init", "-q")
    r = run(manifest(tmp_path, entry("up", upstream["url"], commit=upstream["first"])), checkout / "external" / "src")
    assert r.returncode != 0 and "not ignored" in r.stderr


def test_help_and_list_on_the_real_manifest() -> None:
    h = subprocess.run(["bash", str(SCRIPT), "--help"], capture_output=True, text=True)
    assert h.returncode == 0 and "--list" in h.stdout and "KDA_EXTERNAL_MANIFEST" in h.stdout
    assert "set -euo" not in h.stdout
    env = dict(os.environ, KDA_EXTERNAL_DIR="/nonexistent-kda-external")
    lst = subprocess.run(["bash", str(SCRIPT), "--list"], capture_output=True, text=True, env=env)
    assert lst.returncode == 0
    for s in sources():
        assert s["name"] in lst.stdout


def test_script_is_shellcheck_clean() -> None:
    sc = shutil.which("shellcheck") or next((str(p) for p in (REPO / ".venv/bin/shellcheck",
                                                              Path("/tmp/kdaenv/bin/shellcheck")) if p.exists()), None)
    if sc is None:
        pytest.skip("shellcheck not installed")
    r = subprocess.run([sc, str(SCRIPT)], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout
    head = SCRIPT.read_text().splitlines()[:20]
    assert "set -euo pipefail" in head
    assert os.access(SCRIPT, os.X_OK)
