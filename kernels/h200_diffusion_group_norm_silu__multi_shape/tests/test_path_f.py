"""CPU evidence for path F (c009: src/gns_path_f.cu + src/gnsf_sched.h, routed by gns_kernels.cu's make_plan; the
routing itself is tests/test_c009_routing.py). Nothing here is a GPU measurement.

1. src/gns_path_f.cu builds for sm_90a with nvcc (-O3, no fast-math), ptxas reports 0 spill bytes for every kernel
   and the register budget the launch bounds promise; its PTX holds the PDL instructions and the hinted 16-byte
   loads. The dev L2 microbenchmark (dev/path_f/gnsf_l2.cu) builds without spills too, and the dev torch binding
   (dev/path_f/gns_path_f_binding.cpp) passes the lab's g++ syntax check against the torch headers.
2. The chunk schedule is gnsf_sched.h's own code (built here by g++ into a small shared library and enumerated
   through ctypes): every stats and apply tile exactly once, every partial slot written once and read only in a
   later launch than its writer (never in the same launch), launch 0 stats only, the last launch apply only, every
   launch >= 1 holds apply blocks (the PDL completion chain), and the x reuse distance the notes' window argument
   uses (< 1 chunk of new x interleaved, < 2 chunks stats-first). Deliberately wrong schedules -- the apply of a
   chunk in its stats launch, a duplicated stats tile, one apply tile a launch early -- are rejected.
3. A numpy float32 model of the kernel's statistics (per-thread two-pass over register batches shifted by the
   group's first element, Chan merges, the warp trees, the apply block's fixed-order merge of the P partials):
   within 2e-5 of fp64 on offset-1e4 groups; bitwise the same whatever order the stats blocks finish in; a merge in
   completion order changes the bits and E[x^2]-mean^2 misses the offset rows (both rejected).
"""

from __future__ import annotations

import ast
import ctypes
import os
import re
import shutil
import subprocess
import tomllib
from pathlib import Path

import numpy as np
import pytest

from kda_lab.testing import assert_binding_compiles, compile_host_cpp

TASK = Path(__file__).resolve().parents[1]
SRC = TASK / "src"
PATH_F = TASK / "dev" / "path_f"  # the dev driver: L2 microbenchmark, dev binding, pathf.py
CU = SRC / "gns_path_f.cu"
L2_CU = PATH_F / "gnsf_l2.cu"
ROLE_NONE, ROLE_STATS, ROLE_APPLY = 0, 1, 2


def _nvcc() -> str:
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        if os.environ.get("KDA_ALLOW_NO_NVCC") == "1":
            pytest.skip("nvcc not on PATH (KDA_ALLOW_NO_NVCC=1): path F was NOT compile-checked")
        pytest.fail("nvcc not on PATH: path F's sm_90a build check needs it")
    return nvcc


# ------------------------------------------------------------------------------------------------ 1. the build
@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path]:
    """One nvcc build (sm_90a, -O3, no fast-math) as a shared library: the ptxas log, and the host planner
    (gnsf_plan) callable through ctypes on this CPU machine (it makes no CUDA call)."""
    d = tmp_path_factory.mktemp("gnsf_build")
    so = d / "libgnsf.so"
    res = subprocess.run([_nvcc(), "-std=c++17", "-O3", "-gencode=arch=compute_90a,code=sm_90a", "-Xptxas", "-v",
                          "-shared", "-Xcompiler", "-fPIC", f"-I{SRC}", str(CU), "-o", str(so)],
                         capture_output=True, text=True, timeout=600)
    log = res.stdout + res.stderr
    assert res.returncode == 0, log[-4000:]
    return log, so


def _ptxas_kernels(log: str) -> dict[str, tuple[int, int, int]]:
    """{entry: (spill store bytes, spill load bytes, registers)} from an nvcc -Xptxas -v log."""
    kernels = {}
    for block in log.split("Compiling entry function '")[1:]:
        name = block.split("'", 1)[0]
        spill = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", block)
        regs = re.search(r"Used (\d+) registers", block)
        assert spill and regs, block[:400]
        kernels[name] = (int(spill.group(1)), int(spill.group(2)), int(regs.group(1)))
    return kernels


def test_cu_builds_for_sm90a_without_spills(built) -> None:
    log, _ = built
    assert "--use_fast_math" not in CU.read_text() and "// kda: no-spills" in CU.read_text()
    kernels = _ptxas_kernels(log)
    steps = {n: v for n, v in kernels.items() if "gns_f_step_kernel" in n}
    assert len(steps) == 6 and len(kernels) == 6, kernels  # {half, bf16, float} x {16-byte, scalar}; nothing else
    for name, (st, ld, _) in kernels.items():
        assert st == 0 and ld == 0, f"{name} spills: {kernels[name]}"
    for name, (_, _, regs) in steps.items():
        fp32_vec = "IfLi4E" in name
        assert regs <= (80 if fp32_vec else 64), f"{name}: {regs} registers breaks its launch bounds' residency"


def test_dev_l2_microbenchmark_builds_without_spills(tmp_path: Path) -> None:
    assert "// kda: no-spills" in L2_CU.read_text() and "gns_f_step_kernel" not in L2_CU.read_text()
    res = subprocess.run([_nvcc(), "-std=c++17", "-O3", "-gencode=arch=compute_90a,code=sm_90a", "-Xptxas", "-v",
                          f"-I{SRC}", "-c", str(L2_CU), "-o", str(tmp_path / "l2.o")], capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, (res.stdout + res.stderr)[-4000:]
    kernels = _ptxas_kernels(res.stdout + res.stderr)
    assert list(kernels) and all("gnsf_l2_stream_kernel" in n for n in kernels), kernels
    assert all(st == 0 and ld == 0 for st, ld, _ in kernels.values()), kernels


def test_path_f_lives_in_src_and_the_extension_builds_it() -> None:
    """c009: the kernel and its schedule are src/ files the candidate's extension compiles (and hashes); dev/path_f
    keeps only the dev driver (no second copy of the kernel to drift)."""
    reg = (SRC / "register.py").read_text()
    assert '"gns_path_f.cu"' in reg and '"gnsf_sched.h"' in reg
    assert not (PATH_F / "gns_path_f.cu").exists() and not (PATH_F / "gnsf_sched.h").exists()
    assert "gnsf_l2_stream" not in CU.read_text()  # the microbenchmark is dev only
    pathf = (PATH_F / "pathf.py").read_text()
    assert '"gns_path_f.cu"' in pathf and '"gnsf_l2.cu"' in pathf and '"gnsf_sched.h"' in pathf


def _plan(so: Path, shape, dtype: int, chunk_mib: float, G: int = 32, aligned: int = 1):
    lib = ctypes.CDLL(str(so))
    lib.gnsf_plan.restype = ctypes.c_int
    out = (ctypes.c_int64 * 10)()
    n, c = shape[0], shape[1]
    hw = int(np.prod(shape)) // (n * c)
    rc = lib.gnsf_plan(dtype, ctypes.c_int64(n), ctypes.c_int64(c), ctypes.c_int64(hw), ctypes.c_int64(G),
                       ctypes.c_int64(int(chunk_mib * (1 << 20))), 1, aligned, out)
    keys = ("vec", "tile_elems", "P", "gpc", "K", "launches", "ws_bytes", "max_blocks", "chunk_x_bytes", "group_bytes")
    return rc, dict(zip(keys, list(out), strict=True))


def test_host_planner(built) -> None:
    _, so = built
    MiB = 1 << 20
    for shape, dt, es in [((1, 512, 2, 64, 64), 0, 2), ((1, 256, 17, 256, 256), 0, 2), ((1, 128, 17, 96, 256), 0, 2),
                          ((1, 256, 512, 512), 1, 2), ((1, 512, 9, 48, 40), 0, 2), ((2, 64, 3, 96, 80), 2, 4)]:
        for chunk in (4, 12, 24):
            rc, p = _plan(so, shape, dt, chunk)
            assert rc == 0
            total = shape[0] * 32
            gbytes = int(np.prod(shape[1:])) // 32 * es
            vec = 16 // es
            assert p["vec"] == vec and p["tile_elems"] == 256 * 8 * vec and p["group_bytes"] == gbytes
            assert p["P"] == -(-gbytes // (256 * 8 * 16))
            assert p["gpc"] == min(total, max(1, chunk * MiB // gbytes)) and p["K"] == -(-total // p["gpc"])
            assert p["launches"] == p["K"] + 1 and p["ws_bytes"] == total * p["P"] * 16
            assert p["max_blocks"] == 2 * p["gpc"] * p["P"] and p["chunk_x_bytes"] == p["gpc"] * gbytes
    assert _plan(so, (1, 256, 17, 256, 256), 0, 12)[1]["launches"] == 33  # 17.8 MB groups: one per chunk
    assert _plan(so, (1, 128, 5, 33, 31), 0, 1)[1]["vec"] == 1  # D * 2 % 16 != 0: scalar path
    assert _plan(so, (1, 512, 9, 48, 40), 0, 12, aligned=0)[1]["vec"] == 1
    assert _plan(so, (1, 30, 10), 0, 12)[0] < 0  # C % G != 0: rejected, no launch


def test_ptx_has_pdl_and_hinted_vector_loads(tmp_path: Path) -> None:
    ptx = tmp_path / "gnsf.ptx"
    res = subprocess.run([_nvcc(), "-std=c++17", "-O3", "-arch=sm_90a", "-ptx", f"-I{SRC}", str(CU), "-o",
                          str(ptx)], capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-4000:]
    text = ptx.read_text()
    entries = re.split(r"\.entry ", text)[1:]
    half8 = [e for e in entries if e.startswith("_ZN4gnsf17gns_f_step_kernelI6__halfLi8E")]
    assert len(half8) == 1
    body = half8[0]
    assert "griddepcontrol.launch_dependents" in body and "griddepcontrol.wait" in body
    assert body.count("ld.global.nc.L1::no_allocate.L2::cache_hint.v4.u32") >= 16  # 8 stats + 8 apply loads
    assert "st.global.L2::cache_hint.v4.u32" in body
    for pol in ("evict_last", "evict_first", "evict_normal"):
        assert f"createpolicy.fractional.L2::{pol}" in body
    assert not re.search(r"\b(atom|red)\.", body)  # no atomics: the merge order is fixed by index


def test_binding_compiles_against_torch_headers(tmp_path: Path) -> None:
    assert_binding_compiles(PATH_F / "gns_path_f_binding.cpp", PATH_F, tmp_path)


def test_python_flags_match_the_kernel() -> None:
    src = CU.read_text()
    consts = dict(re.findall(r"constexpr int (k(?:Flag|Hint)\w+) = (\d+);", src))
    text = (PATH_F / "pathf.py").read_text()
    py = dict(re.findall(r"^(PDL|HINT_\w+|STATS_FIRST) = (\d+)$", text, re.M))
    assert consts == {"kFlagPdl": "1", "kHintStatsLast": "2", "kHintApplyFirst": "4", "kHintStoreFirst": "8",
                      "kFlagStatsFirst": "16"}
    assert py == {"PDL": "1", "HINT_STATS_LAST": "2", "HINT_APPLY_FIRST": "4", "HINT_STORE_FIRST": "8",
                  "STATS_FIRST": "16"}
    # the kernel maps blocks and partial slots through gnsf_sched.h, the code the schedule tests run
    assert "block_work(s, j, (int64_t)blockIdx.x)" in src and "part_index(s, g, t)" in src
    assert "launch_blocks(p.s, j)" in src and "j < launches(p.s)" in src


def test_sweep_rows_are_production_rows() -> None:
    tree = ast.parse((TASK / "dev" / "sweep_path_f.py").read_text())
    consts = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
            try:
                consts[node.targets[0].id] = ast.literal_eval(node.value)
            except ValueError:
                pass
    with open(TASK / "task.toml", "rb") as f:
        prod = {(tuple(w["args"]["x"]["shape"]), w["args"]["x"]["dtype"])
                for w in tomllib.load(f)["workloads"] if w["kind"] == "production"}
    rows = consts["DEFAULT_ROWS"]
    assert len(rows) == 14 and all((tuple(s), d) in prod for s, d in rows)
    assert tuple(consts["NCU_ROW"][0]) == (1, 128, 17, 96, 256)
    assert len(consts["DEFAULT_VARIANTS"].split(",")) <= 6


# --------------------------------------------------------------------------------------------- 2. the schedule
SHIM = r"""
#include <stdint.h>
#include "gnsf_sched.h"
extern "C" int64_t sched_info(int64_t total, int64_t P, int64_t gpc, int64_t order, int64_t* out4) {
  const gnsf::Sched s = gnsf::make_sched(total, P, gpc, order);
  int64_t blocks = 0;
  for (int64_t j = 0; j < gnsf::launches(s); ++j) blocks += gnsf::launch_blocks(s, j);
  out4[0] = s.gpc;
  out4[1] = s.K;
  out4[2] = gnsf::launches(s);
  out4[3] = blocks;
  return 0;
}
// rows of (launch, block, role, group, tile, slot): the slot a stats block writes, -1 for apply blocks
extern "C" int64_t sched_rows(int64_t total, int64_t P, int64_t gpc, int64_t order, int64_t* out, int64_t cap) {
  const gnsf::Sched s = gnsf::make_sched(total, P, gpc, order);
  int64_t r = 0;
  for (int64_t j = 0; j < gnsf::launches(s); ++j) {
    for (int64_t b = 0; b < gnsf::launch_blocks(s, j) + 1; ++b) {  // + 1: one past the grid must be kRoleNone
      const gnsf::Work w = gnsf::block_work(s, j, b);
      if (r >= cap) return -1;
      int64_t* o = out + 6 * r++;
      o[0] = j; o[1] = b; o[2] = w.role; o[3] = w.group; o[4] = w.tile;
      o[5] = w.role == gnsf::kRoleStats ? gnsf::part_index(s, w.group, w.tile) : -1;
    }
  }
  return r;
}
"""


@pytest.fixture(scope="module")
def shim(tmp_path_factory: pytest.TempPathFactory) -> ctypes.CDLL:
    d = tmp_path_factory.mktemp("gnsf_shim")
    (d / "shim.cpp").write_text(SHIM)
    lib = ctypes.CDLL(str(compile_host_cpp(d / "shim.cpp", SRC, d / "libgnsf_shim.so", shared=True)))
    for fn in (lib.sched_info, lib.sched_rows):
        fn.restype = ctypes.c_int64
    return lib


def enumerate_schedule(lib: ctypes.CDLL, total: int, P: int, gpc: int, order: int) -> tuple[np.ndarray, dict]:
    info = np.zeros(4, dtype=np.int64)
    lib.sched_info(ctypes.c_int64(total), ctypes.c_int64(P), ctypes.c_int64(gpc), ctypes.c_int64(order),
                   info.ctypes.data_as(ctypes.POINTER(ctypes.c_int64)))
    cap = int(info[3]) + int(info[2]) + 8
    out = np.zeros((cap, 6), dtype=np.int64)
    n = lib.sched_rows(ctypes.c_int64(total), ctypes.c_int64(P), ctypes.c_int64(gpc), ctypes.c_int64(order),
                       out.ctypes.data_as(ctypes.POINTER(ctypes.c_int64)), ctypes.c_int64(cap))
    assert n > 0
    rows = out[:n]
    # one past each grid: no work (the kernel's guard); drop those rows
    last = np.r_[rows[1:, 0] != rows[:-1, 0], True]
    assert (rows[last, 2] == ROLE_NONE).all() and (rows[~last, 2] != ROLE_NONE).all()
    return rows[~last], dict(gpc=int(info[0]), K=int(info[1]), launches=int(info[2]), blocks=int(info[3]))


def check_schedule(rows: np.ndarray, total: int, P: int, order: int | None = None, chunk_tiles: int | None = None):
    """Raise AssertionError unless the schedule is complete, race-free and keeps the reuse distance."""
    j, role, g, t, slot = rows[:, 0], rows[:, 2], rows[:, 3], rows[:, 4], rows[:, 5]
    L = int(j.max()) + 1
    st, ap = role == ROLE_STATS, role == ROLE_APPLY
    assert (st | ap).all(), "every block has a role"
    assert ((g >= 0) & (g < total) & (t >= 0) & (t < P)).all(), "tiles in range"
    # every tile exactly once per role
    for mask, what in ((st, "stats"), (ap, "apply")):
        cnt = np.zeros(total * P, dtype=np.int64)
        np.add.at(cnt, g[mask] * P + t[mask], 1)
        assert (cnt == 1).all(), f"every {what} tile exactly once"
    # partial slots: written once, by the stats block of that tile
    assert (slot[st] == g[st] * P + t[st]).all() and np.unique(slot[st]).size == total * P
    write_launch = np.full(total * P, -1, dtype=np.int64)
    write_launch[slot[st]] = j[st]
    # an apply block of group g reads slots g*P .. g*P+P-1; each must come from an EARLIER launch
    last_write = write_launch.reshape(total, P).max(axis=1)
    assert (last_write[g[ap]] < j[ap]).all(), "an apply block reads partials written in its own or a later launch"
    # launch 0 stats only, last launch apply only, every launch >= 1 holds apply blocks (PDL completion chain)
    assert not ap[j == 0].any() and not st[j == L - 1].any()
    assert all(ap[j == k].any() for k in range(1, L)), "a launch >= 1 without apply blocks breaks the wait chain"
    # y: each apply tile once (above) -> disjoint stores. Reuse distance: new x tiles first-read between a tile's
    # stats read and its apply re-read, in dispatch order (launch by launch, block order inside a launch)
    if chunk_tiles is not None:  # the rows are in dispatch order (launch, then block index)
        assert (np.diff(j) >= 0).all()
        stats_pos = np.empty(total * P, dtype=np.int64)
        stats_pos[g[st] * P + t[st]] = np.nonzero(st)[0]
        cum_stats = np.cumsum(st)
        ap_idx = np.nonzero(ap)[0]
        between = cum_stats[ap_idx] - cum_stats[stats_pos[g[ap] * P + t[ap]]]
        limit = chunk_tiles if order == 0 else 2 * chunk_tiles
        assert between.max() < limit, f"x reuse distance {between.max()} tiles >= {limit}"


CASES = [  # (total groups, P tiles per group, groups per chunk)
    (32, 8, 4), (32, 8, 32), (32, 8, 1), (32, 8, 5), (7, 3, 2), (1, 1, 1), (1, 17, 1), (64, 1, 9), (3, 544, 1),
    (32, 103, 3), (32, 272, 1), (2, 5, 100),
]


@pytest.mark.parametrize("order", [0, 1])
@pytest.mark.parametrize("total,P,gpc", CASES)
def test_schedule_complete_race_free_and_within_window(shim, total: int, P: int, gpc: int, order: int) -> None:
    rows, info = enumerate_schedule(shim, total, P, gpc, order)
    g_eff = min(max(gpc, 1), total)
    assert info["gpc"] == g_eff and info["K"] == -(-total // g_eff) and info["launches"] == info["K"] + 1
    assert info["blocks"] == 2 * total * P == len(rows)
    check_schedule(rows, total, P, order, chunk_tiles=g_eff * P)


def test_production_plans_use_whole_group_chunks(shim) -> None:
    """The planner's gpc = max(1, chunk_bytes // group_bytes): chunks of whole groups, <= the budget unless one
    group is larger (the 1.14 GB row's 17.8 MB groups at a 12 MiB budget: 32 chunks, 33 launches)."""
    MiB = 1 << 20
    for c, hw, chunk in [(256, 17 * 256 * 256, 12), (128, 17 * 96 * 256, 12), (512, 2 * 64 * 64, 8),
                         (128, 17 * 256 * 256, 24)]:
        gbytes = c // 32 * hw * 2
        gpc = max(1, chunk * MiB // gbytes)
        P = -(-gbytes // (32 * 1024))
        rows, info = enumerate_schedule(shim, 32, P, gpc, 0)
        assert info["gpc"] == min(gpc, 32)
        assert info["gpc"] * gbytes <= chunk * MiB or info["gpc"] == 1
        check_schedule(rows, 32, P, 0, chunk_tiles=info["gpc"] * P)
    _, info = enumerate_schedule(shim, 32, 544, max(1, 12 * MiB // (8 * 17 * 256 * 256 * 2)), 0)
    assert info["launches"] == 33


def _mutant_same_launch(rows: np.ndarray) -> np.ndarray:
    """The wrong schedule of the brief: each chunk applied in the launch that computes its stats."""
    m = rows.copy()
    m[m[:, 2] == ROLE_APPLY, 0] -= 1
    return m


def _mutant_dup_stats(rows: np.ndarray) -> np.ndarray:
    m = rows.copy()
    st = np.nonzero(m[:, 2] == ROLE_STATS)[0]
    m[st[1], 3:5] = m[st[0], 3:5]
    m[st[1], 5] = m[st[0], 5]
    return m


def _mutant_one_early(rows: np.ndarray) -> np.ndarray:
    """Only the last apply tile of the last chunk moves one launch early (into its stats launch)."""
    m = rows.copy()
    ap = np.nonzero(m[:, 2] == ROLE_APPLY)[0]
    m[ap[-1], 0] -= 1
    return m


@pytest.mark.parametrize("mutant", [_mutant_same_launch, _mutant_dup_stats, _mutant_one_early])
def test_wrong_schedules_are_rejected(shim, mutant) -> None:
    total, P, gpc = 32, 8, 4
    rows, info = enumerate_schedule(shim, total, P, gpc, 0)
    check_schedule(rows, total, P, 0, chunk_tiles=gpc * P)  # the real one passes
    with pytest.raises(AssertionError):
        check_schedule(mutant(rows), total, P)


# ----------------------------------------------------------------------------------- 3. the statistics (numpy)
f32 = np.float32
THREADS, U, NB, VEC = 256, 8, 4, 8  # fp16 16-byte path: 8 vectors of 8 per thread, batches of 4 vectors


def merge(a, b):
    """stat_merge in float32 (elementwise over arrays of (n, mean, m2)); __fdividef modelled as an IEEE divide."""
    n = (a[0] + b[0]).astype(f32)
    with np.errstate(invalid="ignore", divide="ignore"):
        fb = np.where(n > 0, b[0] / np.where(n > 0, n, f32(1)), f32(0)).astype(f32)
    d = (b[1] - a[1]).astype(f32)
    mean = (d * fb + a[1]).astype(f32)
    m2 = (a[2] + b[2] + d * d * a[0] * fb).astype(f32)
    return n, mean, m2


def tree(s):
    """warp_merge_down over the last axis (32 lanes): lane l takes lane l + off (off 16, 8, 4, 2, 1)."""
    n, mean, m2 = (x.copy() for x in s)
    for off in (16, 8, 4, 2, 1):
        sh = [np.concatenate([x[..., off:], np.zeros_like(x[..., :off])], axis=-1) for x in (n, mean, m2)]
        n, mean, m2 = merge((n, mean, m2), sh)
    return n[..., 0], mean[..., 0], m2[..., 0]


def block(s):
    """block_merge of 256 per-thread stats: warp trees, then warp 0's tree over the 8 warp results."""
    wn, wm, wq = tree(tuple(x.reshape(8, 32) for x in s))
    pad = [np.concatenate([x, np.zeros(24, f32)]) for x in (wn, wm, wq)]
    return tree(tuple(pad))


def tile_partial(xg: np.ndarray, t: int, K: np.float32):
    """Stats block of tile t of a group (x in float32, shifted by K): per-thread two-pass batches, Chan, trees."""
    dvec = xg.size // VEC
    vec = xg.reshape(dvec, VEC)
    base = t * THREADS * U + np.arange(THREADS)
    st = (np.zeros(THREADS, f32), np.zeros(THREADS, f32), np.zeros(THREADS, f32))
    for h in range(U // NB):
        vidx = base[:, None] + (h * NB + np.arange(NB))[None, :] * THREADS  # [thread, k]
        valid = vidx < dvec
        vals = (vec[np.minimum(vidx, dvec - 1)] - K).astype(f32)  # [thread, k, VEC]
        vals = np.where(valid[..., None], vals, f32(0))
        even, odd = vals[..., 0::2], vals[..., 1::2]
        s0 = np.zeros(THREADS, f32)
        s1 = np.zeros(THREADS, f32)
        for k in range(NB):  # the kernel's accumulation order: k, then i; even i -> s0, odd i -> s1
            for i in range(VEC // 2):
                s0 = (s0 + even[:, k, i]).astype(f32)
                s1 = (s1 + odd[:, k, i]).astype(f32)
        nbv = valid.sum(axis=1)
        nb = (nbv * VEC).astype(f32)
        with np.errstate(invalid="ignore", divide="ignore"):
            m = np.where(nbv == NB, (s0 + s1) * f32(1.0 / (NB * VEC)), (s0 + s1) / np.maximum(nb, 1)).astype(f32)
        q0 = np.zeros(THREADS, f32)
        q1 = np.zeros(THREADS, f32)
        for k in range(NB):
            for i in range(VEC // 2):
                de = np.where(valid[:, k], even[:, k, i] - m, f32(0)).astype(f32)
                do = np.where(valid[:, k], odd[:, k, i] - m, f32(0)).astype(f32)
                q0 = (de * de + q0).astype(f32)
                q1 = (do * do + q1).astype(f32)
        upd = merge(st, (nb, m, (q0 + q1).astype(f32)))
        st = tuple(np.where(nbv > 0, u, s).astype(f32) for u, s in zip(upd, st, strict=True))
    return block(st)


def apply_merge(parts, order=None):
    """The apply block's merge of a group's P partials: thread i takes partials i, i + 256, ... in index order,
    then the block trees. order (a permutation) models a WRONG merge in completion order instead."""
    P = len(parts)
    seq = list(range(P)) if order is None else list(order)
    st = (np.zeros(THREADS, f32), np.zeros(THREADS, f32), np.zeros(THREADS, f32))
    for r in range(0, P, THREADS):
        idx = seq[r:r + THREADS]
        cur = tuple(np.array([parts[p][c] for p in idx] + [0.0] * (THREADS - len(idx)), f32) for c in range(3))
        st = merge(st, cur)
    return block(st)


def group_stats(xg: np.ndarray, order=None):
    K = xg[0]
    P = -(-(xg.size // VEC) // (THREADS * U))
    parts = [tuple(f32(v) for v in tile_partial(xg, t, K)) for t in range(P)]
    n, mean, m2 = apply_merge(parts, order)
    return float(K) + float(mean), float(m2) / float(n), parts


def _groups():
    rng = np.random.default_rng(7)
    return [
        rng.normal(1e4, 0.01, 3 * 16384 + 4000).astype(f32),        # offset 1e4 +- 0.01, ragged last tile
        rng.normal(1e4, 100.0, 2 * 16384).astype(f32),                 # offset 1e4 +- 100
        rng.normal(0.0, 1.0, 5 * 16384 + 8 * 33).astype(f32),
        rng.normal(-3.0, 0.5, 16384 // 2).astype(f32),                 # one partial tile
    ]


def test_group_stats_model_matches_fp64() -> None:
    for xg in _groups():
        mean, var, _ = group_stats(xg)
        ref = xg.astype(np.float64)
        rm, rv = ref.mean(), ref.var()
        assert abs(mean - rm) <= 2e-5 * np.sqrt(rv), (mean, rm)
        assert abs(var - rv) <= 2e-5 * rv, (var, rv)


def test_merge_is_fixed_order_and_a_completion_order_merge_is_rejected() -> None:
    xg = _groups()[0]
    _, _, parts = group_stats(xg)
    rng = np.random.default_rng(3)
    fixed = apply_merge(parts)
    # the stats blocks may finish in any order: the partial slots hold the same values, the merge reads them by
    # index, so the result is the same bits (what every apply block of the group computes)
    for _ in range(8):
        perm = rng.permutation(len(parts))
        slots = [None] * len(parts)
        for p in perm:  # write in completion order
            slots[p] = parts[p]
        assert all(np.array_equal(a, b) for a, b in zip(apply_merge(slots), fixed, strict=True))
    # a merge in completion order (the order an atomic-counter design would see) changes the bits: rejected
    many = [tuple(f32(v) for v in p) for p in parts] * 90  # P = 360 partials: 2 per thread for some threads
    base = apply_merge(many)
    changed = 0
    for _ in range(8):
        alt = apply_merge(many, rng.permutation(len(many)))
        changed += not all(np.array_equal(a, b) for a, b in zip(alt, base, strict=True))
    assert changed > 0


def test_single_pass_variance_is_rejected_on_offset_rows() -> None:
    xg = _groups()[0]
    ref = xg.astype(np.float64)
    s = np.float32(0)
    q = np.float32(0)
    for c in np.array_split(xg, 64):  # fp32 sums, the E[x^2] - mean^2 a single-pass kernel computes
        s = f32(s + c.sum(dtype=f32))
        q = f32(q + (c * c).sum(dtype=f32))
    n = f32(xg.size)
    bad = float(q / n - (s / n) * (s / n))
    assert abs(bad - ref.var()) > 100 * 2e-5 * ref.var()  # the model's own error bound above is 2e-5


def test_unshifted_stats_are_rejected_on_offset_rows() -> None:
    """The shift by the group's first element is what keeps the offset rows exact: the same model with K = 0 misses
    the 2e-5 bound by orders of magnitude (a mutant the bound must catch)."""
    xg = _groups()[0]
    P = -(-(xg.size // VEC) // (THREADS * U))
    parts = [tuple(f32(v) for v in tile_partial(xg, t, f32(0))) for t in range(P)]
    n, _, m2 = apply_merge(parts)
    rv = xg.astype(np.float64).var()
    assert abs(float(m2) / float(n) - rv) > 100 * 2e-5 * rv
