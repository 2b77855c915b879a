"""c008's CUDA sources built offline on the CPU host: nvcc for sm_90a (ptxas registers and spills) and the SASS of
the production kernel (head_dim 128, interleaved, half-width fp32 cache, bf16, PIPE = 0: every production row)
and of its double-buffered sibling (PIPE = 1, a dev/sweep.py knob), read with cuobjdump (Triton's bundled copy),
for what the design promises and the emulator cannot see:

- PDL: griddepcontrol.wait (ACQBULK) before the first load, launch_dependents (PREEXIT) at the end, after the last
  store (SGLang's placement; the early trigger is a knob);
- one memory round trip per row: in the steady loop the row's 16-byte q/k load, its two 16-byte cos/sin loads
  (the cache row its position, loaded an iteration earlier, names) and the next row's position all issued before
  the first shuffle of the reduction (SGLang's kernel waits for the position before its cache loads); the double
  buffer issues the next row's q/k load before the current row's store;
- no L2 prefetch, no L1 prefetch (c007's UBLKPF / CCTL), no local memory, no integer division in the loop;
- registers: the production kernel <= 40 (6 CTAs of 256 threads per SM, SGLang's 48 warps), no spill anywhere.

And the torch binding compiles (g++ -fsyntax-only against torch's headers), so a typo there cannot first show on
the GPU box."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kda_lab.testing import assert_binding_compiles

SRC = Path(__file__).resolve().parents[1] / "src"
PRODUCTION = "_ZN7kda_qkr18qknorm_rope_kernelILi128ELi0ELb0ELi0ELi0EEEvNS_6ParamsE"  # PIPE = 0
PIPELINED = "_ZN7kda_qkr18qknorm_rope_kernelILi128ELi0ELb0ELi0ELi1EEEvNS_6ParamsE"  # PIPE = 1 (sweep knob)


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


def test_every_kernel_builds_and_the_production_one_keeps_6_ctas_per_sm(build: dict[str, object]) -> None:
    ptxas = str(build["ptxas"])
    # 3 head dims x 4 layouts x 2 dtypes x 2 cache dtypes x PIPE 0/1
    assert ptxas.count("Compiling entry function") == 96
    assert ptxas.count(" 0 bytes spill stores") == 96  # no spill in any kernel
    regs, _ = _ptxas_stats(ptxas, PRODUCTION)
    assert regs <= 40, regs
    regs, _ = _ptxas_stats(ptxas, PIPELINED)
    assert regs <= 64, regs


def _loop_bounds(lines: list[str]) -> tuple[int, int]:
    """The persistent loop: from the target of its backward branch to that branch."""
    for i in range(len(lines) - 1, -1, -1):
        m = re.search(r"\bBRA 0x([0-9a-f]+)", lines[i])
        if m and "@" in lines[i].split("BRA")[0]:
            target = int(m.group(1), 16)
            start = next(j for j, ln in enumerate(_ADDR[id(lines)]) if ln == target)
            if start < i:
                return start, i
    raise AssertionError("no loop")


_ADDR: dict[int, list[int]] = {}


def _sass_with_addr(sass: str, name: str) -> list[str]:
    body = sass.split(f"Function : {name}", 1)[1].split("Function :", 1)[0]
    rows = [ln for ln in body.splitlines() if re.match(r"\s+/\*[0-9a-f]{4}\*/", ln)]
    lines = [ln.split(";")[0].strip() for ln in rows]
    _ADDR[id(lines)] = [int(re.match(r"\s+/\*([0-9a-f]{4})\*/", ln).group(1), 16) for ln in rows]  # type: ignore[union-attr]
    return lines


def test_production_sass_one_round_trip_late_trigger(build: dict[str, object]) -> None:
    lines = _sass_with_addr(str(build["sass"]), PRODUCTION)
    wait, first_load = _first(lines, r"\bACQBULK\b"), _first(lines, r"\bLDG\b")
    assert wait < first_load
    stores = [i for i, ln in enumerate(lines) if re.search(r"\bSTG\.E\.128\b", ln)]
    assert len(stores) == 2  # the group's first row (speculation checked), the loop's rows
    trig = [i for i, ln in enumerate(lines) if re.search(r"\bPREEXIT\b", ln)]
    assert trig and all(t > stores[-1] for t in trig if "@" not in lines[t])  # the unconditional trigger: last
    start, end = _loop_bounds(lines)
    loop = lines[start:end + 1]
    x = _first(loop, r"\bLDG\.E\.128 ")
    pos = _first(loop, r"\bLDG\.E\.CONSTANT\b")
    cache = [i for i, ln in enumerate(loop) if re.search(r"\bLDG\.E\.128\.CONSTANT\b", ln) and "@" not in ln]
    shfl = _first(loop, r"\bSHFL\.BFLY\b")
    assert max(x, pos, cache[0], cache[1]) < shfl  # q/k, position and speculated cos/sin: one round trip
    assert not any(re.search(r"\b(UBLKPF|CCTL|LDL|STL|LD\.E|ST\.E)\b", ln) for ln in lines)  # generic/local
    assert len(loop) < 200, len(loop)  # SGLang's loop: ~162 instructions a row pair, with two round trips


def test_pipelined_sass_loads_next_row_before_the_store(build: dict[str, object]) -> None:
    lines = _sass_with_addr(str(build["sass"]), PIPELINED)
    start, end = _loop_bounds(lines)
    loop = lines[start:end + 1]
    x_next = _first(loop, r"\bLDG\.E\.128 ")
    store = _first(loop, r"\bSTG\.E\.128\b")
    assert x_next < store
    assert not any(re.search(r"\b(LDL|STL)\b", ln) for ln in lines)


def test_binding_compiles_against_torch_headers(tmp_path: Path) -> None:
    assert_binding_compiles(SRC / "qknorm_rope_binding.cpp", SRC, tmp_path)


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
