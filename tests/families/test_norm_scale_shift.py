"""The norm_scale_shift family (kda_lab/families/norm_scale_shift.py: SGLang's ``norm_scale_shift`` and
``scale_residual_norm_scale_shift``, a LayerNorm/RMSNorm then ``y = n * (1 + scale) + shift``) and its task
folders.

- the oracles on small hand-computed cases, and the [B,S,D] broadcast of the modulation tensors;
- the eager references pass the checker on the rows the wrong implementations below run on;
- deliberately wrong implementations the checker must reject: LayerNorm and RMSNorm swapped, per-frame
  modulation read interleaved, batch rows swapped, ``scale`` without the ``1 +``, a bias in the RMS branch,
  single-pass variance, and for the residual form an ignored gate, the input residual returned, x
  normalized instead of r;
- the tasks' ``src/`` resolve SGLang lazily.
"""

from __future__ import annotations

import math

import pytest
import torch

from kda_lab.families import norm_scale_shift as NSS
from tests.families import _helpers as H

BF16 = torch.bfloat16
FAMILY = "norm_scale_shift"
TASK = H.diffusion_task(FAMILY)


# ----------------------------------------------------------------------------------------------------- oracle

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
    # 1001/999 are rounded to 1000 in bf16
    assert torch.equal(r, (res.float() + xb.float()).to(BF16).double())
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


# ------------------------------------------------------------------------------- the checker: right and wrong

@pytest.mark.parametrize("row", ["test_rms_weight_2d_mod", "test_ln_per_frame_4d", "test_ln_fp16",
                                 "test_ln_fp32_offset_mean300", "test_ln_scalar_mod_fp32_affine",
                                 "test_ln_batch_strided_x", "test_rms_bias_ignored", "test_ln_affine_1d_mod",
                                 "test_ln_chunk_view_mod"])
def test_norm_scale_shift_reference_passes(row):
    assert H.ok(TASK, row, NSS.norm_scale_shift_reference)


@pytest.mark.parametrize("row", ["test_res_rms_gate_2d", "test_res_ln_gate_none", "test_res_ln_per_frame_4d",
                                 "test_res_ln_fp32_offset", "test_res_rms_fp16",
                                 "test_res_ln_affine_tok_gate"])
def test_scale_residual_reference_passes(row):
    assert H.ok(TASK, row, NSS.scale_residual_norm_scale_shift_reference)


def test_norm_scale_shift_ln_rms_swapped_is_rejected():
    def swapped(x, weight, bias, scale, shift, norm_type, eps=1e-5):
        other = {"rms": "layer"}.get(norm_type, "rms")
        return NSS.norm_scale_shift_reference(x, weight, bias, scale, shift, other, eps)

    assert not H.ok(TASK, "test_rms_weight_2d_mod", swapped)
    assert not H.ok(TASK, "test_ln_affine_1d_mod", swapped)


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

    assert not H.ok(TASK, "test_ln_per_frame_4d", frames_as_tokens)
    assert not H.ok(TASK, "test_rms_weight_2d_mod", batch_swapped)
    assert not H.ok(TASK, "test_ln_chunk_view_mod", scale_not_plus_one)


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

    assert not H.ok(TASK, "test_rms_bias_ignored", rms_with_bias)
    assert not H.ok(TASK, "test_ln_fp32_offset_mean300", one_pass_var)


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
        assert not H.ok(TASK, "test_res_rms_gate_2d", wrong), wrong.__name__


# ----------------------------------------------------------------------------------------------- task folders

@pytest.mark.parametrize("arch", H.ARCHES)
def test_baseline_map_matches_task_toml(arch):
    H.assert_baseline_map_matches_task_toml(H.diffusion_task(FAMILY, arch))


def test_register_imports_without_sglang_kernel_modules():
    H.assert_register_imports_lazily(FAMILY)
