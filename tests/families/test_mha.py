"""The mha family (kda_lab/families/mha.py) and its baselines (kda_lab/baselines.py): the fp64 oracle on
hand-computed cases and against SDPA in fp64, deliberately wrong implementations the checker must reject
(each next to a correct control on the same row: no softmax scale, the causal mask inverted, [B,S,H,D] memory
read as [B,H,S,D], the last key block dropped), SDPA's math backend passing the test rows on CPU, and the
lazily resolved GPU-only baselines (SDPA flash, FlashAttention-4, SGLang's FA3) called as SGLang calls them
or failing with a clear error.

The diffusion-shapes task (h200_mha_diffusion__multi_shape): its production rows against SGLang's own DiT
attention calls computed from SGLang's configs (kda_lab/families/mha_calls.py; a row of another shape is
refused), the backend SGLang picks on an H200 (its own selection code), the key-padding contract
(``key_lens``) in the oracle, the baselines and the checker (an implementation that ignores the mask, drops a
key block of the valid keys or zero-fills the padding queries is rejected), the public peers (registered,
absent ones reporting why, adapters checked against the oracle with stand-ins bound to the pinned
signatures) and the FLOP model."""

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
DIFFUSION_TASK = "h200_mha_diffusion__multi_shape"


def test_families_are_registered() -> None:
    assert FAMILY_FUNCTIONS["mha"] == ("mha_forward",)
    assert set(family_module("mha").FUNCTIONS) == {"mha_forward"}


@pytest.mark.parametrize("slug", MHA_TASKS)
def test_task_entries_resolve_without_a_gpu(slug: str) -> None:
    H.assert_reference_task_entry_resolves(load_task(slug))


def test_the_diffusion_task_resolves_sglangs_default_without_a_gpu() -> None:
    from kda_lab.measure.run import resolve_entry

    task = load_task(DIFFUSION_TASK)
    assert resolve_entry(task.functions["mha_forward"].entry) is baselines.sglang_fa3_mha
    assert task.functions["mha_forward"].sglang == baselines.FA3_MODULE + ":flash_attn_varlen_func"
    assert mha.BASELINES["mha_forward"] == task.functions["mha_forward"].entry  # what `kda new-task` stamps


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
    assert seen["k"] == {"backends": ("FLASH_ATTENTION",), "key_lens": None} and seen["a"][3:] == (True, 0.5)


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


def test_fa4_baseline_passes_key_lens_as_seqused_k(monkeypatch: pytest.MonkeyPatch) -> None:
    seen = {}
    monkeypatch.setattr(baselines, "_fa4_varlen", lambda: lambda *a, **kw: seen.update(kw) or a[0])
    q = torch.randn(2, 6, 3, 8)
    baselines.fa4_mha(q, q, q, key_lens=[6, 4])
    assert seen["seqused_k"].dtype == torch.int32 and seen["seqused_k"].tolist() == [6, 4]


# ============================================================= the diffusion shapes: SGLang's calls, the rows

@pytest.fixture(scope="module")
def calls():
    """SGLang 0.5.23's DiT attention calls, from its config objects (their import deps: .venv/e2e-site)."""
    from kda_lab.e2e.runtime import cpu_e2e_site
    from kda_lab.families import mha_calls

    cpu_e2e_site()
    return mha_calls.sglang_dit_attention_calls()


def test_production_rows_are_sglangs_dit_attention_calls(calls) -> None:
    from kda_lab.families.mha_calls import row_problems

    task = load_task(DIFFUSION_TASK)
    assert row_problems(task.workloads, calls) == []
    rows = H.rows(task)
    assert {c.row: c.shape for c in calls} == {
        "hunyuanvideo_joint_B1_S27085_H24_D128": (1, 27085, 24, 128),
        "hunyuanvideo_joint_text256_keylens27085_B1_S27286_H24_D128": (1, 27286, 24, 128),
        "wan22_t2v_B1_S37800_H40_D128": (1, 37800, 40, 128),
        "wan22_t2v_720p_B1_S75600_H40_D128": (1, 75600, 40, 128),
        "qwen_image_joint_B1_S4115_H24_D128": (1, 4115, 24, 128),
        "zimage_joint_B1_S4128_H30_D128": (1, 4128, 30, 128),
        "ltx2_video_B2_S6144_H32_D128": (2, 6144, 32, 128),
        "ltx2_audio_B2_S126_H32_D64": (2, 126, 32, 64),
        "flux1_joint_B1_S4608_H24_D128": (1, 4608, 24, 128)}
    for c in calls:  # each row cites the SGLang file that makes the call; its sizes come with their sources
        dits_file = c.call_site.split(":")[0]
        assert dits_file.startswith("runtime/models/dits/") and dits_file in rows[c.row].source, c.row
        assert c.sizes and rows[c.row].source.startswith("derived: ")
    masked = [c for c in calls if c.key_lens]
    assert [(c.row, c.key_lens, c.in_sglang) for c in masked] == [
        ("hunyuanvideo_joint_text256_keylens27085_B1_S27286_H24_D128", (27085,), False)]
    assert "does NOT make this call" in masked[0].sizes


def _with_args(w, **changes):
    import dataclasses

    return dataclasses.replace(w, args={**w.args, **changes})


def test_a_row_that_differs_from_sglangs_call_is_refused(calls) -> None:
    import dataclasses

    from kda_lab.families.mha_calls import row_problems

    rows = list(load_task(DIFFUSION_TASK).workloads)
    i = next(i for i, w in enumerate(rows) if w.name == "hunyuanvideo_joint_B1_S27085_H24_D128")
    w = rows[i]
    wrong_tokens = [*rows[:i], _with_args(w, q=dataclasses.replace(w.args["q"], shape=(1, 27086, 24, 128))),
                    *rows[i + 1:]]
    assert row_problems(wrong_tokens, calls) == [
        "hunyuanvideo_joint_B1_S27085_H24_D128: q bfloat16[1, 27086, 24, 128] != SGLang's contiguous "
        "bfloat16[1, 27085, 24, 128]"]
    j = next(i for i, w in enumerate(rows) if w.args.get("key_lens"))
    unmasked = [*rows[:j], _with_args(rows[j], key_lens=None), *rows[j + 1:]]
    assert row_problems(unmasked, calls) == [f"{rows[j].name}: key_lens None != [27085]"]
    causal = [*rows[:i], _with_args(w, causal=True), *rows[i + 1:]]
    assert "non-causal" in row_problems(causal, calls)[0]
    extra = [*rows, dataclasses.replace(w, name="hunyuanvideo_joint_B1_S27100_H24_D128")]
    assert row_problems(extra, calls) == [
        "hunyuanvideo_joint_B1_S27100_H24_D128: a production row that is none of SGLang's calls"]
    assert "no production row for HunyuanVideo's call" in row_problems(rows[1:], calls)[0]


def test_sglang_picks_fa3_on_an_h200_for_every_row(calls) -> None:
    """SGLang's own backend selection (runtime/platforms/cuda.py) with an H200's capability: its
    FlashAttention backend for both head dims of the rows, FA3 from sgl_kernel; a head size FA does not list
    falls to SDPA."""
    from kda_lab.families.mha_calls import fa3_source, sglang_default_backend

    fa = "sglang.multimodal_gen.runtime.layers.attention.backends.flash_attn.FlashAttentionBackend"
    assert {c.head_dim: sglang_default_backend(c.head_dim) for c in calls} == {128: fa, 64: fa}
    assert sglang_default_backend(72).endswith("sdpa.SDPABackend")  # SGLang's selection, not a constant
    assert fa3_source() == "fa_ver 3, SGLANG_USE_SGL_FA3_KERNEL=True (sgl_kernel.flash_attn)"
    rows = H.rows(load_task(DIFFUSION_TASK))
    for c in calls:  # each row's note records SGLang's pick
        assert ("FA3 from sgl_kernel" in rows[c.row].note) == c.in_sglang, c.row


# ===================================================================== key_lens: the oracle and the contract

def test_key_lens_oracle_hand_computed() -> None:
    q = torch.tensor([1.0, 2.0, 3.0]).view(1, 3, 1, 1)
    v = torch.tensor([3.0, -1.0, 7.0]).view(1, 3, 1, 1)
    (y,) = mha.oracle({"q": q, "k": q, "v": v, "softmax_scale": 1.0, "key_lens": [2]})
    # every query (the padding one too) over keys 0 and 1 only: weights softmax(q_i * [1, 2])
    expect = [(3 * math.exp(qi) - math.exp(2 * qi)) / (math.exp(qi) + math.exp(2 * qi))
              for qi in (1.0, 2.0, 3.0)]
    torch.testing.assert_close(y.flatten(), torch.tensor(expect, dtype=torch.float64), rtol=1e-14, atol=1e-14)
    (y1,) = mha.oracle({"q": q, "k": q, "v": v, "softmax_scale": 1.0, "key_lens": [1]})
    assert y1.flatten().tolist() == [3.0, 3.0, 3.0]


def test_key_lens_oracle_matches_masked_sdpa_in_fp64(monkeypatch: pytest.MonkeyPatch) -> None:
    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(3, 37, 2, 16, generator=g, dtype=torch.float64) for _ in range(3))
    lens = [37, 20, 1]
    monkeypatch.setattr(mha, "_SCORE_BUDGET", 2 * 37 * 5)  # blocks of a few queries: blocking exercised
    (y,) = mha.oracle({"q": q, "k": k, "v": v, "softmax_scale": 0.4, "key_lens": lens})
    mask = torch.arange(37)[None, :] < torch.tensor(lens)[:, None]
    ref = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                         attn_mask=mask[:, None, None, :], scale=0.4).transpose(1, 2)
    torch.testing.assert_close(y, ref, rtol=1e-12, atol=1e-12)
    (dense,) = mha.oracle({"q": q, "k": k, "v": v, "softmax_scale": 0.4, "key_lens": [37, 37, 37]})
    torch.testing.assert_close(dense, mha.oracle({"q": q, "k": k, "v": v, "softmax_scale": 0.4})[0])


@pytest.mark.parametrize(("lens", "causal", "match"), [([4], False, "each of the 2"), ([4, 0], False, "1..5"),
                                                       ([4, 6], False, "1..5"), ([5, 5], True, "causal")])
def test_key_lens_outside_the_contract_is_refused(lens, causal: bool, match: str) -> None:
    q = torch.randn(2, 5, 1, 8)
    with pytest.raises(ValueError, match=match):
        mha.attention64(q, q, q, causal=causal, key_lens=lens)


def test_the_oracle_block_fits_the_device_budget() -> None:
    assert mha.score_budget(torch.device("cpu")) == mha._SCORE_BUDGET
    # Wan's 75600-token row on a GPU with 140 GB free: the 8 GB cap, 355-query blocks (213 passes over K and
    # V), where the CPU budget would make 11-query blocks (6873 passes)
    assert mha._SCORE_BUDGET_CUDA // (40 * 75600) == 355 and mha._SCORE_BUDGET // (40 * 75600) == 11


# ========================================================= key_lens through the real checker (CPU-sized rows)

def masked_row(shape=(2, 384, 4, 64), lens=(384, 259), dtype="bfloat16"):
    """A key-padding row of the diffusion task's kind at a CPU size: batch 2, one element padded."""
    from kda_lab.task.workloads import Workload, parse_arg

    spec = {"shape": list(shape), "dtype": dtype}
    args = {"q": parse_arg("q", {**spec, "std": 1.5}), "k": parse_arg("k", {**spec, "std": 1.5}),
            "v": parse_arg("v", spec), "causal": False, "softmax_scale": None, "key_lens": list(lens)}
    return Workload(name="masked_cpu_row", fn="mha_forward", kind="test", args=args)


def check_masked(impls: dict, row=None, seed: int = 5):
    from kda_lab.measure.correctness import check_row

    task = load_task(DIFFUSION_TASK)
    w = row or masked_row()
    return {r.impl: r for r in check_row(task, w, contract("mha", "mha_forward"), impls, seed, "cpu")}


def math_masked(q, k, v, causal=False, softmax_scale=None, key_lens=None):
    return baselines.sdpa_mha(q, k, v, causal, softmax_scale, backends=("MATH",), key_lens=key_lens)


def ignores_mask(q, k, v, causal=False, softmax_scale=None, key_lens=None):
    """Wrong: attends to the padding keys too (the mask dropped on the way to the kernel)."""
    return math_masked(q, k, v, causal, softmax_scale)


def drops_a_valid_key_block(q, k, v, causal=False, softmax_scale=None, key_lens=None):
    """Wrong: each element's last 128 valid keys skipped (a block-count off by one at the mask edge)."""
    return math_masked(q, k, v, causal, softmax_scale, [max(1, n - 128) for n in key_lens])


def zeroes_padding_queries(q, k, v, causal=False, softmax_scale=None, key_lens=None):
    """Wrong for this contract: SGLang's varlen fast path with attn_mask_meta zero-fills the padding query
    rows; here every query row is computed."""
    out = math_masked(q, k, v, causal, softmax_scale, key_lens).clone()
    for b, n in enumerate(key_lens):
        out[b, n:] = 0
    return out


MASK_CASES = [("ignores_mask", ignores_mask), ("drops_a_valid_key_block", drops_a_valid_key_block),
              ("zeroes_padding_queries", zeroes_padding_queries)]


@pytest.mark.parametrize(("name", "wrong"), MASK_CASES, ids=[c[0] for c in MASK_CASES])
def test_checker_rejects_wrong_masked_attention(name: str, wrong) -> None:
    res = check_masked({"control": math_masked, name: wrong})
    assert {k: r.ok for k, r in res.items()} == {"control": True, name: False}, \
        "\n".join(r.describe() for r in res.values())


def test_every_sdpa_path_and_the_reference_pass_the_masked_row() -> None:
    """The flash backend takes no mask: its path attends each element over k[b, :L] (CPU flash here); the math
    backend and the torch.compile reference take the boolean mask."""
    flash = functools.partial(baselines.sdpa_mha, backends=("FLASH_ATTENTION",))
    res = check_masked({"flash_sliced": flash, "math_mask": math_masked,
                        "reference": contract("mha", "mha_forward").torch_reference})
    assert all(r.ok for r in res.values()), "\n".join(r.describe() for r in res.values())
    one = masked_row(shape=(1, 300, 2, 64), lens=(211,))
    res = check_masked({"flash_sliced": flash, "dropped": drops_a_valid_key_block}, row=one)
    assert {k: r.ok for k, r in res.items()} == {"flash_sliced": True, "dropped": False}


# ===================================================================================== the diffusion baseline

def test_sglang_fa3_baseline_calls_sglangs_wrapper_like_flash_attention_impl(
        monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[dict] = []

    def fake(q, k, v, cu_q, cu_k, **kw):
        seen.append(dict(cu=(cu_q, cu_k), **kw))
        return q

    monkeypatch.setattr(baselines, "_sglang_fa3_varlen", lambda: fake)
    q, k = torch.randn(2, 6, 3, 8), torch.randn(2, 9, 3, 8)
    baselines.sglang_fa3_mha(q, k, k, softmax_scale=0.2)
    assert seen[0] == {"cu": (None, None), "max_seqlen_q": 6, "max_seqlen_k": 9, "seqused_k": None,
                       "softmax_scale": 0.2, "causal": False, "ver": 3}
    baselines.sglang_fa3_mha(q, k, k, key_lens=[9, 4])
    baselines.sglang_fa3_mha(q, k, k, key_lens=(9, 4))
    lens = seen[1]["seqused_k"]
    assert lens.dtype == torch.int32 and lens.tolist() == [9, 4]
    assert seen[2]["seqused_k"] is lens  # one device tensor per value: built before a capture, reused in it


def test_sglang_fa3_baseline_unavailable_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    baselines._sglang_fa3_varlen.cache_clear()
    monkeypatch.setitem(sys.modules, "sgl_kernel.flash_attn", None)  # what a box without the fa3 chunks has
    try:
        with pytest.raises(baselines.BaselineUnavailable, match=r"\.gpu-stage-d1"):
            baselines.sglang_fa3_mha(*(torch.randn(1, 4, 2, 8, dtype=torch.bfloat16),) * 3)
    finally:
        baselines._sglang_fa3_varlen.cache_clear()


# =========================================================================================== the public peers

PEER_NAMES = ["sdpa_flash", "sdpa_cudnn", "sdpa_efficient", "flashinfer", "sgl_fa3", "sage"]


def _peer(name: str):
    return next(p for p in mha.PEERS["mha_forward"] if p.name == name)


def test_peers_are_registered_with_their_pins_and_mappings() -> None:
    import re
    from importlib import metadata

    from kda_lab.families.peers import FLASHINFER, SGL_KERNEL
    from tests.conftest import REPO

    peers = mha.PEERS["mha_forward"]
    assert [p.name for p in peers] == PEER_NAMES
    assert all(p.mapping for p in peers)
    assert {p.package for p in peers if p.name.startswith("sdpa_")} == {"torch"}
    assert all(p.version == metadata.version("torch") for p in peers if p.package == "torch")
    assert (_peer("flashinfer").package, _peer("flashinfer").version) == FLASHINFER[1:]
    pin = re.search(r"^sglang-kernel==(\S+)", (REPO / "requirements/sgl-kernel.txt").read_text(), re.M)
    assert pin and SGL_KERNEL[1:] == ("sglang-kernel", pin.group(1)) == (_peer("sgl_fa3").package,
                                                                          _peer("sgl_fa3").version)


def test_an_absent_peer_reports_why_and_nothing_crashes(monkeypatch: pytest.MonkeyPatch) -> None:
    """Through the harness (kda_lab.measure.run.checked_peers) on a CPU row: the GPU-only peers read n/a with
    the reason; with that gate lifted, sgl_kernel's FA3 (not installed here) and SageAttention (no wheel) read
    unavailable with theirs, and nothing is timed."""
    import dataclasses
    from importlib import metadata

    from kda_lab.families.peers import PeerUnavailable
    from kda_lab.measure.inputs import make_inputs
    from kda_lab.measure.run import checked_peers

    task, cpu = load_task(DIFFUSION_TASK), torch.device("cpu")
    w = masked_row(shape=(1, 40, 2, 64), lens=(33,))
    verdicts, timed = checked_peers(task, w, 3, cpu, make_inputs(w, cpu, 3))
    assert timed == {} and set(verdicts) == set(PEER_NAMES)
    assert all(verdicts[n]["verdict"] == "n/a" and "CUDA only" in verdicts[n]["why"] for n in PEER_NAMES[:5])
    assert verdicts["sage"] == {"version": "-", "verdict": "unavailable", "why": mha.SAGE_ABSENT}
    with pytest.raises(PeerUnavailable, match="no SageAttention wheel is staged"):
        _peer("sage").load(importer=lambda name: pytest.fail("an absent peer is never imported"))
    try:
        metadata.version("sglang-kernel")
        pytest.skip("sgl-kernel is installed in this environment")
    except metadata.PackageNotFoundError:
        pass
    ungated = tuple(dataclasses.replace(p, applies=lambda a: None) if p.name == "sgl_fa3" else p
                    for p in mha.PEERS["mha_forward"])
    monkeypatch.setattr(mha, "PEERS", {"mha_forward": ungated})
    verdicts, timed = checked_peers(task, w, 3, cpu, make_inputs(w, cpu, 3))
    assert timed == {} and verdicts["sgl_fa3"]["verdict"] == "unavailable"
    assert "sglang-kernel is not installed" in verdicts["sgl_fa3"]["why"]


class _Recorder:
    """A stand-in peer module: each function computes the peer's documented semantics in torch, every call is
    recorded so it can be bound against the real signature."""

    def __init__(self, **fns) -> None:
        self.calls: list[tuple[str, tuple, dict]] = []
        for name, fn in fns.items():
            setattr(self, name, self._recorded(name, fn))

    def _recorded(self, name, fn):
        def call(*args, **kwargs):
            self.calls.append((name, args, kwargs))
            return fn(*args, **kwargs)
        return call


def _fi_single_prefill(q, k, v, *, causal=False, kv_layout="NHD", sm_scale=None, backend="auto", **_):
    """flashinfer.prefill.single_prefill_with_kv_cache on NHD tensors [S, H, D] (its docstring)."""
    assert kv_layout == "NHD" and q.dim() == 3
    o = F.scaled_dot_product_attention(q.transpose(0, 1)[None], k.transpose(0, 1)[None],
                                       v.transpose(0, 1)[None], is_causal=causal, scale=sm_scale)
    return o[0].transpose(0, 1)


def _fa3_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q=None, max_seqlen_k=None, seqused_q=None,
                seqused_k=None, softmax_scale=None, causal=False, **_):
    """sgl_kernel.flash_attn.flash_attn_varlen_func on a dense batch: only the first seqused_k[b] keys."""
    assert cu_seqlens_q is None and cu_seqlens_k is None and max_seqlen_q == q.shape[1]
    lens = None if seqused_k is None else seqused_k.tolist()
    return math_masked(q, k, v, causal, softmax_scale, lens)


def _check_peer(name: str, module, row=None, adapt=None):
    import dataclasses

    from kda_lab.families.peers import bound

    peer = _peer(name) if adapt is None else dataclasses.replace(_peer(name), adapt=adapt)
    return check_masked({name: bound(peer, module)}, row=row)[name]


def test_flashinfer_adapter_matches_the_oracle_and_binds_to_the_pinned_wheel() -> None:
    from tests.peer_standins import pinned_signature

    fi = _Recorder(single_prefill_with_kv_cache=_fi_single_prefill)
    for row in (masked_row(), masked_row(shape=(1, 300, 2, 64), lens=(300,))):
        res = _check_peer("flashinfer", fi, row)
        assert res.ok, res.describe()
    sig = pinned_signature("flashinfer.prefill.single_prefill_with_kv_cache")
    assert fi.calls and all(sig.bind(*a, **kw) for _, a, kw in fi.calls)
    assert {kw["backend"] for _, _, kw in fi.calls} == {"auto"}
    # the wrong mapping (every element over all Sk keys) fails the same check
    def unsliced(m, a):
        return torch.stack([m.single_prefill_with_kv_cache(a["q"][b], a["k"][b], a["v"][b], kv_layout="NHD")
                            for b in range(a["q"].shape[0])])
    assert not _check_peer("flashinfer", fi, adapt=unsliced).ok


def test_sgl_fa3_adapter_matches_the_oracle_and_binds_to_the_staged_wheel() -> None:
    fa = _Recorder(flash_attn_varlen_func=_fa3_varlen)
    res = _check_peer("sgl_fa3", fa)
    assert res.ok, res.describe()
    (_, args, kw), *_ = fa.calls
    assert kw["seqused_k"].tolist() == [384, 259] and args[3:] == (None, None)

    def no_seqused(m, a):  # the mask not mapped onto seqused_k
        return m.flash_attn_varlen_func(a["q"], a["k"], a["v"], None, None, max_seqlen_q=a["q"].shape[1],
                                        max_seqlen_k=a["k"].shape[1])
    assert not _check_peer("sgl_fa3", fa, adapt=no_seqused).ok
    source = H.staged_sgl_kernel_source("flash_attn.py")
    if source is None:
        pytest.skip("sgl_kernel is not staged here (scripts/gpu_stage_sgl_kernel.sh; KDA_GPU_STAGE_DIR)")
    sig = H.signature_in(source, "flash_attn_varlen_func")
    assert all(sig.bind(*a, **kw) for _, a, kw in fa.calls)


def test_sdpa_peer_adapters_pass_the_masked_row_on_cpu() -> None:
    """The flash peer's adapter (per-element valid keys) through the checker with CPU flash; the cuDNN and
    memory-efficient adapters build the same mask as the math path (their kernels are CUDA-only)."""
    res = _check_peer("sdpa_flash", torch.nn.attention)
    assert res.ok, res.describe()
    mask = baselines.key_padding_mask((384, 259), 384, torch.device("cpu"))
    assert mask.shape == (2, 1, 1, 384) and mask.sum(-1).flatten().tolist() == [384, 259]
    assert baselines.key_padding_mask((384, 259), 384, torch.device("cpu")) is mask


# =========================================================================================== FLOPs, TFLOP/s

def test_flop_model_counts_the_kept_scores() -> None:
    from kda_lab.task.flop_model import attention_flops, mha_flops, workload_flops

    assert attention_flops((1, 27085, 24, 128), (1, 27085, 24, 128)) == 4 * 27085 * 27085 * 24 * 128
    assert attention_flops((2, 10, 3, 8), (2, 10, 3, 8), key_lens=[10, 4]) == 4 * 3 * 8 * 10 * 14
    assert attention_flops((2, 10, 3, 8), (2, 10, 3, 8), causal=True) == 4 * 3 * 8 * 2 * 55
    for bad in ([10], [10, 0], [10, 11]):
        with pytest.raises(ValueError):
            attention_flops((2, 10, 3, 8), (2, 10, 3, 8), key_lens=bad)
    rows = H.rows(load_task(DIFFUSION_TASK))
    masked = rows["hunyuanvideo_joint_text256_keylens27085_B1_S27286_H24_D128"]
    assert workload_flops("mha", masked) == 4 * 24 * 128 * 27286 * 27085
    raw = {"q": {"shape": [1, 27286, 24, 128]}, "k": {"shape": [1, 27286, 24, 128]}, "key_lens": [27085]}
    assert mha_flops(raw) == workload_flops("mha", masked)  # the report reads task.toml text, bench rows
    assert workload_flops("norm_infer", masked) is None


def test_bench_prints_tflops_against_the_h200_peak() -> None:
    import json

    from kda_lab.measure.run import format_compute

    row = {"row": "r", "baseline_us": 1000.0, "candidate_us": 500.0,
           "peers": json.dumps({"sdpa_cudnn": {"verdict": "ok", "us": 800.0},
                                "sdpa_flash": {"verdict": "wrong", "us": 1.0}})}
    text = format_compute([row], {"r": 494.5e9}, "h200")
    assert "989 TFLOP/s" in text.splitlines()[0]
    line = text.splitlines()[-1]
    assert "494 (50%)" in line and "989 (100%)" in line and "618 (62%)" in line  # SGLang, candidate, cuDNN
    assert "sdpa_flash" not in text  # a wrong peer gets no TFLOP/s
    assert "no dense peak" in format_compute([row], {"r": 1e9}, "b200").splitlines()[0]


def test_the_report_shows_tflops_per_row_and_peer() -> None:
    from kda_lab.report.model import Run, TaskReport
    from kda_lab.report.peers import compute_table, peers_doc

    rows = [{"row": "a", "baseline_us": 100.0, "candidate_us": None, "compile_us": None,
             "peers": {"sdpa_cudnn": {"verdict": "ok", "us": 50.0}, "sage": {"verdict": "unavailable"}}}]
    run = Run("20261208-000000-abcdef", "baseline-only", "baseline", "h", "2026-12-08T00:00:00Z",
              "NVIDIA H200", "h200", rows)
    t = TaskReport(DIFFUSION_TASK, "h200", "mha", "t", [("a", "m")], "", [run], [], 0, [],
                   flops={"a": 9.89e9})
    table = "\n".join(compute_table(t))
    assert "| `a` | 9.9 | 99 (10%) | 198 (20%) |" in table
    assert "sdpa_cudnn" in table and "sage" not in table
    doc = peers_doc([t])  # docs/peers.md carries the same table per task
    assert f"### {DIFFUSION_TASK}" in doc and table in doc
    assert compute_table(TaskReport("x", "h200", "norm_infer", "t", [("a", "m")], "", [run], [], 0, [])) == []
