"""The mha reference-task family (kda_lab/families/mha.py) and its baselines (kda_lab/baselines.py): the fp64
oracle on hand-computed cases and against SDPA in fp64, deliberately wrong implementations the checker must
reject (each next to a correct control on the same row: no softmax scale, the causal mask inverted, [B,S,H,D]
memory read as [B,H,S,D], the last key block dropped), SDPA's math backend passing the test rows on CPU, and
the lazily resolved GPU-only baselines (SDPA flash, FlashAttention-4) called as SGLang calls them or failing
with a clear error."""

from __future__ import annotations

import functools
import math

import pytest
import torch
import torch.nn.functional as F

from kda_lab import baselines
from kda_lab.families import FAMILY_FUNCTIONS, contract, family_module, mha
from kda_lab.task import load_task
from tests.families import _helpers as H

MHA_TASKS = ("h200_fa4_mha__bf16_head128_total32768", "b200_fa4_mha__bf16_head128_total32768")


def test_families_are_registered() -> None:
    assert FAMILY_FUNCTIONS["mha"] == ("mha_forward",)
    assert set(family_module("mha").FUNCTIONS) == {"mha_forward"}


@pytest.mark.parametrize("slug", MHA_TASKS)
def test_task_entries_resolve_without_a_gpu(slug: str) -> None:
    H.assert_reference_task_entry_resolves(load_task(slug))


# ------------------------------------------------------------------------------------------------ mha: oracle

def test_mha_oracle_hand_computed() -> None:
    q = torch.tensor([1.0, 2.0]).view(1, 2, 1, 1)  # [B=1, S=2, H=1, D=1], scale 1
    v = torch.tensor([3.0, -1.0]).view(1, 2, 1, 1)
    (y,) = mha.oracle({"q": q, "k": q, "v": v, "causal": False, "softmax_scale": 1.0})
    # query 0: scores [1, 2]; query 1: scores [2, 4]
    p0, p1 = 1 / (1 + math.e), 1 / (1 + math.e**2)
    expect = [3 * p0 - (1 - p0), 3 * p1 - (1 - p1)]
    torch.testing.assert_close(y.flatten(), torch.tensor(expect, dtype=torch.float64), rtol=1e-14, atol=1e-14)
    (yc,) = mha.oracle({"q": q, "k": q, "v": v, "causal": True, "softmax_scale": 1.0})
    torch.testing.assert_close(yc.flatten(), torch.tensor([3.0, expect[1]], dtype=torch.float64),
                               rtol=1e-14, atol=1e-14)


@pytest.mark.parametrize(("causal", "scale"), [(False, None), (True, None), (False, 0.3)])
def test_mha_oracle_matches_sdpa_in_fp64(causal: bool, scale: float | None,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 37, 3, 16, generator=g, dtype=torch.float64) for _ in range(3))
    monkeypatch.setattr(mha, "_SCORE_BUDGET", 3 * 37 * 5)  # query blocks of 5 rows: the blocking is exercised
    (y,) = mha.oracle({"q": q, "k": k, "v": v, "causal": causal, "softmax_scale": scale})
    ref = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                         is_causal=causal, scale=scale).transpose(1, 2)
    torch.testing.assert_close(y, ref, rtol=1e-12, atol=1e-12)


def test_mha_oracle_rejects_what_the_contract_excludes() -> None:
    q = torch.randn(1, 4, 2, 8)
    with pytest.raises(ValueError, match="Sq == Sk"):
        mha.attention64(q, torch.randn(1, 5, 2, 8), torch.randn(1, 5, 2, 8), causal=True)
    with pytest.raises(ValueError, match="MHA"):
        mha.attention64(q, torch.randn(1, 4, 1, 8), torch.randn(1, 4, 1, 8))


# ----------------------------------------------------------------------------------------------- mha: checker

math_sdpa = functools.partial(baselines.sdpa_mha, backends=("MATH",))


def no_scale(q, k, v, causal=False, softmax_scale=None):
    return math_sdpa(q, k, v, causal, 1.0)


def wrong_causal(q, k, v, causal=False, softmax_scale=None):
    return math_sdpa(q, k, v, not causal, softmax_scale)


def heads_major_layout(q, k, v, causal=False, softmax_scale=None):
    """Wrong: reads [B, S, H, D] memory as [B, H, S, D]."""
    def as_bhsd(t):
        return t.reshape(t.shape[0], t.shape[2], t.shape[1], t.shape[3])

    o = F.scaled_dot_product_attention(as_bhsd(q), as_bhsd(k), as_bhsd(v), is_causal=causal,
                                       scale=softmax_scale)
    return o.reshape(q.shape)


def drops_last_key_block(q, k, v, causal=False, softmax_scale=None):
    n = (k.shape[1] - 1) // 128 * 128
    return math_sdpa(q, k[:, :n], v[:, :n], causal, softmax_scale)


MHA_CASES = [
    ("no_scale", no_scale, "test_seq_tail_1000"),
    ("wrong_causal", wrong_causal, "test_seq_tail_1000"),
    ("heads_major_layout", heads_major_layout, "test_explicit_scale"),
    ("drops_last_key_block", drops_last_key_block, "test_explicit_scale"),
]


@pytest.mark.parametrize(("name", "wrong", "row_name"), MHA_CASES, ids=[c[0] for c in MHA_CASES])
def test_checker_rejects_wrong_attention(name: str, wrong, row_name: str) -> None:
    res = H.check(load_task(MHA_TASKS[0]), row_name, {"control": math_sdpa, name: wrong}, seed=2)
    assert {r.impl: r.ok for r in res} == {"control": True, name: False}, "\n".join(r.describe() for r in res)


@pytest.mark.parametrize("row_name", ["test_short_seq_17", "test_explicit_scale", "test_fp16_1024"])
def test_sdpa_math_passes_the_test_rows(row_name: str) -> None:
    task = load_task(MHA_TASKS[1])
    c = contract(task.family, H.rows(task)[row_name].fn)
    res = H.check(task, row_name, {"math": math_sdpa, "torch_reference": c.torch_reference}, seed=1)
    assert all(r.ok for r in res), "\n".join(r.describe() for r in res)


def test_sdpa_flash_baseline_pins_the_flash_backend(monkeypatch: pytest.MonkeyPatch) -> None:
    seen = {}
    monkeypatch.setattr(baselines, "sdpa_mha", lambda *a, **k: seen.update(a=a, k=k) or "out")
    q = torch.randn(1, 4, 2, 8)
    assert baselines.sdpa_flash_mha(q, q, q, True, 0.5) == "out"
    assert seen["k"] == {"backends": ("FLASH_ATTENTION",)} and seen["a"][3:] == (True, 0.5)


def test_fa4_baseline_calls_sglangs_wrapper_like_the_diffusion_backend(
        monkeypatch: pytest.MonkeyPatch) -> None:
    seen = {}

    def fake(q, k, v, cu_q, cu_k, **kw):
        seen.update(cu=(cu_q, cu_k), **kw)
        return q

    monkeypatch.setattr(baselines, "_fa4_varlen", lambda: fake)
    q, k = torch.randn(2, 6, 3, 8), torch.randn(2, 9, 3, 8)
    baselines.fa4_mha(q, k, k, causal=False, softmax_scale=0.2)
    assert seen == {"cu": (None, None), "max_seqlen_q": 6, "max_seqlen_k": 9, "softmax_scale": 0.2,
                    "causal": False}


def test_fa4_baseline_unavailable_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    from sglang.kernels.ops.attention import flash_attention_v4 as fa4

    baselines._fa4_varlen.cache_clear()
    monkeypatch.setattr(fa4, "is_flash_attention_v4_available", lambda: False)
    try:
        with pytest.raises(baselines.BaselineUnavailable, match="CuTe DSL"):
            baselines.fa4_mha(*(torch.randn(1, 4, 2, 8, dtype=torch.bfloat16),) * 3)
    finally:
        baselines._fa4_varlen.cache_clear()
