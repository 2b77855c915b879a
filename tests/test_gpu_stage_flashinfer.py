"""Staging FlashInfer for the offline GPU box in chunks (scripts/gpu_stage_flashinfer.sh, the shared chunker
scripts/gpu_stage/wheel_chunks.py, the box-side scripts/gpu_stage/setup-e.sh and flashinfer_env.py).

The round trips run the real scripts through a local wheel directory: real pip downloads, the real xz repack and
split, then the folders' setup.sh with HOME in a temporary directory. The fast ones use a wheel built here with
the official wheel's name and top-level layout (flashinfer/, b12x/, build_backend.py, the dist-info) plus an
incompressible data file, so that a 1 MiB chunk limit gives several folders; the slow one stages the real
flashinfer-python wheel and imports the installed FlashInfer on this CPU machine. The last test is the H200 check.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import zipfile
from importlib import metadata
from pathlib import Path

import pytest

from kda_lab.families.peers import FLASHINFER
from tests.conftest import REPO
from tests.test_gpu_stage import build_wheel, clean_env, norm, pins, requirement_lines, run

STAGE = REPO / "scripts" / "gpu_stage_flashinfer.sh"
HELPER = REPO / "scripts" / "gpu_stage" / "wheel_chunks.py"
SETUP_E = REPO / "scripts" / "gpu_stage" / "setup-e.sh"
ENV_HELPER = REPO / "scripts" / "gpu_stage" / "flashinfer_env.py"
DEPS = REPO / "scripts" / "gpu_stage" / "flashinfer-deps.txt"
GPU_TXT = REPO / "requirements" / "gpu.txt"
VERSION = pins(GPU_TXT)["flashinfer-python"]


def load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


fenv = load(ENV_HELPER, "flashinfer_env")

# The built stand-in of the official wheel: imports what the real one imports first (pynvml, from the staged
# nvidia-ml-py), and its norm module's builder writes a file into the JIT cache the setup points it at.
INIT = f"""import pynvml
__version__ = {VERSION!r}
""".encode()
NORM = b"""import os, pathlib
_USE_CUDA_NORM = True
def get_norm_module():
    d = pathlib.Path(os.environ["FLASHINFER_WORKSPACE_BASE"]) / ".cache" / "flashinfer"
    d.mkdir(parents=True, exist_ok=True)
    (d / "norm.so").write_bytes(b"built")
"""


def build_flashinfer_wheel(dest: Path, data_bytes: int) -> Path:
    files = {"flashinfer/__init__.py": INIT, "flashinfer/norm.py": NORM,
             "flashinfer/data/csrc/norm.cu": os.urandom(data_bytes), "b12x/__init__.py": b"",
             "build_backend.py": b"# build hook\n"}
    return build_wheel(dest, "flashinfer-python", VERSION, files, requires=("apache-tvm-ffi<0.2,>=0.1.11",))


def wheelhouse(tmp: Path, data_bytes: int = 2_000_000) -> tuple[Path, Path]:
    """The stand-in wheel and the deps of flashinfer-deps.txt at their pins: a pynvml module, a ninja binary."""
    wheels = tmp / "wheels"
    wheels.mkdir(exist_ok=True)
    wheel = build_flashinfer_wheel(wheels, data_bytes)
    pinned = pins(GPU_TXT)
    build_wheel(wheels, "nvidia-ml-py", pinned["nvidia-ml-py"], {"pynvml.py": b"NVML = 1\n"})
    build_wheel(wheels, "ninja", pinned["ninja"], {f"ninja-{pinned['ninja']}.data/scripts/ninja": b"#!/bin/sh\n"})
    return wheels, wheel


def checkout(tmp: Path) -> Path:
    repo = tmp / "repo"
    for path in (STAGE, REPO / "scripts" / "gpu_stage" / "lib.sh", HELPER, SETUP_E, ENV_HELPER, DEPS, GPU_TXT):
        rel = path.relative_to(REPO)
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, repo / rel)
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    return repo


def staged(tmp: Path, chunk_mb: str = "1", **env_extra: str) -> tuple[Path, Path, dict[str, str]]:
    wheels, wheel = wheelhouse(tmp)
    repo = checkout(tmp)
    env = clean_env(tmp, KDA_STAGE_WHEELS=str(wheels), KDA_STAGE_CHUNK_MB=chunk_mb, **env_extra)
    r = run(["bash", "scripts/gpu_stage_flashinfer.sh"], env, repo)
    assert r.returncode == 0, r.stdout + r.stderr
    return repo, wheel, env


def folders(repo: Path) -> list[str]:
    return sorted((p.name for p in repo.glob(".gpu-stage-e*")), key=lambda n: int(n.removeprefix(".gpu-stage-e")))


def first_run(env: dict[str, str]) -> Path:
    """What .gpu-stage-a/setup.sh leaves on the box: ~/kda-site and ~/kda-env.sh putting it on PYTHONPATH."""
    home = Path(env["HOME"])
    (home / "kda-site").mkdir()
    (home / "kda-env.sh").write_text('export PYTHONPATH="$HOME/kda-site${PYTHONPATH:+:$PYTHONPATH}"\n')
    return home / "kda-site"


def box(repo: Path, folder: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return run(["bash", str(repo / folder / "setup.sh")], env, repo)


def joined_archive(repo: Path, names: list[str]) -> tuple[bytes, dict]:
    manifest = json.loads((repo / names[0] / "manifest.json").read_text())
    return b"".join((repo / c["folder"] / c["file"]).read_bytes() for c in manifest["chunks"]), manifest


def assert_archive_is_the_wheel(archive: bytes, wheel: Path, tmp: Path) -> None:
    """Every member of the wheel, byte for byte, and nothing else (RECORD: the same files and hashes).

    The archive is read once, in its own order (mode r|xz): looking members up in the wheel's order seeks back
    in the xz stream, which decompresses it again from the start each time (100 s for the real wheel)."""
    path = tmp / "joined.tar.xz"
    path.write_bytes(archive)
    with tarfile.open(path, mode="r|xz") as tar, zipfile.ZipFile(wheel) as z:
        names = {n for n in z.namelist() if not n.endswith("/")}
        seen = set()
        for member in tar:
            if not member.isfile():
                continue
            name = member.name
            assert name in names, name
            seen.add(name)
            data = tar.extractfile(member).read()  # type: ignore[union-attr]
            if name.endswith(".dist-info/RECORD"):
                assert sorted(data.decode().splitlines()) == sorted(z.read(name).decode().splitlines())
            else:
                assert data == z.read(name), name
        assert seen == names


# ------------------------------------------------------------------------------------------------ what is staged

def test_the_pin_is_the_peers_version_everywhere() -> None:
    assert FLASHINFER == ("flashinfer", "flashinfer-python", VERSION) and VERSION == "0.7.2"
    assert pins(REPO / "requirements" / "peers-cpu.txt")["flashinfer-python"] == VERSION


def test_every_requirement_of_the_pinned_wheel_is_accounted_for() -> None:
    """Each Requires-Dist of flashinfer-python (no extra) is staged here, in the box image, in .gpu-stage-a or -b,
    or named in flashinfer-deps.txt as left out, with the reason. The wheel's METADATA comes from the CPU env
    (requirements/peers-cpu.txt installs the pinned wheel --no-deps)."""
    assert metadata.version("flashinfer-python") == VERSION
    required = {norm(re.split(r"[\s<>=!~;\[(]", r, maxsplit=1)[0]) for r in metadata.requires("flashinfer-python") or []
                if "extra ==" not in r}
    assert {"nvidia-ml-py", "ninja", "apache-tvm-ffi", "torch", "click"} <= required  # the METADATA was read
    staged = {norm(n) for n in requirement_lines(DEPS)}
    assert staged == {"nvidia-ml-py", "ninja"}
    box_image = {"torch", "numpy", "packaging", "requests", "tqdm", "einops"}
    gpu_stage_a = {norm(n) for f in ("box-deps.txt", "peer-deps-nodeps.txt")
                   for n in requirement_lines(REPO / "scripts" / "gpu_stage" / f)}
    gpu_stage_b = {"nvidia-cutlass-dsl"}
    comments = "".join(ln for ln in DEPS.read_text().splitlines(keepends=True) if ln.startswith("#"))
    left_out_line = comments.split("left out", 1)[1]
    left_out = {n for n in required if re.search(rf"\b{re.escape(n)}\b", left_out_line)}
    for name in required:
        where = [s for s, names in (("staged", staged), ("image", box_image), ("a", gpu_stage_a),
                                    ("b", gpu_stage_b), ("left out", left_out)) if name in names]
        assert where, f"{name}: a requirement of flashinfer-python {VERSION} that flashinfer-deps.txt does not place"
    assert not left_out & (staged | gpu_stage_a)


def test_the_whole_wheel_is_one_part_but_a_data_folder_is_refused() -> None:
    chunks_mod = load(HELPER, "wheel_chunks")
    names = ["flashinfer/__init__.py", "flashinfer/data/csrc/norm.cu", "b12x/__init__.py", "build_backend.py",
             "flashinfer/data/", f"flashinfer_python-{VERSION}.dist-info/RECORD"]
    members, dropped = chunks_mod.assign_members(names, "flashinfer", None)
    assert members == {"core": [n for n in names if not n.endswith("/")]} and dropped == []
    with pytest.raises(chunks_mod.StageError, match="x-1.data/"):
        chunks_mod.assign_members([*names, "x-1.data/scripts/x"], "flashinfer", None)


@pytest.mark.parametrize("level", ["0", "9"])
def test_the_xz_preset_sets_the_archive_and_a_bad_one_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                 level: str) -> None:
    """KDA_STAGE_XZ_PRESET (the real-wheel test packs at 0): any preset gives the same members back; a value
    that is not 0..9 stops the pack with a usage error before anything is written."""
    chunks_mod = load(HELPER, "wheel_chunks")
    tree = tmp_path / "tree"
    (tree / "pkg").mkdir(parents=True)
    (tree / "pkg" / "a.txt").write_text("x" * 100000)
    monkeypatch.setenv("KDA_STAGE_XZ_PRESET", level)
    archive = tmp_path / f"a{level}.tar.xz"
    chunks_mod.write_archive(tree, archive)
    with tarfile.open(archive, mode="r:xz") as tar:
        assert tar.extractfile("pkg/a.txt").read() == b"x" * 100000
    monkeypatch.setenv("KDA_STAGE_XZ_PRESET", "fast")
    with pytest.raises(chunks_mod.StageError, match="an xz preset is 0..9"):
        chunks_mod.write_archive(tree, tmp_path / "bad.tar.xz")
    assert not (tmp_path / "bad.tar.xz").exists()


# ------------------------------------------------------------------------------------------------ staging

def test_help_and_bad_settings(tmp_path: Path) -> None:
    r = run(["bash", str(STAGE), "--help"], clean_env(tmp_path), REPO)
    assert r.returncode == 0 and "KDA_STAGE_CHUNK_MB=48" in r.stdout and ".gpu-stage-e1/" in r.stdout
    assert "set -euo" not in r.stdout
    assert run(["bash", str(STAGE), "--now"], clean_env(tmp_path), REPO).returncode == 2
    for bad in ({"KDA_STAGE_CHUNK_MB": "61"}, {"KDA_STAGE_CHUNK_MB": "0"}, {"KDA_STAGE_CHUNK_MB": "4.5"},
                {"KDA_STAGE_WHEELS": str(tmp_path / "none")}):
        r = run(["bash", str(STAGE)], clean_env(tmp_path, **bad), REPO)
        assert r.returncode == 2, (bad, r.stderr)


def test_stage_splits_the_whole_wheel_under_the_limit(tmp_path: Path) -> None:
    repo, wheel, _ = staged(tmp_path)
    names = folders(repo)
    assert names == [f".gpu-stage-e{k}" for k in range(1, 4)]  # 2 MB of random data in chunks of < 1 MiB
    archive, manifest = joined_archive(repo, names)
    assert manifest["part"] == "core" and manifest["dropped"] == [] and manifest["version"] == VERSION
    assert manifest["wheel_sha256"] == hashlib.sha256(wheel.read_bytes()).hexdigest()
    for name in names:
        folder = repo / name
        assert sum(p.stat().st_size for p in folder.rglob("*") if p.is_file()) <= 1024 * 1024
        assert json.loads((folder / "manifest.json").read_text()) == manifest
        assert (folder / "setup.sh").read_bytes() == SETUP_E.read_bytes()
        assert (folder / "chunks.py").read_bytes() == HELPER.read_bytes()
        assert (folder / "flashinfer_env.py").read_bytes() == ENV_HELPER.read_bytes()
        (chunk,) = [c for c in manifest["chunks"] if c["folder"] == name]
        assert hashlib.sha256((folder / chunk["file"]).read_bytes()).hexdigest() == chunk["sha256"]
    sizes = [c["bytes"] for c in manifest["chunks"]]
    assert max(sizes) - min(sizes) <= 1
    assert hashlib.sha256(archive).hexdigest() == manifest["archive_sha256"]
    assert_archive_is_the_wheel(archive, wheel, tmp_path)
    pinned = pins(GPU_TXT)
    assert sorted(p.name for p in (repo / names[0] / "deps").iterdir()) == [
        f"ninja-{pinned['ninja']}-py3-none-any.whl", f"nvidia_ml_py-{pinned['nvidia-ml-py']}-py3-none-any.whl"]
    assert not any((repo / n / "deps").exists() for n in names[1:])
    out = subprocess.run(["git", "status", "--porcelain", "--untracked-files=all"], cwd=repo, capture_output=True,
                         text=True, check=True).stdout
    assert ".gpu-stage" not in out  # kept out of git


def test_restaging_replaces_every_folder(tmp_path: Path) -> None:
    repo, _, env = staged(tmp_path)
    assert len(folders(repo)) == 3
    r = run(["bash", "scripts/gpu_stage_flashinfer.sh"], {**env, "KDA_STAGE_CHUNK_MB": "48"}, repo)
    assert r.returncode == 0, r.stderr
    assert folders(repo) == [".gpu-stage-e1"]


def test_a_chunk_limit_the_deps_do_not_fit_under_is_refused_and_keeps_the_stage(tmp_path: Path) -> None:
    repo, _, env = staged(tmp_path)
    before = {n: (repo / n / "manifest.json").read_text() for n in folders(repo)}
    # A ninja wheel of 1.5 MB of random bytes (same name, so it replaces the other): folder e1 goes over 1 MiB.
    build_wheel(tmp_path / "wheels", "ninja", pins(GPU_TXT)["ninja"], {"ninja/big.bin": os.urandom(1_500_000)})
    r = run(["bash", "scripts/gpu_stage_flashinfer.sh"], env, repo)
    assert r.returncode == 1 and "refusing" in r.stderr
    assert {n: (repo / n / "manifest.json").read_text() for n in folders(repo)} == before


# ------------------------------------------------------------------------------------------------ the box

def test_box_installs_when_every_chunk_is_there_in_any_order(tmp_path: Path) -> None:
    repo, wheel, env = staged(tmp_path)
    site = first_run(env)
    home = Path(env["HOME"])
    r = box(repo, ".gpu-stage-e3", env)
    assert r.returncode == 0 and "1 of 3 chunks" in r.stdout and "carry .gpu-stage-e1, .gpu-stage-e2" in r.stdout
    assert not (site / "flashinfer").exists()
    r = box(repo, ".gpu-stage-e1", env)  # brings the deps too
    assert r.returncode == 0 and "carry .gpu-stage-e2 next" in r.stdout
    assert (site / "pynvml.py").is_file() and (site / "bin" / "ninja").is_file()
    assert not (site / "flashinfer").exists()
    r = box(repo, ".gpu-stage-e2", env)
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"flashinfer {VERSION} imports from {site}/flashinfer/__init__.py" in r.stdout
    assert "flashinfer CUDA norm module: built" in r.stdout
    with zipfile.ZipFile(wheel) as z:
        for name in z.namelist():
            if not name.endswith(("/", "RECORD")):
                assert (site / name).read_bytes() == z.read(name), name
    dists = {d.metadata["Name"]: d.version for d in metadata.distributions(path=[str(site)])}
    assert dists["flashinfer-python"] == VERSION
    # The JIT settings: sourced through ~/kda-env.sh, cache under ~/kda-flashinfer-jit, where the build went.
    env_sh = (home / "kda-env.sh").read_text()
    assert env_sh.count("kda-flashinfer-env.sh") == 2  # the one line, if [ -f X ]; then . X; fi
    # Sourcing it stays true once the file is gone (gpu_box.sh sources it under set -e).
    (home / "kda-flashinfer-env.sh").rename(home / "gone.sh")
    assert run(["bash", "-euc", 'source "$HOME/kda-env.sh"; echo sourced'], env, repo).stdout == "sourced\n"
    (home / "gone.sh").rename(home / "kda-flashinfer-env.sh")
    fi_env = (home / "kda-flashinfer-env.sh").read_text()
    assert f"export FLASHINFER_WORKSPACE_BASE={home}/kda-flashinfer-jit" in fi_env
    assert (home / "kda-flashinfer-jit" / ".cache" / "flashinfer" / "norm.so").read_bytes() == b"built"
    # Again: nothing changes, the env line is not added twice.
    r = box(repo, ".gpu-stage-e2", env)
    assert r.returncode == 0 and "already installed" in r.stdout
    assert (home / "kda-env.sh").read_text() == env_sh


def test_box_rejects_a_corrupt_chunk_and_installs_nothing(tmp_path: Path) -> None:
    repo, _, env = staged(tmp_path)
    site = first_run(env)
    _, manifest = joined_archive(repo, folders(repo))
    chunk = repo / ".gpu-stage-e2" / manifest["chunks"][1]["file"]
    data = bytearray(chunk.read_bytes())
    data[len(data) // 3] ^= 0x10  # one bit
    chunk.write_bytes(bytes(data))
    for name in (".gpu-stage-e1", ".gpu-stage-e3"):
        assert box(repo, name, env).returncode == 0
    r = box(repo, ".gpu-stage-e2", env)
    assert r.returncode == 4 and "does not match its size and sha256" in r.stderr
    assert not (site / "flashinfer").exists()
    assert not list((Path(env["HOME"]) / "kda-flashinfer-stash").rglob("*.part02"))


def test_box_rejects_a_joined_archive_that_does_not_match(tmp_path: Path) -> None:
    repo, _, env = staged(tmp_path, chunk_mb="48")
    site = first_run(env)
    path = repo / ".gpu-stage-e1" / "manifest.json"
    manifest = json.loads(path.read_text())
    manifest["archive_sha256"] = "f" * 64
    path.write_text(json.dumps(manifest))
    r = box(repo, ".gpu-stage-e1", env)
    assert r.returncode == 4 and "joined archive does not match" in r.stderr
    assert not (site / "flashinfer").exists()


def test_box_rejects_a_manifest_whose_chunks_leave_their_folders(tmp_path: Path) -> None:
    repo, _, env = staged(tmp_path, chunk_mb="48")
    first_run(env)
    path = repo / ".gpu-stage-e1" / "manifest.json"
    manifest = json.loads(path.read_text())
    manifest["chunks"][0]["folder"] = ".gpu-stage-d1"  # an e stage's chunk claimed by another stage's folder
    path.write_text(json.dumps(manifest))
    r = box(repo, ".gpu-stage-e1", env)
    assert r.returncode == 2 and "malformed" in r.stderr


def test_box_without_the_first_run_says_so(tmp_path: Path) -> None:
    repo, _, env = staged(tmp_path, chunk_mb="48")
    r = box(repo, ".gpu-stage-e1", env)
    assert r.returncode == 3 and "no first run" in r.stderr


@pytest.mark.parametrize("script", ["gpu_stage_flashinfer.sh", "gpu_stage/setup-e.sh", "gpu_stage/flashinfer_env.py"])
def test_scripts_are_executable_and_strict(script: str) -> None:
    path = REPO / "scripts" / script
    assert os.access(path, os.X_OK)
    assert "set -euo pipefail" in path.read_text() or path.suffix == ".py"


def test_gpu_box_runs_every_carried_flashinfer_folder_and_rereads_the_env() -> None:
    text = (REPO / "scripts" / "gpu_box.sh").read_text()
    loop = text.index(".gpu-stage-e[0-9]*/setup.sh")
    assert "source ~/kda-env.sh" in text[loop:text.index("status=0")]
    assert "/.gpu-stage-e[0-9]*/" in (REPO / ".gitignore").read_text()


# ------------------------------------------------------------------------------------------------ the JIT's environment

def fake_cuda(root: Path, headers: tuple[str, ...] = (), libs: tuple[str, ...] = ()) -> Path:
    home = root / "cuda"
    (home / "bin").mkdir(parents=True)
    (home / "bin" / "nvcc").write_text("#!/bin/sh\n")
    (home / "include").mkdir()
    (home / "lib64" / "stubs").mkdir(parents=True)
    for h in headers:
        (home / "include" / h).write_text("")
    for lib in libs:
        (home / "lib64" / lib).write_text("")
    return home


def test_env_adds_nothing_when_the_toolkit_is_complete(tmp_path: Path) -> None:
    home = fake_cuda(tmp_path, headers=fenv.HEADERS, libs=("libcudart.so",))
    (home / "lib64" / "stubs" / "libcuda.so").write_text("")
    lines, report = fenv.env_lines(tmp_path / "jit", home, tmp_path / "site", {"PATH": str(home / "bin")}, [], ())
    assert lines[1:] == [f"export FLASHINFER_WORKSPACE_BASE={tmp_path / 'jit'}"]
    assert not any("MISSING" in ln for ln in report if not ln.startswith("ninja"))


def test_env_takes_missing_headers_and_libraries_from_torchs_cuda_wheels(tmp_path: Path) -> None:
    home = fake_cuda(tmp_path)  # nvcc only, like a toolkit assembled from the compiler wheels
    sp = tmp_path / "site-packages"
    inc, lib = sp / "nvidia" / "cu13" / "include", sp / "nvidia" / "cu13" / "lib"
    inc.mkdir(parents=True)
    lib.mkdir()
    for h in fenv.HEADERS:
        (inc / h).write_text("")
    (lib / "libcudart.so.13").write_text("")  # versioned only, as the runtime wheel ships it
    driver = tmp_path / "driver"
    driver.mkdir()
    (driver / "libcuda.so.1").write_text("")
    site = tmp_path / "site"
    (site / "bin").mkdir(parents=True)
    (site / "bin" / "ninja").write_text("")
    jit = tmp_path / "jit"
    lines, report = fenv.env_lines(jit, home, site, {"PATH": str(home / "bin")}, [str(sp)], (str(driver),))
    assert f"export FLASHINFER_EXTRA_CUDAFLAGS='-isystem {inc}'" in lines
    assert f"export FLASHINFER_EXTRA_LDFLAGS=-L{jit / 'lib'}" in lines
    assert os.readlink(jit / "lib" / "libcudart.so") == str(lib / "libcudart.so.13")
    assert os.readlink(jit / "lib" / "libcuda.so") == str(driver / "libcuda.so.1")
    assert f'export PATH="{site / "bin"}:$PATH"' in lines
    assert not any("MISSING" in ln for ln in report)


def test_env_names_what_it_cannot_find(tmp_path: Path) -> None:
    home = fake_cuda(tmp_path, headers=("cublasLt.h",))
    lines, report = fenv.env_lines(tmp_path / "jit", home, tmp_path / "site", {"PATH": str(home / "bin")}, [], ())
    text = "\n".join(report)
    assert "curand_kernel.h: MISSING" in text and "libcudart.so: MISSING" in text and "libcuda.so: MISSING" in text
    assert "cublasLt.h: MISSING" not in text and "ninja: MISSING" in text
    lines, report = fenv.env_lines(tmp_path / "jit", None, tmp_path / "site", {"PATH": ""}, [], ())
    assert any(ln.startswith("nvcc: MISSING") for ln in report)


def test_env_finds_cuda_home_as_flashinfer_does(tmp_path: Path) -> None:
    home = fake_cuda(tmp_path)
    assert fenv.cuda_home({"CUDA_HOME": "/opt/x", "PATH": str(home / "bin")}) == Path("/opt/x")
    (home / "bin" / "nvcc").chmod(0o755)
    assert fenv.cuda_home({"PATH": str(home / "bin")}) == home


# ------------------------------------------------------------------------------------------------ the real wheel

def _real_wheel() -> Path | None:
    cache = Path(os.environ.get("KDA_STAGE_CACHE", Path.home() / ".cache" / "kda-gpu-stage"))
    hits = sorted((cache / f"flashinfer-{VERSION}").glob(f"flashinfer_python-{VERSION}-*.whl"))
    return hits[0] if hits else None


@pytest.mark.slow
def test_the_real_wheel_stages_and_imports_on_this_machine(tmp_path: Path) -> None:
    """The pinned flashinfer-python wheel (from the stage cache, else the package index), staged at the default
    limit for this interpreter, installed by setup-e.sh on a fake box, then `import flashinfer, flashinfer.norm`
    with this CPU env's torch. apache-tvm-ffi, which .gpu-stage-a brings on the box, is downloaded here."""
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    py = f"{sys.version_info.major}.{sys.version_info.minor}"
    download = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:", "-d", str(wheels)]
    real = _real_wheel()
    if real:
        shutil.copy2(real, wheels)
        cached = real.parent.parent / f"flashinfer-{VERSION}-core.tar.xz"
        for path in (cached, cached.with_name(cached.name + ".key")):  # the xz repack takes minutes on 2 cores
            if path.is_file():
                (tmp_path / "cache").mkdir(exist_ok=True)
                shutil.copy2(path, tmp_path / "cache")
    reqs = [f"nvidia-ml-py=={pins(GPU_TXT)['nvidia-ml-py']}", f"ninja=={pins(GPU_TXT)['ninja']}",
            f"apache-tvm-ffi=={pins(GPU_TXT)['apache-tvm-ffi']}"] + ([] if real else [f"flashinfer-python=={VERSION}"])
    got = subprocess.run(download + reqs, capture_output=True, text=True, timeout=600)
    if got.returncode != 0:  # an offline machine: the fast tests above cover the scripts with built wheels
        pytest.skip(f"needs the package index for {reqs}: {got.stderr.strip()[-300:]}")
    (wheel,) = wheels.glob(f"flashinfer_python-{VERSION}-*.whl")
    repo = checkout(tmp_path)
    # xz -0: the archive is larger (still one folder under the limit) and takes seconds, not a minute, to pack
    env = clean_env(tmp_path, KDA_STAGE_WHEELS=str(wheels), KDA_STAGE_PYTHON=py, KDA_STAGE_XZ_PRESET="0")
    r = subprocess.run(["bash", "scripts/gpu_stage_flashinfer.sh"], env=env, cwd=repo, capture_output=True,
                       text=True, timeout=900)
    assert r.returncode == 0, r.stdout + r.stderr
    names = folders(repo)
    assert names == [".gpu-stage-e1"]  # one upload: about 17 MB at the default preset, 37 MB at xz -0
    folder_bytes = sum(p.stat().st_size for p in (repo / names[0]).rglob("*") if p.is_file())
    assert folder_bytes <= 48 * 1024 * 1024
    archive, manifest = joined_archive(repo, names)
    assert hashlib.sha256(archive).hexdigest() == manifest["archive_sha256"]
    assert_archive_is_the_wheel(archive, wheel, tmp_path)
    site = first_run(env)
    (tvm,) = wheels.glob("apache_tvm_ffi-*.whl")  # what .gpu-stage-a installs on the box
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--target", str(site),
                    str(tvm)], check=True, env=env, timeout=300)
    r = subprocess.run(["bash", str(repo / names[0] / "setup.sh")], env=env, cwd=repo, capture_output=True,
                       text=True, timeout=900)
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"flashinfer {VERSION} imports from {site}/flashinfer/__init__.py" in r.stdout
    # Without a GPU the CUDA norm module cannot be built (no libcudart here): the setup says so and goes on.
    assert "flashinfer CUDA norm module:" in r.stdout + r.stderr
    probe = ("import flashinfer, flashinfer.norm as n, flashinfer.rope as r; "
             "print(flashinfer.__file__, n.rmsnorm.__name__, n.fused_dit_residual_layernorm_scale_shift.__name__)")
    r = subprocess.run(["bash", "-c", f'source "$HOME/kda-env.sh" && python3 -c "{probe}"'], env=env, cwd=repo,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == [f"{site}/flashinfer/__init__.py", "rmsnorm", "fused_dit_residual_layernorm_scale_shift"]


# ------------------------------------------------------------------------------------------------ on the H200

def _flashinfer_on_cuda() -> str:
    try:
        import torch
    except ImportError:
        return "needs torch"
    if not torch.cuda.is_available():
        return "needs a CUDA GPU"
    try:
        import flashinfer  # noqa: F401
    except Exception as e:  # noqa: BLE001 - any import failure: not staged on this box
        return f"needs FlashInfer (carry the .gpu-stage-e folders: docs/gpu-box.md): {e}"[:200]
    return ""


@pytest.mark.gpu
@pytest.mark.skipif(bool(_flashinfer_on_cuda()), reason=_flashinfer_on_cuda() or "ready")
def test_staged_flashinfer_norms_match_torch_on_the_gpu() -> None:
    import flashinfer
    import torch
    from flashinfer import norm

    assert flashinfer.__version__ == VERSION
    g = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(257, 3072, device="cuda", dtype=torch.bfloat16, generator=g)
    w = 1 + 0.1 * torch.randn(3072, device="cuda", dtype=torch.bfloat16, generator=g)
    f = x.float()
    ref = (f * torch.rsqrt(f.pow(2).mean(-1, keepdim=True) + 1e-6) * w.float()).bfloat16()
    torch.testing.assert_close(norm.rmsnorm(x, w, 1e-6), ref, atol=2e-2, rtol=2e-2)
    # The CUDA JIT norm module (nvcc): the fused DiT LayerNorms are built from it.
    assert norm.get_norm_module() is not None
