"""c006's CUDA small-row kernel on a CPU host, kept for the record under dev/small_cuda/ (c006 measured slower than
c005 on the H200, docs/notes.md "c006 on the H200"; src/ is c005 again): the C++ contract and launch plan
(dev/small_cuda/nss_small_contract.h, compiled here with g++ and called through ctypes), a model of the kernel's
per-thread indexing and fp32 arithmetic (dev/small_cuda/nss_small.cu) against the fp64 oracle within task.toml's
tolerances, the spill-free sm_90a build, and the torch binding against torch's headers. c006's register.py
dispatch and its test left with src/ (``git show 6cd13a9:<task>/src/register.py``).

- decide(): every production row of task.toml described as the binding describes it: exactly the eight rows under
  2 MB are the kernel's (with their plans), every other row goes to c005's path with the reason expected; then
  each reason to refuse a call (dtype, shape, layout, residual, gate, scale, shift, affine, one-sided LayerNorm,
  size, device, arch, autograd, special tensors, norm type).
- The model: each (CTA, thread) of the plan takes the 16-byte vectors j·32W + t of its row; per-thread two-pass
  statistics, the 5-step xor butterfly of (mean, M2) pairs, the warp-order merge; the rounding points of
  prompt.md K. Against the fp64 oracle for the production small rows and test-row layouts (bf16 / fp16, LayerNorm
  and RMSNorm, affine, gate None, mean-300 rows, variance near eps, D = 256 .. 8192). A variant without the
  butterfly's between-lane term fails the same comparison on a ramp row.
"""

from __future__ import annotations

import ctypes
import shutil
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import pytest
import torch

from kda_lab.families.norm_scale_shift import norm_scale_shift_oracle, scale_residual_norm_scale_shift_oracle
from kda_lab.measure.correctness import compare
from kda_lab.testing import assert_binding_compiles, compile_host_cpp

TASK_DIR = Path(__file__).resolve().parents[1]
SRC = TASK_DIR / "dev" / "small_cuda"
TOML = tomllib.loads((TASK_DIR / "task.toml").read_text())
TOL = TOML["tolerances"]
CODE = {torch.float16: 1, torch.bfloat16: 2, torch.float32: 3, torch.float64: 0}
REASONS = ("ok", "norm", "x_dtype", "x_shape", "x_layout", "residual", "gate", "scale", "shift", "affine",
           "one_sided", "too_large", "device", "arch", "grad", "special")
SMALL_ROWS = {"qwen_nss_L19", "qwen_nss_L47", "mova_nss_L101", "hyvideo_nss_L55", "qwen_res_nss_L19",
              "qwen_res_nss_L47", "mova_res_nss_L101_nogate", "hyvideo_res_nss_L55"}

SHIM = r"""
#include "nss_small_contract.h"
using namespace kda_nss;
// t: 7 tensors x 24 int64 (present, dim, dtype, is_cuda, device, requires_grad, special, addr, sizes[4],
// strides[4], 8 unused); c: residual_form, norm, current_device, cc_major, cc_minor, grad_mode
extern "C" int decide_flat(const int64_t* t, const int64_t* c, int64_t* out) {
  CallDesc d{};
  TensorDesc* ts[7] = {&d.x, &d.residual, &d.gate, &d.weight, &d.bias, &d.scale, &d.shift};
  for (int k = 0; k < 7; ++k) {
    const int64_t* a = t + 24 * k;
    TensorDesc& s = *ts[k];
    s.present = (int32_t)a[0]; s.dim = (int32_t)a[1]; s.dtype = (int32_t)a[2]; s.is_cuda = (int32_t)a[3];
    s.device = (int32_t)a[4]; s.requires_grad = (int32_t)a[5]; s.special = (int32_t)a[6]; s.addr = (uint64_t)a[7];
    for (int i = 0; i < kMaxDims; ++i) { s.sizes[i] = a[8 + i]; s.strides[i] = a[12 + i]; }
  }
  d.residual_form = (int32_t)c[0]; d.norm = (int32_t)c[1]; d.current_device = (int32_t)c[2];
  d.cc_major = (int32_t)c[3]; d.cc_minor = (int32_t)c[4]; d.grad_mode = (int32_t)c[5];
  const Decision r = decide(d);
  out[0] = r.reason; out[1] = r.warps; out[2] = r.vpt; out[3] = r.rows; out[4] = r.bytes; out[5] = r.has_gate;
  out[6] = r.has_w; out[7] = r.has_b; out[8] = r.is_rms; out[9] = r.x_sb; out[10] = r.x_ss; out[11] = r.r_sb;
  out[12] = r.r_ss; out[13] = r.s;
  return r.reason;
}
"""


@pytest.fixture(scope="module")
def lib(tmp_path_factory: pytest.TempPathFactory) -> ctypes.CDLL:
    out = tmp_path_factory.mktemp("nss_contract")
    (out / "shim.cpp").write_text(SHIM)
    return ctypes.CDLL(str(compile_host_cpp(out / "shim.cpp", SRC, out / "shim.so", shared=True, opt="-O1")))


class T:
    """A tensor as the binding describes it (no storage needed)."""

    def __init__(self, shape: tuple[int, ...], dtype: torch.dtype = torch.bfloat16,
                 strides: tuple[int, ...] | None = None, *, addr: int = 1 << 20, cuda: bool = True, device: int = 0,
                 grad: bool = False, special: bool = False) -> None:
        self.shape, self.dtype = tuple(shape), dtype
        self.strides = strides if strides is not None else torch.empty(shape, device="meta").stride()
        self.addr, self.cuda, self.device, self.grad, self.special = addr, cuda, device, grad, special

    def flat(self) -> list[int]:
        dim = len(self.shape)
        return ([1, dim, CODE[self.dtype], int(self.cuda), self.device, int(self.grad), int(self.special), self.addr]
                + list(self.shape) + [0] * (4 - dim) + list(self.strides) + [0] * (4 - dim) + [0] * 8)


def decide(lib: ctypes.CDLL, *, x: T, scale: T, shift: T, residual: T | None = None, gate: T | None = None,
           weight: T | None = None, bias: T | None = None, residual_form: bool = False, norm: int = 0,
           current: int = 0, cc: tuple[int, int] = (9, 0), grad_mode: bool = False) -> dict[str, Any]:
    flat: list[int] = []
    for t in (x, residual, gate, weight, bias, scale, shift):
        flat += t.flat() if t is not None else [0] * 24
    tarr = (ctypes.c_int64 * len(flat))(*flat)
    carr = (ctypes.c_int64 * 6)(int(residual_form or residual is not None), norm, current, cc[0], cc[1],
                                int(grad_mode))
    out = (ctypes.c_int64 * 14)()
    lib.decide_flat(tarr, carr, out)
    keys = ("reason", "warps", "vpt", "rows", "bytes", "has_gate", "has_w", "has_b", "is_rms", "x_sb", "x_ss",
            "r_sb", "r_ss", "s")
    d = dict(zip(keys, list(out), strict=True))
    d["reason"] = REASONS[d["reason"]]
    return d


def _spec(a: Any) -> T | None:
    if not isinstance(a, dict) or a.get("none"):
        return None
    return T(tuple(a["shape"]), getattr(torch, a["dtype"]), tuple(a["strides"]) if "strides" in a else None)


# ------------------------------------------------------------------------------------------------ decide()

def test_production_rows_under_2mb_are_the_kernels(lib: ctypes.CDLL) -> None:
    taken = {}
    for w in TOML["workloads"]:
        if w["kind"] != "production":
            continue
        a = w["args"]
        res = w["fn"] == "fused_scale_residual_norm_scale_shift"
        d = decide(lib, x=_spec(a["x"]), scale=_spec(a["scale"]), shift=_spec(a["shift"]),
                   residual=_spec(a.get("residual")), gate=_spec(a.get("gate")), weight=_spec(a.get("weight")),
                   bias=_spec(a.get("bias")), residual_form=res, norm={"layer": 0, "rms": 1}[a["norm_type"]])
        if d["reason"] == "ok":
            taken[w["name"]] = (d["warps"], d["vpt"], d["rows"], d["bytes"])
        else:  # larger rows, or fp32 / scalar / per-token modulation: c005's path as before
            assert d["reason"] in ("too_large", "scale", "gate", "affine"), (w["name"], d)
    assert set(taken) == SMALL_ROWS
    for name, (warps, vpt, rows, nbytes) in taken.items():
        assert (warps, vpt) == ((2, 3) if "mova" in name else (4, 3)), name
        assert rows == int(name.split("_L")[1].split("_")[0]) and nbytes <= 2 << 20
    assert taken["qwen_nss_L47"][3] == 2 * 47 * 3072 * 2 + 2 * 3072 * 2  # the task's byte model
    assert taken["qwen_res_nss_L47"][3] == 4 * 47 * 3072 * 2 + 3 * 3072 * 2


@pytest.mark.parametrize("d, plan", [(256, (1, 1)), (512, (1, 2)), (1024, (4, 1)), (1536, (2, 3)),
                                     (2048, (4, 2)), (3072, (4, 3)), (4096, (4, 4)), (5120, (5, 4)),
                                     (6144, (6, 4)), (7936, (31, 1)), (8192, (8, 4))])
def test_plans(lib: ctypes.CDLL, d: int, plan: tuple[int, int]) -> None:
    r = decide(lib, x=T((1, 2, d)), scale=T((d,)), shift=T((1, 1, d)))
    assert r["reason"] == "ok" and (r["warps"], r["vpt"]) == plan
    assert r["warps"] * 32 * r["vpt"] * 8 == d


def _base(**kw: Any) -> dict[str, Any]:
    d = 3072
    args = {"x": T((1, 47, d)), "scale": T((1, d), strides=(6 * d, 1)), "shift": T((1, d), strides=(6 * d, 1)),
            "residual": T((1, 47, d)), "gate": T((1, 1, d), strides=(6 * d, 6 * d, 1)), "residual_form": True}
    args.update(kw)
    return args


@pytest.mark.parametrize("kw, reason", [
    ({}, "ok"),
    ({"gate": None}, "ok"),
    ({"residual": None, "gate": None, "residual_form": False}, "ok"),
    ({"norm": 1, "weight": T((3072,)), "bias": T((3072,))}, "ok"),  # RMSNorm, the bias ignored
    ({"weight": T((3072,)), "bias": T((3072,))}, "ok"),
    ({"x": T((2, 8, 3072), strides=(16 * 3072, 3072, 1)), "residual": T((2, 8, 3072)),
      "scale": T((1, 1, 3072)), "shift": T((3072,)), "gate": T((1, 1, 1, 3072))}, "gate"),  # 4-D needs B = 1
    ({"x": T((1, 47, 3072), strides=(10 ** 6 + 8, 3072, 1))}, "ok"),  # a B = 1 view of a longer buffer
    ({"norm": 2}, "norm"),
    ({"x": T((1, 47, 3072), torch.float32)}, "x_dtype"),
    ({"x": T((47, 3072))}, "x_shape"),
    ({"x": T((1, 47, 3000))}, "x_shape"),
    ({"x": T((1, 47, 8448))}, "x_shape"),
    ({"x": T((1, 0, 3072))}, "x_shape"),
    ({"x": T((1, 47, 3072), strides=(47 * 3072, 3072, 2))}, "x_layout"),
    ({"x": T((1, 47, 3072), strides=(47 * 3072, 3076, 1))}, "x_layout"),
    ({"x": T((1, 47, 3072), addr=(1 << 20) + 8)}, "x_layout"),
    ({"residual": T((1, 47, 3072), torch.float16)}, "residual"),
    ({"residual": T((1, 46, 3072))}, "residual"),
    ({"residual": T((1, 47, 3072), addr=(1 << 20) + 2)}, "residual"),
    ({"gate": T((1, 47, 3072))}, "gate"),  # per-token gate
    ({"gate": T((1, 1, 3072), torch.float32)}, "gate"),
    ({"gate": T((1,))}, "gate"),  # scalar
    ({"scale": T((1,))}, "scale"),
    ({"scale": T((1, 47, 3072))}, "scale"),
    ({"scale": T((3072,), torch.float32)}, "scale"),
    ({"scale": T((3072,), strides=(2,))}, "scale"),
    ({"shift": T((3072,), addr=(1 << 20) + 4)}, "shift"),
    ({"shift": T((1, 3071))}, "shift"),
    ({"weight": T((3072,)), "bias": None}, "one_sided"),
    ({"weight": None, "bias": T((3072,))}, "one_sided"),
    ({"weight": T((3072,), torch.float32), "bias": T((3072,), torch.float32)}, "affine"),
    ({"weight": T((3072,), strides=(2,)), "bias": T((3072,))}, "affine"),
    ({"x": T((1, 171, 3072)), "residual": T((1, 171, 3072))}, "too_large"),
    ({"x": T((1, 47, 3072), cuda=False)}, "device"),
    ({"scale": T((3072,), device=1)}, "device"),
    ({"current": 1}, "device"),
    ({"cc": (10, 0)}, "arch"),
    ({"grad_mode": True, "x": T((1, 47, 3072), grad=True)}, "grad"),
    ({"grad_mode": True}, "ok"),  # grad mode on, nothing requires grad: no graph is recorded
    ({"x": T((1, 47, 3072), special=True)}, "special"),
    ({"scale": T((3072,), special=True)}, "scale"),
])
def test_decide_reasons(lib: ctypes.CDLL, kw: dict[str, Any], reason: str) -> None:
    assert decide(lib, **_base(**kw))["reason"] == reason


def test_size_cut_is_the_byte_model(lib: ctypes.CDLL) -> None:
    """The last residual row that fits 2 MiB is the kernel's, one more token is not (4·S·D·2 + 3·D·2 bytes)."""
    d = 3072
    s = ((2 << 20) - 3 * d * 2) // (4 * d * 2)
    for n, want in ((s, "ok"), (s + 1, "too_large")):
        r = decide(lib, **_base(x=T((1, n, d)), residual=T((1, n, d))))
        assert r["reason"] == want, (n, r)


# ------------------------------------------------------------------------------------------------ the model

def _fma(a: torch.Tensor, b: torch.Tensor | float, c: torch.Tensor) -> torch.Tensor:
    return (a.double() * (b.double() if isinstance(b, torch.Tensor) else b) + c.double()).float()


def kernel_model(x: torch.Tensor, scale: torch.Tensor, shift: torch.Tensor, *, residual: torch.Tensor | None = None,
                 gate: torch.Tensor | None = None, weight: torch.Tensor | None = None,
                 bias: torch.Tensor | None = None, rms: bool = False, eps: float = 1e-6, warps: int, vpt: int,
                 chan: bool = True) -> tuple[torch.Tensor, torch.Tensor | None]:
    """nss_small.cu's arithmetic, vectorized over the grid: CTA = row, thread t's vector j = columns
    (j·32W + t)·8 .. +8."""
    b, s, d = x.shape
    dt = x.dtype
    rows = b * s
    nthr = warps * 32
    assert nthr * vpt * 8 == d
    xf = x.reshape(rows, d).float()
    r_out = None
    if residual is not None:
        v = xf
        if gate is not None:
            v = (v * gate.reshape(1, d).float()).to(dt).float()
        r_out = (v + residual.reshape(rows, d).float()).to(dt)
        xf = r_out.float()
    # [rows, d] -> [rows, thread, vpt*8] in the thread's order (j-major, then the 8 elements)
    per = xf.reshape(rows, vpt, nthr, 8).permute(0, 2, 1, 3).reshape(rows, nthr, vpt * 8)
    cnt = vpt * 8
    if rms:
        mean = torch.zeros(rows, nthr)
    else:
        acc = torch.zeros(rows, nthr)
        for e in range(cnt):
            acc = acc + per[..., e]
        mean = acc * (1.0 / cnt)
    m2 = torch.zeros(rows, nthr)
    for e in range(cnt):
        dv = per[..., e] - mean
        m2 = _fma(dv, dv, m2)
    mean = mean.reshape(rows, warps, 32)
    m2 = m2.reshape(rows, warps, 32)
    half = 0.5 * cnt
    lanes = torch.arange(32)
    for m in (16, 8, 4, 2, 1):
        mb, qb = mean[..., lanes ^ m], m2[..., lanes ^ m]
        dm = mb - mean
        m2 = (m2 + qb) + (dm * dm * half if chan else 0.0)
        mean = 0.5 * (mean + mb)
        half *= 2.0
    assert torch.equal(mean, mean[..., :1].expand_as(mean)) and torch.equal(m2, m2[..., :1].expand_as(m2))
    pm, pq = mean[..., 0], m2[..., 0]  # [rows, warps]: lane 0's pair of each warp
    msum = torch.zeros(rows)
    for w in range(warps):
        msum = msum + pm[:, w]
    mu = msum / float(warps)
    q = torch.zeros(rows)
    spread = torch.zeros(rows)
    for w in range(warps):
        dm = pm[:, w] - mu
        q = q + pq[:, w]
        spread = _fma(dm, dm, spread)
    q = _fma(spread, 32.0 * cnt, q)
    inv_d = torch.tensor(1.0 / d, dtype=torch.float32)
    rstd = torch.rsqrt(q * inv_d + torch.tensor(eps, dtype=torch.float32))
    n = (xf - mu[:, None]) * rstd[:, None]
    if weight is not None:
        n = n * weight.float()
    if bias is not None and not rms:
        n = n + bias.float()
    n = n.to(dt).float()
    c = scale.reshape(1, d).float()
    h = shift.reshape(1, d).float()
    y = _fma(n, (1.0 + c).expand_as(n), h.expand_as(n)).to(dt)
    return y.reshape(b, s, d), (None if r_out is None else r_out.reshape(b, s, d))


def _plan(d: int) -> tuple[int, int]:
    k = d // 256
    if k % 4 == 0 and k // 4 <= 4:
        return 4, k // 4
    w = next(w for w in range(1, k + 1) if k % w == 0 and k // w <= 4)
    return w, k // w


def _check(out: torch.Tensor, ref: torch.Tensor, name: str) -> None:
    tol = TOL[str(out.dtype).removeprefix("torch.")]
    from kda_lab.task.schema import Tolerance

    c = compare(name, out, ref, Tolerance(**tol))
    assert c.ok, c.describe()


CASES = [
    # (name, S, D, dtype, residual, gate, affine, rms, mean, std)
    ("qwen_nss_L47", 47, 3072, torch.bfloat16, False, False, False, False, 0.0, 1.0),
    ("qwen_nss_L19", 19, 3072, torch.bfloat16, False, False, False, False, 0.0, 1.0),
    ("mova_nss_L101", 101, 1536, torch.bfloat16, False, False, False, False, 0.0, 1.0),
    ("qwen_res_nss_L47", 47, 3072, torch.bfloat16, True, True, False, False, 0.0, 1.0),
    ("mova_res_nss_L101_nogate", 101, 1536, torch.bfloat16, True, False, False, False, 0.0, 1.0),
    ("hyvideo_res_nss_L55", 55, 3072, torch.bfloat16, True, True, False, False, 0.0, 1.0),
    ("fp16_res_affine", 9, 2048, torch.float16, True, True, True, False, 0.0, 1.0),
    ("rms_affine", 7, 5120, torch.bfloat16, False, False, True, True, 0.0, 1.0),
    ("rms_res_fp16", 5, 8192, torch.float16, True, True, True, True, 0.0, 1.0),
    ("mean300", 6, 3072, torch.bfloat16, False, False, False, False, 300.0, 1.0),
    ("mean300_res", 6, 1536, torch.bfloat16, True, False, False, False, 300.0, 1.0),
    ("near_eps", 4, 3072, torch.bfloat16, False, False, False, False, 0.0, 1e-3),
    ("d256", 33, 256, torch.bfloat16, True, True, False, False, 0.0, 1.0),
    ("d7936", 3, 7936, torch.float16, False, False, True, False, 1.0, 2.0),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_kernel_model_matches_oracle(case: tuple[Any, ...]) -> None:
    name, s, d, dt, has_res, has_gate, affine, rms, mean, std = case
    g = torch.Generator().manual_seed(hash(name) % (1 << 31))

    def rnd(*shape: int, m: float = 0.0, sd: float = 1.0) -> torch.Tensor:
        return (torch.randn(*shape, generator=g) * sd + m).to(dt)

    x = rnd(1, s, d, m=mean, sd=std)
    residual = rnd(1, s, d, m=mean, sd=std) if has_res else None
    gate = rnd(1, 1, d, sd=0.5) if has_gate else None
    scale, shift = rnd(1, d, sd=0.3), rnd(1, d, sd=0.3)
    weight = rnd(d, m=1.0, sd=0.2) if affine else None
    bias = rnd(d, sd=0.2) if affine else None
    warps, vpt = _plan(d)
    y, r = kernel_model(x, scale, shift, residual=residual, gate=gate, weight=weight, bias=bias, rms=rms,
                        warps=warps, vpt=vpt)
    args = {"x": x, "weight": weight, "bias": bias, "scale": scale, "shift": shift,
            "norm_type": "rms" if rms else "layer", "eps": 1e-6}
    if has_res:
        args.update(residual=residual, gate=gate)
        ref_y, ref_r = scale_residual_norm_scale_shift_oracle(args)
        _check(r, ref_r, "residual_out")
    else:
        (ref_y,) = norm_scale_shift_oracle(args)
    _check(y, ref_y, "y")


def test_model_without_the_between_lane_term_fails() -> None:
    """A butterfly that only adds M2 (no (mb - ma)^2 term) loses the spread of the lanes' means: on a row whose
    value is a function of the lane (every thread's own values equal) the variance collapses and y leaves the
    tolerance (the check above can fail)."""
    d = 3072
    lane = (torch.arange(d) // 8) % 32
    x = ((lane - 15.5) / 8).reshape(1, 1, d).to(torch.bfloat16)
    scale = torch.zeros(1, d, dtype=torch.bfloat16)
    shift = torch.zeros(1, d, dtype=torch.bfloat16)
    (ref,) = norm_scale_shift_oracle({"x": x, "weight": None, "bias": None, "scale": scale, "shift": shift,
                                      "norm_type": "layer", "eps": 1e-6})
    good, _ = kernel_model(x, scale, shift, warps=4, vpt=3)
    _check(good, ref, "y")
    bad, _ = kernel_model(x, scale, shift, warps=4, vpt=3, chan=False)
    with pytest.raises(AssertionError):
        _check(bad, ref, "y")


# ------------------------------------------------------------------------------------------------ builds

def test_sm90a_build_without_spills(tmp_path: Path) -> None:
    """All 8 instantiations (fp16 / bf16 x VPT 1-4) build for sm_90a without spills (the production bf16 VPT = 3
    kernel holds every operand of its row in registers)."""
    nvcc = shutil.which("nvcc")
    if not nvcc:
        pytest.skip("nvcc not on PATH (tests/test_cuda_sources.py says so too)")
    res = subprocess.run([nvcc, "-std=c++17", "-O3", "-gencode=arch=compute_90a,code=sm_90a", "-Xptxas", "-v",
                          f"-I{SRC}", "-c", str(SRC / "nss_small.cu"), "-o", str(tmp_path / "k.o")],
                         capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr
    blocks = res.stderr.split("Compiling entry function '")[1:]
    assert len(blocks) == 8
    for block in blocks:
        assert "0 bytes spill stores, 0 bytes spill loads" in block, block


def test_binding_compiles_against_torch_headers(tmp_path: Path) -> None:
    """nss_small_binding.cpp against torch's headers (g++ syntax check, warnings as errors): the box builds it."""
    assert_binding_compiles(SRC / "nss_small_binding.cpp", SRC, tmp_path)
