"""The norm_infer family (kda_lab/families/norm_infer.py: SGLang's LayerNorm/RMSNorm ``norm_infer`` and the
one-pass RMSNorm) and its task folders.

- the oracles on small hand-computed cases;
- the eager references pass the checker on the rows the wrong implementations below run on;
- deliberately wrong implementations the checker must reject: LayerNorm and RMSNorm swapped, the RMS branch
  without its bias, single-pass variance, a wrong eps, ignoring ``out=`` or writing part of it, a flipped
  weight;
- the tasks' ``src/`` resolve SGLang lazily, and the interpreter shim reaches SGLang's one-pass kernel on CPU.
"""

from __future__ import annotations

import math

import pytest
import torch

from kda_lab.families import norm_infer as NI
from tests.families import _helpers as H

FAMILY = "norm_infer"
TASK = H.diffusion_task(FAMILY)


# ----------------------------------------------------------------------------------------- oracle, references

def test_norm_infer_oracle_hand_computed():
    x = torch.tensor([[1.0, 2.0, 3.0, 4.0], [2.0, 2.0, 2.0, 2.0]])
    w = torch.tensor([1.0, 2.0, 0.5, -1.0])
    b = torch.tensor([0.0, 1.0, 0.0, 3.0])
    (y,) = NI.norm_infer_oracle({"x": x, "weight": w, "bias": b, "eps": 1e-6, "is_rms_norm": False})
    # mean 2.5, var 1.25
    z = torch.tensor([-1.5, -0.5, 0.5, 1.5], dtype=torch.float64) / math.sqrt(1.25 + 1e-6)
    assert torch.allclose(y[0], z * w.double() + b.double(), atol=1e-12)
    assert torch.equal(y[1], b.double())  # a constant row normalizes to 0: y = bias
    (y,) = NI.norm_infer_oracle({"x": torch.tensor([[3.0, 4.0]]), "weight": torch.tensor([1.0, 2.0]),
                                 "bias": torch.tensor([0.5, 0.5]), "eps": 0.0, "is_rms_norm": True})
    r = math.sqrt(12.5)  # RMS of (3, 4); the RMS branch adds the bias too
    assert torch.allclose(y, torch.tensor([[3 / r + 0.5, 8 / r + 0.5]], dtype=torch.float64), atol=1e-12)
    (y,) = NI.one_pass_oracle({"x": torch.tensor([[1.0, -1.0, 1.0, -1.0]]),
                               "w": torch.tensor([1.0, 2.0, 3.0, 4.0]), "eps": 0.0})
    assert torch.allclose(y, torch.tensor([[1.0, -2.0, 3.0, -4.0]], dtype=torch.float64))
    with pytest.raises(ValueError, match="2-D"):
        NI.norm_infer_oracle({"x": torch.ones(2, 2, 2), "weight": None, "bias": None, "eps": 1e-6})


@pytest.mark.parametrize("row", ["test_ln_affine_tail", "test_rms_fp32_weight", "test_ln_out_padded_rows",
                                 "test_rms_out_fp32_from_bf16", "test_ln_offset_mean300", "test_ln_strided_x",
                                 "test_rms_weight_bias", "test_ln_variance_near_eps"])
def test_norm_infer_reference_passes(row):
    assert H.ok(TASK, row, NI.norm_infer_reference)


@pytest.mark.parametrize("row", ["test_onepass_tail_rows", "test_onepass_3d_heads",
                                 "test_onepass_fp32_weight", "test_onepass_tiny_values"])
def test_one_pass_reference_passes(row):
    assert H.ok(TASK, row, NI.one_pass_reference)


def test_norm_infer_ln_rms_swapped_is_rejected():
    def swapped(x, weight, bias, eps, is_rms_norm=False, out=None):
        return NI.norm_infer_reference(x, weight, bias, eps, not is_rms_norm, out)

    assert not H.ok(TASK, "test_ln_affine_tail", swapped)
    assert not H.ok(TASK, "test_rms_fp32_weight", swapped)


def test_norm_infer_rms_without_bias_is_rejected():
    def no_bias_in_rms(x, weight, bias, eps, is_rms_norm=False, out=None):
        return NI.norm_infer_reference(x, weight, None if is_rms_norm else bias, eps, is_rms_norm, out)

    assert not H.ok(TASK, "test_rms_weight_bias", no_bias_in_rms)


def test_norm_infer_single_pass_variance_is_rejected():
    def one_pass_var(x, weight, bias, eps, is_rms_norm=False, out=None):
        xf = x.float()
        mean = xf.mean(-1, keepdim=True)
        var = (xf * xf).mean(-1, keepdim=True) - mean * mean
        y = (xf - mean) * torch.rsqrt(var + eps) * weight.float() + bias.float()
        return y.to(x.dtype)

    assert not H.ok(TASK, "test_ln_offset_mean300", one_pass_var)


def test_norm_infer_wrong_eps_is_rejected():
    def eps_times_10(x, weight, bias, eps, is_rms_norm=False, out=None):
        return NI.norm_infer_reference(x, weight, bias, eps * 10, is_rms_norm, out)

    res = H.check(TASK, "test_ln_variance_near_eps", {"impl": eps_times_10})[0]
    assert not res.ok and "beyond tolerance" in res.describe()


def test_norm_infer_must_write_into_out():
    def ignores_out(x, weight, bias, eps, is_rms_norm=False, out=None):
        return NI.norm_infer_reference(x, weight, bias, eps, is_rms_norm).to(out.dtype)

    def writes_part_of_out(x, weight, bias, eps, is_rms_norm=False, out=None):
        y = NI.norm_infer_reference(x, weight, bias, eps, is_rms_norm)
        out[:-1].copy_(y[:-1])  # the last row of out is never written: it stays NaN-poisoned
        return out

    res = H.check(TASK, "test_ln_out_padded_rows", {"impl": ignores_out})[0]
    assert not res.ok and "must write the result into `out`" in res.error
    res = H.check(TASK, "test_ln_out_padded_rows", {"impl": writes_part_of_out})[0]
    assert not res.ok and res.comparisons[0].nonfinite == 160


def test_one_pass_wrong_weight_and_eps_are_rejected():
    def flipped_weight(x, w, eps=1e-6):
        return NI.one_pass_reference(x, w.flip(0), eps)

    def eps_1e5(x, w, eps=1e-6):
        return NI.one_pass_reference(x, w, 1e-5)

    assert not H.ok(TASK, "test_onepass_tail_rows", flipped_weight)
    assert not H.ok(TASK, "test_onepass_tiny_values", eps_1e5)



# ----------------------------------------------------------------------------------------------- task folders

@pytest.mark.parametrize("arch", H.ARCHES)
def test_baseline_map_matches_task_toml(arch):
    H.assert_baseline_map_matches_task_toml(H.diffusion_task(FAMILY, arch))


def test_register_imports_without_sglang_kernel_modules():
    H.assert_register_imports_lazily(FAMILY)


def test_interpreter_shim_reaches_sglangs_one_pass_kernel():
    """Without the shim the one-pass wrapper cannot run on CPU tensors; with it SGLang's kernel matches the
    oracle, and neither SGLang's module nor torch is modified."""
    import os

    if torch.cuda.is_available() or os.environ.get("TRITON_INTERPRET") != "1":
        pytest.skip("CPU interpreter only")
    from kda_lab.interpret import interpreter as interpret
    from kda_lab.interpret.shims import norm_infer as shims

    x, w = torch.randn(4, 128), torch.randn(128)
    plain = interpret.recompiled  # the generic path, without any family route
    with pytest.raises(Exception, match="CPU"):  # the custom op has a CUDA implementation only
        plain(shims.ONE_PASS_MODULE, shims.ONE_PASS)(x, w, 1e-6)
    module = __import__(shims.ONE_PASS_MODULE, fromlist=["_"])
    before = getattr(module, shims.ONE_PASS_CUDA_OP)
    shims.install()
    assert shims.install() is False  # idempotent
    y = interpret.interpretable(shims.ONE_PASS_MODULE, shims.ONE_PASS)(x, w, 1e-6)
    assert torch.allclose(y.double(), NI.one_pass_oracle({"x": x, "w": w, "eps": 1e-6})[0], atol=1e-5)
    assert getattr(module, shims.ONE_PASS_CUDA_OP) is before and not hasattr(torch.cpu, "device")
    with pytest.raises(LookupError):
        shims.interpretable_one_pass(shims.ONE_PASS_MODULE, "norm_infer")

