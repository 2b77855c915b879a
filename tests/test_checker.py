"""The correctness checker must reject deliberately wrong implementations and accept a right one.

Wrong implementations: skips a tail, wrong eps, bf16 accumulation, single-pass E[x^2]-mean^2 variance,
returns its input, leaves outputs unwritten. They run on CPU against the real task's rows and oracle.
"""

from __future__ import annotations

import pytest
import torch

from kda_lab.families import contract
from kda_lab.families.fuse_scale_shift import fuse_scale_shift_reference, select01_reference
from kda_lab.measure.correctness import check_row, compare
from kda_lab.task import Tolerance, load_task
from tests.conftest import FSS

TASK = load_task(FSS)
ROWS = {w.name: w for w in TASK.workloads}
SELECT01 = "fuse_layernorm_scale_shift_gate_select01_kernel"
MULADD = "fuse_scale_shift_kernel"


def _run(fn, row: str, seed: int = 3):
    w = ROWS[row]
    return check_row(TASK, w, contract(TASK.family, w.fn), {"impl": fn}, seed=seed, device="cpu")[0]


def _select01_with_stats(stats):
    def impl(x, weight, bias, scale0, shift0, gate0, scale1, shift1, gate1, index, eps):
        mean, var = stats(x)
        xhat = (x.float() - mean) * torch.rsqrt(var + eps)
        if weight is not None:
            xhat = xhat * weight.float()
        if bias is not None:
            xhat = xhat + bias.float()
        idx = (index != 0)[..., None]
        scale = torch.where(idx, scale1[:, None, :], scale0[:, None, :]).float()
        shift = torch.where(idx, shift1[:, None, :], shift0[:, None, :]).float()
        gate = torch.where(idx, gate1[:, None, :], gate0[:, None, :]).expand_as(x)
        return (xhat * (1 + scale) + shift).to(x.dtype), gate.to(x.dtype).contiguous()
    return impl


def _two_pass(x):
    xf = x.float()
    mean = xf.mean(-1, keepdim=True)
    return mean, (xf - mean).square().mean(-1, keepdim=True)


@pytest.mark.parametrize("row", ["test_ln_select01_tiny_spread", "test_ln_select01_offset", "test_ln_select01_tail_affine"])
def test_right_select01_passes(row):
    assert _run(select01_reference, row).ok
    assert _run(_select01_with_stats(_two_pass), row).ok


@pytest.mark.parametrize("row", ["test_tail_bc_modulation", "test_per_frame_4d_scale", "test_per_token_fp32_chunk_view"])
def test_right_muladd_passes(row):
    assert _run(fuse_scale_shift_reference, row).ok


def test_wrong_eps_is_rejected():
    right = _select01_with_stats(_two_pass)

    def wrong_eps(*args):
        *rest, eps = args
        return right(*rest, eps * 10)

    def call(x, weight, bias, scale0, shift0, gate0, scale1, shift1, gate1, index, eps):
        return wrong_eps(x, weight, bias, scale0, shift0, gate0, scale1, shift1, gate1, index, eps)

    res = _run(call, "test_ln_select01_tiny_spread")
    assert not res.ok and "beyond tolerance" in res.describe()


def test_bf16_accumulation_is_rejected():
    def bf16_stats(x):
        xb = x.bfloat16()
        mean = xb.mean(-1, keepdim=True, dtype=torch.bfloat16)
        var = (xb - mean).square().mean(-1, keepdim=True, dtype=torch.bfloat16)
        return mean.float(), var.float()

    assert not _run(_select01_with_stats(bf16_stats), "test_ln_select01_offset").ok


def test_single_pass_variance_is_rejected():
    def one_pass(x):
        xf = x.float()
        mean = xf.mean(-1, keepdim=True)
        return mean, (xf * xf).mean(-1, keepdim=True) - mean * mean

    assert not _run(_select01_with_stats(one_pass), "test_ln_select01_offset").ok


def test_skipped_tail_is_rejected():
    def skips_tail(x, scale, shift, scale_constant=1.0, block_l=128, block_c=128):
        full = fuse_scale_shift_reference(x, scale, shift, scale_constant)
        out = torch.empty_like(x)
        out[..., :-1] = full[..., :-1]  # the last column of every row is never written
        return out

    res = _run(skips_tail, "test_tail_bc_modulation")
    assert not res.ok
    assert res.comparisons[0].nonfinite == 2 * 37  # exactly the unwritten tail, read back as poison
    assert "not fully written" in res.describe()


def test_returning_the_input_is_rejected():
    assert not _run(lambda x, scale, shift, scale_constant=1.0: x, "test_tail_bc_modulation").ok


def test_unwritten_output_is_rejected():
    res = _run(lambda x, scale, shift, scale_constant=1.0: torch.empty_like(x), "test_per_frame_4d_scale")
    assert not res.ok and res.comparisons[0].nonfinite == res.comparisons[0].numel


def test_raising_impl_fails_with_reason():
    def boom(**_):
        raise RuntimeError("no kernel for you")

    res = _run(boom, "test_tail_bc_modulation")
    assert not res.ok and "no kernel for you" in res.error


def test_in_place_functions_get_private_copies():
    """An impl that scribbles on its inputs fails, and does not change what the next impl (or the oracle) sees."""
    w = ROWS["test_tail_bc_modulation"]

    def vandal(x, scale, shift, scale_constant=1.0):
        out = fuse_scale_shift_reference(x, scale, shift, scale_constant)
        x.fill_(7.0)
        return out

    results = check_row(TASK, w, contract(TASK.family, MULADD), {"a": vandal, "b": fuse_scale_shift_reference},
                        seed=5, device="cpu")
    assert [r.ok for r in results] == [False, True]
    assert "wrote its read-only input(s) ['x']" in results[0].error


# ------------------------------------------------------------------ beyond the values (kda_lab.measure.guards)

def _vs_sglang(fn, row: str = "test_tail_bc_modulation", seed: int = 3):
    """``fn`` as the candidate, the family's reference as SGLang (the baseline whose dtype/layout counts)."""
    w = ROWS[row].with_dtype("float32")
    results = check_row(TASK, w, contract(TASK.family, w.fn), {"baseline": fuse_scale_shift_reference, "candidate": fn},
                        seed=seed, device="cpu")
    return {r.impl: r for r in results}


def test_wrong_output_dtype_fails_even_within_its_own_dtype_tolerance():
    def bf16_out(x, scale, shift, scale_constant=1.0):
        return fuse_scale_shift_reference(x, scale, shift, scale_constant).to(torch.bfloat16)

    res = _vs_sglang(bf16_out)
    assert res["baseline"].ok and not res["candidate"].ok
    assert "dtype bfloat16 != SGLang's float32" in res["candidate"].describe()
    # without SGLang's output the tolerance is still fp32's (the stricter one), never the output's bf16 one
    w = ROWS["test_tail_bc_modulation"].with_dtype("float32")
    (alone,) = check_row(TASK, w, contract(TASK.family, w.fn), {"impl": bf16_out}, seed=3, device="cpu")
    assert not alone.ok and "beyond tolerance" in alone.describe()


def test_wrong_strides_fail():
    def transposed(x, scale, shift, scale_constant=1.0):
        out = fuse_scale_shift_reference(x, scale, shift, scale_constant)
        return out.transpose(-1, -2).contiguous().transpose(-1, -2)  # same values, column-major

    res = _vs_sglang(transposed)
    assert not res["candidate"].ok and "strides" in res["candidate"].describe()


def test_mutating_a_read_only_input_after_the_result_fails():
    def adds_one(x, scale, shift, scale_constant=1.0):
        out = fuse_scale_shift_reference(x, scale, shift, scale_constant)
        scale.add_(1.0)
        return out

    res = _vs_sglang(adds_one)
    assert not res["candidate"].ok and "read-only input(s) ['scale']" in res["candidate"].error


def test_returning_a_view_of_an_input_fails_even_when_the_values_are_right():
    def in_place_on_x(x, scale, shift, scale_constant=1.0):
        out = fuse_scale_shift_reference(x, scale, shift, scale_constant)
        x.copy_(out)  # writes the right answer into x and returns x
        return x

    res = _vs_sglang(in_place_on_x)
    assert not res["candidate"].ok
    assert "read-only input(s) ['x']" in res["candidate"].error


def test_returning_an_input_untouched_is_an_alias_failure():
    res = _vs_sglang(lambda x, scale, shift, scale_constant=1.0: x[...])
    assert not res["candidate"].ok and "returned its input(s) ['x']" in res["candidate"].error


def test_a_reused_output_buffer_fails():
    kept: dict[tuple, torch.Tensor] = {}

    def one_buffer(x, scale, shift, scale_constant=1.0):
        out = kept.setdefault((tuple(x.shape), x.dtype), torch.empty_like(x))
        out.copy_(fuse_scale_shift_reference(x, scale, shift, scale_constant))
        return out

    res = _vs_sglang(one_buffer)
    assert not res["candidate"].ok and "reused output buffer" in res["candidate"].error


def test_right_candidate_passes_every_guard():
    res = _vs_sglang(fuse_scale_shift_reference)
    assert res["candidate"].ok and res["baseline"].ok


def test_compare_reports_errors():
    ref = torch.zeros(4, 4, dtype=torch.float64)
    out = torch.zeros(4, 4)
    out[2, 3] = 1.0
    out[1, 1] = float("inf")
    c = compare("y", out, ref, Tolerance(1e-3, 1e-3))
    assert not c.ok and c.mismatches == 2 and c.nonfinite == 1 and c.first_bad == (1, 1) and c.max_abs == 1.0
    assert compare("y", torch.full((3,), float("nan")), torch.zeros(3, dtype=torch.float64), Tolerance(1.0, 1.0)).ok is False
