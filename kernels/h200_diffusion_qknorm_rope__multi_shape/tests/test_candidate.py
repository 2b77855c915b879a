"""The Triton candidate's own contract on small inputs, in the CPU interpreter (or on a GPU): its kernel against
the lab's fp64 oracle on the layouts the task rows cover only in part (both RoPE layouts x half/full-width caches
x rope_dim < head_dim x head_dim 64/128/256 x int32/int64 positions x fp16/fp32 caches x strided qkv views x
Hq != Hk x several tokens per program with a token tail), deliberately wrong variants the comparison must reject,
in-place semantics (q and k written, nothing else), and every fallback branch. SGLang's kernel is JIT CUDA: on a
CPU host it cannot run, so the oracle is the reference here (the GPU check compares both)."""

from __future__ import annotations

import sys
from typing import Any

import pytest
import torch

from kda_lab.families.qknorm_rope import qknorm_rope_oracle
from kda_lab.measure.correctness import compare
from kda_lab.testing import candidate_under_test

UNDER_TEST = candidate_under_test(__file__)
TASK, CAND, DEVICE = UNDER_TEST.task, UNDER_TEST.module, UNDER_TEST.device
ON_GPU = DEVICE == "cuda"
KERNEL = sys.modules[CAND.launch.__module__]  # src/qknorm_rope.py, as register.py imported it
ACT_DTYPES = (torch.float16, torch.float32) if not ON_GPU else (torch.float16, torch.bfloat16)


def make(n: int, hq: int, hk: int, d: int, dtype: torch.dtype, cache_dtype: torch.dtype, rope: int, full: bool,
         pos_dtype: torch.dtype, qkv_views: bool = False, std: float = 1.0, seed: int = 0) -> dict[str, Any]:
    g = torch.Generator().manual_seed(seed)
    if qkv_views:  # q | k | v of one projection: token stride (hq + 2 hk) d, v must stay untouched
        buf = torch.randn(n, (hq + 2 * hk) * d, generator=g).mul(std).to(dtype).to(DEVICE)
        q = buf[:, : hq * d].view(n, hq, d)
        k = buf[:, hq * d:(hq + hk) * d].view(n, hk, d)
    else:
        buf = None
        q = torch.randn(n, hq, d, generator=g).mul(std).to(dtype).to(DEVICE)
        k = torch.randn(n, hk, d, generator=g).mul(std).to(dtype).to(DEVICE)
    p = n + 3
    return {
        "q": q, "k": k, "buf": buf,
        "q_weight": (1 + 0.1 * torch.randn(d, generator=g)).to(dtype).to(DEVICE),
        "k_weight": (1 + 0.1 * torch.randn(d, generator=g)).to(dtype).to(DEVICE),
        "cos_sin_cache": (torch.rand(p, 2 * rope if full else rope, generator=g) * 2 - 1).to(cache_dtype).to(DEVICE),
        "positions": torch.randint(0, p, (n,), generator=g).to(pos_dtype).to(DEVICE),
        "rope_dim": rope, "cache_has_full_width": full,
    }


def call_args(a: dict[str, Any], is_neox: bool, eps: float) -> dict[str, Any]:
    return {"q": a["q"], "k": a["k"], "q_weight": a["q_weight"], "k_weight": a["k_weight"],
            "cos_sin_cache": a["cos_sin_cache"], "positions": a["positions"], "is_neox": is_neox, "eps": eps,
            "rope_dim": a["rope_dim"], "cache_has_full_width": a["cache_has_full_width"]}


def oracle(a: dict[str, Any], is_neox: bool, eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    args = call_args(a, is_neox, eps)
    args["q"], args["k"] = a["q"].clone(), a["k"].clone()
    return qknorm_rope_oracle(args)


def verdict(a: dict[str, Any], expected: tuple[torch.Tensor, torch.Tensor]) -> list[str]:
    """Failures of q and k (after the call) against the oracle, at the task's tolerance."""
    tol = TASK.tolerance(str(a["q"].dtype).removeprefix("torch."))
    cmps = [compare(name, out, ref, tol) for name, out, ref in zip(("q", "k"), (a["q"], a["k"]), expected,
                                                                     strict=True)]
    return [c.describe() for c in cmps if not c.ok]


# (n, hq, hk, d, rope, full, is_neox, pos dtype, cache dtype, qkv views)
CASES = [
    (61, 2, 2, 128, 128, False, False, torch.int64, torch.float32, False),  # several tokens a program, tail
    (7, 24, 24, 128, 128, False, False, torch.int64, torch.float32, True),  # production layout, qkv views
    (5, 3, 5, 128, 64, False, True, torch.int32, torch.float32, False),  # NeoX partial, GQA, masked heads
    (5, 4, 2, 128, 96, False, True, torch.int64, torch.float16, False),  # NeoX rope 96 (not a power of two)
    (6, 2, 3, 128, 96, True, False, torch.int32, torch.float32, False),  # interleaved, full width, partial
    (4, 8, 8, 64, 64, False, True, torch.int32, torch.float16, False),  # head_dim 64 NeoX, fp16 cache
    (3, 7, 7, 128, 64, False, True, torch.int32, torch.float32, False),  # 7 heads: padded head blocks
    (3, 2, 1, 64, 32, True, True, torch.int64, torch.float32, True),  # NeoX full width partial, views
    (3, 3, 3, 256, 128, False, False, torch.int32, torch.float32, True),  # head_dim 256, rope 128
    (2, 2, 2, 256, 256, True, True, torch.int64, torch.float16, False),  # head_dim 256 NeoX full width
]


@pytest.mark.parametrize("dtype", ACT_DTYPES, ids=str)
@pytest.mark.parametrize("case", CASES, ids=lambda c: f"N{c[0]}_Hq{c[1]}_Hk{c[2]}_D{c[3]}_R{c[4]}"
                         f"{'_full' if c[5] else ''}{'_neox' if c[6] else ''}_{str(c[7])[6:]}{'_views' if c[9] else ''}")
def test_kernel_matches_oracle_in_place(case: tuple[Any, ...], dtype: torch.dtype) -> None:
    n, hq, hk, d, rope, full, neox, pos_dtype, cache_dtype, views = case
    a = make(n, hq, hk, d, dtype, cache_dtype, rope, full, pos_dtype, views)
    expected = oracle(a, neox, 1e-6)
    q_ptr, k_ptr, q_stride, k_stride = a["q"].data_ptr(), a["k"].data_ptr(), a["q"].stride(), a["k"].stride()
    v_before = a["buf"][:, (hq + hk) * d:].clone() if views else None
    assert CAND.fused_inplace_qknorm_rope(**call_args(a, neox, 1e-6)) is None
    assert not verdict(a, expected), verdict(a, expected)
    assert (a["q"].data_ptr(), a["k"].data_ptr(), a["q"].stride(), a["k"].stride()) == (q_ptr, k_ptr, q_stride,
                                                                                        k_stride)
    if views:  # the v third of the projection is not written
        assert torch.equal(a["buf"][:, (hq + hk) * d:], v_before)


def test_plans_cover_tiles_with_several_tokens_and_masked_heads() -> None:
    """The cases above reach the kernel's multi-token tiles (with a tail) and padded head blocks."""
    sms = KERNEL.sm_count(torch.device("cpu"))  # the interpreter's tiling
    tok, hb, _ = KERNEL.plan(61, 2, 2, 128, 2, 512, sms)
    assert tok > 1 and 61 % tok  # several tokens a program, the last one masked
    tok, hb, _ = KERNEL.plan(3, 7, 7, 128, 2, 256, sms)
    assert -(-7 // hb) * hb > 7  # 7 heads in padded head blocks
    # production shapes: H24 -> 8-head blocks, H30 -> 32-head blocks (2 masked), large rows fill ~TILE_ELEMS
    assert KERNEL.plan(4096, 24, 24, 128, 2, 512, 132) == (4, 8, 8)
    assert KERNEL.plan(4096, 30, 30, 128, 2, 512, 132) == (1, 32, 8)
    assert KERNEL.plan(19, 24, 24, 128, 2, 512, 132)[0] == 1  # small rows: one token a program


def test_tiny_variance_respects_eps() -> None:
    """mean(x²) ~ 1e-6 next to eps 1e-5: eps must be inside the rsqrt, in the right place."""
    a = make(16, 4, 4, 128, ACT_DTYPES[0], torch.float32, 128, False, torch.int64, std=1e-3)
    expected = oracle(a, False, 1e-5)
    CAND.fused_inplace_qknorm_rope(**call_args(a, False, 1e-5))
    assert not verdict(a, expected)


# ------------------------------------------------------------------- the comparison rejects wrong variants

def _launch_wrong(a: dict[str, Any], is_neox: bool, eps: float, rope: int, full: bool) -> None:
    KERNEL.launch(a["q"], a["k"], a["q_weight"], a["k_weight"], a["cos_sin_cache"], a["positions"], eps, rope,
                  is_neox, full)


@pytest.mark.parametrize("wrong", ["layout swapped", "rope on every lane", "eps x100", "cache width ignored"])
def test_wrong_variants_are_rejected(wrong: str) -> None:
    neox, rope, full, eps, std = True, 64, False, 1e-5, 1.0
    if wrong == "eps x100":
        std = 1e-3
    if wrong == "cache width ignored":
        full = True
    a = make(5, 2, 3, 128, ACT_DTYPES[0], torch.float32, rope, full, torch.int64, std=std)
    expected = oracle(a, neox, eps)
    if wrong == "layout swapped":
        _launch_wrong(a, not neox, eps, rope, full)
    elif wrong == "rope on every lane":  # rotate all 128 lanes with the 64-lane cache row read as a 128-lane one
        a2 = dict(a, cos_sin_cache=torch.cat([a["cos_sin_cache"]] * 2, dim=1))
        _launch_wrong(a2, neox, eps, 128, full)
    elif wrong == "eps x100":
        _launch_wrong(a, neox, eps * 100, rope, full)
    else:  # a full-width row read as a half-width one
        _launch_wrong(a, neox, eps, rope, False)
    assert verdict(a, expected), f"the comparison accepted a wrong kernel ({wrong})"


# ------------------------------------------------------------------------------------------- fallbacks

class Recorder:
    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, *args: Any, **kwargs: Any) -> None:
        self.calls += 1


@pytest.fixture
def sglang(monkeypatch: pytest.MonkeyPatch) -> Recorder:
    rec = Recorder()
    monkeypatch.setattr(CAND, "_sglang_qknorm_rope", rec)
    return rec


def _base() -> dict[str, Any]:
    return call_args(make(3, 2, 2, 128, ACT_DTYPES[0], torch.float32, 128, False, torch.int64), False, 1e-6)


FALLBACKS = {
    "round_norm_before_rope": lambda a: a.update(round_norm_before_rope=True),
    "head_dim 96": lambda a: a.update(q=a["q"][..., :96], k=a["k"][..., :96], q_weight=a["q_weight"][:96],
                                      k_weight=a["k_weight"][:96], cos_sin_cache=a["cos_sin_cache"][:, :96].clone(),
                                      rope_dim=0),
    "head_dim arg != D": lambda a: a.update(head_dim=64),
    "rope not a multiple of D/32": lambda a: a.update(cos_sin_cache=a["cos_sin_cache"][:, :6].clone(), rope_dim=6),
    "NeoX with an odd lane count": lambda a: a.update(is_neox=True, cos_sin_cache=a["cos_sin_cache"][:, :4].clone(),
                                                      rope_dim=4),
    "cache width != rope_dim": lambda a: a.update(rope_dim=64),
    "strided cache": lambda a: a.update(cos_sin_cache=torch.cat([a["cos_sin_cache"]] * 2, 1)[:, :128]),
    "weight dtype": lambda a: a.update(q_weight=a["q_weight"].double()),
    "different head strides": lambda a: a.update(k=torch.zeros(3, 2, 256, dtype=a["k"].dtype,
                                                               device=DEVICE)[..., :128]),
    "last stride not 1": lambda a: a.update(q=a["q"].transpose(1, 2).contiguous().transpose(1, 2)),
    "float64 q/k": lambda a: a.update(q=a["q"].double(), k=a["k"].double()),
    "positions int16": lambda a: a.update(positions=a["positions"].to(torch.int16)),
    "non-bool is_neox": lambda a: a.update(is_neox=1),
    "overlapping rows": lambda a: a.update(q=a["q"][:1].expand(3, 2, 128)),
}


@pytest.mark.parametrize("name", list(FALLBACKS))
def test_outside_the_contract_goes_to_sglang(name: str, sglang: Recorder) -> None:
    a = _base()
    FALLBACKS[name](a)
    CAND.fused_inplace_qknorm_rope(**a)
    assert sglang.calls == 1, name


def test_no_work_returns_without_sglang(sglang: Recorder) -> None:
    a = _base()
    a.update(q=a["q"][:0], k=a["k"][:0], positions=a["positions"][:0])
    assert CAND.fused_inplace_qknorm_rope(**a) is None
    assert sglang.calls == 0
