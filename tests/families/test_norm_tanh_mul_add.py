"""The norm families' oracles (norm_infer, norm_tanh_mul_add, norm_scale_shift) and their task folders.

- oracle unit tests on small hand-computed cases;
- the bf16-rounding oracle of rmsnorm_scale / rmsnorm_tanh_residual against a straightforward eager-bf16 torch
  computation (Z-Image's own fallback code): bit for bit on CPU, on hand-made and on every task row;
- deliberately wrong implementations the checker must reject (fp32 arithmetic for the exact functions,
  LayerNorm and RMSNorm swapped, wrong broadcasts, a skipped bias, single-pass variance, a wrong eps,
  ignoring ``out=``, returning None);
- a CPU model of how SGLang's Triton kernel departs from the eager chain stays inside the declared tolerance;
- the tasks' ``src/`` resolve SGLang lazily (importing needs neither a GPU, nor CuTe DSL, nor norm_triton).
"""

from __future__ import annotations

import math
import subprocess
import sys

import pytest
import torch

from kda_lab.families import contract
from kda_lab.families import norm_infer as NI
from kda_lab.families import norm_scale_shift as NSS
from kda_lab.families import norm_tanh_mul_add as NTM
from kda_lab.measure.correctness import check_row
from kda_lab.measure.inputs import make_inputs
from kda_lab.task import load_candidate, load_task
from tests.conftest import REPO

BF16 = torch.bfloat16
ARCHES = ("h200", "b200")
FAMILIES = ("norm_infer", "norm_tanh_mul_add", "norm_scale_shift")
TASKS = {(a, f): load_task(f"{a}_diffusion_{f}__multi_shape") for a in ARCHES for f in FAMILIES}


def _task(family: str, arch: str = "h200"):
    return TASKS[(arch, family)]


def _rows(family: str, arch: str = "h200"):
    return {w.name: w for w in _task(family, arch).workloads}


def _check(family: str, row: str, impls: dict, seed: int = 3):
    task = _task(family)
    w = _rows(family)[row]
    return check_row(task, w, contract(family, w.fn), impls, seed=seed, device="cpu")


def _ok(family: str, row: str, fn, seed: int = 3) -> bool:
    return _check(family, row, {"impl": fn}, seed)[0].ok


# ============================================================================================ norm_infer

def test_norm_infer_oracle_hand_computed():
    x = torch.tensor([[1.0, 2.0, 3.0, 4.0], [2.0, 2.0, 2.0, 2.0]])
    w = torch.tensor([1.0, 2.0, 0.5, -1.0])
    b = torch.tensor([0.0, 1.0, 0.0, 3.0])
    (y,) = NI.norm_infer_oracle({"x": x, "weight": w, "bias": b, "eps": 1e-6, "is_rms_norm": False})
    z = torch.tensor([-1.5, -0.5, 0.5, 1.5], dtype=torch.float64) / math.sqrt(1.25 + 1e-6)  # mean 2.5, var 1.25
    assert torch.allclose(y[0], z * w.double() + b.double(), atol=1e-12)
    assert torch.equal(y[1], b.double())  # a constant row normalizes to 0: y = bias
    (y,) = NI.norm_infer_oracle({"x": torch.tensor([[3.0, 4.0]]), "weight": torch.tensor([1.0, 2.0]),
                                 "bias": torch.tensor([0.5, 0.5]), "eps": 0.0, "is_rms_norm": True})
    r = math.sqrt(12.5)  # RMS of (3, 4); the RMS branch adds the bias too
    assert torch.allclose(y, torch.tensor([[3 / r + 0.5, 8 / r + 0.5]], dtype=torch.float64), atol=1e-12)
    (y,) = NI.one_pass_oracle({"x": torch.tensor([[1.0, -1.0, 1.0, -1.0]]), "w": torch.tensor([1.0, 2.0, 3.0, 4.0]),
                               "eps": 0.0})
    assert torch.allclose(y, torch.tensor([[1.0, -2.0, 3.0, -4.0]], dtype=torch.float64))
    with pytest.raises(ValueError, match="2-D"):
        NI.norm_infer_oracle({"x": torch.ones(2, 2, 2), "weight": None, "bias": None, "eps": 1e-6})


@pytest.mark.parametrize("row", ["test_ln_affine_tail", "test_rms_fp32_weight", "test_ln_out_padded_rows",
                                 "test_rms_out_fp32_from_bf16", "test_ln_offset_mean300", "test_ln_strided_x"])
def test_norm_infer_reference_passes(row):
    assert _ok("norm_infer", row, NI.norm_infer_reference)


@pytest.mark.parametrize("row", ["test_onepass_tail_rows", "test_onepass_3d_heads", "test_onepass_fp32_weight"])
def test_one_pass_reference_passes(row):
    assert _ok("norm_infer", row, NI.one_pass_reference)


def test_norm_infer_ln_rms_swapped_is_rejected():
    def swapped(x, weight, bias, eps, is_rms_norm=False, out=None):
        return NI.norm_infer_reference(x, weight, bias, eps, not is_rms_norm, out)

    assert not _ok("norm_infer", "test_ln_affine_tail", swapped)
    assert not _ok("norm_infer", "test_rms_fp32_weight", swapped)


def test_norm_infer_rms_without_bias_is_rejected():
    def no_bias_in_rms(x, weight, bias, eps, is_rms_norm=False, out=None):
        return NI.norm_infer_reference(x, weight, None if is_rms_norm else bias, eps, is_rms_norm, out)

    assert not _ok("norm_infer", "test_rms_weight_bias", no_bias_in_rms)


def test_norm_infer_single_pass_variance_is_rejected():
    def one_pass_var(x, weight, bias, eps, is_rms_norm=False, out=None):
        xf = x.float()
        mean = xf.mean(-1, keepdim=True)
        var = (xf * xf).mean(-1, keepdim=True) - mean * mean
        y = (xf - mean) * torch.rsqrt(var + eps) * weight.float() + bias.float()
        return y.to(x.dtype)

    assert not _ok("norm_infer", "test_ln_offset_mean300", one_pass_var)


def test_norm_infer_wrong_eps_is_rejected():
    def eps_times_10(x, weight, bias, eps, is_rms_norm=False, out=None):
        return NI.norm_infer_reference(x, weight, bias, eps * 10, is_rms_norm, out)

    res = _check("norm_infer", "test_ln_variance_near_eps", {"impl": eps_times_10})[0]
    assert not res.ok and "beyond tolerance" in res.describe()


def test_norm_infer_must_write_into_out():
    def ignores_out(x, weight, bias, eps, is_rms_norm=False, out=None):
        return NI.norm_infer_reference(x, weight, bias, eps, is_rms_norm).to(out.dtype)

    def writes_part_of_out(x, weight, bias, eps, is_rms_norm=False, out=None):
        y = NI.norm_infer_reference(x, weight, bias, eps, is_rms_norm)
        out[:-1].copy_(y[:-1])  # the last row of out is never written: it stays NaN-poisoned
        return out

    res = _check("norm_infer", "test_ln_out_padded_rows", {"impl": ignores_out})[0]
    assert not res.ok and "must write the result into `out`" in res.error
    res = _check("norm_infer", "test_ln_out_padded_rows", {"impl": writes_part_of_out})[0]
    assert not res.ok and res.comparisons[0].nonfinite == 160


def test_one_pass_wrong_weight_and_eps_are_rejected():
    assert not _ok("norm_infer", "test_onepass_tail_rows", lambda x, w, eps=1e-6: NI.one_pass_reference(x, w.flip(0), eps))
    assert not _ok("norm_infer", "test_onepass_tiny_values", lambda x, w, eps=1e-6: NI.one_pass_reference(x, w, 1e-5))


# ============================================================================================ norm_tanh_mul_add

def _bf(values) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.float32).to(BF16)


def test_rmsnorm_oracles_hand_computed():
    # x = 2 everywhere: sq = 4, ms = 4, bf16(4 + 1e-5) = 4, rstd = 0.5, x * rstd = 1, n = w exactly.
    x = _bf([[[2.0, 2.0, 2.0, 2.0]]])
    w = _bf([1.0, 0.5, -2.0, 3.0])
    scale = _bf([[[1.5, 2.0, 0.25, 1.0]]])
    (y,) = NTM.rmsnorm_scale_oracle({"x": x, "weight": w, "scale": scale, "eps": 1e-5})
    assert y.tolist() == [[[1.5, 1.0, -0.5, 3.0]]]
    res = _bf([[[0.25, -1.0, 8.0, 0.0]]])
    (y,) = NTM.rmsnorm_tanh_residual_oracle(
        {"x": x, "gate": torch.zeros(1, 1, 4, dtype=BF16), "residual": res, "weight": w, "eps": 1e-5})
    assert y.tolist() == res.double().tolist()  # tanh(0) = 0: y = residual
    # A large gate saturates tanh to exactly 1 in bf16: y = bf16(residual + n).
    (y,) = NTM.rmsnorm_tanh_residual_oracle(
        {"x": x, "gate": _bf([[[20.0] * 4]]), "residual": res, "weight": w, "eps": 1e-5})
    assert y.tolist() == [[[1.25, -0.5, 6.0, 3.0]]]
    # x = 3: ms = 9, rstd = bf16(1/3) = 0.333984375, x * rstd = 1.001953125 rounds to 1.0 (the bf16 grid at 1 is
    # 2^-7), so n = w and y = w * scale exactly.
    (y,) = NTM.rmsnorm_scale_oracle({"x": _bf([[3.0, 3.0]]), "weight": _bf([1.5, 1.0]), "scale": _bf([[1.0, 1.0]]),
                                     "eps": 1e-5})
    assert y.tolist() == [[1.5, 1.0]]
    # x = (1, 2): ms = 2.5, rstd = bf16(0.6324555) = 0.6328125 (162/256), x * rstd = (0.6328125, 1.265625) exact,
    # times w = (1, 3): 3.796875 (on the 2^-6 grid); scale (1, 0.5) -> (0.6328125, 1.8984375).
    (y,) = NTM.rmsnorm_scale_oracle({"x": _bf([[1.0, 2.0]]), "weight": _bf([1.0, 3.0]), "scale": _bf([[1.0, 0.5]]),
                                     "eps": 1e-5})
    assert y.tolist() == [[0.6328125, 1.8984375]]


def eager_rmsnorm_bf16(x, weight, eps):
    """Z-Image's eager ZImageRMSNorm, one torch op per step on bf16 tensors, as CUDA runs it.

    Each elementwise op computes in fp32 and rounds once to bf16 (CUDA's opmath). The verbatim module code
    (``NTM.zimage_rmsnorm_eager``, the torch.compile peer) matches this on CUDA; on CPU torch's scalar tail
    loop for bf16 ``rsqrt`` rounds ``sqrt`` to bf16 before dividing, so rows past the last full vector of a
    CPU call can differ: the transcendental steps here upcast explicitly.
    """
    ms = (x * x).mean(dim=-1, keepdim=True)  # bf16 squares, fp32 accumulation, one rounding
    rstd = torch.rsqrt((ms.float() + eps).to(BF16).float()).to(BF16)
    return (x * rstd) * weight


def eager_rmsnorm_scale_bf16(x, weight, scale, eps):
    return eager_rmsnorm_bf16(x, weight, eps) * scale


def eager_rmsnorm_tanh_residual_bf16(x, gate, residual, weight, eps):
    return residual + torch.tanh(gate.float()).to(BF16) * eager_rmsnorm_bf16(x, weight, eps)


def _eager_cases():
    g = torch.Generator().manual_seed(11)

    def t(*shape, mean=0.0, std=1.0):
        return (torch.randn(*shape, generator=g) * std + mean).to(BF16)

    yield t(1, 64, 3840), t(3840, mean=1.0, std=0.1), t(1, 1, 3840, mean=1.0, std=0.25), t(1, 64, 3840)
    yield t(2, 37, 200), t(200), t(2, 1, 200), t(2, 37, 200)
    yield t(1, 33, 256, std=3e-3), t(256), t(1, 33, 256), t(1, 33, 256)
    yield t(5, 8192, mean=300.0), t(8192), t(1, 8192, std=4.0), t(5, 8192, std=50.0)
    yield t(3, 7, 96, std=1e-5), t(96, std=3.0), t(3, 1, 96, std=1e-4), t(3, 7, 96)


@pytest.mark.parametrize("case", range(5))
def test_bf16_oracle_equals_eager_bf16_torch_bitwise(case):
    x, w, mod, res = list(_eager_cases())[case]
    eps = 1e-5
    (y,) = NTM.rmsnorm_scale_oracle({"x": x, "weight": w, "scale": mod, "eps": eps})
    assert torch.equal(y, eager_rmsnorm_scale_bf16(x, w, mod, eps).double())
    (y,) = NTM.rmsnorm_tanh_residual_oracle({"x": x, "gate": mod, "residual": res, "weight": w, "eps": eps})
    assert torch.equal(y, eager_rmsnorm_tanh_residual_bf16(x, mod, res, w, eps).double())


@pytest.mark.parametrize("arch", ARCHES)
def test_bf16_oracle_equals_eager_on_every_task_row(arch):
    task = _task("norm_tanh_mul_add", arch)
    for w in task.workloads:
        a = make_inputs(w, "cpu", seed=5)
        (y,) = contract(task.family, w.fn).oracle(a)
        eager = eager_rmsnorm_scale_bf16 if w.fn == "rmsnorm_scale" else eager_rmsnorm_tanh_residual_bf16
        assert torch.equal(y, eager(**a).double()), w.name  # eager broadcasting == SGLang's row blocks here


def test_exhaustive_bf16_rounding_steps():
    """The oracle's rsqrt and tanh roundings equal fp32 rsqrt / tanh rounded to bf16 for every bf16 input.

    rsqrt and tanh take bf16 inputs, so 2^16 cases cover them. The exact rsqrt of a bf16 value is never within
    44 fp32 ulps of a bf16 rounding boundary, so any fp32 rsqrt with an error under that rounds the same.
    """
    v = torch.arange(0, 1 << 16, dtype=torch.int32).to(torch.int16).view(BF16)
    finite = v[torch.isfinite(v.float())]
    assert torch.equal(torch.tanh(finite.float()).to(BF16).double(), NTM._bf(torch.tanh(finite.double())))
    pos = finite[finite.float() > 0]
    r64 = torch.rsqrt(pos.double())
    assert torch.equal(torch.rsqrt(pos.float()).to(BF16).double(), NTM._bf(r64))
    ulp = torch.pow(2.0, torch.floor(torch.log2(r64)) - 7)  # bf16 spacing at r
    to_boundary = ((r64 / ulp) % 1.0 - 0.5).abs() * ulp
    assert float((to_boundary / (ulp * 2.0**-16)).min()) > 40  # in fp32 ulps (2^-16 of a bf16 ulp)


def test_flat_row_stride_and_block_rows_match_sglang():
    from sglang.kernels.ops.diffusion.norm import native_bf16_rmsnorm_triton as S

    base = torch.zeros(2, 8, 4 * 64, dtype=BF16)
    views = [torch.zeros(3, 5, 64), torch.zeros(15, 64), base[:, :1, 64:128], base[:, :, :64], base[:, ::2, :64],
             base.transpose(0, 1)[..., :64], torch.zeros(64), torch.zeros(4, 64)[:, ::2], base[:1, :, 128:192]]
    for t in views:
        assert NTM.flat_row_stride(t) == S._flat_row_stride(t), (t.shape, t.stride())
    x = torch.arange(4 * 3 * 2, dtype=torch.float32).reshape(4, 3, 2)
    scale = torch.tensor([[[10.0, 20.0]], [[30.0, 40.0]]])  # [2,1,D] for x [4,3,D]: rows 0-5 -> 0, rows 6-11 -> 1
    rows = NTM.modulation_rows(scale, x)
    assert rows[:2].eq(scale[0]).all() and rows[2:].eq(scale[1]).all()


def test_accepts_mirrors_sglang_predicate():
    x = torch.zeros(1, 8, 256, dtype=BF16)
    w = torch.zeros(256, dtype=BF16)
    s = torch.zeros(1, 1, 256, dtype=BF16)
    assert NTM.accepts(x, w, s) is None
    assert "bf16" in NTM.accepts(x.float(), w, s)
    assert "D must" in NTM.accepts(torch.zeros(1, 2, 8200, dtype=BF16), torch.zeros(8200, dtype=BF16),
                                   torch.zeros(1, 1, 8200, dtype=BF16))
    assert "multiple" in NTM.accepts(x, w, torch.zeros(1, 3, 256, dtype=BF16))
    assert NTM.accepts(torch.zeros(1, 16, 256, dtype=BF16)[:, ::2], w, s) is None  # token-strided: still flat rows
    assert "flat row stride" in NTM.accepts(torch.zeros(2, 8, 256, dtype=BF16).transpose(0, 1), w, s)
    assert "scale/gate" in NTM.accepts(x, w, torch.zeros(256, dtype=BF16))
    assert "residual" in NTM.accepts(x, w, s, torch.zeros(1, 9, 256, dtype=BF16))
    with pytest.raises(ValueError, match="outside SGLang's contract"):
        NTM.rmsnorm_scale_oracle({"x": x.float(), "weight": w, "scale": s, "eps": 1e-5})


@pytest.mark.parametrize("arch", ARCHES)
def test_every_tanh_task_row_is_inside_sglang_predicate(arch):
    for w in _task("norm_tanh_mul_add", arch).workloads:
        a = make_inputs(w, "cpu", seed=1)
        other = a["scale"] if w.fn == "rmsnorm_scale" else a["gate"]
        assert NTM.accepts(a["x"], a["weight"], other, a.get("residual")) is None, w.name


def _fp32_scale(x, weight, scale, eps):
    xf = x.float()
    return (xf * torch.rsqrt(xf.square().mean(-1, keepdim=True) + eps) * weight.float() * scale.float()).to(x.dtype)


def _fp32_tanh(x, gate, residual, weight, eps):
    xf = x.float()
    n = xf * torch.rsqrt(xf.square().mean(-1, keepdim=True) + eps) * weight.float()
    return (residual.float() + torch.tanh(gate.float()) * n).to(x.dtype)


@pytest.mark.parametrize(("row", "wrong"), [("test_scale_batch2_odd_d", _fp32_scale),
                                            ("test_scale_offset_mean300", _fp32_scale),
                                            ("test_tanh_batch2_gate_chunk", _fp32_tanh),
                                            ("test_tanh_odd_d", _fp32_tanh)])
def test_fp32_arithmetic_fails_the_exact_contract(row, wrong):
    """fp32 math without the bf16 roundings lands within the tolerance but is not SGLang's bits: rejected."""
    fn = _rows("norm_tanh_mul_add")[row].fn
    reference = contract("norm_tanh_mul_add", fn).torch_reference  # stands in for SGLang's output on CPU
    base, cand = _check("norm_tanh_mul_add", row, {"baseline": reference, "candidate": wrong})
    assert base.ok
    assert not cand.ok and "not bit-identical to SGLang" in cand.describe()
    assert all(c.ok for c in cand.comparisons if "vs SGLang" not in c.output)  # the tolerance alone would pass it


def test_tanh_and_scale_mistakes_are_rejected():
    def no_tanh(x, gate, residual, weight, eps):
        return residual + gate * NTM.zimage_rmsnorm_eager(x, weight, eps)

    def no_weight(x, weight, scale, eps):
        return NTM.zimage_rmsnorm_eager(x, torch.ones_like(weight), eps) * scale

    def wrong_eps(x, weight, scale, eps):
        return NTM.zimage_rmsnorm_eager(x, weight, 1e-3) * scale

    assert not _ok("norm_tanh_mul_add", "test_tanh_odd_d", no_tanh)
    assert not _ok("norm_tanh_mul_add", "test_scale_batch2_odd_d", no_weight)
    assert not _ok("norm_tanh_mul_add", "test_scale_variance_near_eps", wrong_eps)


def test_returning_none_on_a_task_row_fails_with_reason():
    res = _check("norm_tanh_mul_add", "test_scale_2d_x", {"impl": lambda x, weight, scale, eps: None})[0]
    assert not res.ok and "returned None" in res.error


# --- a CPU model of SGLang's Triton kernel (native_bf16_rmsnorm_triton.py) ---------------------------------------

def _bf32(t: torch.Tensor) -> torch.Tensor:
    return t.to(BF16).float()


def triton_bf16_row_sum(sq: torch.Tensor, num_warps: int = 8) -> torch.Tensor:
    """A model of ``tl.sum`` over a bf16 row: Triton keeps bf16 (no upcast), so every add rounds to bf16.

    Order modelled (a plausible Triton lowering, not verified on a GPU): 8 contiguous elements per thread and
    32 lanes x num_warps threads per block repetition, a sequential per-thread sum over its registers, then an
    xor butterfly over the lanes and over the warps.
    """
    rows, d = sq.shape
    block = 1 << max(0, (d - 1).bit_length())
    threads = 32 * num_warps
    vec = max(1, min(8, block // threads))
    reps = max(1, block // (vec * threads))
    pad = torch.zeros(rows, reps * threads * vec)
    pad[:, :d] = sq.float()
    v = pad.reshape(rows, reps, threads, vec)
    acc = v[:, 0, :, 0].clone()
    for r in range(reps):
        for j in range(vec):
            if r or j:
                acc = _bf32(acc + v[:, r, :, j])
    acc = acc.reshape(rows, num_warps, 32)
    for off in (16, 8, 4, 2, 1):
        acc = _bf32(acc + acc[:, :, torch.arange(32) ^ off])
    w = acc[:, :, 0]
    off = num_warps // 2
    while off:
        w = _bf32(w + w[:, torch.arange(num_warps) ^ off])
        off //= 2
    return w[:, 0]


def sglang_triton_model(x, weight, eps, mod, residual=None):
    """Both kernels, modelled: bf16 row sum, eps as a bf16 constant, tanh as 2/(1+exp(-2g))-1 in fp32."""
    d = x.shape[-1]
    x2 = x.reshape(-1, d).float()
    ms = _bf32(triton_bf16_row_sum(_bf32(x2 * x2)) / d)
    rstd = _bf32(torch.rsqrt(_bf32(ms + torch.tensor(eps).to(BF16).float())))
    n = _bf32(_bf32(x2 * rstd[:, None]) * weight.float()).reshape(x.shape)
    m = NTM.modulation_rows(mod, x).float()
    if residual is None:
        return _bf32(n * m).to(BF16)
    t = _bf32(2.0 / (1.0 + torch.exp(-2.0 * m)) - 1.0)
    return _bf32(residual.float() + _bf32(t * n)).to(BF16)


@pytest.mark.parametrize("row", ["zimage_rmsnorm_scale_L4096", "zimage_tanh_residual_L4128", "test_tanh_tiny_gate",
                                 "test_scale_variance_near_eps", "test_scale_d8192"])
def test_tolerance_absorbs_the_triton_kernel_model(row):
    """SGLang's kernel is not eager bit for bit; the declared bf16 tolerance must absorb the difference."""
    w = _rows("norm_tanh_mul_add")[row]
    a = make_inputs(w, "cpu", seed=2)
    if w.fn == "rmsnorm_scale":
        model = sglang_triton_model(a["x"], a["weight"], a["eps"], a["scale"])
    else:
        model = sglang_triton_model(a["x"], a["weight"], a["eps"], a["gate"], a["residual"])
    res = _check("norm_tanh_mul_add", row, {"model": lambda **_: model.clone()}, seed=2)[0]
    assert res.ok, res.describe()


# ============================================================================================ norm_scale_shift

def test_norm_scale_shift_oracle_hand_computed():
    d = 256
    x = torch.tensor([1.0, -1.0] * (d // 2)).reshape(1, 1, d)  # mean 0, variance 1
    scale = torch.tensor([0.5])
    shift = torch.arange(d, dtype=torch.float32)
    (y,) = NSS.norm_scale_shift_oracle({"x": x, "weight": None, "bias": None, "scale": scale, "shift": shift,
                                        "norm_type": "layer", "eps": 0.0})
    assert torch.equal(y, (x * 1.5 + shift).double())
    (y,) = NSS.norm_scale_shift_oracle({"x": x + 3, "weight": None, "bias": torch.ones(d), "scale": scale,
                                        "shift": shift, "norm_type": "rms", "eps": 0.0})
    rms = math.sqrt((16 + 4) / 2)  # rows of 4 and 2; the RMS branch ignores the bias
    assert torch.allclose(y, ((x + 3) / rms * 1.5 + shift).double(), atol=1e-6)
    # residual form: gate None -> r = residual + x; r and the normalized value are rounded to x's dtype.
    xb, res = x.to(BF16), torch.full((1, 1, d), 1000.0).to(BF16)
    y, r = NSS.scale_residual_norm_scale_shift_oracle(
        {"residual": res, "x": xb, "gate": None, "weight": None, "bias": None, "scale": torch.zeros(1),
         "shift": torch.zeros(1), "norm_type": "layer", "eps": 1e-6})
    assert torch.equal(r, (res.float() + xb.float()).to(BF16).double())  # 1001/999 are rounded to 1000 in bf16
    assert torch.equal(y, torch.zeros_like(y))  # so the rows are constant: normalized 0


def test_bsfd_broadcast_modes():
    x = torch.zeros(2, 6, 256)
    t4 = torch.arange(2 * 3 * 256, dtype=torch.float32).reshape(2, 3, 1, 256)
    full = NSS.bsfd(t4, x)
    assert torch.equal(full[1, 2], t4[1, 1, 0]) and torch.equal(full[1, 5], t4[1, 2, 0])  # 2 tokens per frame
    assert NSS.bsfd(torch.ones(1), x).shape == (2, 6, 256)
    assert torch.equal(NSS.bsfd(torch.arange(2 * 256.0).reshape(2, 256), x)[1, 4], torch.arange(256.0, 512.0))
    for bad in (torch.zeros(3, 256), torch.zeros(2, 4, 256), torch.zeros(2, 4, 1, 256), torch.zeros(255)):
        with pytest.raises(ValueError):
            NSS.bsfd(bad, x)


@pytest.mark.parametrize("row", ["test_rms_weight_2d_mod", "test_ln_per_frame_4d", "test_ln_fp16",
                                 "test_ln_fp32_offset_mean300", "test_ln_scalar_mod_fp32_affine",
                                 "test_ln_batch_strided_x", "test_rms_bias_ignored"])
def test_norm_scale_shift_reference_passes(row):
    assert _ok("norm_scale_shift", row, NSS.norm_scale_shift_reference)


@pytest.mark.parametrize("row", ["test_res_rms_gate_2d", "test_res_ln_gate_none", "test_res_ln_per_frame_4d",
                                 "test_res_ln_fp32_offset", "test_res_rms_fp16", "test_res_ln_affine_tok_gate"])
def test_scale_residual_reference_passes(row):
    assert _ok("norm_scale_shift", row, NSS.scale_residual_norm_scale_shift_reference)


def test_norm_scale_shift_ln_rms_swapped_is_rejected():
    def swapped(x, weight, bias, scale, shift, norm_type, eps=1e-5):
        return NSS.norm_scale_shift_reference(x, weight, bias, scale, shift, {"rms": "layer"}.get(norm_type, "rms"), eps)

    assert not _ok("norm_scale_shift", "test_rms_weight_2d_mod", swapped)
    assert not _ok("norm_scale_shift", "test_ln_affine_1d_mod", swapped)


def test_norm_scale_shift_wrong_broadcasts_are_rejected():
    def frames_as_tokens(x, weight, bias, scale, shift, norm_type, eps=1e-5):
        # [B,F,1,D] read as interleaved frames (token t -> frame t % F) instead of contiguous blocks
        b, s, d = x.shape
        f = scale.shape[1]
        idx = torch.arange(s) % f
        n = NSS._norm_ref(x.float(), weight, bias, norm_type, eps).to(x.dtype).float()
        return (n * (1 + scale[:, idx, 0].float()) + shift[:, idx, 0].float()).to(x.dtype)

    def batch_swapped(x, weight, bias, scale, shift, norm_type, eps=1e-5):
        return NSS.norm_scale_shift_reference(x, weight, bias, scale.flip(0), shift.flip(0), norm_type, eps)

    def scale_not_plus_one(x, weight, bias, scale, shift, norm_type, eps=1e-5):
        return NSS.norm_scale_shift_reference(x, weight, bias, scale - 1, shift, norm_type, eps)

    assert not _ok("norm_scale_shift", "test_ln_per_frame_4d", frames_as_tokens)
    assert not _ok("norm_scale_shift", "test_rms_weight_2d_mod", batch_swapped)
    assert not _ok("norm_scale_shift", "test_ln_chunk_view_mod", scale_not_plus_one)


def test_norm_scale_shift_rms_bias_and_variance_mistakes_are_rejected():
    def rms_with_bias(x, weight, bias, scale, shift, norm_type, eps=1e-5):
        y = NSS._norm_ref(x.float(), weight, None, norm_type, eps) + bias.float()
        n = y.to(x.dtype).float()
        return (n * (1 + NSS.bsfd(scale, x).float()) + NSS.bsfd(shift, x).float()).to(x.dtype)

    def one_pass_var(x, weight, bias, scale, shift, norm_type, eps=1e-5):
        xf = x.float()
        mean = xf.mean(-1, keepdim=True)
        n = (xf - mean) * torch.rsqrt((xf * xf).mean(-1, keepdim=True) - mean * mean + eps)
        return (n * (1 + NSS.bsfd(scale, x).float()) + NSS.bsfd(shift, x).float()).to(x.dtype)

    assert not _ok("norm_scale_shift", "test_rms_bias_ignored", rms_with_bias)
    assert not _ok("norm_scale_shift", "test_ln_fp32_offset_mean300", one_pass_var)


def test_scale_residual_mistakes_are_rejected():
    ref = NSS.scale_residual_norm_scale_shift_reference

    def gate_ignored(residual, x, gate, weight, bias, scale, shift, norm_type, eps=1e-5):
        return ref(residual, x, None, weight, bias, scale, shift, norm_type, eps)

    def returns_input_residual(residual, x, gate, weight, bias, scale, shift, norm_type, eps=1e-5):
        y, _ = ref(residual, x, gate, weight, bias, scale, shift, norm_type, eps)
        return y, residual.clone()

    def norms_x_not_r(residual, x, gate, weight, bias, scale, shift, norm_type, eps=1e-5):
        _, r = ref(residual, x, gate, weight, bias, scale, shift, norm_type, eps)
        return NSS.norm_scale_shift_reference(x, weight, bias, scale, shift, norm_type, eps), r

    for wrong in (gate_ignored, returns_input_residual, norms_x_not_r):
        assert not _ok("norm_scale_shift", "test_res_rms_gate_2d", wrong), wrong.__name__


# ============================================================================================ task folders

@pytest.mark.parametrize(("arch", "family"), [(a, f) for a in ARCHES for f in FAMILIES])
def test_baseline_map_matches_task_toml(arch, family):
    """The task's SGLang modules are the registry's (kda_kernels.lazy_baseline resolves fallbacks there), and the
    candidate exports every function: the passthrough (BASELINE = True) or a real candidate (no BASELINE)."""
    from kda_kernels import TARGETS

    task = _task(family, arch)
    module = load_candidate(task)
    defining = {t.function: t.module for t in TARGETS}
    assert {fn: spec.sglang.partition(":")[0] for fn, spec in task.functions.items()} == {
        fn: defining[fn] for fn in task.functions}
    assert set(module.EXPORTS) == set(task.functions) and getattr(module, "BASELINE", True) is True


def test_baseline_resolve_unwraps_a_kda_object(monkeypatch):
    import kda_kernels

    module = load_candidate(_task("norm_tanh_mul_add"))
    import sglang.kernels.ops.diffusion.norm.native_bf16_rmsnorm_triton as owner

    original = owner.rmsnorm_scale

    def overlay(*args, **kwargs):  # what kda_kernels installs: a function carrying SGLang's original
        raise AssertionError("the overlay must never be called back")

    overlay.__kda_kernel__ = True
    overlay.__kda_baseline__ = original
    monkeypatch.setattr(owner, "rmsnorm_scale", overlay)
    assert kda_kernels.baseline("rmsnorm_scale") is original
    x = torch.ones(1, 2, 8, dtype=BF16)
    assert module.EXPORTS["rmsnorm_scale"](x, torch.ones(8, dtype=BF16), x, 1e-5) is None  # SGLang: CPU -> None


def test_register_imports_without_sglang_kernel_modules():
    """Importing every norm task's register.py loads none of SGLang's kernel modules (no GPU, no CuTe DSL)."""
    code = (
        "import sys\n"
        "from kda_lab.task import load_task, load_candidate\n"
        "for a in ('h200', 'b200'):\n"
        "    for f in ('norm_infer', 'norm_tanh_mul_add', 'norm_scale_shift'):\n"
        "        load_candidate(load_task(f'{a}_diffusion_{f}__multi_shape'))\n"
        "bad = [m for m in sys.modules if m.startswith('sglang.kernels.ops.diffusion.norm') or m.startswith('cutlass')]\n"
        "assert not bad, bad\n"
        "print('ok')\n"
    )
    r = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and r.stdout.strip().endswith("ok"), r.stderr[-2000:]


def test_interpreter_shim_reaches_sglangs_one_pass_kernel():
    """Without the shim the one-pass wrapper cannot run on CPU tensors; with it SGLang's kernel matches the oracle,
    and neither SGLang's module nor torch is modified."""
    import os

    if torch.cuda.is_available() or os.environ.get("TRITON_INTERPRET") != "1":
        pytest.skip("CPU interpreter only")
    from kda_lab.interpret import interpreter as interpret
    from kda_lab.interpret.shims import norm_infer as shims

    x, w = torch.randn(4, 128), torch.randn(128)
    plain = interpret.recompiled  # the generic path, without any family route
    with pytest.raises(Exception, match="CPU"):  # the custom op has a CUDA implementation only
        plain(shims.ONE_PASS_MODULE, shims.ONE_PASS)(x, w, 1e-6)
    module = __import__(shims.ONE_PASS_MODULE, fromlist=["_"])
    before = getattr(module, shims.ONE_PASS_CUDA_OP)
    shims.install()
    assert shims.install() is False  # idempotent
    y = interpret.interpretable(shims.ONE_PASS_MODULE, shims.ONE_PASS)(x, w, 1e-6)
    assert torch.allclose(y.double(), NI.one_pass_oracle({"x": x, "w": w, "eps": 1e-6})[0], atol=1e-5)
    assert getattr(module, shims.ONE_PASS_CUDA_OP) is before and not hasattr(torch.cpu, "device")
    with pytest.raises(LookupError):
        shims.interpretable_one_pass(shims.ONE_PASS_MODULE, "norm_infer")


# ============================================================================================ GPU

@pytest.mark.gpu
@pytest.mark.parametrize("row", ["zimage_rmsnorm_scale_L4096", "zimage_tanh_residual_L4096"])
def test_sglang_bf16_kernel_vs_eager_chain_on_gpu(row):
    """How far SGLang's Triton kernel is from the eager chain (informative; run with -s on the GPU box)."""
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    import sglang.kernels.ops.diffusion as facade

    w = _rows("norm_tanh_mul_add")[row]
    a = make_inputs(w, "cuda", seed=4)
    with torch.no_grad():
        out = getattr(facade, w.fn)(**a)
        eager = contract("norm_tanh_mul_add", w.fn).torch_reference(**a)
        (oracle,) = contract("norm_tanh_mul_add", w.fn).oracle(a)
    same_eager = float((out == eager).float().mean())
    same_oracle = float((out.double() == oracle).float().mean())
    model = sglang_triton_model(*(a[k].cpu() if isinstance(a[k], torch.Tensor) else a[k]
                                  for k in ("x", "weight", "eps")),
                                a["scale" if w.fn == "rmsnorm_scale" else "gate"].cpu(),
                                a.get("residual").cpu() if "residual" in a else None)
    same_model = float((out.cpu() == model).float().mean())
    print(f"{row}: SGLang == eager on {same_eager:.4%}, == oracle on {same_oracle:.4%}, "
          f"== CPU model on {same_model:.4%} of elements")
    tol = _task("norm_tanh_mul_add").tolerance("bfloat16")
    err = (out.double() - oracle).abs()
    assert bool((err <= tol.atol + tol.rtol * oracle.abs()).all())
