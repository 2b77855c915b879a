"""The candidate's select01 kernel (c005) on the paths the task.toml tiny rows do not reach: the head + tail split
with a masked tail (C = 1000), a tail narrower than half the head (C = 2100: 2048 + 64, C = 600: 512 + 128; the
head is folded onto the tail's width before each reduction), weight and bias on the split path, the residual form
at C = 3072, several rows per
program with a partial last program, [1, C] modulation broadcast over B, a transposed (strided) index and a bool
index, mixed gate/x dtypes; gate_out and residual_out bit for bit with SGLang's kernel, y against the fp64
oracle at the task tolerance; deliberately wrong variants that the comparison must reject; and every fallback
branch. Runs in the Triton interpreter on a CPU host (conftest.py sets TRITON_INTERPRET=1) or on the GPU."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

import pytest
import torch

from kda_lab.families.fuse_scale_shift import residual_select01_oracle, select01_oracle
from kda_lab.testing import HandedOver, candidate_under_test

UNDER_TEST = candidate_under_test(__file__)
TASK, CAND, DEVICE = UNDER_TEST.task, UNDER_TEST.module, UNDER_TEST.device
ON_GPU = DEVICE == "cuda"
PLAIN = "fuse_layernorm_scale_shift_gate_select01_kernel"
RESID = "fuse_residual_layernorm_scale_shift_gate_select01_kernel"
FLOATS = UNDER_TEST.floats
DNAME = {torch.float32: "float32", torch.float16: "float16", torch.bfloat16: "bfloat16"}


def sglang(fn: str) -> Callable[..., Any]:
    module, _, name = TASK.functions[fn].sglang.partition(":")
    if ON_GPU:
        return getattr(importlib.import_module(module), name)
    from kda_lab.interpret import interpretable

    return interpretable(module, name)


def rand(*shape: int, dtype: torch.dtype = torch.float32, mean: float = 0.0) -> torch.Tensor:
    return (torch.randn(*shape, device=DEVICE) + mean).to(dtype)


def make(batch: int, seq: int, c: int, dtype: torch.dtype, *, residual: bool, affine: bool, mod_batch: int | None = None,
         gate_dtype: torch.dtype | None = None, mean: float = 0.0) -> dict[str, Any]:
    mb = batch if mod_batch is None else mod_batch
    a: dict[str, Any] = {"x": rand(batch, seq, c, dtype=dtype, mean=mean)}
    if residual:
        a["residual"] = rand(batch, seq, c, dtype=dtype)
        a["residual_gate"] = rand(batch, seq, c, dtype=dtype)
    a["weight"] = rand(c, dtype=dtype) if affine else None
    a["bias"] = rand(c, dtype=dtype) if affine else None
    for k in ("scale0", "shift0", "scale1", "shift1"):
        a[k] = rand(mb, c, dtype=dtype)
    for k in ("gate0", "gate1"):
        a[k] = rand(mb, c, dtype=gate_dtype or dtype)
    a["index"] = torch.randint(0, 2, (batch, seq), device=DEVICE, dtype=torch.int32)
    a["eps"] = 1e-6
    return a


def call(fn: Callable[..., Any], a: dict[str, Any]) -> tuple[torch.Tensor, ...]:
    return tuple(fn(**a))


def candidate(a: dict[str, Any]) -> tuple[torch.Tensor, ...]:
    return call(CAND.EXPORTS[RESID if "residual" in a else PLAIN], a)


def oracle(a: dict[str, Any]) -> tuple[torch.Tensor, ...]:
    return residual_select01_oracle(a) if "residual" in a else select01_oracle(a)


def close_to_oracle(outs: tuple[torch.Tensor, ...], a: dict[str, Any]) -> bool:
    """Every output finite and within the task tolerance of the fp64 oracle, elementwise."""
    tol = TASK.tolerance(DNAME[a["x"].dtype])
    ref = oracle(a)
    assert len(outs) == len(ref)
    for out, r in zip(outs, ref, strict=True):
        r = r.expand(out.shape).cpu()
        o = out.double().cpu()
        if out.shape != a["x"].shape or out.dtype != a["x"].dtype or not torch.isfinite(o).all():
            return False
        if not ((o - r).abs() <= tol.atol + tol.rtol * r.abs()).all():
            return False
    return True


# ------------------------------------------------------------------------------------ inside the contract

CASES = {
    # (B, L, C, residual, affine): split 512 + 512 with a masked tail; rows per program with a partial last one
    "split_masked_tail_affine": (2, 5, 1000, False, True),
    "split_masked_tail_residual": (2, 3, 1000, True, True),
    "production_width_residual": (1, 3, 3072, True, False),
    "production_width_affine": (1, 2, 3072, False, True),
    "multi_row_partial_program": (3, 7, 96, False, True),
    "multi_row_residual_no_affine": (2, 9, 200, True, False),
    "narrow_tail_fold_affine": (1, 3, 2100, False, True),
    "narrow_tail_fold_residual": (2, 5, 600, True, False),
}


@pytest.mark.parametrize("dtype", FLOATS, ids=lambda d: DNAME[d])
@pytest.mark.parametrize("case", sorted(CASES))
def test_matches_oracle_and_sglang_bits(case: str, dtype: torch.dtype) -> None:
    torch.manual_seed(7)
    b, length, c, residual, affine = CASES[case]
    a = make(b, length, c, dtype, residual=residual, affine=affine)
    ours = candidate(a)
    theirs = call(sglang(RESID if residual else PLAIN), a)
    assert close_to_oracle(ours, a)
    assert torch.equal(ours[-1], theirs[-1]), "gate_out must be SGLang's bits"
    if residual:
        assert torch.equal(ours[1], theirs[1]), "residual_out must be SGLang's bits"


@pytest.mark.parametrize("residual", [False, True], ids=["plain", "residual"])
def test_broadcast_modulation_and_strided_index(residual: bool) -> None:
    torch.manual_seed(3)
    a = make(2, 6, 1000, torch.float32, residual=residual, affine=False, mod_batch=1)
    a["index"] = torch.randint(0, 2, (6, 2), device=DEVICE, dtype=torch.int64).t()  # strided [B, L]
    assert close_to_oracle(candidate(a), a)
    a["index"] = a["index"].to(torch.bool)
    assert close_to_oracle(candidate(a), a)
    a["index"] = torch.randint(0, 2, (1, 6), device=DEVICE, dtype=torch.int32) * 5  # [1, L], nonzero = 5
    assert close_to_oracle(candidate(a), a)


def test_mixed_gate_dtype_and_strided_modulation() -> None:
    torch.manual_seed(5)
    a = make(2, 4, 200, torch.float16, residual=False, affine=True, gate_dtype=torch.float32)
    a["scale1"] = rand(200, 2).t()  # C stride 2: made dense, as SGLang's .contiguous() does
    a["scale1"] = a["scale1"].to(torch.float16)
    ours = candidate(a)
    assert close_to_oracle(ours, a)
    assert torch.equal(ours[1], call(sglang(PLAIN), a)[1])


def test_offset_mean_two_pass() -> None:
    torch.manual_seed(11)
    a = make(1, 4, 3072, torch.float32, residual=False, affine=False, mean=300.0)
    assert close_to_oracle(candidate(a), a)


# ------------------------------------------------------------------------------------ the check bites

def test_wrong_variants_are_rejected() -> None:
    """Inverting the selection, a wrong eps and single-pass E[x^2]-mean^2 statistics must all fail the
    comparison that passes the candidate."""
    torch.manual_seed(13)
    a = make(2, 5, 1000, torch.float32, residual=False, affine=True)
    a["index"][0, 0], a["index"][0, 1] = 0, 1
    assert close_to_oracle(candidate(a), a)
    flipped = dict(a, index=(a["index"] == 0).to(torch.int32))
    assert not close_to_oracle(candidate(flipped), a)
    tiny = make(1, 4, 256, torch.float32, residual=False, affine=False)
    tiny["x"] = tiny["x"] * 1e-3
    assert close_to_oracle(candidate(tiny), tiny)
    assert not close_to_oracle(candidate(dict(tiny, eps=1e-4)), tiny)
    off = make(1, 4, 3072, torch.float32, residual=False, affine=False, mean=300.0)
    x = off["x"].float()
    naive_var = (x * x).mean(-1, keepdim=True) - x.mean(-1, keepdim=True) ** 2  # fp32 cancellation
    xhat = (x - x.mean(-1, keepdim=True)) * torch.rsqrt(naive_var + off["eps"])
    idx = (off["index"] != 0)[..., None]
    scale = torch.where(idx, off["scale1"][:, None], off["scale0"][:, None])
    shift = torch.where(idx, off["shift1"][:, None], off["shift0"][:, None])
    gate = torch.where(idx, off["gate1"][:, None], off["gate0"][:, None]).expand_as(x).contiguous()
    assert not close_to_oracle((xhat * (1 + scale) + shift, gate), off)


# ------------------------------------------------------------------------------------ fallbacks



@pytest.fixture
def fallbacks(monkeypatch: pytest.MonkeyPatch) -> dict[str, HandedOver]:
    rec = {PLAIN: HandedOver(), RESID: HandedOver()}
    monkeypatch.setattr(CAND, "_sglang_select01", rec[PLAIN])
    monkeypatch.setattr(CAND, "_sglang_residual_select01", rec[RESID])
    return rec


def outside(residual: bool) -> dict[str, Callable[[dict[str, Any]], dict[str, Any]]]:
    cases: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
        "x_not_contiguous": lambda a: dict(a, x=a["x"].transpose(0, 1).contiguous().transpose(0, 1)),
        "x_fp64": lambda a: dict(a, x=a["x"].double()),
        "x_2d": lambda a: dict(a, x=a["x"][0]),
        "mod_3d": lambda a: dict(a, scale0=a["scale0"][:, None]),
        "mod_wrong_c": lambda a: dict(a, shift1=a["shift1"][:, :-1]),
        "mod_wrong_batch": lambda a: dict(a, gate0=torch.cat([a["gate0"]] * 3)),
        "weight_wrong_c": lambda a: dict(a, weight=torch.ones(7, device=DEVICE)),
        "index_1d": lambda a: dict(a, index=a["index"][0]),
        "index_float": lambda a: dict(a, index=a["index"].float()),
        "index_wrong_l": lambda a: dict(a, index=a["index"][:, :-1]),
        "wide_c": lambda a: dict(make(1, 1, CAND.MAX_C + 1, torch.float32, residual=residual, affine=False)),
        "empty": lambda a: dict(a, x=a["x"][:, :0], index=a["index"][:, :0]) if not residual else dict(
            a, x=a["x"][:, :0], residual=a["residual"][:, :0], residual_gate=a["residual_gate"][:, :0],
            index=a["index"][:, :0]),
        "requires_grad": lambda a: dict(a, scale0=a["scale0"].clone().requires_grad_(True)),
        # the kernel selects between a pair's base pointers: one dtype per (scale, shift, gate) pair
        "scale_pair_dtypes": lambda a: dict(a, scale1=a["scale1"].half()),
        "gate_pair_dtypes": lambda a: dict(a, gate0=a["gate0"].bfloat16()),
    }
    if residual:
        cases["residual_strided"] = lambda a: dict(a, residual=a["residual"].transpose(0, 1).contiguous()
                                                   .transpose(0, 1))
        cases["residual_gate_shape"] = lambda a: dict(a, residual_gate=a["residual_gate"][:, :1])
    return cases


@pytest.mark.parametrize("residual", [False, True], ids=["plain", "residual"])
def test_outside_contract_goes_to_sglang(residual: bool, fallbacks: dict[str, HandedOver]) -> None:
    base = make(2, 3, 64, torch.float32, residual=residual, affine=True)
    fn = RESID if residual else PLAIN
    for name, edit in outside(residual).items():
        before = fallbacks[fn].calls
        assert CAND.EXPORTS[fn](**edit(base)) is fallbacks[fn].result, name
        assert fallbacks[fn].calls > before, name
