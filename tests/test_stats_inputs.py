"""Timing statistics on synthetic samples, byte models and input generation (no GPU needed)."""

from __future__ import annotations

import math

import pytest
import torch

from kda_lab.ledger import geomean
from kda_lab.measure.inputs import clone_args, make_inputs, make_tensor, rotation_count, set_bytes
from kda_lab.stats import aa_spread, interleaved_order, percentile, summarize
from kda_lab.task import load_task
from kda_lab.task.byte_model import tbps
from kda_lab.task.workloads import TensorSpec
from tests.conftest import FSS

TASK = load_task(FSS)
ROWS = {w.name: w for w in TASK.workloads}


def test_percentiles_and_summary():
    xs = [5.0, 1.0, 3.0, 2.0, 4.0]
    assert percentile(xs, 50) == 3.0 and percentile(xs, 0) == 1.0 and percentile(xs, 100) == 5.0
    assert percentile(xs, 10) == pytest.approx(1.4)
    s = summarize([10.0] * 9 + [100.0])  # one outlier: the median ignores it
    assert s.median == 10.0 and s.p10 == 10.0 and s.p90 == pytest.approx(19.0) and s.n == 10
    with pytest.raises(ValueError):
        percentile([], 50)


def test_interleaving_is_seeded_and_covers_every_impl():
    a = interleaved_order(["baseline", "candidate", "copy"], 50, seed=1)
    assert a == interleaved_order(["baseline", "candidate", "copy"], 50, seed=1)
    assert a != interleaved_order(["baseline", "candidate", "copy"], 50, seed=2)
    assert all(sorted(t) == ["baseline", "candidate", "copy"] for t in a)
    firsts = {t[0] for t in a}
    assert firsts == {"baseline", "candidate", "copy"}  # nobody always goes first


def test_geomean_and_aa_spread():
    assert geomean([2.0, 0.5]) == pytest.approx(1.0)
    assert geomean([4.0, 1.0]) == pytest.approx(2.0)
    assert math.isnan(geomean([]))
    s = aa_spread([1.01, 0.98, 1.0])
    assert s["max_dev"] == pytest.approx(0.02) and s["min"] == 0.98 and s["max"] == 1.01


def test_byte_model_counts_broadcasts_once():
    w = ROWS["qwen_muladd_L4096"]  # x, shift [1,4096,3072] bf16; scale [1,1,3072]; one output
    bm = TASK.functions[w.fn].byte_model
    assert bm.bytes(w) == (3 * 4096 * 3072 + 3072) * 2
    w = ROWS["wan_ti2v_muladd_L18144"]  # fp32 per-token scale as a chunk view: only its elements count
    assert TASK.functions[w.fn].byte_model.bytes(w) == 18144 * 3072 * (2 + 4 + 2 + 2)
    assert tbps(4e12, 1e6) == pytest.approx(4.0)


def test_inputs_are_seeded_nonzero_and_in_layout():
    w = ROWS["test_per_token_fp32_chunk_view"]
    a, b, c = (make_inputs(w, "cpu", s) for s in (1, 1, 2))
    assert torch.equal(a["x"], b["x"]) and not torch.equal(a["x"], c["x"])
    assert a["scale"].stride() == (19008, 576, 1) and a["scale"].storage_offset() == 192
    assert a["scale"].dtype == torch.float32 and not a["scale"].is_contiguous()
    for t in (a["x"], a["scale"], a["shift"]):
        assert (t != 0).all()
    assert not torch.equal(a["x"], a["shift"])  # each argument has its own stream
    idx = make_inputs(ROWS["test_ln_select01_tail_affine"], "cpu", 1)["index"]
    assert set(idx.unique().tolist()) == {0, 1} and idx.dtype == torch.int64


def test_broadcast_specs_and_clones_keep_layout():
    spec = TensorSpec(shape=(2, 5, 8), dtype="float32", strides=(0, 0, 1))
    t = make_tensor(spec, "cpu", 0)
    assert t.stride() == (0, 0, 1) and spec.unique_numel == 8 and spec.storage_numel == 8
    c = clone_args({"t": t})["t"]
    assert c.stride() == t.stride() and torch.equal(c, t) and c.data_ptr() != t.data_ptr()


def test_rotation_exceeds_three_l2():
    l2 = 60 << 20
    for w in TASK.workloads:
        n = rotation_count(w, l2)
        assert n >= 2
        assert n * set_bytes(w) > 3 * l2 or n == 1024


def test_in_place_functions_get_private_input_sets_per_timed_impl():
    """The shared sets of an in-place function let one side's writes move another's times on the H200 (qknorm
    bias probe, 2026-11-27): each timed impl of a mutating contract gets its own clones; read-only ones share."""
    from kda_lab.families import contract
    from kda_lab.measure.run import impl_arg_sets

    qk = load_task("h200_diffusion_qknorm_rope__multi_shape")
    w = next(w for w in qk.workloads if w.kind == "test")
    c = contract(qk.family, w.fn)
    assert c.mutates == ("q", "k")
    sets = [make_inputs(w, "cpu", s) for s in (1, 2)]
    names = ["baseline", "candidate", "compile"]
    per = impl_arg_sets(names, sets, c.mutates)
    assert per["baseline"] is sets
    for i in range(len(sets)):
        ptrs = {per[n][i][m].data_ptr() for n in names for m in c.mutates}
        assert len(ptrs) == len(names) * len(c.mutates)  # nobody writes another side's q or k
        for n in names:
            for k, v in sets[i].items():
                if isinstance(v, torch.Tensor):
                    got = per[n][i][k]
                    assert torch.equal(got, v) and got.stride() == v.stride()
    per["candidate"][0]["q"].zero_()
    assert (per["baseline"][0]["q"] != 0).any() and (per["compile"][0]["q"] != 0).any()
    fss = contract(TASK.family, ROWS["test_per_token_fp32_chunk_view"].fn)
    assert not fss.mutates
    shared = impl_arg_sets(names, sets, fss.mutates)
    assert all(shared[n] is sets for n in names)
