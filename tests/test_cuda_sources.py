"""Every CUDA source (``*.cu``) in a task's ``src/`` (its candidate) and ``dev/`` (variants its dev scripts build
on the GPU box) compiles with nvcc for the task's architecture.

``kernels/h200_*`` sources build for ``sm_90a``, ``kernels/b200_*`` for ``sm_100a``, with the command the task
cards give: ``nvcc -std=c++17 -O3 -gencode=arch=compute_XXa,code=sm_XXa -c file.cu`` (plus include paths: the
file's folder, the task's ``src/`` and torch's headers). Two self-tests prove the check itself: a small valid
kernel compiles for both architectures and a deliberately broken one is rejected.

A source that carries the line ``// kda: no-spills`` promises a spill-free build: the same compile runs with
``-Xptxas -v`` and every kernel in it must report 0 bytes of spill stores and loads.

nvcc is part of the CPU test environment: without it these tests fail, unless ``KDA_ALLOW_NO_NVCC=1`` (then
they skip, and say why).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # nvcc compiles / whole-repo launches: started first (conftest.py)

REPO = Path(__file__).resolve().parents[1]
KERNELS = REPO / "kernels"
ARCH_GENCODE = {"h200": "90a", "b200": "100a"}
SKIP_PARTS = {"build", "__pycache__", ".ruff_cache"}
NVCC_TIMEOUT_S = 600
NO_SPILLS_MARK = "// kda: no-spills"


def task_cuda_sources(kernels: Path = KERNELS) -> list[Path]:
    """``kernels/<arch>_*/{src,dev}/**/*.cu`` for the known arches, build outputs and caches excluded."""
    found = []
    for task in sorted(p for p in kernels.glob("*") if p.is_dir()):
        if task.name.split("_", 1)[0] not in ARCH_GENCODE:
            continue
        for cu in sorted((task / "src").rglob("*.cu")) + sorted((task / "dev").rglob("*.cu")):
            if not SKIP_PARTS & set(cu.relative_to(task).parts):
                found.append(cu)
    return found


def arch_of(cu: Path) -> str:
    """The task arch of a source under ``kernels/<arch>_.../src/``."""
    for part in cu.parts:
        arch = part.split("_", 1)[0]
        if arch in ARCH_GENCODE and "_" in part:
            return arch
    raise ValueError(f"{cu}: not under a kernels/<arch>_<task>/ folder ({sorted(ARCH_GENCODE)})")


def nvcc() -> str:
    path = shutil.which("nvcc")
    if path:
        return path
    if os.environ.get("KDA_ALLOW_NO_NVCC") == "1":
        pytest.skip("nvcc not on PATH (KDA_ALLOW_NO_NVCC=1): CUDA sources were NOT compile-checked")
    pytest.fail("nvcc not on PATH: the CUDA compile checks need it (install the CUDA toolkit, or set "
                "KDA_ALLOW_NO_NVCC=1 to skip them knowingly)")


def _torch_includes() -> list[str]:
    try:
        from torch.utils.cpp_extension import include_paths

        return [p for p in include_paths() if Path(p).is_dir()]
    except Exception:  # noqa: BLE001 - torch headers are optional for pure-CUDA sources
        return []


def compile_cu(cu: Path, arch: str, out_dir: Path, extra_includes: tuple[Path, ...] = ()) -> subprocess.CompletedProcess:
    sm = ARCH_GENCODE[arch]
    includes = [cu.parent, *extra_includes]
    cmd = [nvcc(), "-std=c++17", "-O3", f"-gencode=arch=compute_{sm},code=sm_{sm}", "-Xptxas", "-v",
           *(f"-I{p}" for p in includes), *(f"-I{p}" for p in _torch_includes()),
           "-c", str(cu), "-o", str(out_dir / (cu.stem + f".sm_{sm}.o"))]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=NVCC_TIMEOUT_S)


def _task_src(cu: Path) -> Path:
    """The task's src/ for any source under a task folder: a dev/ variant may include the candidate's headers (as
    the dev build scripts put src/ on the include path)."""
    for parent in cu.parents:
        if parent.parent == KERNELS and (parent / "src").is_dir():
            return parent / "src"
    return cu.parent


SOURCES = task_cuda_sources()


@pytest.mark.parametrize("cu", SOURCES, ids=[str(p.relative_to(KERNELS)) for p in SOURCES])
def test_task_cuda_source_compiles(cu: Path, tmp_path: Path) -> None:
    arch = arch_of(cu)
    res = compile_cu(cu, arch, tmp_path, extra_includes=(_task_src(cu),))
    assert res.returncode == 0, (f"{cu.relative_to(REPO)} does not compile for {arch} (sm_{ARCH_GENCODE[arch]}):\n"
                                 f"{' '.join(res.args)}\n{res.stdout}{res.stderr}")
    if NO_SPILLS_MARK in cu.read_text():
        spills = spilling_kernels(res.stdout + res.stderr)
        assert not spills, f"{cu.relative_to(REPO)} promises no spills ({NO_SPILLS_MARK}); ptxas: {spills}"


def spilling_kernels(ptxas_log: str) -> dict[str, str]:
    """kernel -> its spill line, for every entry function of a ``-Xptxas -v`` log that spills."""
    out = {}
    for block in ptxas_log.split("Compiling entry function '")[1:]:
        name = block.split("'", 1)[0]
        for line in block.splitlines():
            if "spill stores" in line and not line.strip().startswith("0 bytes stack frame, 0 bytes spill stores, "
                                                                      "0 bytes spill loads"):
                out[name] = line.strip()
    return out


def test_spill_check_reads_ptxas_logs() -> None:
    log = ("ptxas info    : Compiling entry function '_Z1av' for 'sm_90a'\n"
           "    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
           "ptxas info    : Compiling entry function '_Z1bv' for 'sm_90a'\n"
           "    24 bytes stack frame, 32 bytes spill stores, 32 bytes spill loads\n")
    assert spilling_kernels(log) == {"_Z1bv": "24 bytes stack frame, 32 bytes spill stores, 32 bytes spill loads"}


GOOD_CU = r"""
#include <cuda_runtime.h>
#include <cooperative_groups.h>
namespace cg = cooperative_groups;

__global__ void __cluster_dims__(2, 1, 1) scale_kernel(float* __restrict__ y, const float* __restrict__ x, int n) {
  cg::cluster_group cluster = cg::this_cluster();
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = 2.0f * x[i];
  cluster.sync();
}

extern "C" cudaError_t launch_scale(float* y, const float* x, int n, cudaStream_t s) {
  scale_kernel<<<((n + 511) / 512) * 2, 256, 0, s>>>(y, x, n);
  return cudaGetLastError();
}
"""

BROKEN_CU = r"""
__global__ void broken(float* y) {
  y[threadIdx.x] = this_symbol_does_not_exist;
}
"""


@pytest.mark.parametrize("arch", sorted(ARCH_GENCODE))
def test_compile_check_accepts_a_valid_kernel(arch: str, tmp_path: Path) -> None:
    cu = tmp_path / f"kernels/{arch}_selftest__x/src/good.cu"
    cu.parent.mkdir(parents=True)
    cu.write_text(GOOD_CU)
    assert arch_of(cu) == arch
    res = compile_cu(cu, arch, tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr
    assert (tmp_path / f"good.sm_{ARCH_GENCODE[arch]}.o").stat().st_size > 0


@pytest.mark.parametrize("arch", sorted(ARCH_GENCODE))
def test_compile_check_rejects_a_broken_kernel(arch: str, tmp_path: Path) -> None:
    cu = tmp_path / "broken.cu"
    cu.write_text(BROKEN_CU)
    res = compile_cu(cu, arch, tmp_path)
    assert res.returncode != 0
    assert "this_symbol_does_not_exist" in res.stdout + res.stderr


def test_discovery_maps_arches_and_skips_build_outputs(tmp_path: Path) -> None:
    for rel in ("h200_a__x/src/k.cu", "b200_b__y/src/sub/k2.cu", "h200_a__x/src/build/gen.cu",
                "h200_a__x/docs/notes.cu", "other_c/src/k.cu", "h200_a__x/dev/variant/v.cu"):
        p = tmp_path / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text("")
    found = [p.relative_to(tmp_path).as_posix() for p in task_cuda_sources(tmp_path)]
    assert found == ["b200_b__y/src/sub/k2.cu", "h200_a__x/src/k.cu", "h200_a__x/dev/variant/v.cu"]
    assert [arch_of(tmp_path / f) for f in found] == ["b200", "h200", "h200"]


def test_missing_nvcc_fails_unless_allowed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shutil, "which", lambda name: None)
    monkeypatch.delenv("KDA_ALLOW_NO_NVCC", raising=False)
    with pytest.raises(pytest.fail.Exception, match="nvcc not on PATH"):
        nvcc()
    monkeypatch.setenv("KDA_ALLOW_NO_NVCC", "1")
    with pytest.raises(pytest.skip.Exception, match="NOT compile-checked"):
        nvcc()


def test_the_binding_syntax_check_rejects_a_binding_that_would_not_build(tmp_path: Path) -> None:
    """kda_lab.testing.assert_binding_compiles, which every CUDA task's binding test calls, must fail on a
    binding the box could not build (a warning counts: -Werror), and pass on a minimal good one."""
    from kda_lab.testing import assert_binding_compiles

    good = tmp_path / "good_binding.cpp"
    good.write_text('#include <torch/extension.h>\n'
                    'static int64_t numel(const at::Tensor& t) { return t.numel(); }\n'
                    'PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("numel", &numel); }\n')
    assert_binding_compiles(good, tmp_path, tmp_path)
    bad = tmp_path / "bad_binding.cpp"
    bad.write_text(good.read_text().replace("return t.numel();", "int unused = 0; return t.numel();"))
    with pytest.raises(AssertionError, match="unused"):
        assert_binding_compiles(bad, tmp_path, tmp_path)


def test_the_header_cache_is_keyed_by_content_not_paths_or_mtimes(tmp_path: Path) -> None:
    """The precompiled torch header's folder is named by what it is built from: the same headers in another
    folder (another checkout's venv) or touched share it; a changed byte in any header read, or another flag,
    does not."""
    from kda_lab.testing import _torch_header_key

    cxx = shutil.which("g++")
    if not cxx:
        pytest.fail("g++ is needed: nvcc needs one too")
    roots = []
    for name in ("venv_a", "venv_b"):
        root = tmp_path / name / "include"
        (root / "torch").mkdir(parents=True)
        (root / "torch/extension.h").write_text('#pragma once\n#include "ops.h"\n')
        (root / "torch/ops.h").write_text("inline int twice(int x) { return 2 * x; }\n")
        roots.append(root)

    def key(root: Path, *more: str) -> str | None:
        return _torch_header_key(cxx, ("-std=c++20", *more, f"-isystem{root}"))

    a = key(roots[0])
    assert a is not None and a == key(roots[1])
    os.utime(roots[1] / "torch/ops.h", ns=(1, 1))
    assert key(roots[1]) == a
    assert key(roots[1], "-Wall") != a
    (roots[1] / "torch/ops.h").write_text("inline int twice(int x) { return x + x; }\n")
    assert key(roots[1]) != a
    (roots[1] / "torch/extension.h").unlink()
    assert key(roots[1]) is None
