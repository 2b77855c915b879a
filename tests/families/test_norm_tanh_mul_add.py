"""The norm_tanh_mul_add family (kda_lab/families/norm_tanh_mul_add.py: Z-Image's bf16 ``rmsnorm_scale`` and
``rmsnorm_tanh_residual``, SGLang's native_bf16_rmsnorm_triton) and its task folders.

- the bf16-rounding oracles on small hand-computed cases, and against a straightforward eager-bf16 torch
  computation (Z-Image's own fallback code): bit for bit on CPU, on hand-made and on every task row;
- deliberately wrong implementations the checker must reject (each next to the eager reference passing on the
  same row): fp32 arithmetic for the exact functions, no tanh, no weight, a wrong eps, returning None;
- a CPU model of how SGLang's Triton kernel departs from the eager chain stays inside the declared tolerance;
- the tasks' ``src/`` resolve SGLang lazily (importing needs neither a GPU, nor CuTe DSL, nor norm_triton).
"""

from __future__ import annotations

import pytest
import torch

from kda_lab.families import contract
from kda_lab.families import norm_tanh_mul_add as NTM
from kda_lab.measure.inputs import make_inputs
from kda_lab.task import load_candidate
from tests.families import _helpers as H

BF16 = torch.bfloat16
FAMILY = "norm_tanh_mul_add"
TASK = H.diffusion_task(FAMILY)


# ----------------------------------------------------------------------------------------------------- oracle

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
    # x = 3: ms = 9, rstd = bf16(1/3) = 0.333984375, x * rstd = 1.001953125 rounds to 1.0 (the bf16 grid at 1
    # is 2^-7), so n = w and y = w * scale exactly.
    (y,) = NTM.rmsnorm_scale_oracle({"x": _bf([[3.0, 3.0]]), "weight": _bf([1.5, 1.0]),
                                     "scale": _bf([[1.0, 1.0]]), "eps": 1e-5})
    assert y.tolist() == [[1.5, 1.0]]
    # x = (1, 2): ms = 2.5, rstd = bf16(0.6324555) = 0.6328125 (162/256), x * rstd = (0.6328125, 1.265625)
    # exact, times w = (1, 3): 3.796875 (on the 2^-6 grid); scale (1, 0.5) -> (0.6328125, 1.8984375).
    (y,) = NTM.rmsnorm_scale_oracle({"x": _bf([[1.0, 2.0]]), "weight": _bf([1.0, 3.0]),
                                     "scale": _bf([[1.0, 0.5]]), "eps": 1e-5})
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


@pytest.mark.parametrize("arch", H.ARCHES)
def test_bf16_oracle_equals_eager_on_every_task_row(arch):
    task = H.diffusion_task(FAMILY, arch)
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
    views = [torch.zeros(3, 5, 64), torch.zeros(15, 64), base[:, :1, 64:128], base[:, :, :64],
             base[:, ::2, :64], base.transpose(0, 1)[..., :64], torch.zeros(64), torch.zeros(4, 64)[:, ::2],
             base[:1, :, 128:192]]
    for t in views:
        assert NTM.flat_row_stride(t) == S._flat_row_stride(t), (t.shape, t.stride())
    x = torch.arange(4 * 3 * 2, dtype=torch.float32).reshape(4, 3, 2)
    # [2,1,D] for x [4,3,D]: rows 0-5 -> 0, rows 6-11 -> 1
    scale = torch.tensor([[[10.0, 20.0]], [[30.0, 40.0]]])
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
    # token-strided: still flat rows
    assert NTM.accepts(torch.zeros(1, 16, 256, dtype=BF16)[:, ::2], w, s) is None
    assert "flat row stride" in NTM.accepts(torch.zeros(2, 8, 256, dtype=BF16).transpose(0, 1), w, s)
    assert "scale/gate" in NTM.accepts(x, w, torch.zeros(256, dtype=BF16))
    assert "residual" in NTM.accepts(x, w, s, torch.zeros(1, 9, 256, dtype=BF16))
    with pytest.raises(ValueError, match="outside SGLang's contract"):
        NTM.rmsnorm_scale_oracle({"x": x.float(), "weight": w, "scale": s, "eps": 1e-5})


@pytest.mark.parametrize("arch", H.ARCHES)
def test_every_tanh_task_row_is_inside_sglang_predicate(arch):
    for w in H.diffusion_task(FAMILY, arch).workloads:
        a = make_inputs(w, "cpu", seed=1)
        other = a["scale"] if w.fn == "rmsnorm_scale" else a["gate"]
        assert NTM.accepts(a["x"], a["weight"], other, a.get("residual")) is None, w.name


# ------------------------------------------------------------------------------- the checker: right and wrong

@pytest.mark.parametrize("row", ["test_tanh_odd_d", "test_scale_batch2_odd_d", "test_scale_variance_near_eps",
                                 "test_scale_2d_x"])
def test_norm_tanh_mul_add_reference_passes(row):
    """The control of the wrong implementations below: the eager reference passes on their rows."""
    assert H.ok(TASK, row, contract(FAMILY, H.rows(TASK)[row].fn).torch_reference)


def _fp32_scale(x, weight, scale, eps):
    xf = x.float()
    n = xf * torch.rsqrt(xf.square().mean(-1, keepdim=True) + eps)
    return (n * weight.float() * scale.float()).to(x.dtype)


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
    fn = H.rows(TASK)[row].fn
    reference = contract("norm_tanh_mul_add", fn).torch_reference  # stands in for SGLang's output on CPU
    base, cand = H.check(TASK, row, {"baseline": reference, "candidate": wrong})
    assert base.ok
    assert not cand.ok and "not bit-identical to SGLang" in cand.describe()
    # the tolerance alone would pass it
    assert all(c.ok for c in cand.comparisons if "vs SGLang" not in c.output)


def test_tanh_and_scale_mistakes_are_rejected():
    def no_tanh(x, gate, residual, weight, eps):
        return residual + gate * NTM.zimage_rmsnorm_eager(x, weight, eps)

    def no_weight(x, weight, scale, eps):
        return NTM.zimage_rmsnorm_eager(x, torch.ones_like(weight), eps) * scale

    def wrong_eps(x, weight, scale, eps):
        return NTM.zimage_rmsnorm_eager(x, weight, 1e-3) * scale

    assert not H.ok(TASK, "test_tanh_odd_d", no_tanh)
    assert not H.ok(TASK, "test_scale_batch2_odd_d", no_weight)
    assert not H.ok(TASK, "test_scale_variance_near_eps", wrong_eps)


def test_returning_none_on_a_task_row_fails_with_reason():
    res = H.check(TASK, "test_scale_2d_x", {"impl": lambda x, weight, scale, eps: None})[0]
    assert not res.ok and "returned None" in res.error


# -------------------------------------- a CPU model of SGLang's Triton kernel (native_bf16_rmsnorm_triton.py)

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


@pytest.mark.parametrize("row", ["zimage_rmsnorm_scale_L4096", "zimage_tanh_residual_L4128",
                                 "test_tanh_tiny_gate", "test_scale_variance_near_eps", "test_scale_d8192"])
def test_tolerance_absorbs_the_triton_kernel_model(row):
    """SGLang's kernel is not eager bit for bit; the declared bf16 tolerance must absorb the difference."""
    w = H.rows(TASK)[row]
    a = make_inputs(w, "cpu", seed=2)
    if w.fn == "rmsnorm_scale":
        model = sglang_triton_model(a["x"], a["weight"], a["eps"], a["scale"])
    else:
        model = sglang_triton_model(a["x"], a["weight"], a["eps"], a["gate"], a["residual"])
    res = H.check(TASK, row, {"model": lambda **_: model.clone()}, seed=2)[0]
    assert res.ok, res.describe()


# ----------------------------------------------------------------------------------------------- task folders

@pytest.mark.parametrize("arch", H.ARCHES)
def test_baseline_map_matches_task_toml(arch):
    H.assert_baseline_map_matches_task_toml(H.diffusion_task(FAMILY, arch))


def test_baseline_resolve_unwraps_a_kda_object(monkeypatch):
    import kda_kernels

    module = load_candidate(TASK)
    import sglang.kernels.ops.diffusion.norm.native_bf16_rmsnorm_triton as owner

    original = owner.rmsnorm_scale

    def overlay(*args, **kwargs):  # what kda_kernels installs: a function carrying SGLang's original
        raise AssertionError("the overlay must never be called back")

    overlay.__kda_kernel__ = True
    overlay.__kda_baseline__ = original
    monkeypatch.setattr(owner, "rmsnorm_scale", overlay)
    assert kda_kernels.baseline("rmsnorm_scale") is original
    x = torch.ones(1, 2, 8, dtype=BF16)
    # SGLang: CPU -> None
    assert module.EXPORTS["rmsnorm_scale"](x, torch.ones(8, dtype=BF16), x, 1e-5) is None


def test_register_imports_without_sglang_kernel_modules():
    H.assert_register_imports_lazily(FAMILY)


# -------------------------------------------------------------------------------------------------------- GPU

@pytest.mark.gpu
@pytest.mark.parametrize("row", ["zimage_rmsnorm_scale_L4096", "zimage_tanh_residual_L4096"])
def test_sglang_bf16_kernel_vs_eager_chain_on_gpu(row):
    """How far SGLang's Triton kernel is from the eager chain (informative; run with -s on the GPU box)."""
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    import sglang.kernels.ops.diffusion as facade

    w = H.rows(TASK)[row]
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
    tol = TASK.tolerance("bfloat16")
    err = (out.double() - oracle).abs()
    assert bool((err <= tol.atol + tol.rtol * oracle.abs()).all())
