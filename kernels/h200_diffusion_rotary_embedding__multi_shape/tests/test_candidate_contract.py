"""The Triton candidate's own contract: which inputs its kernels take (bit for bit with SGLang's kernel, run in
the Triton interpreter on a CPU host or on the GPU) and which go to SGLang's function (and raise where SGLang
raises). The shared task tests (test_correctness.py) cover the task.toml rows; these cover the layouts the rows
do not: wide or fp64 tables, permuted dense x, mixed x/cos dtypes, and every fallback branch."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from typing import Any

import pytest
import torch
import triton
import triton.language as tl

from kda_lab.testing import HandedOver, candidate_under_test

UNDER_TEST = candidate_under_test(__file__)
TASK, CAND, DEVICE = UNDER_TEST.task, UNDER_TEST.module, UNDER_TEST.device
ON_GPU = DEVICE == "cuda"
FLOATS = UNDER_TEST.floats


def sglang(fn: str) -> Callable[..., Any]:
    """SGLang's own kernel: on a CPU host its wrapper made runnable in the interpreter (with the rotary shims)."""
    module, _, name = TASK.functions[fn].sglang.partition(":")
    if ON_GPU:
        return getattr(importlib.import_module(module), name)
    from kda_lab.interpret import interpretable

    return interpretable(module, name)




@pytest.fixture
def fallbacks(monkeypatch: pytest.MonkeyPatch) -> dict[str, HandedOver]:
    rec = {"apply_rotary_embedding": HandedOver(), "apply_ltx2_split_rotary_emb": HandedOver()}
    monkeypatch.setattr(CAND, "_sglang_rotary", rec["apply_rotary_embedding"])
    monkeypatch.setattr(CAND, "_sglang_ltx2", rec["apply_ltx2_split_rotary_emb"])
    return rec


def uniform(*shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return (torch.rand(*shape, device=DEVICE) * 2 - 1).to(dtype)


def bits_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)


# ------------------------------------------------------------------------------------ inside the contract

def rope_cases(dtype: torch.dtype) -> dict[str, tuple[torch.Tensor, torch.Tensor, torch.Tensor, bool]]:
    t, h, d = 6, 3, 32
    permuted = uniform(1, h, t, d, dtype=dtype).permute(0, 2, 1, 3)  # dense, head-major memory: out keeps it
    return {
        "wide_table_not_interleaved": (uniform(2, t, h, d, dtype=dtype), uniform(t + 3, d), uniform(t + 3, d), False),
        "fp64_tables": (uniform(t, h, d, dtype=dtype), uniform(t, d // 2, dtype=torch.float64),
                        uniform(t, d // 2, dtype=torch.float64), False),
        "mixed_table_dtypes": (uniform(1, t, h, d, dtype=dtype), uniform(t, d // 2, dtype=torch.float16),
                               uniform(t, d // 2), False),
        "permuted_dense_x": (permuted, uniform(t, d // 2), uniform(t, d // 2), False),
        "interleaved_half_width": (uniform(1, t, h, d, dtype=dtype), uniform(t, d // 2), uniform(t, d // 2), True),
        "head_dim_24": (uniform(2, 5, 7, 24, dtype=dtype), uniform(5, 12), uniform(5, 12), False),
    }


@pytest.mark.parametrize("kernel", ["registered", "gptj_rope", "gptj_rope_headloop"])
@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("case", list(rope_cases(torch.float32)))
def test_rope_runs_its_kernel_bit_exact(case: str, dtype: torch.dtype, kernel: str, fallbacks: dict[str, HandedOver],
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """The registered launcher and each GPT-J kernel file (the variant is one import line away in register.py)."""
    if kernel != "registered":
        monkeypatch.setattr(CAND, "launch_gptj", importlib.import_module(f"{CAND.__name__}.{kernel}").launch)
        monkeypatch.setattr(CAND, "ROPE_LAUNCHES", type(CAND.ROPE_LAUNCHES)())  # no kept launch of another kernel
    torch.manual_seed(5)
    x, cos, sin, interleaved = rope_cases(dtype)[case]
    got = CAND.apply_rotary_embedding(x, cos, sin, interleaved)
    assert fallbacks["apply_rotary_embedding"].calls == 0, "the candidate handed an in-contract call to SGLang"
    want = sglang("apply_rotary_embedding")(x, cos, sin, interleaved)
    assert got.stride() == want.stride()
    assert bits_equal(got, want)


def ltx2_cases(dtype: torch.dtype) -> dict[str, tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    b, s, h, half = 2, 5, 3, 16

    def transposed(tdtype: torch.dtype) -> torch.Tensor:
        return uniform(b, s, h, half, dtype=tdtype).transpose(1, 2)  # LTX-2's [B,H,S,D/2] view

    return {
        "fp32_tables_promote": (uniform(b, s, h * 2 * half, dtype=dtype), transposed(torch.float32),
                                transposed(torch.float32)),
        "fp16_tables": (uniform(b, s, h * 2 * half, dtype=dtype), transposed(torch.float16),
                        uniform(b, h, s, half, dtype=torch.float16)),
        "large_values": (uniform(1, s, h * 2 * half, dtype=dtype) * 60, transposed(dtype)[:1], transposed(dtype)[:1]),
    }


@pytest.mark.parametrize("plan", [p.__name__ for p in CAND.PLANS_LTX2])
@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("case", list(ltx2_cases(torch.float32)))
def test_ltx2_runs_its_kernel_bit_exact(case: str, dtype: torch.dtype, plan: str, fallbacks: dict[str, HandedOver],
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """Each LTX-2 tile plan (the variant is one line away in register.py)."""
    monkeypatch.setattr(CAND, "plan_ltx2", next(p for p in CAND.PLANS_LTX2 if p.__name__ == plan))
    monkeypatch.setattr(CAND, "LTX2_LAUNCHES", type(CAND.LTX2_LAUNCHES)())  # no kept launch of another plan
    torch.manual_seed(6)
    x, cos, sin = ltx2_cases(dtype)[case]
    got = CAND.apply_ltx2_split_rotary_emb(x, cos, sin)
    assert fallbacks["apply_ltx2_split_rotary_emb"].calls == 0, "the candidate handed an in-contract call to SGLang"
    assert bits_equal(got, sglang("apply_ltx2_split_rotary_emb")(x, cos, sin))


round_to_bf16 = sys.modules[f"{CAND.__name__}.ltx2_split_rope"]._round_to_bf16  # a global, as @triton.jit wants


@triton.jit
def round_kernel(src, dst, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    v = tl.load(src + offs, mask=offs < n)
    tl.store(dst + offs, round_to_bf16(v), mask=offs < n)


def test_round_to_bf16_is_round_to_nearest_even() -> None:
    """The LTX-2 kernel's bf16 rounding (integer RNE on the bits) against torch's fp32 -> bf16 cast, on ties,
    the largest finite values, infinities, subnormals and NaN; a truncating rounding fails here."""
    kernel = round_kernel
    bits = torch.tensor([0x3F808000, 0x3F818000, 0x3F808001, 0x3F807FFF, 0x7F7FFFFF, 0x7F7F7FFF, 0xFF7FFFFF,
                         0x7F800000, 0xFF800000, 0x00000001, 0x00008000, 0x80018000, 0x00000000, 0x80000000],
                        dtype=torch.int64).to(torch.int32)
    values = torch.cat([bits.view(torch.float32), torch.randn(4000) * 1e3]).to(DEVICE)
    out = torch.empty_like(values)
    kernel[(1,)](values, out, values.numel(), BLOCK=4096)
    assert torch.equal(out, values.to(torch.bfloat16).float())
    nan = torch.tensor([float("nan")], device=DEVICE)
    kernel[(1,)](nan, out, 1, BLOCK=4096)
    assert torch.isnan(out[0])


# ------------------------------------------------------------------------------------ outside the contract

def rope_outside() -> dict[str, tuple[Any, ...]]:
    t, h, d = 4, 2, 16
    x = uniform(1, t, h, d)
    c, s = uniform(t, d // 2), uniform(t, d // 2)
    return {
        "x_fp64": (x.double(), c, s, False),
        "x_5d": (x[None], c, s, False),
        "odd_head_dim": (uniform(1, t, h, 15), uniform(t, 8), uniform(t, 8), False),
        "empty_x": (uniform(1, 0, h, d), c[:0], s[:0], False),
        "table_too_few_rows": (x, c[:3], s[:3], False),
        "table_too_narrow": (x, uniform(t, d // 2 - 1), uniform(t, d // 2 - 1), False),
        "table_3d": (x, c[None], s[None], False),
        "interleaved_tables_differ": (x, uniform(t, d), s, True),
        "table_int": (x, torch.ones(t, d // 2, dtype=torch.int32, device=DEVICE), s, False),
        "x_requires_grad": (x.clone().requires_grad_(), c, s, False),
        "batch_not_viewable": (uniform(t, 2, h, d).transpose(0, 1), c, s, False),
    }


@pytest.mark.parametrize("case", list(rope_outside()))
def test_rope_outside_contract_goes_to_sglang(case: str, fallbacks: dict[str, HandedOver]) -> None:
    rec = fallbacks["apply_rotary_embedding"]
    assert CAND.apply_rotary_embedding(*rope_outside()[case]) is rec.result
    assert rec.calls == 1


def ltx2_outside() -> dict[str, tuple[Any, ...]]:
    b, s, h, half = 1, 4, 2, 8
    x = uniform(b, s, h * 2 * half)
    c = uniform(b, s, h, half).transpose(1, 2)
    return {
        "x_fp64": (x.double(), c, c),
        "cos_fp64": (x, c.double(), c),
        "shape_mismatch": (x, uniform(b, h, s + 1, half), uniform(b, h, s + 1, half)),
        "sin_shape_differs": (x, c, uniform(b, h, s, half)[:, :, :, :4]),
        "x_2d": (x[0], c, c),
        "empty": (x[:, :0], c[:, :, :0], c[:, :, :0]),
        "x_requires_grad": (x.clone().requires_grad_(), c, c),
    }


@pytest.mark.parametrize("case", list(ltx2_outside()))
def test_ltx2_outside_contract_goes_to_sglang(case: str, fallbacks: dict[str, HandedOver]) -> None:
    rec = fallbacks["apply_ltx2_split_rotary_emb"]
    assert CAND.apply_ltx2_split_rotary_emb(*ltx2_outside()[case]) is rec.result
    assert rec.calls == 1


def strided_last() -> dict[str, tuple[str, tuple[Any, ...]]]:
    """Inputs SGLang 0.5.23 accepts and answers wrong (its kernels index the last dim as dense; the H200 overlay
    fuzz): the candidate answers them on dense copies, never through SGLang."""
    t, h, d = 4, 2, 16
    b, s, half = 1, 4, 8
    xl = uniform(b, s, h * 2 * half)
    cl = uniform(b, s, h, half).transpose(1, 2)
    return {
        "x_last_stride_2": ("apply_rotary_embedding",
                            (uniform(1, t, h, 2 * d)[..., ::2], uniform(t, d // 2), uniform(t, d // 2), False)),
        "table_column_stride_2": ("apply_rotary_embedding",
                                  (uniform(1, t, h, d), uniform(t, d)[:, ::2], uniform(t, d // 2), False)),
        "ltx2_x_last_stride_2": ("apply_ltx2_split_rotary_emb", (uniform(b, s, 2 * h * 2 * half)[..., ::2], cl, cl)),
        "ltx2_cos_last_stride_2": ("apply_ltx2_split_rotary_emb", (xl, uniform(b, h, s, 2 * half)[..., ::2], cl)),
    }


@pytest.mark.parametrize("case", list(strided_last()))
def test_strided_last_dims_answer_like_their_dense_copies(case: str, fallbacks: dict[str, HandedOver]) -> None:
    fn, args = strided_last()[case]
    dense = tuple(a.contiguous() if isinstance(a, torch.Tensor) else a for a in args)
    out = getattr(CAND, fn)(*args)
    assert fallbacks[fn].calls == 0, "SGLang's function answers these wrong; it must not be called"
    assert torch.equal(out, getattr(CAND, fn)(*dense))


def test_sglang_errors_reach_the_caller(monkeypatch: pytest.MonkeyPatch) -> None:
    """A call SGLang rejects is handed to SGLang, which raises its own error (never a wrong answer)."""
    monkeypatch.setattr(CAND, "_sglang_ltx2", sglang("apply_ltx2_split_rotary_emb"))
    monkeypatch.setattr(CAND, "_sglang_rotary", sglang("apply_rotary_embedding"))
    x = uniform(1, 4, 32)
    with pytest.raises(ValueError, match="shape mismatch"):
        CAND.apply_ltx2_split_rotary_emb(x, uniform(1, 2, 5, 8), uniform(1, 2, 5, 8))
    with pytest.raises(AssertionError, match="divisible by 2"):
        CAND.apply_rotary_embedding(uniform(1, 4, 2, 15), uniform(4, 8), uniform(4, 8))


@pytest.mark.parametrize("heads", [1, 3, 5, 17, 24, 32, 40])
@pytest.mark.parametrize("rows", [1, 7, 126, 27030])
def test_plans_cover_every_head_and_row(heads: int, rows: int) -> None:
    ltx2 = sys.modules[f"{CAND.__name__}.ltx2_split_rope"]
    for name in ("gptj_rope", "gptj_rope_headloop"):
        r, h, block_d, warps = importlib.import_module(f"{CAND.__name__}.{name}").plan(rows, heads, 128)
        assert r >= 1 and h >= 1 and block_d == 128 and 1 <= warps <= 8 and (h & (h - 1)) == 0 and (r & (r - 1)) == 0
    for plan in CAND.PLANS_LTX2:
        for half_dim, itemsize in ((12, 2), (32, 2), (64, 2), (64, 4)):
            for n_elems in (rows * heads * 2 * half_dim, ltx2.STREAM_MIN_ELEMS):
                p = plan(heads, half_dim, itemsize, n_elems)
                assert 1 <= p.block_heads <= 32 and (p.block_heads & (p.block_heads - 1)) == 0
                assert p.block_half >= half_dim and 1 <= p.num_warps <= 8


def test_auto_plan_streams_large_calls_only() -> None:
    """plan_auto: c004's geometry below STREAM_MIN_ELEMS, the memory-order 16-byte-vector plan from it."""
    ltx2 = sys.modules[f"{CAND.__name__}.ltx2_split_rope"]
    assert CAND.plan_ltx2 is ltx2.plan_auto
    small = ltx2.plan_auto(32, 64, 2, ltx2.STREAM_MIN_ELEMS - 1)
    assert small == ltx2.plan_sglang_tiles(32, 64, 2) and not small.linear
    assert tuple(ltx2.plan_auto(32, 64, 2, 2 * 6144 * 4096)) == (16, 64, 4, True, False, 0)
    assert tuple(ltx2.plan_auto(32, 32, 2, 24576 * 2048)) == (16, 32, 2, True, False, 0)
