"""c007's CUDA one-pass RMSNorm on a CPU host: the C++ contract and launch plan (src/onepass_contract.h, compiled
here with g++ and called through ctypes) and a model of the kernel's per-thread indexing and arithmetic
(src/onepass_rms.cu) against the fp64 oracle within task.toml's tolerances.

- decide(): every branch (production rows, the test rows' strided / 3-D / fp32-weight shapes, and each reason to
  hand a call to the Triton path: dtype, D not 16-byte vectors or too narrow / wide, a last stride != 1, rows
  that overlap or do not collapse to one stride, misalignment, a weight of another shape / stride / dtype, CPU
  tensors, another device, another arch, autograd recording, no rows).
- make_plan(): the production rows' R, G and CTAs on 132 SMs x 16 resident CTAs (the sm_90a build keeps <= 32
  registers a thread: tests/test_onepass_cuda_model.py::test_sm90a_build checks it with ptxas).
- The model: each (CTA, thread) of the plan's grid takes the rows and the 16-byte vector the kernel gives it
  (row = (cta * R + r) * G + thread / L, vector = thread % L, vectors >= vecs idle); every output element must be
  written exactly once, nothing past the last row; per-lane fp32 sums in element order, the xor butterfly over
  the L lanes, rstd = rsqrt(sum * fp32(1/D) + eps), y = (x * rstd) * w rounded once. Two wrong variants (a grid
  one CTA short, eps dropped) must fail the same comparison.
"""

from __future__ import annotations

import ctypes
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import torch

from kda_lab.testing import assert_binding_compiles, compile_host_cpp

SRC = Path(__file__).resolve().parents[1] / "src"
TOL = {torch.bfloat16: (4e-3, 8e-3), torch.float16: (1e-3, 2e-3), torch.float32: (5e-4, 1e-4)}
CODE = {torch.float16: 1, torch.bfloat16: 2, torch.float32: 3, torch.float64: 0}
THREADS = 128
RESIDENT = 132 * 16  # H200: 132 SMs x 16 CTAs of 128 threads at <= 32 registers

SHIM = r"""
#include "onepass_contract.h"
using namespace kda_onepass;
extern "C" int decide_flat(const int64_t* xi, const int64_t* wi, const int64_t* ci, int64_t* out) {
  // xi: dim, dtype, is_cuda, device, requires_grad, addr, sizes[8], strides[8]; wi likewise; ci: cur, major,
  // minor, grad_mode
  CallDesc c{};
  TensorDesc* ts[2] = {&c.x, &c.w};
  const int64_t* in[2] = {xi, wi};
  for (int k = 0; k < 2; ++k) {
    TensorDesc& t = *ts[k];
    const int64_t* a = in[k];
    t.dim = (int32_t)a[0]; t.dtype = (int32_t)a[1]; t.is_cuda = (int32_t)a[2]; t.device = (int32_t)a[3];
    t.requires_grad = (int32_t)a[4]; t.addr = (uint64_t)a[5];
    for (int i = 0; i < kMaxDims; ++i) { t.sizes[i] = a[6 + i]; t.strides[i] = a[14 + i]; }
  }
  c.current_device = (int32_t)ci[0]; c.cc_major = (int32_t)ci[1]; c.cc_minor = (int32_t)ci[2];
  c.grad_mode = (int32_t)ci[3];
  const Decision d = decide(c);
  out[0] = d.ok; out[1] = d.x_dtype; out[2] = d.w_f32; out[3] = d.lanes; out[4] = d.vecs; out[5] = d.d;
  out[6] = d.rows; out[7] = d.row_stride;
  if (d.ok) {
    const Plan p = make_plan(d, ci[4]);
    out[8] = p.rows_per_group; out[9] = p.groups; out[10] = p.ctas;
  }
  return d.ok;
}
"""


@pytest.fixture(scope="module")
def lib(tmp_path_factory: pytest.TempPathFactory) -> ctypes.CDLL:
    out = tmp_path_factory.mktemp("onepass_contract")
    (out / "shim.cpp").write_text(SHIM)
    return ctypes.CDLL(str(compile_host_cpp(out / "shim.cpp", SRC, out / "shim.so", shared=True, opt="-O1")))


def _desc(shape, strides, dtype, *, addr=1 << 20, cuda=True, device=0, grad=False) -> list[int]:
    sizes = list(shape) + [0] * (8 - len(shape))
    st = list(strides) + [0] * (8 - len(strides))
    return [len(shape), CODE.get(dtype, 0), int(cuda), device, int(grad), addr, *sizes, *st]


def _contig(shape) -> list[int]:
    st, acc = [], 1
    for s in reversed(shape):
        st.append(acc)
        acc *= s
    return list(reversed(st))


def decide(lib: ctypes.CDLL, x: list[int], w: list[int], cur=0, cc=(9, 0), grad_mode=False,
           resident=RESIDENT) -> dict[str, int] | None:
    arr = ctypes.c_int64 * 22
    out = (ctypes.c_int64 * 11)()
    ci = (ctypes.c_int64 * 5)(cur, cc[0], cc[1], int(grad_mode), resident)
    ok = lib.decide_flat(arr(*x), arr(*w), ci, out)
    if not ok:
        return None
    keys = ("ok", "x_dtype", "w_f32", "lanes", "vecs", "d", "rows", "row_stride", "R", "G", "ctas")
    return dict(zip(keys, list(out), strict=True))


def _call(lib, shape, dtype=torch.bfloat16, wdtype=None, strides=None, **kw):
    d = shape[-1]
    x = _desc(shape, strides or _contig(shape), dtype, **kw.pop("xkw", {}))
    w = _desc([d], [1], wdtype or dtype, **kw.pop("wkw", {}))
    return decide(lib, x, w, **kw)


# ------------------------------------------------------------------------------------------------ contract / plan

@pytest.mark.parametrize("rows,R,ctas", [(1320, 1, 165), (4096, 1, 512), (16384, 2, 1024),
                                         (648720, 2, 40545), (650040, 2, 40628)])
def test_production_rows_take_the_kernel_and_plan(lib, rows: int, R: int, ctas: int) -> None:
    d = _call(lib, [rows, 128])
    assert d is not None and (d["lanes"], d["vecs"], d["rows"], d["row_stride"]) == (16, 16, rows, 128)
    assert (d["R"], d["G"], d["ctas"]) == (R, 8, ctas)  # R = 1 within half a wave, else SGLang's tile
    assert d["ctas"] * d["R"] * d["G"] >= rows > (d["ctas"] - 1) * d["R"] * d["G"]


def test_test_rows_shapes(lib) -> None:
    assert _call(lib, [24, 128], strides=[384, 1])["row_stride"] == 384  # packed-qkv slice, read in place
    d = _call(lib, [11, 2, 64])  # 3-D heads: rows collapse
    assert (d["rows"], d["row_stride"], d["lanes"], d["vecs"]) == (22, 64, 8, 8)
    d = _call(lib, [19, 72])  # D = 72: 9 vectors on 16 lanes
    assert (d["lanes"], d["vecs"]) == (16, 9)
    assert _call(lib, [16, 128], wdtype=torch.float32)["w_f32"] == 1
    d = _call(lib, [12, 128], dtype=torch.float32)  # fp32 rows: 32 lanes
    assert (d["lanes"], d["vecs"], d["w_f32"]) == (32, 32, 0)
    d = _call(lib, [4, 1, 3, 128], strides=[768, 5, 256, 1])  # size-1 dims never move the address
    assert d is not None and (d["rows"], d["row_stride"]) == (12, 256)
    assert _call(lib, [5, 3, 128], strides=[384 * 3, 384, 1])["row_stride"] == 384
    assert _call(lib, [128], dtype=torch.bfloat16)["rows"] == 1  # a 1-D x is one row


@pytest.mark.parametrize("case", [
    "fp64", "d_not_vectors", "d_too_narrow", "d_too_wide", "last_stride", "row_overlap", "row_stride_unaligned",
    "no_collapse", "x_misaligned", "w_misaligned", "w_shape", "w_stride", "w_dtype", "cpu", "w_other_device",
    "not_current", "sm100", "grad", "no_rows", "zero_dim",
])
def test_outside_the_contract_goes_to_triton(lib, case: str) -> None:
    b = torch.bfloat16
    cases = {
        "fp64": lambda: _call(lib, [8, 128], dtype=torch.float64, wdtype=torch.float32),
        "d_not_vectors": lambda: _call(lib, [8, 100]),  # 200 bytes
        "d_too_narrow": lambda: _call(lib, [8, 16]),  # 2 vectors
        "d_too_wide": lambda: _call(lib, [8, 264]),  # 33 vectors
        "last_stride": lambda: _call(lib, [8, 128], strides=[1, 8]),
        "row_overlap": lambda: _call(lib, [8, 128], strides=[64, 1]),
        "row_stride_unaligned": lambda: _call(lib, [8, 128], strides=[132, 1]),
        "no_collapse": lambda: _call(lib, [4, 3, 128], strides=[1024, 128 + 8, 1]),
        "x_misaligned": lambda: _call(lib, [8, 128], xkw={"addr": (1 << 20) + 8}),
        "w_misaligned": lambda: _call(lib, [8, 128], wkw={"addr": (1 << 20) + 2}),
        "w_shape": lambda: decide(lib, _desc([8, 128], [128, 1], b), _desc([64], [1], b)),
        "w_stride": lambda: decide(lib, _desc([8, 128], [128, 1], b), _desc([128], [2], b)),
        "w_dtype": lambda: _call(lib, [8, 128], wdtype=torch.float16),
        "cpu": lambda: _call(lib, [8, 128], xkw={"cuda": False}, wkw={"cuda": False}),
        "w_other_device": lambda: _call(lib, [8, 128], wkw={"device": 1}),
        "not_current": lambda: _call(lib, [8, 128], cur=1),
        "sm100": lambda: _call(lib, [8, 128], cc=(10, 0)),
        "grad": lambda: _call(lib, [8, 128], grad_mode=True, xkw={"grad": True}),
        "no_rows": lambda: _call(lib, [0, 128]),
        "zero_dim": lambda: decide(lib, _desc([], [], b), _desc([128], [1], b)),
    }
    assert cases[case]() is None
    if case == "grad":  # grad mode alone, or a tensor that requires grad with grad mode off: the kernel's
        assert _call(lib, [8, 128], grad_mode=True) is not None
        assert _call(lib, [8, 128], xkw={"grad": True}) is not None


# ------------------------------------------------------------------------------------------------ kernel model

def _round(t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    return t.to(dtype)  # torch's fp32 -> bf16 / fp16 conversion rounds to nearest even, as __floats2*_rn


def model_kernel(x: torch.Tensor, w: torch.Tensor, eps: float, plan: dict[str, int], *,
                 ctas: int | None = None, drop_eps: bool = False) -> torch.Tensor:
    """y as the kernel's grid computes it (NaN where no thread stores). Vectorized over (CTA, thread, r)."""
    rows, d, lanes, vecs, R, G = plan["rows"], plan["d"], plan["lanes"], plan["vecs"], plan["R"], plan["G"]
    ctas = plan["ctas"] if ctas is None else ctas
    v = 16 // x.element_size()
    x2 = x.reshape(rows, d)
    tid = torch.arange(THREADS)
    lane, g = tid % lanes, tid // lanes
    cta = torch.arange(ctas)[:, None, None]
    r = torch.arange(R)[None, None, :]
    row = (cta * R + r) * G + g[None, :, None]  # [ctas, threads, R]
    lane3 = lane[None, :, None].expand_as(row)
    ok = (lane3 < vecs) & (row < rows)
    # the per-thread partial sums: the lane's V elements in order, fp32 (fma: one rounding; products are exact in
    # fp64 for these inputs' fp32 values, so fp64 then one rounding to fp32 per step is fma's result)
    xf = torch.zeros(ctas, THREADS, R, v, dtype=torch.float32)
    rr, ll = row[ok], lane3[ok]
    cols = ll[:, None] * v + torch.arange(v)[None, :]
    xf[ok] = x2[rr[:, None], cols].float()
    s = torch.zeros(ctas, THREADS, R, dtype=torch.float32)
    for i in range(v):
        s = (s.double() + xf[..., i].double() * xf[..., i].double()).float()
    # xor butterfly inside each group of L lanes (all 32 lanes of a warp take part)
    m = lanes // 2
    while m >= 1:
        s = s + s[:, tid ^ m, :]
        m //= 2
    inv_d = torch.tensor(1.0 / d, dtype=torch.float32)
    rstd = torch.rsqrt(s * inv_d + (0.0 if drop_eps else torch.tensor(eps, dtype=torch.float32)))
    wf = torch.zeros(THREADS, v, dtype=torch.float32)
    lane_ok = lane < vecs
    wf[lane_ok] = w.float()[lane[lane_ok][:, None] * v + torch.arange(v)[None, :]]
    yf = (xf * rstd[..., None]) * wf[None, :, None, :]
    y = torch.full((rows, d), float("nan"), dtype=x.dtype)
    count = torch.zeros(rows, d, dtype=torch.int32)
    assert not bool((row[ok] >= rows).any())  # never a store past the last row
    y[rr[:, None], cols] = _round(yf[ok], x.dtype)
    count.index_put_((rr[:, None].expand_as(cols), cols), torch.ones_like(cols, dtype=torch.int32), accumulate=True)
    assert int(count.max()) <= 1, "an element is stored twice"
    return y.reshape(x.shape)


def _oracle(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    xd = x.double()
    return xd * torch.rsqrt(xd.square().mean(-1, keepdim=True) + eps) * w.double()


def _close(y: torch.Tensor, ref: torch.Tensor) -> bool:
    atol, rtol = TOL[y.dtype]
    yd = y.double()
    return bool(torch.isfinite(yd).all()) and bool(((yd - ref).abs() <= atol + rtol * ref.abs()).all())


ROWS_CASES = [
    ((1320, 128), torch.bfloat16, torch.bfloat16, 1.0, 0),
    ((4096, 128), torch.bfloat16, torch.bfloat16, 1.0, 0),
    ((37, 128), torch.bfloat16, torch.bfloat16, 1.0, 0),
    ((19, 72), torch.bfloat16, torch.bfloat16, 1.0, 0),  # 9 of 16 lanes
    ((11, 2, 64), torch.bfloat16, torch.bfloat16, 1.0, 0),
    ((16, 128), torch.bfloat16, torch.float32, 1.0, 0),
    ((12, 128), torch.float32, torch.float32, 1e-4, 0),  # tiny values: mean square << eps
    ((16, 128), torch.float32, torch.float32, 1.0, 300.0),  # mean 300
    ((1029, 128), torch.float16, torch.float16, 1.0, 0),
    ((8195, 128), torch.bfloat16, torch.bfloat16, 1.0, 0),
    ((5000, 256), torch.bfloat16, torch.bfloat16, 1.0, 0),  # 32 lanes
    ((300, 48), torch.float16, torch.float16, 1.0, 0),  # 6 of 8 lanes
    ((70, 12), torch.float32, torch.float32, 1.0, 0),  # 3 of 4 lanes
]


def _rows(shape, dtype, wdtype, std, mean, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = (torch.randn(shape, generator=g, dtype=torch.float64) * std + mean).to(dtype)
    w = (torch.rand(shape[-1], generator=g, dtype=torch.float64) + 0.5).to(wdtype)
    return x, w


@pytest.mark.parametrize("shape,dtype,wdtype,std,mean", ROWS_CASES, ids=[f"{c[0]}-{c[1]}-w{c[2]}" for c in ROWS_CASES])
@pytest.mark.parametrize("resident", [RESIDENT, 8])  # 8: forces R = 2 on every row with more than 8 x G rows
def test_kernel_model_matches_the_oracle(lib, shape, dtype, wdtype, std, mean, resident) -> None:
    x, w = _rows(shape, dtype, wdtype, std, mean)
    plan = _call(lib, list(shape), dtype=dtype, wdtype=wdtype, resident=resident)
    assert plan is not None
    y = model_kernel(x, w, 1e-6, plan)
    assert _close(y, _oracle(x, w, 1e-6))


def test_wrong_variants_are_rejected(lib) -> None:
    x, w = _rows((1029, 128), torch.bfloat16, torch.bfloat16, 1e-4, 0)
    plan = _call(lib, [1029, 128], resident=8)
    assert plan["R"] == 2
    ref = _oracle(x, w, 1e-6)
    assert _close(model_kernel(x, w, 1e-6, plan), ref)
    assert not _close(model_kernel(x, w, 1e-6, plan, ctas=plan["ctas"] - 1), ref)  # the tail rows never written
    assert not _close(model_kernel(x, w, 1e-6, plan, drop_eps=True), ref)  # eps dropped (mean square ~ 1e-8)


# ------------------------------------------------------------------------------------------------ sm_90a build

def test_sm90a_build(tmp_path: Path) -> None:
    """Every kernel builds for sm_90a without spills; the production ones (bf16, 16 lanes, R = 1 and 2) keep <= 32
    registers (16 resident CTAs of 128 threads: 2048 threads, 32 / 64 KB of loads in flight per SM)."""
    nvcc = shutil.which("nvcc")
    if not nvcc:
        pytest.skip("nvcc not on PATH (tests/test_cuda_sources.py says so too)")
    res = subprocess.run([nvcc, "-std=c++17", "-O3", "-gencode=arch=compute_90a,code=sm_90a", "-Xptxas", "-v",
                          f"-I{SRC}", "-c", str(SRC / "onepass_rms.cu"), "-o", str(tmp_path / "op.o")],
                         capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr
    stats = {}
    for block in res.stderr.split("Compiling entry function '")[1:]:
        name = block.split("'", 1)[0]
        regs = int(re.search(r"Used (\d+) registers", block).group(1))  # type: ignore[union-attr]
        spill = int(re.search(r"(\d+) bytes spill stores", block).group(1))  # type: ignore[union-attr]
        stats[name] = (regs, spill)
    assert len(stats) == 48
    assert all(spill == 0 for _, spill in stats.values()), stats
    for r in (1, 2):
        regs, _ = stats[f"_ZN11kda_onepass18onepass_rms_kernelILi2ELb0ELi16ELi{r}EEEvNS_6ParamsE"]
        assert regs <= 32, (r, regs)


# ------------------------------------------------------------------------------------------------ register.py

def test_register_dispatch_without_a_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """Importing builds nothing; CPU tensors never load the extension; the binding's answer is returned as is, its
    None (outside the contract) and every call the wrapper does not hand it go to c006's Triton path."""
    from kda_lab.task import load_task
    from kda_lab.task.schema import load_candidate

    reg = load_candidate(load_task(Path(__file__).resolve().parents[1]))
    assert reg.EXTENSION.module is None and reg._ext is None and not reg._ext_tried
    assert reg.EXTENSION.name.startswith("kda_h200_onepass_rms_")
    monkeypatch.setattr(reg, "one_pass_triton", lambda x, w, eps: "triton")
    x, w = torch.randn(4, 128), torch.ones(128)
    assert reg.triton_one_pass_rms_norm(x, w, 1e-6) == "triton"
    assert reg._ext is None and not reg._ext_tried  # a CPU call never loads (or builds) the extension

    calls: list[float] = []

    class FakeExt:
        def __init__(self, result: object) -> None:
            self.result = result

        def one_pass(self, x: torch.Tensor, w: torch.Tensor, eps: float) -> object:
            calls.append(eps)
            return self.result

    y = torch.zeros(1)
    monkeypatch.setattr(reg, "_ext", FakeExt(y))
    assert reg.triton_one_pass_rms_norm(x, w, 1e-5) is y and calls == [1e-5]
    assert reg.triton_one_pass_rms_norm(torch.nn.Parameter(x), w) is y and calls == [1e-5, 1e-6]
    monkeypatch.setattr(reg, "_ext", FakeExt(None))
    assert reg.triton_one_pass_rms_norm(x, w, 1e-6) == "triton" and len(calls) == 3
    for args in ((x, w, 1), (x, None, 1e-6), (x.numpy(), w, 1e-6), (x, w, True)):
        assert reg.triton_one_pass_rms_norm(*args) == "triton"
    monkeypatch.setattr(reg, "_is_compiling", lambda: True)
    assert reg.triton_one_pass_rms_norm(x, w, 1e-6) == "triton"
    assert len(calls) == 3  # none of those reached the binding


def test_binding_compiles_against_torch_headers(tmp_path: Path) -> None:
    """onepass_binding.cpp against torch's headers (g++ syntax check, warnings as errors): the box builds it."""
    assert_binding_compiles(SRC / "onepass_binding.cpp", SRC, tmp_path)
