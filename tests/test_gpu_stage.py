"""Offline GPU-box staging (scripts/gpu_stage.sh and the two box-side setup scripts) and the GPU requirements.

The staging round trip runs the real scripts on real wheels built here (tiny, pure-Python, versioned as
requirements/gpu.txt pins them) through a local wheel directory (`KDA_STAGE_WHEELS`): real pip downloads
with dependency resolution and constraints, the SGLang repack, the CUDA 13 runtime split, then both setup
scripts with HOME in a temporary directory and the readiness imports they end with. No network.
"""

from __future__ import annotations

import base64
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

from tests.conftest import REPO

STAGE = REPO / "scripts" / "gpu_stage.sh"
BOX_DEPS = REPO / "scripts" / "gpu_stage" / "box-deps.txt"
E2E_DEPS = REPO / "scripts" / "gpu_stage" / "e2e-deps.txt"  # .gpu-stage-c, for kda e2e
E2E_NODEPS = REPO / "scripts" / "gpu_stage" / "e2e-deps-nodeps.txt"  # .gpu-stage-c, staged --no-deps (need torch)
PEER_NODEPS = REPO / "scripts" / "gpu_stage" / "peer-deps-nodeps.txt"  # .gpu-stage-a, --no-deps (public peers)
FLASHINFER_DEPS = REPO / "scripts" / "gpu_stage" / "flashinfer-deps.txt"  # .gpu-stage-e1, --no-deps (FlashInfer's)
GPU_TXT = REPO / "requirements" / "gpu.txt"
CPU_TXT = REPO / "requirements" / "cpu.txt"
CPU_IN = REPO / "requirements" / "cpu.in"
SGLANG_TXT = REPO / "requirements" / "sglang.txt"
CUTE_LIBS = ("nvidia-cutlass-dsl-libs-base", "nvidia-cutlass-dsl-libs-core", "nvidia-cutlass-dsl-libs-cu13")


# ------------------------------------------------------------------------------------------------ requirements

def norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_lines(path: Path) -> list[str]:
    return [ln.split("#", 1)[0].strip() for ln in path.read_text().splitlines() if ln.split("#", 1)[0].strip()]


def pins(path: Path) -> dict[str, str]:
    """name -> version for NAME==VERSION lines, '' for unpinned ones."""
    out = {}
    for line in requirement_lines(path):
        m = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._-]*)(?:\[[^\]]*\])?\s*(?:==\s*([^\s;]+))?.*", line)
        assert m, f"{path.name}: unparsed line {line!r}"
        out[norm(m.group(1))] = m.group(2) or ""
    return out


def extra(name: str) -> dict[str, str]:
    raw = tomllib.loads((REPO / "pyproject.toml").read_text())
    out = {}
    for req in raw["project"]["optional-dependencies"][name]:
        m = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._-]*)(\[[^\]]*\])?\s*(==\s*\S+|[<>=!~].*)?", req)
        assert m, req
        out[norm(m.group(1)) + (m.group(2) or "")] = (m.group(3) or "").replace("==", "").strip()
    return out


def test_gpu_extra_keeps_the_machines_torch_and_matches_the_pinned_file() -> None:
    gpu = extra("gpu")
    lab = extra("lab")
    assert "kda-lab[lab]" in gpu  # `pip install -e '.[gpu]'` alone gives a working `kda`
    names = {n for n in gpu if "[" not in n} | {n for n in lab}
    # SGLang (pins torch 2.14.1 and a serving stack) and torch itself would replace the machine's CUDA torch.
    for forbidden in ("sglang", "torch"):
        assert forbidden not in names and forbidden not in pins(GPU_TXT)
    pinned = pins(GPU_TXT)
    assert set(pinned) == names, f"only in gpu.txt: {set(pinned) - names}; only in the extras: {names - set(pinned)}"
    assert all(pinned.values()), f"unpinned in gpu.txt: {[n for n, v in pinned.items() if not v]}"
    for name, version in {**gpu, **lab}.items():
        if version and "[" not in name and not version.startswith("<"):
            assert pinned[name] == version, (name, version, pinned[name])


def test_gpu_pins_follow_the_cpu_environment_and_cover_sglangs_import_deps() -> None:
    pinned, cpu = pins(GPU_TXT), pins(CPU_TXT)
    for name, version in pinned.items():
        if name in cpu:
            assert version == cpu[name], f"{name}: gpu.txt {version}, cpu.txt {cpu[name]}"
    text = CPU_IN.read_text()
    block = text.split("# import deps of", 1)[1].split("\n#", 1)[0].splitlines()[1:]
    import_deps = {norm(ln.strip()) for ln in block if ln.strip()}
    assert import_deps and import_deps <= set(pinned), import_deps - set(pinned)
    assert {"nvidia-cutlass-dsl", *CUTE_LIBS} <= set(pinned)
    assert len({pinned[n] for n in ("nvidia-cutlass-dsl", *CUTE_LIBS)}) == 1


def test_gpu_txt_is_usable_as_pip_constraints() -> None:
    """gpu_stage.sh passes it with -c: pip rejects extras, editables and options in a constraints file."""
    for line in requirement_lines(GPU_TXT):
        assert not line.startswith("-") and "[" not in line and "@" not in line, line


def test_every_staged_box_dep_is_pinned_for_gpu_machines() -> None:
    staged = {norm(ln) for f in (BOX_DEPS, E2E_DEPS, E2E_NODEPS, PEER_NODEPS, FLASHINFER_DEPS) for ln in requirement_lines(f)}
    assert staged and staged <= set(pins(GPU_TXT)), staged - set(pins(GPU_TXT))


# ------------------------------------------------------------------------------------------------ wheels

def build_wheel(dest: Path, dist: str, version: str, files: dict[str, bytes], requires: tuple[str, ...] = ()) -> Path:
    """A valid py3-none-any wheel (PEP 427: METADATA, WHEEL, RECORD with sha256 of every file)."""
    stem = f"{re.sub(r'[-_.]+', '_', dist).lower()}-{version}"
    info = f"{stem}.dist-info"
    meta = f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n" + "".join(
        f"Requires-Dist: {r}\n" for r in requires)
    entries = {**files, f"{info}/METADATA": meta.encode(),
               f"{info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: kda-test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    record = []
    for name, data in entries.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{name},sha256={digest},{len(data)}")
    record.append(f"{info}/RECORD,,")
    path = dest / f"{stem}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in entries.items():
            z.writestr(name, data)
        z.writestr(f"{info}/RECORD", "\n".join(record) + "\n")
    return path


def module_of(dist: str) -> str:
    return "kda_fake_" + norm(dist).replace("-", "_")


def wheel_dir(tmp: Path, runtime: bytes) -> Path:
    """Every wheel the stage needs: SGLang (whose facade imports each box dep), the box deps (starlette pulls
    anyio, which the box image has), the four CuTe DSL wheels; the cu13 runtime carries `runtime`."""
    d = tmp / "wheels"
    d.mkdir()
    pinned = pins(GPU_TXT)
    (sglang_version,) = [v for n, v in pins(SGLANG_TXT).items() if n == "sglang"]
    deps = [norm(ln) for ln in requirement_lines(BOX_DEPS)]
    e2e = [norm(ln) for ln in requirement_lines(E2E_DEPS)]
    nodeps = [norm(ln) for ln in requirement_lines(E2E_NODEPS)]
    facade = "".join(f"import {module_of(n)}\n" for n in deps) + "def fuse_scale_shift_kernel():\n    pass\n"
    build_wheel(d, "sglang", sglang_version, {
        "sglang/__init__.py": f"__version__ = {sglang_version!r}\n".encode(),
        "sglang/kernels/__init__.py": b"", "sglang/kernels/ops/__init__.py": b"",
        "sglang/kernels/ops/diffusion.py": facade.encode(),
        "sglang/test/test_big.py": b"# excluded from the stage\n",
        "sglang/srt/rust_extensions/lib.rs": b"// excluded from the stage\n",
        "sglang/multimodal_gen/test/test_gen.py": b"# excluded from the stage\n",
    })
    for name in deps:
        requires = ("anyio",) if name == "starlette" else ()
        build_wheel(d, name, pinned[name], {f"{module_of(name)}/__init__.py": b""}, requires)
    for name in e2e:  # pydantic is a box dep too: staged once, in .gpu-stage-a
        requires = ("pydantic",) if name == "transformers" else ()
        build_wheel(d, name, pinned[name], {f"{module_of(name)}/__init__.py": b""}, requires)
    for name in nodeps + [norm(ln) for ln in requirement_lines(PEER_NODEPS)]:  # no torch wheel here: staged --no-deps
        build_wheel(d, name, pinned[name], {f"{module_of(name)}/__init__.py": b""}, ("torch>=2.7",))
    build_wheel(d, "anyio", "4.0.0", {"anyio/__init__.py": b""})
    cute = pinned["nvidia-cutlass-dsl"]
    pkg = "nvidia_cutlass_dsl/dsl_packages/cutlass"
    build_wheel(d, "nvidia-cutlass-dsl", cute, {"nvidia_cutlass_dsl/VERSION": cute.encode()})
    build_wheel(d, "nvidia-cutlass-dsl-libs-base", cute,
                {f"{pkg}/__init__.py": b"", f"{pkg}/cute/__init__.py": b"from cutlass import core_marker\n"})
    build_wheel(d, "nvidia-cutlass-dsl-libs-core", cute, {f"{pkg}/core_marker.py": b""})
    build_wheel(d, "nvidia-cutlass-dsl-libs-cu13", cute, {"nvidia_cutlass_dsl/lib/libcute_cu13.so": runtime})
    return d


# ------------------------------------------------------------------------------------------------ running

def clean_env(tmp: Path, **extra_env: str) -> dict[str, str]:
    """No pip config or PIP_* settings of this machine, `python3` = this interpreter (it has pip), HOME in tmp."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_") and k != "PYTHONPATH"}
    bin_dir = tmp / "bin"
    bin_dir.mkdir(exist_ok=True)
    shim = bin_dir / "python3"
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
    shim.chmod(0o755)
    home = tmp / "home"
    home.mkdir(exist_ok=True)
    env.update(PIP_CONFIG_FILE=os.devnull, PIP_DISABLE_PIP_VERSION_CHECK="1", PATH=f"{bin_dir}:{env['PATH']}",
               HOME=str(home), KDA_STAGE_CACHE=str(tmp / "cache"), **extra_env)
    return env


def checkout(tmp: Path) -> Path:
    """A git checkout holding the staging scripts and the requirements they read, without a .gitignore."""
    repo = tmp / "repo"
    for rel in ("scripts/gpu_stage.sh", "scripts/gpu_stage/lib.sh", "scripts/gpu_stage/setup-a.sh", "scripts/gpu_stage/setup-b.sh",
                "scripts/gpu_stage/setup-c.sh", "scripts/gpu_stage/box-deps.txt", "scripts/gpu_stage/e2e-deps.txt",
                "scripts/gpu_stage/e2e-deps-nodeps.txt", "scripts/gpu_stage/peer-deps-nodeps.txt", "requirements/gpu.txt",
                "requirements/sglang.txt"):
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / rel, repo / rel)
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    return repo


def run(cmd: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True, timeout=300)


def test_help_and_bad_arguments(tmp_path: Path) -> None:
    r = run(["bash", str(STAGE), "--help"], clean_env(tmp_path), REPO)
    assert r.returncode == 0 and "KDA_STAGE_WHEELS=DIR" in r.stdout and ".gpu-stage-b/" in r.stdout
    assert "#!/usr/bin/env" not in r.stdout and "set -euo" not in r.stdout  # the comment block only
    r = run(["bash", str(STAGE), "--fast"], clean_env(tmp_path), REPO)
    assert r.returncode == 2 and "usage: scripts/gpu_stage.sh" in r.stderr
    r = run(["bash", str(STAGE)], clean_env(tmp_path, KDA_STAGE_WHEELS=str(tmp_path / "none")), REPO)
    assert r.returncode == 2 and "is not a directory" in r.stderr


def test_stage_round_trip_from_a_local_wheel_directory(tmp_path: Path) -> None:
    runtime = os.urandom(300_000)  # incompressible: the split really spreads it over both folders
    wheels = wheel_dir(tmp_path, runtime)
    repo = checkout(tmp_path)
    env = clean_env(tmp_path, KDA_STAGE_WHEELS=str(wheels))
    r = run(["bash", "scripts/gpu_stage.sh"], env, repo)
    assert r.returncode == 0 and not r.stderr, r.stderr
    a, b = repo / ".gpu-stage-a", repo / ".gpu-stage-b"
    staged = sorted(p.name.split("-")[0] for p in (a / "deps").glob("*.whl"))
    assert staged == sorted(norm(n).replace("-", "_")
                            for n in requirement_lines(BOX_DEPS) + requirement_lines(PEER_NODEPS))  # anyio dropped
    c = repo / ".gpu-stage-c"
    staged_c = sorted(p.name.split("-")[0] for p in (c / "deps").glob("*.whl"))
    assert staged_c == sorted(norm(n).replace("-", "_")
                              for n in requirement_lines(E2E_DEPS) + requirement_lines(E2E_NODEPS))  # no pydantic
    assert sorted(p.name.split("-")[0] for p in (a / "cute").glob("*.whl")) == [
        "nvidia_cutlass_dsl", "nvidia_cutlass_dsl_libs_base", "nvidia_cutlass_dsl_libs_core"]
    listing = subprocess.run(["tar", "-tJf", str(a / "sglang.tar.xz")], capture_output=True, text=True).stdout
    assert "sglang/kernels/ops/diffusion.py" in listing
    assert "sglang/test/" not in listing and "rust_extensions" not in listing and "multimodal_gen" not in listing
    part1, part2 = (a / "cu13.part1").stat().st_size, (b / "cu13.part2").stat().st_size
    assert part1 > 0 and part2 > 0
    assert (a / "setup.sh").read_bytes() == (REPO / "scripts/gpu_stage/setup-a.sh").read_bytes()
    # the folders stay out of git through the clone's info/exclude, written once
    assert run(["git", "status", "--porcelain", "--untracked-files=all"], env, repo).stdout.count(".gpu-stage") == 0
    assert run(["bash", "scripts/gpu_stage.sh"], env, repo).returncode == 0
    exclude = (repo / ".git" / "info" / "exclude").read_text().splitlines()
    assert exclude.count("/.gpu-stage-a/") == 1 and exclude.count("/.gpu-stage-b/") == 1
    assert exclude.count("/.gpu-stage-c/") == 1

    # the box: a second part before any first part says the box was recycled
    home = Path(env["HOME"])
    r = run(["bash", str(b / "setup.sh")], env, tmp_path)
    assert r.returncode == 3 and "recycled" in r.stderr
    r = run(["bash", str(c / "setup.sh")], env, tmp_path)
    assert r.returncode == 3 and "recycled" in r.stderr
    r = run(["bash", str(a / "setup.sh")], env, tmp_path)
    assert r.returncode == 0, r.stderr
    assert "SGLang 0.5.23 ready" in r.stdout
    r = run(["bash", str(b / "setup.sh")], env, tmp_path)
    assert r.returncode == 0, r.stderr
    assert "CuTe DSL ready" in r.stdout
    assert (home / "kda-cute/nvidia_cutlass_dsl/lib/libcute_cu13.so").read_bytes() == runtime
    # base and core share a top-level folder: both survived the one pip command
    assert (home / "kda-cute/nvidia_cutlass_dsl/dsl_packages/cutlass/core_marker.py").is_file()
    probe = run(["bash", "-c", "source ~/kda-env.sh && python3 -c 'import sglang, cutlass.cute; print(sglang.__file__)'"],
                env, tmp_path)
    assert probe.returncode == 0 and str(home / "kda-site") in probe.stdout, probe.stderr
    r = run(["bash", str(c / "setup.sh")], env, tmp_path)
    assert r.returncode == 0 and f"({len(staged_c)} wheels)" in r.stdout, r.stderr
    probe = run(["bash", "-c", "source ~/kda-env.sh && python3 -c 'import kda_fake_transformers, kda_fake_cache_dit'"],
                env, tmp_path)
    assert probe.returncode == 0, probe.stderr


def test_box_rejects_parts_of_different_stages_and_a_missing_dep(tmp_path: Path) -> None:
    wheels = wheel_dir(tmp_path, os.urandom(200_000))
    repo = checkout(tmp_path)
    env = clean_env(tmp_path, KDA_STAGE_WHEELS=str(wheels))
    assert run(["bash", "scripts/gpu_stage.sh"], env, repo).returncode == 0
    a, b = repo / ".gpu-stage-a", repo / ".gpu-stage-b"
    assert run(["bash", str(a / "setup.sh")], env, tmp_path).returncode == 0
    part2 = b / "cu13.part2"
    data = bytearray(part2.read_bytes())
    data[-1] ^= 0xFF
    part2.write_bytes(bytes(data))
    r = run(["bash", str(b / "setup.sh")], env, tmp_path)
    assert r.returncode == 4 and "sha256" in r.stderr
    # a stage missing one import dep fails at setup-a's readiness import, not later in a run
    victim = next((a / "deps").glob("orjson-*.whl"))
    victim.unlink()
    r = run(["bash", str(a / "setup.sh")], env, tmp_path)
    assert r.returncode != 0 and "kda_fake_orjson" in r.stderr


def test_stage_over_the_size_limit_refuses_and_keeps_the_previous_stage(tmp_path: Path) -> None:
    wheels = wheel_dir(tmp_path, os.urandom(3 * 1024 * 1024))  # ≈ 1.5 MiB per folder after the split
    repo = checkout(tmp_path)
    env = clean_env(tmp_path, KDA_STAGE_WHEELS=str(wheels))
    assert run(["bash", "scripts/gpu_stage.sh"], env, repo).returncode == 0
    before = (repo / ".gpu-stage-a" / "cu13.sha256").read_text()
    (repo / ".gpu-stage-a" / "marker").write_text("previous stage")
    r = run(["bash", "scripts/gpu_stage.sh"], {**env, "KDA_STAGE_LIMIT_MB": "1"}, repo)
    assert r.returncode == 1 and "KDA_STAGE_LIMIT_MB=1" in r.stderr and "nothing was changed" in r.stderr
    assert (repo / ".gpu-stage-a" / "marker").read_text() == "previous stage"
    assert (repo / ".gpu-stage-a" / "cu13.sha256").read_text() == before


@pytest.mark.parametrize("script", ["gpu_stage.sh", "gpu_stage/setup-a.sh", "gpu_stage/setup-b.sh",
                                    "gpu_stage/setup-c.sh"])
def test_stage_scripts_are_strict_and_executable(script: str) -> None:
    path = REPO / "scripts" / script
    assert os.access(path, os.X_OK)
    assert "set -euo pipefail" in path.read_text()


def test_a_missing_pin_stops_the_stage_before_any_download(tmp_path: Path) -> None:
    repo = checkout(tmp_path)
    gpu_txt = repo / "requirements" / "gpu.txt"
    gpu_txt.write_text("".join(ln for ln in gpu_txt.read_text().splitlines(keepends=True)
                               if not ln.startswith("nvidia-cutlass-dsl-libs-core==")))
    env = clean_env(tmp_path, KDA_STAGE_WHEELS=str(tmp_path))
    r = run(["bash", "scripts/gpu_stage.sh"], env, repo)
    assert r.returncode == 2 and "no nvidia-cutlass-dsl-libs-core==VERSION line in requirements/gpu.txt" in r.stderr
    assert not (tmp_path / "cache").exists() and not (repo / ".gpu-stage-a").exists()


def test_stage_from_a_linked_worktree_keeps_the_folders_out_of_git(tmp_path: Path) -> None:
    # A linked worktree's .git is a file: the exclude file is found with `git rev-parse --git-path info/exclude`.
    wheels = wheel_dir(tmp_path, os.urandom(1000))
    repo = checkout(tmp_path)
    env = clean_env(tmp_path, KDA_STAGE_WHEELS=str(wheels), GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@t",
                    GIT_COMMITTER_NAME="t", GIT_COMMITTER_EMAIL="t@t")
    assert run(["git", "add", "-A"], env, repo).returncode == 0
    assert run(["git", "commit", "-qm", "scripts"], env, repo).returncode == 0
    wt = tmp_path / "wt"
    assert run(["git", "worktree", "add", "-q", str(wt)], env, repo).returncode == 0
    assert (wt / ".git").is_file()
    r = run(["bash", "scripts/gpu_stage.sh"], env, wt)
    assert r.returncode == 0 and not r.stderr, r.stderr
    assert (wt / ".gpu-stage-a").is_dir() and (wt / ".gpu-stage-b").is_dir()
    assert run(["git", "status", "--porcelain", "--untracked-files=all"], env, wt).stdout.count(".gpu-stage") == 0
    exclude = (repo / ".git" / "info" / "exclude").read_text().splitlines()
    assert exclude.count("/.gpu-stage-a/") == 1
