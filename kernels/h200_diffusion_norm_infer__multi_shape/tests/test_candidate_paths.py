"""The candidate's kernel paths in the CPU Triton interpreter, against SGLang's own Triton kernels (also in the
interpreter) and the fp64 oracle, within task.toml's tolerances (the contract is not bit-exact).

The tiny rows of task.toml do not reach several paths: several rows per program, two column segments with and
without a masked tail, non-unit column strides of x and out, an out that overlaps x, a non-contiguous 3-D x for the
one-pass kernel, and the fallbacks. Each case below asserts the plan it is meant to exercise. Two deliberately
wrong variants (a plan that never writes the row tail, and eps dropped) must be rejected by the same comparison.
fp32 and fp16 only: the interpreter mishandles bf16 (its fp32 -> bf16 cast truncates).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import torch

pytestmark = pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1",
                                reason="CPU interpreter tests (TRITON_INTERPRET=1, set by conftest.py without a GPU)")

TASK_DIR = Path(__file__).resolve().parents[1]
TOL = {torch.float32: (5e-4, 1e-4), torch.float16: (1e-3, 2e-3)}


def _load() -> tuple[Any, Any, Any, Any]:
    from kda_lab.interpret import install_shims, interpretable
    from kda_lab.task import load_task
    from kda_lab.task.schema import load_candidate

    install_shims()
    reg = load_candidate(load_task(TASK_DIR))
    import sys

    kernel_mod = sys.modules[reg.launch.__module__]
    sg_ni = interpretable("sglang.kernels.ops.diffusion.norm.norm_triton", "norm_infer")
    sg_op = interpretable("sglang.kernels.ops.diffusion.norm.rmsnorm_onepass_triton", "triton_one_pass_rms_norm")
    return reg, kernel_mod, sg_ni, sg_op


@pytest.fixture(scope="module")
def env() -> tuple[Any, Any, Any, Any]:
    return _load()


def _oracle(x: torch.Tensor, w: Any, b: Any, eps: float, rms: bool) -> torch.Tensor:
    xd = x.double()
    if rms:
        y = xd * torch.rsqrt(xd.square().mean(-1, keepdim=True) + eps)
    else:
        mu = xd.mean(-1, keepdim=True)
        y = (xd - mu) * torch.rsqrt((xd - mu).square().mean(-1, keepdim=True) + eps)
    if w is not None:
        y = y * w.double()
    if b is not None:
        y = y + b.double()
    return y


def _close(got: torch.Tensor, want: torch.Tensor, dtype: torch.dtype) -> bool:
    atol, rtol = TOL[dtype]
    g, w = got.double(), want.double()
    return bool(torch.isfinite(g).all()) and bool(((g - w).abs() <= atol + rtol * w.abs()).all())


def _rows(m: int, n: int, dtype: torch.dtype, kind: str = "randn", seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    if kind == "near_eps":
        return (torch.randn(m, n, generator=g) * 1e-3).to(dtype)
    if kind == "mean300":
        return (torch.randn(m, n, generator=g) + 300.0).to(dtype)
    return (torch.randn(m, n, generator=g) * 1.5 + 0.25).to(dtype)


# (m, n, rms, weight, bias, x kind, the plan feature the case exercises)
NORM_CASES = [
    (1100, 64, False, True, True, "randn", "rows>1"),
    (700, 200, True, True, True, "randn", "rows>1,mask"),
    (6, 3000, False, True, True, "randn", "two segments,mask"),
    (5, 5120, False, True, True, "randn", "two segments exact"),
    (4, 5120, True, True, False, "randn", "two segments exact"),
    (9, 130, False, False, False, "randn", "two segments exact"),
    (7, 97, True, False, True, "randn", "mask"),
    (8, 256, False, False, False, "near_eps", "plain"),
    (16, 3072, False, True, True, "mean300", "two segments exact"),
]


def _expect_plan(plan: Any, feature: str) -> None:
    for part in feature.split(","):
        if part == "rows>1":
            assert plan.rows > 1, plan
        elif part == "mask":
            assert plan.mask_n, plan
        elif part == "two segments":
            assert plan.block_b > 0, plan
        elif part == "two segments exact":
            assert plan.block_b > 0 and not plan.mask_n, plan


def _norm_run(env: Any, case: tuple[Any, ...], dtype: torch.dtype, fn: Any = None) -> tuple[torch.Tensor, ...]:
    reg, kernel_mod, sg_ni, _ = env
    m, n, rms, has_w, has_b, kind, feature = case
    _expect_plan(kernel_mod.plan_norm_infer(m, n, torch.empty((), dtype=dtype).element_size()), feature)
    x = _rows(m, n, dtype, kind)
    w = torch.randn(n, generator=torch.Generator().manual_seed(1)).to(dtype) if has_w else None
    b = torch.randn(n, generator=torch.Generator().manual_seed(2)).to(dtype) if has_b else None
    got = (fn or reg.norm_infer)(x, w, b, 1e-6, rms)
    return got, sg_ni(x, w, b, 1e-6, rms), _oracle(x, w, b, 1e-6, rms)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=str)
@pytest.mark.parametrize("case", NORM_CASES, ids=lambda c: f"{c[0]}x{c[1]}-{'rms' if c[2] else 'ln'}-{c[5]}")
def test_norm_infer_paths(env: Any, case: tuple[Any, ...], dtype: torch.dtype) -> None:
    got, sglang, oracle = _norm_run(env, case, dtype)
    assert got.dtype == dtype and got.shape == (case[0], case[1]) and got.is_contiguous()
    assert _close(got, oracle, dtype)
    assert _close(got, sglang.double(), dtype)


LAYOUTS = ("x_rowpad", "x_transposed", "out_rowpad", "out_fp32", "out_transposed", "in_place", "out_overlaps_x")


@pytest.mark.parametrize("layout", LAYOUTS)
def test_norm_infer_layouts(env: Any, layout: str) -> None:
    reg, _, sg_ni, _ = env
    dt, m, n = torch.float16, 33, 160
    w = torch.randn(n).to(dt)
    b = torch.randn(n).to(dt)
    base = _rows(m, n, dt)
    x, out = base.clone(), None
    if layout == "x_rowpad":
        x = torch.full((m, 256), float("nan"), dtype=dt)[:, 5:5 + n]
        x.copy_(base)
    elif layout == "x_transposed":
        x = base.t().contiguous().t()
    elif layout == "out_rowpad":
        out = torch.full((m, 192), float("nan"), dtype=dt)[:, 3:3 + n]
    elif layout == "out_fp32":
        out = torch.full((m, n), float("nan"), dtype=torch.float32)
    elif layout == "out_transposed":  # SGLang ignores out's column stride (wrong there): the oracle decides
        out = torch.full((n, m), float("nan"), dtype=dt).t()
    elif layout == "in_place":
        out = x
    elif layout == "out_overlaps_x":  # out starts one row into x: the kernel must read a copy of x
        buf = torch.full((m + 1, n), float("nan"), dtype=dt)
        buf[:m].copy_(base)
        x, out = buf[:m], buf[1:]
    want = _oracle(base, w, b, 1e-6, False)
    if out is not None and layout not in ("in_place", "out_overlaps_x"):
        sglang = sg_ni(x.clone(), w, b, 1e-6, False, out.clone() if layout != "out_transposed" else None)
    else:
        sglang = sg_ni(base.clone(), w, b, 1e-6, False)
    got = reg.norm_infer(x, w, b, 1e-6, False, out)
    if out is not None:
        assert got is out
    assert _close(got, want, dt)  # fp16 tolerance also for the fp32 out (its values need not be fp16-rounded)
    assert _close(got, sglang.double(), dt)


ONE_PASS_CASES = [
    ((2100, 128), torch.float32, "rows>1"),
    ((1029, 72), torch.float16, "rows>1,two segments exact"),
    ((37, 128), torch.float16, "plain"),
]


@pytest.mark.parametrize("case", ONE_PASS_CASES, ids=lambda c: "x".join(map(str, c[0])) + f"-{c[1]}")
def test_one_pass_paths(env: Any, case: tuple[Any, ...]) -> None:
    reg, kernel_mod, _, sg_op = env
    shape, dt, feature = case
    _expect_plan(kernel_mod.plan_one_pass(shape[0], shape[1], torch.empty((), dtype=dt).element_size()), feature)
    x = _rows(*shape, dt)
    w = torch.randn(shape[1]).to(dt)
    got = reg.triton_one_pass_rms_norm(x, w, 1e-6)
    assert got.shape == x.shape and got.dtype == dt and got.is_contiguous()
    assert _close(got, _oracle(x, w, None, 1e-6, True), dt)
    assert _close(got, sg_op(x, w, 1e-6).double(), dt)


@pytest.mark.parametrize("layout", ("qkv_slice", "3d_transposed", "fp32_weight"))
def test_one_pass_layouts(env: Any, layout: str) -> None:
    reg, _, _, sg_op = env
    dt = torch.float16
    if layout == "qkv_slice":
        x = _rows(24, 3 * 128, dt)[:, 128:256]
        w = torch.randn(128).to(dt)
    elif layout == "3d_transposed":
        x = _rows(2 * 11, 64, dt).view(2, 11, 64).transpose(0, 1)  # [11, 2, 64], not contiguous
        w = torch.randn(64).to(dt)
    else:
        x = _rows(16, 128, dt)
        w = torch.randn(128)
    got = reg.triton_one_pass_rms_norm(x, w, 1e-6)
    assert got.shape == x.shape and got.is_contiguous()
    assert _close(got, _oracle(x.float(), w, None, 1e-6, True), dt)
    assert _close(got, sg_op(x, w, 1e-6).double(), dt)


def test_int64_row_offsets(env: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The ROW64 path (taken only past 2^31 elements, too large for a CPU test) forced on small inputs."""
    reg, _, _, sg_op = env
    monkeypatch.setattr(reg, "needs_row64", lambda *a: True)
    got, sglang, oracle = _norm_run(env, NORM_CASES[1], torch.float16)
    assert _close(got, oracle, torch.float16) and _close(got, sglang.double(), torch.float16)
    x = _rows(1029, 72, torch.float16)
    w = torch.randn(72).to(torch.float16)
    y = reg.triton_one_pass_rms_norm(x, w, 1e-6)
    assert _close(y, _oracle(x, w, None, 1e-6, True), torch.float16)
    assert _close(y, sg_op(x, w, 1e-6).double(), torch.float16)


def test_fallbacks_go_to_sglang(env: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    reg, _, sg_ni, sg_op = env
    calls: list[str] = []

    def counting(name: str, fn: Any) -> Any:
        def call(*a: Any, **k: Any) -> Any:
            calls.append(name)
            return fn(*a, **k)
        return call

    monkeypatch.setattr(reg, "_sglang_norm_infer", counting("norm_infer", sg_ni))
    monkeypatch.setattr(reg, "_sglang_one_pass", counting("one_pass", sg_op))
    n = 64
    x = _rows(4, n, torch.float32)
    w = torch.randn(n)
    reg.norm_infer(x.double(), w, None, 1e-6, False)  # fp64 x
    with pytest.raises(AssertionError):
        reg.norm_infer(x, torch.randn(n + 1), None, 1e-6, False)  # SGLang asserts the weight shape
    with pytest.raises(RuntimeError):
        reg.norm_infer(torch.randn(2, 16385), None, None, 1e-6, False)  # row over 64 KiB: SGLang raises
    xg = x.clone().requires_grad_(True)
    with torch.enable_grad():
        reg.triton_one_pass_rms_norm(xg, w, 1e-6)  # autograd recording
    reg.triton_one_pass_rms_norm(x, w.double(), 1e-6)  # fp64 weight
    assert calls == ["norm_infer", "norm_infer", "norm_infer", "one_pass", "one_pass"]


def _reject(env: Any, case: tuple[Any, ...], dtype: torch.dtype, fn: Any) -> bool:
    """True when the comparison of test_norm_infer_paths rejects ``fn`` on ``case``."""
    got, sglang, oracle = _norm_run(env, case, dtype, fn)
    return not (_close(got, oracle, dtype) and _close(got, sglang.double(), dtype))


def test_wrong_variants_are_rejected(env: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    reg, kernel_mod, _, _ = env
    plain = (8, 256, False, False, False, "near_eps", "plain")
    tail = (7, 200, False, True, True, "randn", "mask")
    assert not _reject(env, plain, torch.float32, reg.norm_infer)
    assert not _reject(env, tail, torch.float32, reg.norm_infer)

    real_launch = reg.launch

    def no_eps(plan: Any, y: Any, x: Any, w: Any, b: Any, m: int, n: int, eps: float, is_rms: bool) -> Any:
        return real_launch(plan, y, x, w, b, m, n, 0.0, is_rms)

    def torn_plan(m: int, n: int, elem_bytes: int) -> Any:  # covers only the first power of two of the row
        p = kernel_mod.plan_norm_infer(m, n, elem_bytes)
        return kernel_mod.Plan(p.rows, kernel_mod._prev_pow2(n), 0, True, p.num_warps)

    def poisoned(fn: Any) -> Any:
        def call(x: Any, w: Any, b: Any, eps: float, rms: bool) -> Any:
            out = torch.full(x.shape, float("nan"), dtype=x.dtype)
            return fn(x, w, b, eps, rms, out)
        return call

    with monkeypatch.context() as mp:
        mp.setattr(reg, "launch", no_eps)
        assert _reject(env, plain, torch.float32, reg.norm_infer)
    with monkeypatch.context() as mp:
        mp.setattr(reg, "plan_norm_infer", torn_plan)
        assert _reject(env, tail, torch.float32, poisoned(reg.norm_infer))
