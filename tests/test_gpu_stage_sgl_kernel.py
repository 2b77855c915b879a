"""Staging SGLang's sgl_kernel for the offline GPU box in chunks (scripts/gpu_stage_sgl_kernel.sh, its helper
scripts/gpu_stage/wheel_chunks.py and the box-side scripts/gpu_stage/setup-d.sh).

The round trips run the real scripts on a real wheel built here with the official wheel's name, layout and tags
(`sglang_kernel-<pinned version>-cp310-abi3-manylinux2014_x86_64.whl`: sgl_kernel with sm90/ and sm100/ builds of
common_ops, flash_ops, flashmla_ops, spatial_ops, the vendored triton_kernels), through a local wheel directory:
real pip downloads in hash-checking mode, the real xz repack and split, then every folder's setup.sh with HOME in
a temporary directory, in the order a lead might carry them. No network. The last test is the H200 check.
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
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.test_gpu_stage import clean_env, run

STAGE = REPO / "scripts" / "gpu_stage_sgl_kernel.sh"
HELPER = REPO / "scripts" / "gpu_stage" / "wheel_chunks.py"
SETUP_D = REPO / "scripts" / "gpu_stage" / "setup-d.sh"
PIN = REPO / "requirements" / "sgl-kernel.txt"


def load_helper():
    spec = importlib.util.spec_from_file_location("wheel_chunks", HELPER)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


chunks_mod = load_helper()


def pinned_version() -> str:
    m = re.search(r"^sglang-kernel==(\S+) --hash=sha256:[0-9a-f]{64}$", PIN.read_text(), re.M)
    assert m, "requirements/sgl-kernel.txt has no hashed sglang-kernel pin"
    return m.group(1)


VERSION = pinned_version()
INIT = f"""__version__ = {VERSION!r}
import importlib.util, pathlib
_so = pathlib.Path(__file__).parent / "sm90" / "common_ops.abi3.so"
common_ops = type("common_ops", (), {{"__file__": str(_so)}})
if not _so.is_file():
    raise ImportError(f"no {{_so}}")
""".encode()


def build_kernel_wheel(dest: Path, sizes: dict[str, int]) -> Path:
    """The official wheel's layout with incompressible (random) shared objects of the given sizes."""
    info = f"sglang_kernel-{VERSION}.dist-info"
    files = {"sgl_kernel/__init__.py": INIT, "sgl_kernel/elementwise.py": b"def rmsnorm():\n    pass\n",
             "sgl_kernel/testing/__init__.py": b"", "triton_kernels/__init__.py": b"",
             f"{info}/METADATA": f"Metadata-Version: 2.1\nName: sglang-kernel\nVersion: {VERSION}\n".encode(),
             f"{info}/WHEEL": b"Wheel-Version: 1.0\nRoot-Is-Purelib: false\nTag: cp310-abi3-manylinux2014_x86_64\n"}
    for name, size in sizes.items():
        files[name] = os.urandom(size)
    record = [chunks_mod.record_line(n, d) for n, d in files.items()] + [f"{info}/RECORD,,"]
    path = dest / f"sglang_kernel-{VERSION}-cp310-abi3-manylinux2014_x86_64.whl"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in files.items():
            z.writestr(zipfile.ZipInfo(name), data)
        z.writestr(f"{info}/RECORD", "\n".join(record) + "\n")
    return path


SIZES = {"sgl_kernel/sm90/common_ops.abi3.so": 300_000, "sgl_kernel/sm100/common_ops.abi3.so": 200_000,
         "sgl_kernel/spatial_ops.abi3.so": 20_000, "sgl_kernel/flash_ops.abi3.so": 2_000_000,
         "sgl_kernel/flashmla_ops.abi3.so": 100_000, "sgl_kernel/infllm_ops.cpython-310-x86_64-linux-gnu.so": 50_000}
CORE_SO = {"sgl_kernel/sm90/common_ops.abi3.so", "sgl_kernel/spatial_ops.abi3.so"}
DROPPED = {"sgl_kernel/sm100/common_ops.abi3.so", "sgl_kernel/flashmla_ops.abi3.so",
           "sgl_kernel/infllm_ops.cpython-310-x86_64-linux-gnu.so", "triton_kernels/__init__.py"}


def checkout(tmp: Path, wheel: Path) -> Path:
    """A git checkout with the staging scripts, and the pin rewritten to the built wheel's sha256."""
    repo = tmp / "repo"
    for path in (STAGE, STAGE.parent / "gpu_stage" / "lib.sh", HELPER, SETUP_D, PIN):
        rel = path.relative_to(REPO)
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, repo / rel)
    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
    pin = repo / "requirements" / "sgl-kernel.txt"
    pin.write_text(re.sub(r"--hash=sha256:[0-9a-f]{64}", f"--hash=sha256:{digest}", pin.read_text()))
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    return repo


def staged(tmp: Path, chunk_mb: str = "1", **env_extra: str) -> tuple[Path, Path, dict[str, str]]:
    wheels = tmp / "wheels"
    wheels.mkdir(exist_ok=True)
    wheel = build_kernel_wheel(wheels, SIZES)
    repo = checkout(tmp, wheel)
    env = clean_env(tmp, KDA_STAGE_WHEELS=str(wheels), KDA_STAGE_CHUNK_MB=chunk_mb, **env_extra)
    r = run(["bash", "scripts/gpu_stage_sgl_kernel.sh"], env, repo)
    assert r.returncode == 0, r.stdout + r.stderr
    return repo, wheel, env


def first_run(env: dict[str, str]) -> Path:
    """What .gpu-stage-a/setup.sh leaves on the box: ~/kda-site and ~/kda-env.sh putting it on PYTHONPATH."""
    home = Path(env["HOME"])
    (home / "kda-site").mkdir()
    (home / "kda-env.sh").write_text('export PYTHONPATH="$HOME/kda-site${PYTHONPATH:+:$PYTHONPATH}"\n')
    return home / "kda-site"


def box(repo: Path, folder: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return run(["bash", str(repo / folder / "setup.sh")], env, repo)


def folders(repo: Path) -> list[str]:
    return sorted((p.name for p in repo.glob(".gpu-stage-d*")), key=lambda n: int(n.removeprefix(".gpu-stage-d")))


# ------------------------------------------------------------------------------------------------ the split

@pytest.mark.parametrize(("total", "limit"), [(1, 1), (10, 3), (12, 3), (1000, 1000), (1001, 1000), (0, 5),
                                              (300_000_000, 58_458_112)])
def test_chunks_are_the_fewest_possible_and_even(total: int, limit: int) -> None:
    sizes = chunks_mod.chunk_sizes(total, limit)
    assert sum(sizes) == total and all(s <= limit for s in sizes)
    assert len(sizes) == max(1, -(-total // limit))  # no fewer chunks can hold it
    assert max(sizes) - min(sizes) <= 1


def test_a_non_positive_chunk_limit_is_refused() -> None:
    with pytest.raises(chunks_mod.StageError):
        chunks_mod.chunk_sizes(10, 0)


def test_members_go_to_the_first_matching_part_and_the_rest_is_dropped() -> None:
    names = ["sgl_kernel/__init__.py", "sgl_kernel/sm90/common_ops.abi3.so", "sgl_kernel/sm100/common_ops.abi3.so",
             "sgl_kernel/flash_ops.abi3.so", "triton_kernels/x.py", "sglang_kernel-1.dist-info/RECORD", "x/"]
    parts = chunks_mod.parse_keep(["core=sgl_kernel/sm90/*", "fa3=sgl_kernel/flash_ops.*", "fa3=sgl_kernel/sm90/*"])
    members, dropped = chunks_mod.assign_members(names, "sgl_kernel", parts)
    assert members == {"core": ["sgl_kernel/__init__.py", "sgl_kernel/sm90/common_ops.abi3.so",
                                "sglang_kernel-1.dist-info/RECORD"],
                       "fa3": ["sgl_kernel/flash_ops.abi3.so"]}
    assert dropped == ["sgl_kernel/sm100/common_ops.abi3.so", "triton_kernels/x.py"]
    with pytest.raises(chunks_mod.StageError, match="matches nothing"):
        chunks_mod.assign_members(names, "sgl_kernel", chunks_mod.parse_keep(["core=*.so", "fa3=nothing.so"]))
    with pytest.raises(chunks_mod.StageError, match="PART=PATTERN"):
        chunks_mod.parse_keep(["sgl_kernel/flash_ops.*"])


# ------------------------------------------------------------------------------------------------ staging

def test_help_and_bad_settings(tmp_path: Path) -> None:
    r = run(["bash", str(STAGE), "--help"], clean_env(tmp_path), REPO)
    assert r.returncode == 0 and "KDA_SGL_KERNEL_FA3=1" in r.stdout and ".gpu-stage-d1/" in r.stdout
    assert "set -euo" not in r.stdout
    assert run(["bash", str(STAGE), "--now"], clean_env(tmp_path), REPO).returncode == 2
    for bad in ({"KDA_STAGE_CHUNK_MB": "61"}, {"KDA_STAGE_CHUNK_MB": "0"}, {"KDA_STAGE_CHUNK_MB": "5.5"},
                {"KDA_SGL_KERNEL_FA3": "yes"}, {"KDA_STAGE_WHEELS": str(tmp_path / "none")}):
        r = run(["bash", str(STAGE)], clean_env(tmp_path, **bad), REPO)
        assert r.returncode == 2, (bad, r.stderr)


def test_the_pin_is_a_hashed_official_release() -> None:
    # The script reads the same line (a version and the wheel's sha256; pip checks the hash on download).
    assert re.fullmatch(r"\d+\.\d+\.\d+(\.post\d+)?", VERSION)
    assert VERSION == "0.4.5"  # the last sglang-kernel an SGLang release pins next to torch==2.11.0 (see the file)


def test_stage_trims_to_sm90_and_splits_under_the_limit(tmp_path: Path) -> None:
    repo, wheel, _ = staged(tmp_path)
    names = folders(repo)
    assert names[0] == ".gpu-stage-d1" and len(names) == 4  # core in one chunk, flash_ops (2 MB) in three of at most 768 KiB
    manifests = [json.loads((repo / n / "manifest.json").read_text()) for n in names]
    assert [m["part"] for m in manifests] == ["core", "fa3", "fa3", "fa3"]
    assert manifests[1] == manifests[2] == manifests[3] and manifests[1]["base_sha256"] == manifests[0][
        "archive_sha256"]
    for name, manifest in zip(names, manifests, strict=True):
        folder = repo / name
        assert sum(p.stat().st_size for p in folder.iterdir()) <= 1024 * 1024
        assert (folder / "setup.sh").read_bytes() == SETUP_D.read_bytes()
        assert (folder / "chunks.py").read_bytes() == HELPER.read_bytes()
        (chunk,) = [c for c in manifest["chunks"] if c["folder"] == name]
        assert hashlib.sha256((folder / chunk["file"]).read_bytes()).hexdigest() == chunk["sha256"]
        assert set(manifest["dropped"]) == DROPPED
        assert manifest["wheel_sha256"] == hashlib.sha256(wheel.read_bytes()).hexdigest()
    sizes = [c["bytes"] for c in manifests[1]["chunks"]]
    assert max(sizes) - min(sizes) <= 1
    # The core archive: the Python package, the kept shared objects, the dist-info (RECORD truthful).
    core = b"".join((repo / c["folder"] / c["file"]).read_bytes() for c in manifests[0]["chunks"])
    assert hashlib.sha256(core).hexdigest() == manifests[0]["archive_sha256"]
    (tmp_path / "core.tar.xz").write_bytes(core)
    with tarfile.open(tmp_path / "core.tar.xz") as tar:
        members = {m.name for m in tar.getmembers() if m.isfile()}
        record = tar.extractfile(f"sglang_kernel-{VERSION}.dist-info/RECORD").read().decode()  # type: ignore
    with zipfile.ZipFile(wheel) as z:
        kept = {n for n in z.namelist() if not n.endswith("/RECORD") and n not in DROPPED
                and n != "sgl_kernel/flash_ops.abi3.so"}
    info = f"sglang_kernel-{VERSION}.dist-info"
    assert members == kept | {f"{info}/RECORD", f"{info}/KDA-TRIMMED"}
    assert {ln.split(",")[0] for ln in record.splitlines()} == members
    assert git_status(repo) == ""  # the folders are kept out of git


def git_status(repo: Path) -> str:
    out = subprocess.run(["git", "status", "--porcelain", "--untracked-files=all"], cwd=repo,
                         capture_output=True, text=True, check=True).stdout
    return "".join(ln + "\n" for ln in out.splitlines() if ".gpu-stage" in ln)


def test_a_wheel_that_does_not_match_the_pinned_hash_is_refused(tmp_path: Path) -> None:
    repo, _, env = staged(tmp_path, chunk_mb="56")
    before = {n: (repo / n / "manifest.json").read_text() for n in folders(repo)}
    build_kernel_wheel(tmp_path / "wheels", SIZES)  # same name, other bytes
    shutil.rmtree(tmp_path / "cache")
    r = run(["bash", "scripts/gpu_stage_sgl_kernel.sh"], env, repo)
    assert r.returncode != 0 and "HASH" in (r.stdout + r.stderr).upper()
    assert {n: (repo / n / "manifest.json").read_text() for n in folders(repo)} == before


def test_restaging_without_fa3_leaves_one_folder(tmp_path: Path) -> None:
    repo, _, env = staged(tmp_path)
    assert len(folders(repo)) == 4
    r = run(["bash", "scripts/gpu_stage_sgl_kernel.sh"], {**env, "KDA_SGL_KERNEL_FA3": "0"}, repo)
    assert r.returncode == 0, r.stderr
    assert folders(repo) == [".gpu-stage-d1"]
    manifest = json.loads((repo / ".gpu-stage-d1" / "manifest.json").read_text())
    assert "sgl_kernel/flash_ops.abi3.so" in manifest["dropped"]


# ------------------------------------------------------------------------------------------------ the box

def installed_files(site: Path) -> set[str]:
    return {str(p.relative_to(site)) for p in site.rglob("*") if p.is_file()}


def test_box_installs_each_part_when_its_chunks_are_all_in_any_order(tmp_path: Path) -> None:
    repo, wheel, env = staged(tmp_path)
    site = first_run(env)
    # flash_ops' chunks first: each call says what is still missing, nothing is installed yet.
    r = box(repo, ".gpu-stage-d3", env)
    assert r.returncode == 0 and "1 of 3 chunks" in r.stdout and "carry .gpu-stage-d2, .gpu-stage-d4" in r.stdout
    assert len(r.stdout.strip().splitlines()) == 1 and not installed_files(site)
    r = box(repo, ".gpu-stage-d2", env)
    assert r.returncode == 0 and "carry .gpu-stage-d4 next" in r.stdout
    r = box(repo, ".gpu-stage-d4", env)
    assert r.returncode == 0 and "all 3 chunks are on this box" in r.stdout and ".gpu-stage-d1" in r.stdout
    assert not installed_files(site)
    # The core part installs, then the waiting fa3 part over it, then the import check runs.
    r = box(repo, ".gpu-stage-d1", env)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "(core): installed" in r.stdout and "(fa3): installed" in r.stdout
    assert f"sgl_kernel {VERSION} imports with" in r.stdout and "sm90/common_ops.abi3.so" in r.stdout
    with zipfile.ZipFile(wheel) as z:
        for name in CORE_SO | {"sgl_kernel/flash_ops.abi3.so", "sgl_kernel/__init__.py"}:
            assert (site / name).read_bytes() == z.read(name), name
    files = installed_files(site)
    assert not files & DROPPED and not any(f.startswith("triton_kernels") for f in files)
    record = (site / f"sglang_kernel-{VERSION}.dist-info" / "RECORD").read_text()
    assert {ln.split(",")[0] for ln in record.splitlines()} == {f for f in files if not f.startswith(
        "sgl_kernel/.kda-staged-")}
    # Carrying a folder again changes nothing.
    r = box(repo, ".gpu-stage-d2", env)
    assert r.returncode == 0 and "already installed" in r.stdout


def test_box_with_missing_chunks_installs_nothing_and_says_which(tmp_path: Path) -> None:
    repo, _, env = staged(tmp_path)
    site = first_run(env)
    assert box(repo, ".gpu-stage-d1", env).returncode == 0
    assert (site / "sgl_kernel" / "sm90" / "common_ops.abi3.so").is_file()
    r = box(repo, ".gpu-stage-d4", env)
    assert r.returncode == 0 and "carry .gpu-stage-d2, .gpu-stage-d3 next" in r.stdout
    assert not (site / "sgl_kernel" / "flash_ops.abi3.so").exists()


def test_box_rejects_a_corrupt_chunk(tmp_path: Path) -> None:
    repo, _, env = staged(tmp_path)
    site = first_run(env)
    manifest = json.loads((repo / ".gpu-stage-d1" / "manifest.json").read_text())
    chunk = repo / ".gpu-stage-d1" / manifest["chunks"][0]["file"]
    data = bytearray(chunk.read_bytes())
    data[len(data) // 2] ^= 0x01  # one bit
    chunk.write_bytes(bytes(data))
    r = box(repo, ".gpu-stage-d1", env)
    assert r.returncode == 4 and "does not match its size and sha256" in r.stderr
    assert not installed_files(site)
    stash = Path(env["HOME"]) / "kda-sgl-kernel-stash"
    assert not list(stash.rglob("*.part*"))  # a bad chunk is never stashed


def test_box_refetches_a_stashed_chunk_that_went_bad(tmp_path: Path) -> None:
    repo, _, env = staged(tmp_path)
    site = first_run(env)
    for name in (".gpu-stage-d2", ".gpu-stage-d3"):
        assert box(repo, name, env).returncode == 0
    (stashed,) = [p for p in (Path(env["HOME"]) / "kda-sgl-kernel-stash").rglob("*.part01")]
    stashed.write_bytes(stashed.read_bytes()[:-1])  # truncated on the box between calls
    r = box(repo, ".gpu-stage-d4", env)
    assert r.returncode == 0 and "carry .gpu-stage-d2 next" in r.stdout
    assert box(repo, ".gpu-stage-d1", env).returncode == 0
    assert not (site / "sgl_kernel" / "flash_ops.abi3.so").exists()  # fa3 still waits for a good d2
    r = box(repo, ".gpu-stage-d2", env)
    assert r.returncode == 0 and "(fa3): installed" in r.stdout
    assert (site / "sgl_kernel" / "flash_ops.abi3.so").is_file()


def test_box_rejects_a_joined_archive_that_does_not_match(tmp_path: Path) -> None:
    repo, _, env = staged(tmp_path, KDA_SGL_KERNEL_FA3="0")
    site = first_run(env)
    path = repo / ".gpu-stage-d1" / "manifest.json"
    manifest = json.loads(path.read_text())
    manifest["archive_sha256"] = "0" * 64  # chunks fine, the whole wrong (another stage's manifest)
    path.write_text(json.dumps(manifest))
    r = box(repo, ".gpu-stage-d1", env)
    assert r.returncode == 4 and "joined archive does not match" in r.stderr
    assert not installed_files(site)


def test_box_rejects_a_malformed_manifest_and_a_chunk_name_outside_its_folder(tmp_path: Path) -> None:
    repo, _, env = staged(tmp_path, KDA_SGL_KERNEL_FA3="0")
    first_run(env)
    path = repo / ".gpu-stage-d1" / "manifest.json"
    manifest = json.loads(path.read_text())
    manifest["chunks"][0]["file"] = "../../evil.part01"
    path.write_text(json.dumps(manifest))
    r = box(repo, ".gpu-stage-d1", env)
    assert r.returncode == 2 and "malformed" in r.stderr
    path.write_text("{")
    r = box(repo, ".gpu-stage-d1", env)
    assert r.returncode == 2 and "malformed" in r.stderr


def test_box_without_the_first_run_says_so(tmp_path: Path) -> None:
    repo, _, env = staged(tmp_path, KDA_SGL_KERNEL_FA3="0")
    r = box(repo, ".gpu-stage-d1", env)
    assert r.returncode == 3 and "no first run" in r.stderr


def test_a_new_stage_replaces_the_installed_package_whole(tmp_path: Path) -> None:
    repo, _, env = staged(tmp_path)
    site = first_run(env)
    for name in folders(repo):
        assert box(repo, name, env).returncode == 0
    assert (site / "sgl_kernel" / "flash_ops.abi3.so").is_file()
    r = run(["bash", "scripts/gpu_stage_sgl_kernel.sh"], {**env, "KDA_SGL_KERNEL_FA3": "0"}, repo)
    assert r.returncode == 0
    r = box(repo, ".gpu-stage-d1", env)
    assert r.returncode == 0 and "(core): installed" in r.stdout
    assert not (site / "sgl_kernel" / "flash_ops.abi3.so").exists()  # no stale add-on of the old stage


@pytest.mark.parametrize("script", ["gpu_stage_sgl_kernel.sh", "gpu_stage/setup-d.sh", "gpu_stage/wheel_chunks.py"])
def test_scripts_are_executable_and_strict(script: str) -> None:
    path = REPO / "scripts" / script
    assert os.access(path, os.X_OK)
    assert "set -euo pipefail" in path.read_text() or path.suffix == ".py"


def test_gpu_box_runs_every_carried_chunk_folder() -> None:
    text = (REPO / "scripts" / "gpu_box.sh").read_text()
    assert ".gpu-stage-d[0-9]*/setup.sh" in text


# ------------------------------------------------------------------------------------------------ on the H200

def _sgl_kernel_on_cuda() -> str:
    try:
        import torch
    except ImportError:
        return "needs torch"
    if not torch.cuda.is_available():
        return "needs a CUDA GPU"
    if importlib.util.find_spec("sgl_kernel") is None:
        return "needs sgl_kernel (carry the .gpu-stage-d folders: docs/gpu-box.md)"
    return ""


@pytest.mark.gpu
@pytest.mark.skipif(bool(_sgl_kernel_on_cuda()), reason=_sgl_kernel_on_cuda() or "ready")
# sgl_kernel's norms dispatch fp16/bf16 only ("failed to dispatch data type Float" on the H200, 2026-11-25);
# SGLang's diffusion layers call them with half-precision activations.
@pytest.mark.parametrize("dtype_name", ["float16", "bfloat16"])
def test_staged_sgl_kernel_matches_torch_on_the_gpu(dtype_name: str) -> None:
    import sgl_kernel
    import torch
    import torch.nn.functional as F

    dtype = getattr(torch, dtype_name)
    tol = {"float16": 2e-3, "bfloat16": 2e-2}[dtype_name]
    g = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(257, 3072, device="cuda", dtype=dtype, generator=g)
    w = 1 + 0.1 * torch.randn(3072, device="cuda", dtype=dtype, generator=g)

    def ref_rms(t: torch.Tensor) -> torch.Tensor:
        f = t.float()
        return (f * torch.rsqrt(f.pow(2).mean(-1, keepdim=True) + 1e-6) * w.float()).to(dtype)

    torch.testing.assert_close(sgl_kernel.rmsnorm(x, w, 1e-6), ref_rms(x), atol=tol, rtol=tol)
    r = torch.randn_like(x)
    inp, res = x.clone(), r.clone()
    sgl_kernel.fused_add_rmsnorm(inp, res, w, 1e-6)
    torch.testing.assert_close(res, x + r, atol=tol, rtol=tol)
    torch.testing.assert_close(inp, ref_rms((x.float() + r.float()).to(dtype)), atol=tol, rtol=tol)
    y = torch.randn(257, 2 * 1536, device="cuda", dtype=dtype, generator=g)
    ref = (F.silu(y[:, :1536].float()) * y[:, 1536:].float()).to(dtype)
    torch.testing.assert_close(sgl_kernel.silu_and_mul(y), ref, atol=tol, rtol=tol)
    assert "sm90" in Path(sgl_kernel.common_ops.__file__).parts or torch.cuda.get_device_capability()[0] != 9
    assert sys.modules["sgl_kernel"].__version__ == VERSION


@pytest.mark.gpu
@pytest.mark.skipif(bool(_sgl_kernel_on_cuda()), reason=_sgl_kernel_on_cuda() or "ready")
def test_staged_flash_attention_3_matches_sdpa_on_the_gpu() -> None:
    import torch
    import torch.nn.functional as F

    if importlib.util.find_spec("sgl_kernel.flash_ops") is None:
        pytest.skip("flash_ops not staged (KDA_SGL_KERNEL_FA3=0, or the fa3 folders not carried)")
    from sgl_kernel.flash_attn import flash_attn_varlen_func

    g = torch.Generator(device="cuda").manual_seed(0)
    seqs, heads, dim = [1024, 77], 24, 128  # two sequences of a varlen batch, as SGLang's diffusion backend packs
    q, k, v = (torch.randn(sum(seqs), heads, dim, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(3))
    cu = torch.tensor([0, seqs[0], sum(seqs)], device="cuda", dtype=torch.int32)
    out = flash_attn_varlen_func(q, k, v, cu, cu, max(seqs), max(seqs), causal=False)
    out = out[0] if isinstance(out, tuple) else out
    for lo, hi in ((0, seqs[0]), (seqs[0], sum(seqs))):
        ref = F.scaled_dot_product_attention(*(t[lo:hi].transpose(0, 1).float() for t in (q, k, v)))
        torch.testing.assert_close(out[lo:hi].float(), ref.transpose(0, 1), atol=2e-2, rtol=2e-2)
