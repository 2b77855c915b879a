"""Oracles of the qknorm_rope and rotary_embedding families: hand-computed cases, and wrong implementations
the checker must reject (run on CPU against the real H200 tasks' rows and oracles).

SGLang's qknorm_rope baseline is a JIT CUDA kernel (GPU only); the rotary kernels also run in the Triton
interpreter on the tasks' 'tiny' rows (kernels/*_rotary_embedding__multi_shape/tests), which is the check of
those oracles against SGLang's real code.
"""

from __future__ import annotations

import math

import pytest
import torch

from kda_lab.families import contract
from kda_lab.families.qknorm_rope import qknorm_rope_oracle, qknorm_rope_reference
from kda_lab.families.rotary_embedding import (
    ltx2_split_oracle,
    ltx2_split_reference,
    rotary_oracle,
    rotary_reference,
)
from kda_lab.measure.correctness import check_row
from kda_lab.measure.inputs import make_inputs
from kda_lab.task import load_task

QK = load_task("h200_diffusion_qknorm_rope__multi_shape")
ROT = load_task("h200_diffusion_rotary_embedding__multi_shape")
QK_ROWS = {w.name: w for w in QK.workloads}
ROT_ROWS = {w.name: w for w in ROT.workloads}
QKN = "fused_inplace_qknorm_rope"
ROPE = "apply_rotary_embedding"
LTX2 = "apply_ltx2_split_rotary_emb"
# small rows only (the fp64 oracle runs on the CPU)
QK_SMALL = ["test_tail_T129_int32_cache_longer", "test_fused_qkv_views_T47", "test_neox_D64_T9_int64",
            "test_D256_partial_rope_T257_int32", "test_fp16_neox_partial_gqa", "test_fp16_interleaved_fp16_cache_D64",
            "test_round_norm_full_width_neox", "test_round_norm_bf16_cache_rope96",
            "test_round_norm_interleaved_full_width_fp16", "test_tiny_variance_eps", "test_one_token",
            "qwen_T19_H24_D128", "zimage_T32_H30_D128"]
ROT_TINY = [w.name for w in ROT.workloads if "tiny" in w.tags]


def _check(task, rows, row, impls, seed=3):
    w = rows[row]
    return check_row(task, w, contract(task.family, w.fn), impls, seed=seed, device="cpu")


def _ok(task, rows, row, fn) -> bool:
    return all(r.ok for r in _check(task, rows, row, {"impl": fn}))


# ------------------------------------------------------------------------------------------ qknorm oracle


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


# ------------------------------------------------------------------------------------------ rotary oracles


def test_rotary_rotation_by_90_degrees_shared_across_batch():
    x = torch.randn(2, 3, 2, 8, dtype=torch.float64)
    cos, sin = torch.zeros(3, 4), torch.ones(3, 4)
    (out,) = rotary_oracle({"x": x, "cos": cos, "sin": sin, "interleaved": False})
    expected = torch.stack([-x[..., 1::2], x[..., 0::2]], dim=-1).reshape(x.shape)
    torch.testing.assert_close(out, expected, rtol=0, atol=0)
    # one batch entry's rows are the same cos/sin rows as the other's
    theta = torch.rand(3, 4, dtype=torch.float64)
    (out,) = rotary_oracle({"x": x[:1].expand(2, -1, -1, -1), "cos": theta.cos(), "sin": theta.sin()})
    assert torch.equal(out[0], out[1])


def test_rotary_interleaved_full_width_cos_equals_half_width():
    x = torch.randn(5, 3, 8, dtype=torch.float64)  # 3-D [T, H, D]
    theta = torch.rand(5, 4, dtype=torch.float64) * 6
    (half,) = rotary_oracle({"x": x, "cos": theta.cos(), "sin": theta.sin(), "interleaved": False})
    full = {"x": x, "cos": theta.cos().repeat_interleave(2, -1), "sin": theta.sin().repeat_interleave(2, -1),
            "interleaved": True}
    (out,) = rotary_oracle(full)
    torch.testing.assert_close(out, half, rtol=0, atol=0)
    # a rotation keeps each pair's norm
    torch.testing.assert_close(out.square().sum(-1), x.square().sum(-1), rtol=1e-12, atol=1e-12)


def _ltx2_one(x1: float, x2: float, c: float, s: float, dtype=torch.float32) -> tuple[float, float]:
    """LTX-2 oracle on one head with head_dim 2: x [1,1,2], cos/sin [1,1,1,1]."""
    x = torch.tensor([[[x1, x2]]], dtype=dtype)
    cos, sin = torch.tensor([[[[c]]]], dtype=dtype), torch.tensor([[[[s]]]], dtype=dtype)
    (out,) = ltx2_split_oracle({"x": x, "cos": cos, "sin": sin})
    return float(out[0, 0, 0]), float(out[0, 0, 1])


def test_ltx2_rotation_by_90_degrees_is_exact():
    assert _ltx2_one(0.75, -1.5, 0.0, 1.0) == (1.5, 0.75)  # (x1, x2) -> (x1 c - x2 s, x2 c + x1 s)


def test_ltx2_rounds_x_cos_to_bf16_but_not_x_sin():
    u = 1.0 + 2.0**-7  # exact in bf16; u*u = 1 + 2^-6 + 2^-14 is not
    # cos product: rounded to bf16 (1 + 2^-6) even though x is fp32
    assert _ltx2_one(u, 0.0, u, 0.0) == (1.0 + 2.0**-6, 0.0)
    # sin product: fp32, kept
    assert _ltx2_one(0.0, u, 0.0, u) == (-(1.0 + 2.0**-6 + 2.0**-14), 0.0)
    # bf16 output: the final store rounds too
    assert _ltx2_one(0.0, u, 0.0, u, torch.bfloat16) == (-(1.0 + 2.0**-6), 0.0)


@pytest.mark.parametrize("row", ["test_ltx2_large_values", "test_ltx2_tiny_transposed_views",
                                 "test_ltx2_tiny_batch2_mixed_strides", "ltx2_split_B1_S126_H32_D64"])
def test_ltx2_eager_reference_equals_oracle_bit_for_bit(row):
    a = make_inputs(ROT_ROWS[row], "cpu", seed=5)
    (expected,) = ltx2_split_oracle(a)
    out = ltx2_split_reference(**a)
    assert out.dtype == torch.bfloat16 and torch.equal(out.double(), expected)


# ------------------------------------------------------------------------------------------ right passes


@pytest.mark.parametrize("row", QK_SMALL)
def test_right_qknorm_passes(row):
    assert _ok(QK, QK_ROWS, row, qknorm_rope_reference)


@pytest.mark.parametrize("row", ROT_TINY + ["test_ltx2_large_values", "ltx2_split_B1_S126_H32_D64"])
def test_right_rotary_passes(row):
    fn = {ROPE: rotary_reference, LTX2: ltx2_split_reference}[ROT_ROWS[row].fn]
    results = _check(ROT, ROT_ROWS, row, {"baseline": fn, "candidate": fn})
    assert all(r.ok for r in results), "\n".join(r.describe() for r in results)


# ------------------------------------------------------------------------------------------ wrong: qknorm


def _qk_variant(*, swap_style=False, pos_shift=0, eps_scale=1.0, rope_all_lanes=False, skip_k=False,
                cache_per_element=False):
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
        a = {"q": q.clone(), "k": k.clone(), "q_weight": q_weight, "k_weight": k_weight,
             "cos_sin_cache": cos_sin_cache, "positions": pos, "is_neox": is_neox != swap_style,
             "eps": eps * eps_scale, "rope_dim": rope, "round_norm_before_rope": round_norm_before_rope,
             "cache_has_full_width": full}
        qo, ko = qknorm_rope_oracle(a)
        q.copy_(qo.to(q.dtype))
        if not skip_k:
            k.copy_(ko.to(k.dtype))
    return impl


@pytest.mark.parametrize("row", ["qwen_T19_H24_D128", "test_neox_D64_T9_int64", "test_round_norm_full_width_neox"])
def test_neox_interleaved_swapped_is_rejected(row):
    assert not _ok(QK, QK_ROWS, row, _qk_variant(swap_style=True))


@pytest.mark.parametrize("row", ["test_tail_T129_int32_cache_longer", "test_one_token", "zimage_T32_H30_D128"])
def test_positions_off_by_one_are_rejected(row):
    assert not _ok(QK, QK_ROWS, row, _qk_variant(pos_shift=1))


def test_wrong_eps_is_rejected():
    assert _ok(QK, QK_ROWS, "test_tiny_variance_eps", _qk_variant())  # the harness of these variants is right
    assert not _ok(QK, QK_ROWS, "test_tiny_variance_eps", _qk_variant(eps_scale=10.0))


@pytest.mark.parametrize("row", ["test_D256_partial_rope_T257_int32", "test_fp16_neox_partial_gqa",
                                 "test_round_norm_bf16_cache_rope96"])
def test_rope_on_every_lane_is_rejected(row):
    assert not _ok(QK, QK_ROWS, row, _qk_variant(rope_all_lanes=True))


def test_k_left_unwritten_is_rejected():
    res = _check(QK, QK_ROWS, "test_fp16_neox_partial_gqa", {"impl": _qk_variant(skip_k=True)})[0]
    assert not res.ok and any(c.output == "k" and not c.ok for c in res.comparisons)


def test_half_width_cache_read_per_element_is_rejected():
    assert not _ok(QK, QK_ROWS, "qwen_T19_H24_D128", _qk_variant(cache_per_element=True))


# ------------------------------------------------------------------------------------------ wrong: rotary


def _rope_neox_halves(x, cos, sin, interleaved=False):
    d = x.shape[-1]
    c, s = cos[:, : d // 2].float()[:, None, :], sin[:, : d // 2].float()[:, None, :]
    t = x.shape[-3]
    c, s = c[:t], s[:t]
    x1, x2 = x.float()[..., : d // 2], x.float()[..., d // 2:]
    return torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], dim=-1).to(x.dtype)


def _rope_cos_off_by_one(x, cos, sin, interleaved=False):
    return rotary_reference(x, torch.roll(cos, 1, 0), torch.roll(sin, 1, 0), interleaved)


def _rope_ignores_interleaved_flag(x, cos, sin, interleaved=False):
    return rotary_reference(x, cos, sin, False)


def _rope_sin_sign_flipped(x, cos, sin, interleaved=False):
    return rotary_reference(x, cos, -sin, interleaved)


@pytest.mark.parametrize(("impl", "rows"), [
    (_rope_neox_halves, ["test_rope_tiny_batch2_tail", "test_rope_tiny_3d", "hunyuanvideo_rope_B1_T27030_H24_D128"]),
    (_rope_cos_off_by_one, ["test_rope_tiny_batch2_tail", "test_rope_tiny_token_view"]),
    (_rope_ignores_interleaved_flag, ["test_rope_tiny_interleaved_full_cos"]),
    (_rope_sin_sign_flipped, ["test_rope_fp16_odd", "test_rope_tiny_d256_odd_heads"]),
])
def test_wrong_rotary_is_rejected(impl, rows):
    for row in rows:
        if ROT_ROWS[row].kind == "production":  # large: check the small dtype-converted interpreter copy instead
            continue
        assert not _ok(ROT, ROT_ROWS, row, impl), row


def _ltx2_no_bf16_rounding(x, cos, sin):
    b, s, inner = x.shape
    _, h, _, half = cos.shape
    xv = x.float().reshape(b, s, h, 2 * half)
    c, sn = cos.float().permute(0, 2, 1, 3), sin.float().permute(0, 2, 1, 3)
    x1, x2 = xv[..., :half], xv[..., half:]
    return torch.cat([x1 * c - x2 * sn, x2 * c + x1 * sn], dim=-1).to(x.dtype).reshape(b, s, inner)


def _ltx2_interleaved_pairs(x, cos, sin):
    b, s, inner = x.shape
    _, h, _, half = cos.shape
    xv = x.float().reshape(b, s, h, 2 * half)
    c, sn = cos.float().permute(0, 2, 1, 3), sin.float().permute(0, 2, 1, 3)
    x1, x2 = xv[..., 0::2], xv[..., 1::2]
    out = torch.stack([x1 * c - x2 * sn, x2 * c + x1 * sn], dim=-1)
    return out.to(x.dtype).reshape(b, s, inner)


def _ltx2_ignores_cos_strides(x, cos, sin):
    # treats the transposed [B,H,S,D/2] views as if their memory were [B,H,S,D/2]-contiguous
    flat_c = torch.as_strided(cos, (cos.numel(),), (1,), cos.storage_offset()).reshape(cos.shape)
    flat_s = torch.as_strided(sin, (sin.numel(),), (1,), sin.storage_offset()).reshape(sin.shape)
    return ltx2_split_reference(x, flat_c, flat_s)


def test_ltx2_without_bf16_rounding_is_rejected():
    # fp32 copy of a tiny row: the tolerance check alone rejects it (the bf16 rounding is ~1e-3 relative)
    w = ROT_ROWS["test_ltx2_tiny_d128_17heads"].with_dtype("float32")
    res = check_row(ROT, w, contract(ROT.family, LTX2), {"impl": _ltx2_no_bf16_rounding}, seed=3, device="cpu")
    assert not res[0].ok
    # bf16 rows: inside the bf16 tolerance, caught by the bit-exact comparison with the baseline (exact = true)
    assert ROT.functions[LTX2].exact
    for row in ["test_ltx2_large_values", "ltx2_split_B1_S126_H32_D64"]:
        results = _check(ROT, ROT_ROWS, row, {"baseline": ltx2_split_reference, "candidate": _ltx2_no_bf16_rounding})
        cand = next(r for r in results if r.impl == "candidate")
        assert not cand.ok and "not bit-identical to SGLang" in cand.describe(), row


@pytest.mark.parametrize(("impl", "row"), [
    (_ltx2_interleaved_pairs, "test_ltx2_tiny_batch2_mixed_strides"),
    (_ltx2_interleaved_pairs, "test_ltx2_tiny_odd_heads_half12"),
    (_ltx2_ignores_cos_strides, "test_ltx2_tiny_transposed_views"),
    (_ltx2_ignores_cos_strides, "test_ltx2_tiny_d128_17heads"),
])
def test_wrong_ltx2_is_rejected(impl, row):
    assert not _ok(ROT, ROT_ROWS, row, impl)


# ------------------------------------------------------------------------------------------ GPU (pytest -m gpu)


@pytest.mark.gpu
@pytest.mark.parametrize("row", [w.name for w in ROT.workloads if w.fn == LTX2])
def test_ltx2_oracle_equals_sglang_bit_for_bit_on_gpu(row):
    """The LTX-2 oracle claims SGLang's exact roundings: on the GPU it must equal the Triton kernel's output."""
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    import sglang.kernels.ops.diffusion as facade

    a = make_inputs(ROT_ROWS[row], "cuda", seed=7)
    (expected,) = ltx2_split_oracle(a)
    out = facade.apply_ltx2_split_rotary_emb(**a)
    assert torch.equal(out.double(), expected), f"{int((out.double() != expected).sum())} elements differ"
