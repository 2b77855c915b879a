"""c007's CUDA sources built offline on the CPU host: nvcc for sm_90a (ptxas registers and spills) and the SASS of
the production kernels (head_dim 128, interleaved, half-width fp32 cache, bf16; 4 rows per item for the large
rows, 1 for the small ones), read with cuobjdump (Triton's bundled copy), for what the design promises and the
emulator cannot see:

- PDL: launch_dependents (SASS PREEXIT) before griddepcontrol.wait (ACQBULK), and the wait before the first load;
- the L2 bulk prefetch of the cache (UBLKPF.L2);
- 16-byte vectors: the item's q/k row loads (LDG.E.128) issued together, then the cache loads, then the next
  item's position; 16-byte stores;
- <= 64 registers (4 CTAs of 256 threads per SM) with at most a 16-byte spill.

And the torch binding compiles (g++ -fsyntax-only against torch's headers), so a typo there cannot first show on
the GPU box."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
PRODUCTION = "_ZN7kda_qkr18qknorm_rope_kernelILi128ELi0ELb0ELi0ELi4EEEvNS_6ParamsE"  # R = 4: the large rows
SMALL = "_ZN7kda_qkr18qknorm_rope_kernelILi128ELi0ELb0ELi0ELi1EEEvNS_6ParamsE"  # R = 1: T19, T32, T47


def _nvcc() -> str:
    nvcc = shutil.which("nvcc")
    if not nvcc:
        pytest.skip("nvcc not on PATH: the sm_90a build checks need it (tests/test_cuda_sources.py says so too)")
    return nvcc


@pytest.fixture(scope="module")
def build(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    out = tmp_path_factory.mktemp("qkr_sm90a")
    obj = out / "qknorm_rope.o"
    res = subprocess.run([_nvcc(), "-std=c++17", "-O3", "-gencode=arch=compute_90a,code=sm_90a", "-Xptxas", "-v",
                          f"-I{SRC}", "-c", str(SRC / "qknorm_rope.cu"), "-o", str(obj)],
                         capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr
    import triton

    cuobjdump = Path(triton.__file__).parent / "backends/nvidia/bin/cuobjdump"
    sass = subprocess.run([str(cuobjdump), "-sass", str(obj)], capture_output=True, text=True, check=True).stdout
    return {"ptxas": res.stderr, "sass": sass}


def _ptxas_stats(ptxas: str, name: str) -> tuple[int, int]:
    block = ptxas.split(f"Compiling entry function '{name}'", 1)[1].split("Compiling entry function", 1)[0]
    regs = int(re.search(r"Used (\d+) registers", block).group(1))  # type: ignore[union-attr]
    spill = int(re.search(r"(\d+) bytes spill stores", block).group(1))  # type: ignore[union-attr]
    return regs, spill


def _sass_of(sass: str, name: str) -> list[str]:
    body = sass.split(f"Function : {name}", 1)[1].split("Function :", 1)[0]
    return [ln.split(";")[0].strip() for ln in body.splitlines() if re.match(r"\s+/\*[0-9a-f]{4}\*/", ln)]


def _first(lines: list[str], pattern: str, start: int = 0) -> int:
    return next(i for i in range(start, len(lines)) if re.search(pattern, lines[i]))


def test_every_kernel_builds_and_the_production_one_keeps_4_ctas_per_sm(build: dict[str, object]) -> None:
    ptxas = str(build["ptxas"])
    # 3 head dims x 4 layouts x 2 dtypes x 2 cache dtypes x rows per item 1/2/4
    assert ptxas.count("Compiling entry function") == 144
    regs, spill = _ptxas_stats(ptxas, PRODUCTION)
    assert regs <= 64 and spill <= 16, (regs, spill)


@pytest.mark.parametrize(("name", "rows"), [(PRODUCTION, 4), (SMALL, 1)], ids=["R4", "R1"])
def test_production_sass_has_early_pdl_trigger_prefetch_and_one_round_trip(build: dict[str, object], name: str,
                                                                           rows: int) -> None:
    lines = _sass_of(str(build["sass"]), name)
    trigger, wait = _first(lines, r"\bPREEXIT\b"), _first(lines, r"\bACQBULK\b")
    first_load = _first(lines, r"\bLDG\b")
    assert trigger < wait < first_load  # launch_dependents first, then the wait, then the first load
    assert any("UBLKPF.L2" in ln for ln in lines[:first_load + 40])  # the cache prefetch, beside the first loads
    # the loop: the item's 16-byte q/k loads, then the two 16-byte cache loads (cos, sin), then the next position
    x_loads = [i for i, ln in enumerate(lines) if re.search(r"\bLDG\.E\.128 ", ln)]
    assert len(x_loads) == rows
    cache = [i for i, ln in enumerate(lines) if re.search(r"\bLDG\.E\.128\.CONSTANT\b", ln) and i > x_loads[-1]]
    assert len(cache) >= 2 and cache[0] > x_loads[-1]
    next_pos = _first(lines, r"\bLDG\.E\.(64\.)?CONSTANT\b", cache[1] + 1)
    first_store = _first(lines, r"\bSTG\.E\.128\b")
    assert next_pos < first_store  # the next item's position is loaded before this item's stores
    assert sum(bool(re.search(r"\bSTG\.E\.128\b", ln)) for ln in lines) == rows
    assert not any(re.search(r"\bST[GS]?\.E\.(64|32|U16)\b", ln) for ln in lines)  # no narrower q/k stores


def test_binding_compiles_against_torch_headers(tmp_path: Path) -> None:
    cxx = shutil.which("g++")
    nvcc = _nvcc()
    if not cxx:
        pytest.skip("no g++")
    import torch.utils.cpp_extension as ce

    cuda_include = Path(nvcc).resolve().parents[1] / "include"
    if not (cuda_include / "cuda_runtime.h").is_file():
        cuda_include = Path("/usr/local/cuda/include")
    stub = tmp_path / "stub/c10/cuda/impl"  # a CPU wheel of torch lacks this generated header
    stub.mkdir(parents=True)
    (stub / "cuda_cmake_macros.h").write_text("#pragma once\n")
    includes = [str(SRC), str(tmp_path / "stub"), *ce.include_paths(), str(cuda_include),
                sysconfig.get_paths()["include"]]
    res = subprocess.run([cxx, "-std=c++20", "-fsyntax-only", "-Wall", "-Wextra", "-Werror",
                          *(f"-isystem{p}" for p in includes[1:]), f"-I{includes[0]}",
                          "-DTORCH_EXTENSION_NAME=qkr_syntax", str(SRC / "qknorm_rope_binding.cpp")],
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-4000:]


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
