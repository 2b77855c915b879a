"""c009's routing (CPU evidence; nothing here is a GPU measurement): c007 plus two clauses from the H200 sweeps
(docs/notes.md, "c009"; the rules and their numbers sit next to the code: register.py `_wins` for the SGLang
hand-off, gns_kernels.cu `chunk_auto` / kChunkAuto* for path F).

1. The extension's CUDA sources (gns_kernels.cu + gns_path_f.cu, the files register.EXTENSION compiles) build for
   sm_90a; path F's kernels spill nothing and c007's kernels spill exactly what they spilled in c007 (the two scalar
   cluster kernels of the fp32/bf16 unaligned fallback, 168 B each: no production row reaches them).
2. The whole routing applied to every production row of task.toml: register.py's `_wins` on a meta tensor (SGLang or
   not), then the extension's own planner (gns_describe of the nvcc-built library, called through ctypes; the plan
   makes no CUDA call that changes the answer for groups > 240 KiB, the only ones whose plan c009 changes). It sends
   exactly the intended rows to path F and to path B, and every other row where c007 sent it (c007 = `_wins_c007` +
   force_path 7, both in the same build). Deliberately wrong rules are rejected: c007's routing itself (the B clause
   missing), c003's tail-free rule without SGLang's apply-kernel condition (keeps the scalar-apply rows too), the
   clause without its 20 MiB bound (takes the flux 16 MiB row that lost in c000's bench), and a path F rule that
   drops the < 2^18 group bound and widens x to 24 MiB (takes rows where F measured no gain).
"""

from __future__ import annotations

import ctypes
import importlib.util
import math
import re
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest
import torch

TASK = Path(__file__).resolve().parents[1]
SRC = TASK / "src"
NVCC_FLAGS = ["-std=c++17", "-O3", "-gencode=arch=compute_90a,code=sm_90a", "-Xcompiler", "-fPIC"]
DCODE = {"float16": 0, "bfloat16": 1, "float32": 2}
TORCH_DT = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32}
SGLANG = "sglang"

# The intended c009 changes against c007, as (x shape, dtype) of task.toml's production rows (both entry points of
# a HunyuanVideo shape are routed alike). Path F: 16-bit, c007's path B groups (> 240 KiB) of < 2^18 elements, x of
# 8-16 MiB. Path B (was SGLang): tail-free SGLang-chunked rows where SGLang's apply gathers w/b, x >= 20 MiB.
TO_F = {
    ((1, 512, 2, 64, 64), "float16"),
    ((1, 256, 9, 48, 40), "float16"),
    ((1, 256, 3, 48, 128), "float16"),
    ((1, 128, 5, 96, 80), "float16"),
    ((1, 512, 3, 128, 40), "float16"),
}
TO_B = {
    ((1, 512, 5, 64, 64), "float16"),
    ((1, 256, 3, 128, 128), "float16"),
    ((1, 512, 16, 32, 48), "bfloat16"),
    ((1, 128, 5, 256, 80), "float16"),
    ((1, 128, 5, 96, 256), "float16"),
    ((1, 256, 5, 256, 80), "float16"),
    ((1, 128, 17, 256, 80), "float16"),
    ((1, 256, 17, 256, 80), "float16"),
}


def _nvcc() -> str:
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        pytest.fail("nvcc not on PATH: the sm_90a build and the planner library need it")
    return nvcc


def _register():
    spec = importlib.util.spec_from_file_location("gns_c009_register", SRC / "register.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def production_rows() -> list[tuple[str, tuple[int, ...], str, int]]:
    with open(TASK / "task.toml", "rb") as f:
        ws = [w for w in tomllib.load(f)["workloads"] if w["kind"] == "production"]
    return [(w["name"], tuple(w["args"]["x"]["shape"]), w["args"]["x"]["dtype"], int(w["args"].get("num_groups", 32)))
            for w in ws]


def _ptxas(log: str) -> dict[str, tuple[int, int]]:
    out = {}
    for block in log.split("Compiling entry function '")[1:]:
        name = block.split("'", 1)[0]
        m = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", block)
        assert m, block[:400]
        out[name] = (int(m.group(1)), int(m.group(2)))
    return out


def _build(tmp: Path, kernels_cu_text: str | None = None,
           path_f_obj: Path | None = None) -> tuple[ctypes.CDLL, dict, dict]:
    """gns_kernels.cu (or a mutated copy) + gns_path_f.cu -> one shared library, and each file's ptxas report.
    ``path_f_obj``: gns_path_f.cu's object from an earlier build (same source and flags), linked as it is; its
    report is then {}."""
    tmp.mkdir(parents=True, exist_ok=True)
    kcu = SRC / "gns_kernels.cu"
    if kernels_cu_text is not None:
        kcu = tmp / "gns_kernels_mut.cu"
        kcu.write_text(kernels_cu_text)
    logs = {"gns_path_f.cu": {}}
    f_obj = path_f_obj or tmp / "f.o"
    for cu, obj in ((kcu, tmp / "k.o"), *(() if path_f_obj else ((SRC / "gns_path_f.cu", f_obj),))):
        res = subprocess.run([_nvcc(), *NVCC_FLAGS, "-Xptxas", "-v", f"-I{SRC}", "-c", str(cu), "-o", str(obj)],
                             capture_output=True, text=True, timeout=600)
        assert res.returncode == 0, (res.stdout + res.stderr)[-4000:]
        logs[cu.name] = _ptxas(res.stdout + res.stderr)
    so = tmp / "libgns.so"
    res = subprocess.run([_nvcc(), "-shared", "-gencode=arch=compute_90a,code=sm_90a", str(tmp / "k.o"),
                          str(f_obj), "-o", str(so)], capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-4000:]
    lib = ctypes.CDLL(str(so))
    lib.gns_describe.restype = ctypes.c_int
    return lib, logs["gns_path_f.cu"], logs[kcu.name]


@pytest.fixture(scope="module")
def build_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("gns_c009")


@pytest.fixture(scope="module")
def built(build_dir: Path):
    return _build(build_dir)


def describe(lib: ctypes.CDLL, shape, dtype: str, G: int, force_path: int = 0) -> list[int]:
    out = (ctypes.c_int64 * 8)()
    n, c = shape[0], shape[1]
    hw = math.prod(shape) // (n * c)
    rc = lib.gns_describe(DCODE[dtype], ctypes.c_int64(n), ctypes.c_int64(c), ctypes.c_int64(hw), ctypes.c_int64(G),
                          force_path, 0, 0, out)
    assert rc == 0, (shape, dtype, rc)
    return list(out)


# ------------------------------------------------------------------------------------------------ 1. the build
def test_extension_sources_build_for_sm90a_without_new_spills(built) -> None:
    _, f_kernels, c007_kernels = built
    assert len(f_kernels) == 6 and all(v == (0, 0) for v in f_kernels.values()), f_kernels
    spilling = {n: v for n, v in c007_kernels.items() if v != (0, 0)}
    assert set(spilling) == {"_ZN3gns18gns_cluster_kernelIfLi1EEEvPKT_S3_S3_PS1_liiNS_7FastDivEiifi",
                             "_ZN3gns18gns_cluster_kernelI13__nv_bfloat16Li1EEEvPKT_S4_S4_PS2_liiNS_7FastDivEiifi"}, \
        spilling
    assert all(v == (168, 168) for v in spilling.values()), spilling
    assert len(c007_kernels) >= 30  # c007's kernel set is still compiled (paths A-D, all dtypes)
    reg = _register()
    assert reg._SOURCES == ("gns_kernels.cu", "gns_path_f.cu", "gns_binding.cpp")
    assert reg._HEADERS == ("gns_kernels.cuh", "gns_device.cuh", "gnsf_sched.h")


def test_forced_path_f_plans(built) -> None:
    lib, _, _ = built
    # force_path 8: chunk MiB in force_cs (0 = 24), flags in smem_cap (0 = 15: PDL + hints)
    d = describe(lib, (1, 512, 3, 128, 40), "float16", 32, 8)
    assert d == [8, 8, 32, 1, 2, 15, 15, 24]  # one chunk of all 32 groups, 2 launches, 15 tiles per group
    d = describe(lib, (1, 256, 17, 256, 256), "float16", 32, 8)
    assert d[:5] == [8, 8, 1, 32, 33]  # 17 MiB groups: one per chunk
    assert describe(lib, (1, 512, 2, 64, 64), "float16", 32, 7)[0] == 2  # force_path 7 = c007: path B there
    assert describe(lib, (1, 512, 2, 64, 64), "float16", 32, 0)[0] == 8


# --------------------------------------------------------------------------------------------- 2. the routing
def route(wins, lib: ctypes.CDLL, force_path: int) -> dict[tuple, object]:
    """(shape, dtype) -> SGLANG or the plan's path, over every production row (both entry points must agree)."""
    table: dict[tuple, object] = {}
    for name, shape, dtype, G in production_rows():
        x = torch.empty(shape, dtype=TORCH_DT[dtype], device="meta")
        where = describe(lib, shape, dtype, G, force_path)[0] if wins(x, G) else SGLANG
        key = (shape, dtype)
        assert table.setdefault(key, where) == where, (name, table[key], where)
    return table


def check_c009(c009: dict, c007: dict) -> None:
    assert len(c009) == len(c007) == 54  # 102 rows: 48 HunyuanVideo shapes x 2 entry points + 4 FLUX + 2 LTX-2
    f_rows = {k for k, v in c009.items() if v == 8}
    assert f_rows == TO_F, sorted(f_rows ^ TO_F)
    to_b = {k for k, v in c009.items() if v == 2 and c007[k] == SGLANG}
    assert to_b == TO_B, sorted(to_b ^ TO_B)
    assert all(c007[k] == 2 for k in TO_F)  # F replaces c007's path B, nothing else
    changed = {k for k in c009 if c009[k] != c007[k]}
    assert changed == TO_F | TO_B, sorted(changed ^ (TO_F | TO_B))


def test_routing_sends_exactly_the_intended_rows(built) -> None:
    lib, _, _ = built
    reg = _register()
    c007 = route(reg._wins_c007, lib, 7)
    c009 = route(reg._wins, lib, 0)
    check_c009(c009, c007)
    # sanity of the reference itself: c007's SGLang hand-off is its tail-free chunked class
    assert sum(v == SGLANG for v in c007.values()) == 22 and sum(v == SGLANG for v in c009.values()) == 14


@pytest.mark.parametrize("wrong", ["c007", "no_gather_condition", "no_20mib_bound", "wide_f_rule"])
def test_wrong_rules_are_rejected(built, build_dir: Path, tmp_path: Path, wrong: str) -> None:
    lib, _, _ = built
    reg = _register()
    c007 = route(reg._wins_c007, lib, 7)
    wins = reg._wins
    if wrong == "c007":
        wins = reg._wins_c007
    elif wrong == "no_gather_condition":
        reg._sglang_gathers_affine = lambda group_elems, spatial: True
    elif wrong == "no_20mib_bound":
        reg._SPLIT_KEEP_MIN_X_BYTES = 0
    elif wrong == "wide_f_rule":
        text = (SRC / "gns_kernels.cu").read_text()
        for old, new in (("D < kChunkAutoMaxGroupElems &&", "true &&"),
                         ("kChunkAutoMaxXBytes = 16ll << 20", "kChunkAutoMaxXBytes = 24ll << 20")):
            assert text.count(old) == 1
            text = text.replace(old, new)
        lib, _, _ = _build(tmp_path / "mut", text, path_f_obj=build_dir / "f.o")  # gns_path_f.cu as built
    table = route(wins, lib, 0)  # outside the raises: only check_c009 may reject
    with pytest.raises(AssertionError):
        check_c009(table, c007)
