"""The rotary_embedding family (kda_lab/families/rotary_embedding.py: SGLang's ``apply_rotary_embedding`` and
LTX-2's ``apply_ltx2_split_rotary_emb``): the fp64 oracles on hand-computed cases, the eager references
passing the checker on the tiny rows, and wrong implementations the checker must reject (run on CPU against
the real H200 task's rows and oracles): NeoX halves for interleaved pairs, cos/sin rows off by one, the
interleaved flag ignored, sin's sign flipped, cos and sin swapped; for LTX-2 the bf16 roundings skipped,
interleaved pairs for split halves, the cos/sin views' strides ignored.

The rotary kernels also run in the Triton interpreter on the task's 'tiny' rows
(kernels/*_rotary_embedding__multi_shape/tests), which is the check of these oracles against SGLang's real
code.
"""

from __future__ import annotations

import pytest
import torch

from kda_lab.families import contract
from kda_lab.families.rotary_embedding import (
    ltx2_split_oracle,
    ltx2_split_reference,
    rotary_oracle,
    rotary_reference,
)
from kda_lab.measure.correctness import check_row
from kda_lab.measure.inputs import make_inputs
from tests.families import _helpers as H

ROT = H.diffusion_task("rotary_embedding")
ROT_ROWS = H.rows(ROT)
ROPE = "apply_rotary_embedding"
LTX2 = "apply_ltx2_split_rotary_emb"
ROT_TINY = [w.name for w in ROT.workloads if "tiny" in w.tags]


# --------------------------------------------------------------------------------------------- rotary oracles


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


# ----------------------------------------------------------------------------------------------- right passes


@pytest.mark.parametrize("row", ROT_TINY + ["test_ltx2_large_values", "ltx2_split_B1_S126_H32_D64"])
def test_right_rotary_passes(row):
    fn = {ROPE: rotary_reference, LTX2: ltx2_split_reference}[ROT_ROWS[row].fn]
    results = H.check(ROT, row, {"baseline": fn, "candidate": fn})
    assert all(r.ok for r in results), "\n".join(r.describe() for r in results)


# ---------------------------------------------------------------------------------------------- wrong: rotary


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


def _rope_cos_sin_swapped(x, cos, sin, interleaved=False):
    return rotary_reference(x, sin, cos, interleaved)


@pytest.mark.parametrize(("impl", "rows"), [
    (_rope_neox_halves, ["test_rope_tiny_batch2_tail", "test_rope_tiny_3d",
                         "hunyuanvideo_rope_B1_T27030_H24_D128"]),
    (_rope_cos_off_by_one, ["test_rope_tiny_batch2_tail", "test_rope_tiny_token_view"]),
    (_rope_ignores_interleaved_flag, ["test_rope_tiny_interleaved_full_cos"]),
    (_rope_sin_sign_flipped, ["test_rope_fp16_odd", "test_rope_tiny_d256_odd_heads"]),
    (_rope_cos_sin_swapped, ["test_rope_tiny_batch2_tail", "test_rope_tiny_interleaved_full_cos"]),
])
def test_wrong_rotary_is_rejected(impl, rows):
    for row in rows:
        # large: check the small dtype-converted interpreter copy instead
        if ROT_ROWS[row].kind == "production":
            continue
        assert not H.ok(ROT, row, impl), row


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
    res = check_row(ROT, w, contract(ROT.family, LTX2), {"impl": _ltx2_no_bf16_rounding}, seed=3,
                    device="cpu")
    assert not res[0].ok
    # bf16 rows: inside the bf16 tolerance, caught by the bit-exact comparison with the baseline
    # (exact = true)
    assert ROT.functions[LTX2].exact
    for row in ["test_ltx2_large_values", "ltx2_split_B1_S126_H32_D64"]:
        results = H.check(ROT, row, {"baseline": ltx2_split_reference, "candidate": _ltx2_no_bf16_rounding})
        cand = next(r for r in results if r.impl == "candidate")
        assert not cand.ok and "not bit-identical to SGLang" in cand.describe(), row


@pytest.mark.parametrize(("impl", "row"), [
    (_ltx2_interleaved_pairs, "test_ltx2_tiny_batch2_mixed_strides"),
    (_ltx2_interleaved_pairs, "test_ltx2_tiny_odd_heads_half12"),
    (_ltx2_ignores_cos_strides, "test_ltx2_tiny_transposed_views"),
    (_ltx2_ignores_cos_strides, "test_ltx2_tiny_d128_17heads"),
])
def test_wrong_ltx2_is_rejected(impl, row):
    assert not H.ok(ROT, row, impl)


# ---------------------------------------------------------------------------------------- GPU (pytest -m gpu)


@pytest.mark.gpu
@pytest.mark.parametrize("row", [w.name for w in ROT.workloads if w.fn == LTX2])
def test_ltx2_oracle_equals_sglang_bit_for_bit_on_gpu(row):
    """The LTX-2 oracle claims SGLang's exact roundings: on the GPU it must equal the Triton kernel's
    output."""
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    import sglang.kernels.ops.diffusion as facade

    a = make_inputs(ROT_ROWS[row], "cuda", seed=7)
    (expected,) = ltx2_split_oracle(a)
    out = facade.apply_ltx2_split_rotary_emb(**a)
    assert torch.equal(out.double(), expected), f"{int((out.double() != expected).sum())} elements differ"
