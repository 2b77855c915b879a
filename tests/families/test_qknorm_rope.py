"""The qknorm_rope family (kda_lab/families/qknorm_rope.py: SGLang's ``fused_inplace_qknorm_rope``, an
in-place per-head RMSNorm of q and k then a rotary embedding): the fp64 oracle on hand-computed cases, the
eager reference passing the checker, and wrong implementations the checker must reject (run on CPU against the
real H200 task's rows and oracle): NeoX and interleaved rotation swapped, positions off by one, a wrong eps or
none, the rotation on every lane of a partial-rope head, k left unwritten, a half-width cache read per
element, q and k weights swapped.

SGLang's qknorm_rope baseline is a JIT CUDA kernel (GPU only): its tiny rows are ``no_cpu_baseline``.
"""

from __future__ import annotations

import math

import pytest
import torch

from kda_lab.families.qknorm_rope import qknorm_rope_oracle, qknorm_rope_reference
from tests.families import _helpers as H

QK = H.diffusion_task("qknorm_rope")
QK_ROWS = H.rows(QK)
# small rows only (the fp64 oracle runs on the CPU)
QK_SMALL = ["test_tail_T129_int32_cache_longer", "test_fused_qkv_views_T47", "test_neox_D64_T9_int64",
            "test_D256_partial_rope_T257_int32", "test_fp16_neox_partial_gqa",
            "test_fp16_interleaved_fp16_cache_D64", "test_round_norm_full_width_neox",
            "test_round_norm_bf16_cache_rope96", "test_round_norm_interleaved_full_width_fp16",
            "test_tiny_variance_eps", "test_one_token", "qwen_T19_H24_D128", "zimage_T32_H30_D128"]


# ---------------------------------------------------------------------------------------------- qknorm oracle


def _qk_args(q, k, cache, positions, **kw):
    d = q.shape[-1]
    return {"q": q, "k": k, "q_weight": torch.ones(d), "k_weight": torch.ones(d), "cos_sin_cache": cache,
            "positions": positions, "is_neox": False, "eps": 0.0, **kw}


def test_qknorm_constant_vector_normalizes_to_weight():
    d = 8
    q = torch.full((1, 1, d), 3.0)
    k = torch.full((1, 2, d), -0.5)
    w = torch.arange(1, d + 1, dtype=torch.float64)
    cache = torch.cat([torch.ones(1, d // 2), torch.zeros(1, d // 2)], dim=-1)  # cos 1, sin 0: identity
    a = _qk_args(q, k, cache, torch.zeros(1, dtype=torch.int64), q_weight=w, k_weight=w, eps=1e-6)
    qo, ko = qknorm_rope_oracle(a)
    torch.testing.assert_close(qo[0, 0], w * 3.0 / math.sqrt(9.0 + 1e-6), rtol=0, atol=1e-15)
    torch.testing.assert_close(ko[0, 1], -w * 0.5 / math.sqrt(0.25 + 1e-6), rtol=0, atol=1e-15)


def test_qknorm_rotation_by_90_degrees_interleaved_and_neox():
    d = 8
    x = torch.tensor([1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0], dtype=torch.float64).reshape(1, 1, d)
    e = x / x.square().mean().sqrt()
    cache = torch.cat([torch.zeros(1, d // 2), torch.ones(1, d // 2)], dim=-1)  # cos 0, sin 1
    pos = torch.zeros(1, dtype=torch.int32)
    qo, _ = qknorm_rope_oracle(_qk_args(x, x, cache, pos))
    inter = torch.stack([-e[..., 1::2], e[..., 0::2]], dim=-1).reshape(1, 1, d)  # (e0, e1) -> (-e1, e0)
    torch.testing.assert_close(qo, inter.double(), rtol=0, atol=1e-15)
    qo, _ = qknorm_rope_oracle(_qk_args(x, x, cache, pos, is_neox=True))
    neox = torch.cat([-e[..., 4:], e[..., :4]], dim=-1)  # halves: (lo, hi) -> (-hi, lo)
    torch.testing.assert_close(qo, neox.double(), rtol=0, atol=1e-15)


def test_qknorm_partial_rope_leaves_tail_lanes_normalized_only():
    d, rope = 8, 4
    x = torch.randn(2, 3, d, dtype=torch.float64)
    cache = torch.cat([torch.zeros(5, rope // 2), torch.ones(5, rope // 2)], dim=-1)
    qo, _ = qknorm_rope_oracle(_qk_args(x, x, cache, torch.tensor([4, 0])))
    e = x / x.square().mean(-1, keepdim=True).sqrt()
    torch.testing.assert_close(qo[..., rope:], e[..., rope:], rtol=0, atol=1e-15)
    torch.testing.assert_close(qo[..., 0], -e[..., 1], rtol=0, atol=1e-15)


def test_qknorm_positions_pick_cache_rows_and_full_width_matches_half_width():
    d = 8
    x = torch.randn(3, 2, d, dtype=torch.float64)
    x[2] = x[0]
    theta = torch.rand(6, d // 2, dtype=torch.float64) * 6
    half = torch.cat([theta.cos(), theta.sin()], dim=-1)  # [cos(4) | sin(4)]: one entry per pair
    pos = torch.tensor([5, 0, 5], dtype=torch.int64)
    q_half, _ = qknorm_rope_oracle(_qk_args(x, x, half, pos))
    assert torch.equal(q_half[0], q_half[2]) and not torch.equal(q_half[0], q_half[1])
    # the same rotation, written per element ([cos(8) | sin(8)], each pair's value twice): identical result
    full = torch.cat([theta.cos().repeat_interleave(2, -1), theta.sin().repeat_interleave(2, -1)], dim=-1)
    q_full, _ = qknorm_rope_oracle(_qk_args(x, x, full, pos, cache_has_full_width=True))
    torch.testing.assert_close(q_full, q_half, rtol=0, atol=1e-15)
    # NeoX full width: element i and i+h share the angle of frequency i
    full_neox = torch.cat([theta.cos().repeat(1, 2), theta.sin().repeat(1, 2)], dim=-1)
    n_half, _ = qknorm_rope_oracle(_qk_args(x, x, half, pos, is_neox=True))
    n_full, _ = qknorm_rope_oracle(_qk_args(x, x, full_neox, pos, is_neox=True, cache_has_full_width=True))
    torch.testing.assert_close(n_full, n_half, rtol=0, atol=1e-15)


def test_qknorm_round_norm_before_rope_rounds_the_normalized_value():
    x = torch.randn(4, 2, 64).bfloat16()
    cache = torch.cat([torch.ones(4, 32), torch.zeros(4, 32)], dim=-1)  # identity rotation
    pos = torch.arange(4)
    plain, _ = qknorm_rope_oracle(_qk_args(x, x, cache, pos, eps=1e-6))
    rounded, _ = qknorm_rope_oracle(_qk_args(x, x, cache, pos, eps=1e-6, round_norm_before_rope=True))
    assert torch.equal(rounded, plain.bfloat16().double()) and not torch.equal(rounded, plain)


def test_qknorm_rejects_cache_width_mismatch():
    x = torch.randn(1, 1, 8)
    with pytest.raises(ValueError, match="width"):
        qknorm_rope_oracle(_qk_args(x, x, torch.ones(1, 6), torch.zeros(1, dtype=torch.int64), rope_dim=4))

# ----------------------------------------------------------------------------------------------- right passes


@pytest.mark.parametrize("row", QK_SMALL)
def test_right_qknorm_passes(row):
    assert H.ok(QK, row, qknorm_rope_reference)



# ---------------------------------------------------------------------------------------------- wrong: qknorm


def _qk_variant(*, swap_style=False, pos_shift=0, eps_scale=1.0, rope_all_lanes=False, skip_k=False,
                cache_per_element=False, swap_weights=False):
    def impl(q, k, q_weight, k_weight, cos_sin_cache, positions, *, is_neox, eps=1e-6, head_dim=0, rope_dim=0,
             round_norm_before_rope=False, cache_has_full_width=False):
        full = cache_has_full_width or cache_per_element
        width = cos_sin_cache.shape[-1]
        rope = rope_dim or (width // 2 if cache_has_full_width else width)
        if rope_all_lanes:
            rope = q.shape[-1]
        if cache_per_element and not cache_has_full_width:
            # reads a half-width [cos(r/2) | sin(r/2)] row as if it held one entry per element
            cos_sin_cache = torch.cat([cos_sin_cache, cos_sin_cache], dim=-1)
        if rope_all_lanes and cos_sin_cache.shape[-1] < (2 * rope if full else rope):
            reps = -(-(2 * rope if full else rope) // cos_sin_cache.shape[-1])
            cos_sin_cache = cos_sin_cache.repeat(1, reps)[:, : (2 * rope if full else rope)]
        pos = (positions.long() + pos_shift) % cos_sin_cache.shape[0]
        if swap_weights:  # q normalized with k's RMSNorm weight, k with q's
            q_weight, k_weight = k_weight, q_weight
        a = {"q": q.clone(), "k": k.clone(), "q_weight": q_weight, "k_weight": k_weight,
             "cos_sin_cache": cos_sin_cache, "positions": pos, "is_neox": is_neox != swap_style,
             "eps": eps * eps_scale, "rope_dim": rope, "round_norm_before_rope": round_norm_before_rope,
             "cache_has_full_width": full}
        qo, ko = qknorm_rope_oracle(a)
        q.copy_(qo.to(q.dtype))
        if not skip_k:
            k.copy_(ko.to(k.dtype))
    return impl


@pytest.mark.parametrize("row", ["qwen_T19_H24_D128", "test_neox_D64_T9_int64",
                                 "test_round_norm_full_width_neox"])
def test_neox_interleaved_swapped_is_rejected(row):
    assert not H.ok(QK, row, _qk_variant(swap_style=True))


@pytest.mark.parametrize("row", ["test_tail_T129_int32_cache_longer", "test_one_token",
                                 "zimage_T32_H30_D128"])
def test_positions_off_by_one_are_rejected(row):
    assert not H.ok(QK, row, _qk_variant(pos_shift=1))


def test_wrong_eps_is_rejected():
    assert H.ok(QK, "test_tiny_variance_eps", _qk_variant())  # the harness of these variants is right
    assert not H.ok(QK, "test_tiny_variance_eps", _qk_variant(eps_scale=10.0))


def test_norm_without_eps_is_rejected():
    assert not H.ok(QK, "test_tiny_variance_eps", _qk_variant(eps_scale=0.0))


@pytest.mark.parametrize("row", ["qwen_T19_H24_D128", "test_fp16_neox_partial_gqa"])
def test_q_and_k_weights_swapped_are_rejected(row):
    assert H.ok(QK, row, _qk_variant())
    assert not H.ok(QK, row, _qk_variant(swap_weights=True))


@pytest.mark.parametrize("row", ["test_D256_partial_rope_T257_int32", "test_fp16_neox_partial_gqa",
                                 "test_round_norm_bf16_cache_rope96"])
def test_rope_on_every_lane_is_rejected(row):
    assert not H.ok(QK, row, _qk_variant(rope_all_lanes=True))


def test_k_left_unwritten_is_rejected():
    res = H.check(QK, "test_fp16_neox_partial_gqa", {"impl": _qk_variant(skip_k=True)})[0]
    assert not res.ok and any(c.output == "k" and not c.ok for c in res.comparisons)


def test_half_width_cache_read_per_element_is_rejected():
    assert not H.ok(QK, "qwen_T19_H24_D128", _qk_variant(cache_per_element=True))
