"""The fuse_scale_shift family (kda_lab/families/fuse_scale_shift.py: SGLang's adaLN modulation
``fuse_scale_shift_kernel``, ``y = x * (k + scale) + shift``, and the select01 LayerNorm modulation kernels).

- the oracles on small hand-computed cases (the broadcasts of scale/shift, the select01 choice per token);
- the eager references pass the checker on every CPU-sized test row of the family's home task;
- deliberately wrong implementations the checker must reject, each on a row where its control passes: scale
  and shift swapped, ``scale_constant`` ignored, batch 0's modulation for every batch, per-frame scale read
  interleaved, a chunk view's strides ignored; for select01 the index's polarity inverted, ``scale`` without
  the ``1 +``, the LayerNorm's affine skipped; for the residual form the residual gate ignored, the input
  residual returned, x normalized instead of r.

The checker's own guards (tails, poisoned outputs, aliasing, strides, dtypes) are exercised on this family's
rows in tests/test_checker.py; the GPU path through the real ``kda check`` in tests/adversarial/.
"""

from __future__ import annotations

import math

import pytest
import torch

from kda_lab.families import contract
from kda_lab.families import fuse_scale_shift as FSS
from tests.families import _helpers as H

FAMILY = "fuse_scale_shift"
TASK = H.diffusion_task(FAMILY)
ROWS = H.rows(TASK)
MULADD = "fuse_scale_shift_kernel"
SELECT01 = "fuse_layernorm_scale_shift_gate_select01_kernel"
RESIDUAL = "fuse_residual_layernorm_scale_shift_gate_select01_kernel"
# The rows small enough for the fp64 oracle on one CPU core in well under a second each.
CPU_ROWS = [w.name for w in TASK.workloads if w.kind == "test" and "tiny" in w.tags]


# ----------------------------------------------------------------------------------------------------- oracle

def test_fuse_scale_shift_oracle_hand_computed():
    x = torch.tensor([[[1.0, 2.0], [3.0, 4.0]]])  # [B=1, L=2, C=2]
    scale, shift = torch.tensor([[0.5, -1.0]]), torch.tensor([[10.0, 20.0]])  # [B, C]: broadcast over L
    (y,) = FSS.fuse_scale_shift_oracle({"x": x, "scale": scale, "shift": shift, "scale_constant": 1.0})
    assert y.dtype == torch.float64 and y.tolist() == [[[11.5, 20.0], [14.5, 20.0]]]
    (y,) = FSS.fuse_scale_shift_oracle({"x": x, "scale": torch.tensor(2.0), "shift": torch.zeros(1, 1, 2),
                                        "scale_constant": 0.0})  # a 0-D scale, k = 0: y = 2x
    assert y.tolist() == [[[2.0, 4.0], [6.0, 8.0]]]
    # [B, F, 1, C] scale: frames of L / F contiguous tokens; a 4-D shift of as many tokens is per token
    x = torch.ones(1, 4, 1)
    scale = torch.tensor([1.0, 2.0]).reshape(1, 2, 1, 1)
    shift = torch.tensor([0.0, 1.0, 2.0, 3.0]).reshape(1, 2, 2, 1)
    (y,) = FSS.fuse_scale_shift_oracle({"x": x, "scale": scale, "shift": shift, "scale_constant": 0.0})
    assert y.flatten().tolist() == [1.0, 2.0, 4.0, 5.0]
    with pytest.raises(ValueError, match="L % F"):
        FSS.fuse_scale_shift_oracle({"x": torch.ones(1, 3, 1), "scale": scale, "shift": torch.zeros(1)})


def test_select01_oracle_hand_computed():
    x = torch.tensor([1.0, 2.0, 3.0, 4.0]).repeat(1, 2, 1)  # [B=1, L=2, C=4]: mean 2.5, variance 1.25
    zeros, ones = torch.zeros(1, 4), torch.ones(1, 4)
    args = {"x": x, "weight": None, "bias": None, "scale0": zeros, "shift0": zeros, "gate0": zeros - 1,
            "scale1": ones, "shift1": ones * 3, "gate1": ones * 7, "index": torch.tensor([[0, 5]]),
            "eps": 0.0}
    y, gate = FSS.select01_oracle(args)
    xhat = torch.tensor([-1.5, -0.5, 0.5, 1.5], dtype=torch.float64) / math.sqrt(1.25)
    torch.testing.assert_close(y[0, 0], xhat, rtol=0, atol=1e-15)  # index 0: scale0 = shift0 = 0
    # index != 0: (1 + scale1) * xhat + shift1
    torch.testing.assert_close(y[0, 1], 2 * xhat + 3, rtol=0, atol=1e-15)
    assert gate[0].tolist() == [[-1.0] * 4, [7.0] * 4]
    residual = torch.full((1, 2, 4), 10.0)
    residual_gate = torch.full((1, 2, 4), 2.0)
    y, r, gate = FSS.residual_select01_oracle({**args, "residual": residual, "residual_gate": residual_gate})
    assert torch.equal(r, (residual + 2 * x).double())  # r = residual + residual_gate * x
    # r's rows are x's, scaled by 2 and moved by 10: the same normalized values
    torch.testing.assert_close(y[0, 0], xhat, rtol=0, atol=1e-15)


# ------------------------------------------------------------------------------- the checker: right and wrong

def _reference(row: str):
    return contract(FAMILY, ROWS[row].fn).torch_reference


@pytest.mark.parametrize("row", CPU_ROWS)
def test_references_pass_every_cpu_row(row):
    """The control of every wrong implementation below: the eager reference passes on its row."""
    results = H.check(TASK, row, {"reference": _reference(row)})
    assert all(r.ok for r in results), "\n".join(r.describe() for r in results)


def scale_and_shift_swapped(x, scale, shift, scale_constant=1.0, block_l=128, block_c=128):
    return FSS.fuse_scale_shift_reference(x, shift, scale, scale_constant)


def scale_constant_ignored(x, scale, shift, scale_constant=1.0, block_l=128, block_c=128):
    return FSS.fuse_scale_shift_reference(x, scale, shift, 1.0)  # x * (1 + scale) + shift, whatever k is


def batch0_modulation_everywhere(x, scale, shift, scale_constant=1.0, block_l=128, block_c=128):
    """A [B, C] modulation read without the token's batch index: batch 0's row for every batch."""
    return FSS.fuse_scale_shift_reference(x, scale[:1], shift[:1], scale_constant)


def frames_interleaved(x, scale, shift, scale_constant=1.0, block_l=128, block_c=128):
    """A [B, F, 1, C] scale read as token t -> frame t % F instead of contiguous blocks of L / F tokens."""
    frame = torch.arange(x.shape[1]) % scale.shape[1]
    return FSS.fuse_scale_shift_reference(x, scale[:, frame, 0], shift, scale_constant)


def chunk_strides_ignored(x, scale, shift, scale_constant=1.0, block_l=128, block_c=128):
    """A chunk view (a slice of a wider tensor) read as if its memory were contiguous."""
    flat = torch.as_strided(scale, scale.shape, torch.empty(scale.shape).stride(), scale.storage_offset())
    return FSS.fuse_scale_shift_reference(x, flat, shift, scale_constant)


MULADD_CASES = [
    ("scale_and_shift_swapped", scale_and_shift_swapped, "test_tail_bc_modulation"),
    ("scale_and_shift_swapped", scale_and_shift_swapped, "test_per_token_fp32_chunk_view"),
    ("scale_constant_ignored", scale_constant_ignored, "test_per_token_fp32_chunk_view"),
    ("batch0_modulation_everywhere", batch0_modulation_everywhere, "test_tail_bc_modulation"),
    ("frames_interleaved", frames_interleaved, "test_per_frame_4d_scale"),
    ("chunk_strides_ignored", chunk_strides_ignored, "test_per_token_fp32_chunk_view"),
]


@pytest.mark.parametrize(("name", "wrong", "row"), MULADD_CASES, ids=[f"{c[0]}-{c[2]}" for c in MULADD_CASES])
def test_wrong_modulation_is_rejected(name, wrong, row):
    assert ROWS[row].fn == MULADD and row in CPU_ROWS  # its control: test_references_pass_every_cpu_row
    res = H.check(TASK, row, {name: wrong})[0]
    assert not res.ok and "beyond tolerance" in res.describe(), res.describe()


def index_inverted(**a):
    """index != 0 picks set 0 (the polarity of the select flipped)."""
    sets = {f"{name}{i}": a[f"{name}{1 - i}"] for name in ("scale", "shift", "gate") for i in (0, 1)}
    return FSS.select01_reference(**{**a, **sets})


def scale_without_one(**a):
    """y = xhat * scale + shift: the adaLN ``1 +`` dropped."""
    return FSS.select01_reference(**{**a, "scale0": a["scale0"] - 1, "scale1": a["scale1"] - 1})


def affine_skipped(**a):
    """The LayerNorm's weight and bias never applied."""
    return FSS.select01_reference(**{**a, "weight": None, "bias": None})


SELECT01_CASES = [
    ("index_inverted", index_inverted, "test_ln_select01_tail_affine"),
    ("index_inverted", index_inverted, "test_ln_select01_tiny_spread"),
    ("scale_without_one", scale_without_one, "test_ln_select01_tiny_spread"),
    ("affine_skipped", affine_skipped, "test_ln_select01_tail_affine"),
]


@pytest.mark.parametrize(("name", "wrong", "row"), SELECT01_CASES,
                         ids=[f"{c[0]}-{c[2]}" for c in SELECT01_CASES])
def test_wrong_select01_is_rejected(name, wrong, row):
    assert ROWS[row].fn == SELECT01 and row in CPU_ROWS
    res = H.check(TASK, row, {name: wrong})[0]
    assert not res.ok, res.describe()


def residual_gate_ignored(**a):
    """r = residual + x: the residual gate never multiplied in."""
    return FSS.residual_select01_reference(**{**a, "residual_gate": torch.ones_like(a["residual_gate"])})


def input_residual_returned(**a):
    """residual_out is the input residual, not r."""
    y, _, gate = FSS.residual_select01_reference(**a)
    return y, a["residual"].clone(), gate


def x_normalized_not_r(**a):
    """r is formed (and returned) but x is what the LayerNorm reads."""
    _, r, gate = FSS.residual_select01_reference(**a)
    y, _ = FSS.select01_reference(**{k: v for k, v in a.items() if k not in ("residual", "residual_gate")})
    return y, r, gate


@pytest.mark.parametrize(("wrong", "output"), [(residual_gate_ignored, "y"),
                                               (input_residual_returned, "residual_out"),
                                               (x_normalized_not_r, "y")])
def test_wrong_residual_select01_is_rejected(wrong, output):
    res = H.check(TASK, "test_res_ln_select01_tail", {"wrong": wrong})[0]
    assert ROWS["test_res_ln_select01_tail"].fn == RESIDUAL and "test_res_ln_select01_tail" in CPU_ROWS
    assert not res.ok and any(c.output == output and not c.ok for c in res.comparisons), res.describe()
