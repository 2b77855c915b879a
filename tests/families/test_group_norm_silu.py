"""The group_norm_silu family: fp64 oracle on hand-computed cases, the prepare() hook, the torch references,
deliberately wrong implementations the checker must reject (each next to a correct control on the same row),
and the interpreter shim (SGLang's real Triton kernels run, and SGLang's single-pass variance misses the
offset rows)."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from kda_lab.families import contract
from kda_lab.families.group_norm_silu import (
    BYTE_MODELS,
    FUNCTIONS,
    apply_oracle,
    group_norm_silu64,
    prepare_apply,
    triton_oracle,
)
from kda_lab.measure.correctness import check_row
from kda_lab.measure.inputs import make_inputs
from kda_lab.task import load_task
from kda_lab.task.workloads import Workload

TASKS = ("h200_diffusion_group_norm_silu__multi_shape", "b200_diffusion_group_norm_silu__multi_shape")


def silu(t: float) -> float:
    return t / (1.0 + math.exp(-t))


# ------------------------------------------------------------------------------------------------ oracle

def test_oracle_hand_computed_one_group() -> None:
    x = torch.tensor([[[1.0, 2.0], [3.0, 4.0]]])  # [B=1, C=2, L=2], one group of 4: mean 2.5, var 1.25
    w, b = torch.ones(2), torch.zeros(2)
    (y,) = triton_oracle({"x": x, "weight": w, "bias": b, "num_groups": 1, "eps": 0.0})
    expect = [silu((v - 2.5) / math.sqrt(1.25)) for v in (1.0, 2.0, 3.0, 4.0)]
    assert y.dtype == torch.float64 and y.shape == x.shape
    torch.testing.assert_close(y.flatten(), torch.tensor(expect, dtype=torch.float64), rtol=1e-15, atol=1e-15)


def test_oracle_hand_computed_two_groups_affine() -> None:
    x = torch.tensor([[[1.0, 2.0], [3.0, 4.0]]])  # groups {1,2} and {3,4}: x_hat = -1, +1 in each
    w, b = torch.tensor([2.0, -1.0]), torch.tensor([0.5, 0.0])
    (y,) = triton_oracle({"x": x, "weight": w, "bias": b, "num_groups": 2, "eps": 0.0})
    expect = [[silu(-2.0 + 0.5), silu(2.0 + 0.5)], [silu(1.0), silu(-1.0)]]
    torch.testing.assert_close(y[0], torch.tensor(expect, dtype=torch.float64), rtol=1e-15, atol=1e-15)


def test_oracle_eps_enters_under_the_root() -> None:
    x = torch.tensor([[[0.0, 2.0]]])  # var 1: x_hat = +-1/sqrt(1 + eps)
    (y,) = triton_oracle({"x": x, "weight": torch.ones(1), "bias": torch.zeros(1), "num_groups": 1,
                          "eps": 3.0})
    torch.testing.assert_close(y.flatten(), torch.tensor([silu(-0.5), silu(0.5)], dtype=torch.float64))


def test_one_element_per_group_gives_silu_of_bias() -> None:
    g = torch.Generator().manual_seed(0)
    x, w, b = torch.randn(3, 32, generator=g), torch.randn(32, generator=g), torch.randn(32, generator=g)
    (y,) = triton_oracle({"x": x, "weight": w, "bias": b, "num_groups": 32, "eps": 1e-6})
    torch.testing.assert_close(y, F.silu(b.double()).expand(3, 32), rtol=0, atol=1e-15)


def test_constant_input_gives_silu_of_bias() -> None:
    x = torch.full((2, 8, 3, 5), 0.3)
    w, b = torch.randn(8), torch.randn(8)
    (y,) = triton_oracle({"x": x, "weight": w, "bias": b, "num_groups": 4, "eps": 1e-6})
    torch.testing.assert_close(y, F.silu(b.double()).view(1, 8, 1, 1).expand_as(y), rtol=0, atol=1e-12)


@pytest.mark.parametrize("shape", [(4, 128), (2, 64, 37), (2, 64, 7, 9), (1, 64, 3, 5, 7)])
def test_oracle_matches_torch_in_fp64_for_2d_to_5d(shape: tuple[int, ...]) -> None:
    g = torch.Generator().manual_seed(1)
    x = torch.randn(shape, generator=g, dtype=torch.float64) * 3 + 1
    w = torch.randn(shape[1], generator=g, dtype=torch.float64)
    b = torch.randn(shape[1], generator=g, dtype=torch.float64)
    (y,) = triton_oracle({"x": x, "weight": w, "bias": b, "num_groups": 32, "eps": 1e-6})
    torch.testing.assert_close(y, F.silu(F.group_norm(x, 32, w, b, 1e-6)), rtol=1e-12, atol=1e-12)


def test_oracle_is_layout_independent_and_leaves_inputs_alone() -> None:
    x = torch.randn(1, 64, 3, 4, 5, dtype=torch.float64)
    cl = x.contiguous(memory_format=torch.channels_last_3d)
    before = cl.clone()
    w, b = torch.randn(64, dtype=torch.float64), torch.randn(64, dtype=torch.float64)
    y1 = group_norm_silu64(x, w, b, 32, 1e-6)
    y2 = group_norm_silu64(cl, w, b, 32, 1e-6)
    assert torch.equal(y1, y2) and torch.equal(cl, before)


def test_oracle_rejects_indivisible_groups() -> None:
    with pytest.raises(ValueError, match="not divisible"):
        group_norm_silu64(torch.randn(1, 6, 4), None, None, 4, 1e-5)


# ------------------------------------------------------------------------------------------------ prepare

def test_prepare_builds_the_modules_from_the_row_tensors() -> None:
    x, w, b = torch.randn(2, 64, 3, 3), torch.randn(64), torch.randn(64)
    a = prepare_apply({"x": x, "weight": w, "bias": b, "num_groups": 32, "eps": 1e-6})
    assert set(a) == {"x", "norm", "activation"} and a["x"] is x
    norm, act = a["norm"], a["activation"]
    assert isinstance(norm, nn.GroupNorm) and isinstance(act, nn.SiLU) and not act.inplace
    assert (norm.num_groups, norm.num_channels, norm.eps, norm.affine) == (32, 64, 1e-6, True)
    assert norm.weight.data_ptr() == w.data_ptr() and norm.bias.data_ptr() == b.data_ptr()  # no copy
    assert not norm.weight.requires_grad and not norm.bias.requires_grad  # frozen, as a loaded model's
    assert prepare_apply(a) is a  # idempotent
    torch.testing.assert_close(apply_oracle(a)[0], triton_oracle({"x": x, "weight": w, "bias": b,
                                                                   "num_groups": 32, "eps": 1e-6})[0])


def test_prepare_rejects_unknown_row_args() -> None:
    with pytest.raises(ValueError, match="also got"):
        prepare_apply({"x": torch.randn(1, 4, 2), "weight": torch.randn(4), "bias": torch.randn(4),
                       "num_groups": 2, "eps": 1e-5, "affine": True})


def test_contracts_and_byte_models() -> None:
    assert set(FUNCTIONS) == set(BYTE_MODELS) == {"triton_group_norm_silu", "apply_group_norm_silu"}
    assert FUNCTIONS["apply_group_norm_silu"].prepare is prepare_apply
    assert BYTE_MODELS["apply_group_norm_silu"] == (("x", "weight", "bias"), ("x",))


@pytest.mark.parametrize("fn", ["triton_group_norm_silu", "apply_group_norm_silu"])
def test_torch_references_agree_with_the_oracle(fn: str) -> None:
    task = load_task(TASKS[0])
    row = next(w for w in task.workloads if w.fn == fn and w.kind == "test" and "tiny" in w.tags
               and w.primary().dtype == "float32" and w.primary().dist == "normal")
    c = contract(task.family, fn)
    res = check_row(task, row, c, {"torch": c.torch_reference}, seed=0, device="cpu")
    assert all(r.ok for r in res), "\n".join(r.describe() for r in res)


# ------------------------------------------------------------------------------------------------ wrong impls

def _groups(x: torch.Tensor, g: int) -> torch.Tensor:
    return x.float().reshape(x.shape[0], g, -1)


def _finish(xhat: torch.Tensor, x: torch.Tensor, w: torch.Tensor, b: torch.Tensor,
            act: bool = True) -> torch.Tensor:
    shape = (1, x.shape[1]) + (1,) * (x.dim() - 2)
    y = xhat.reshape(x.shape) * w.float().reshape(shape) + b.float().reshape(shape)
    return (F.silu(y) if act else y).to(x.dtype)


def two_pass_fp32(x, weight, bias, num_groups, eps=1e-5):
    """Correct control: fp32 statistics, centered variance."""
    g = _groups(x, num_groups)
    mean = g.mean(-1, keepdim=True)
    var = (g - mean).square().mean(-1, keepdim=True)
    return _finish((g - mean) * torch.rsqrt(var + eps), x, weight, bias)


def single_pass_fp32(x, weight, bias, num_groups, eps=1e-5):
    """Wrong: var = E[x^2] - mean^2 in fp32 (cancels catastrophically at a large offset)."""
    g = _groups(x, num_groups)
    mean = g.mean(-1, keepdim=True)
    var = (g * g).mean(-1, keepdim=True) - mean * mean
    return _finish((g - mean) * torch.rsqrt(var + eps), x, weight, bias)


def interleaved_groups(x, weight, bias, num_groups, eps=1e-5):
    """Wrong: channel c in group c % G instead of the contiguous block c // (C/G)."""
    b, c = x.shape[:2]
    xt = x.float().reshape(b, c // num_groups, num_groups, -1).transpose(1, 2)  # [B, G, C/G, S]
    g = xt.reshape(b, num_groups, -1)
    mean = g.mean(-1, keepdim=True)
    var = (g - mean).square().mean(-1, keepdim=True)
    xhat = ((g - mean) * torch.rsqrt(var + eps)).reshape(xt.shape).transpose(1, 2)
    return _finish(xhat, x, weight, bias)


def no_silu(x, weight, bias, num_groups, eps=1e-5):
    """Wrong: GroupNorm without the SiLU."""
    g = _groups(x, num_groups)
    mean = g.mean(-1, keepdim=True)
    var = (g - mean).square().mean(-1, keepdim=True)
    return _finish((g - mean) * torch.rsqrt(var + eps), x, weight, bias, act=False)


def as_apply(fn):
    def apply(x, norm, activation):
        return fn(x, norm.weight, norm.bias, norm.num_groups, norm.eps)

    return apply


WRONG = {"single_pass_fp32": single_pass_fp32, "interleaved_groups": interleaved_groups, "no_silu": no_silu}
CASES = [  # (wrong implementation, the row it must fail, triton / apply row)
    ("single_pass_fp32", "test_offset_fp32", "test_apply_offset_fp32"),
    ("interleaved_groups", "test_3d_odd_tail", "test_apply_4d_tail"),
    ("interleaved_groups", "test_5d_odd", "test_apply_5d_eps1e5"),
    ("no_silu", "test_4d_tail_eps1e5", "test_apply_4d_tail"),
    ("no_silu", "test_constant_input", "test_apply_constant_input"),
]


def _run(task_name: str, row_name: str, impls: dict) -> dict[str, bool]:
    task = load_task(task_name)
    row = next(w for w in task.workloads if w.name == row_name)
    res = check_row(task, row, contract(task.family, row.fn), impls, seed=5, device="cpu")
    return {r.impl: r.ok for r in res}


@pytest.mark.parametrize("task_name", TASKS)
@pytest.mark.parametrize(("wrong", "triton_row", "apply_row"), CASES)
def test_checker_rejects_wrong_implementations(task_name: str, wrong: str, triton_row: str,
                                               apply_row: str) -> None:
    ok = _run(task_name, triton_row, {"control": two_pass_fp32, wrong: WRONG[wrong]})
    assert ok == {"control": True, wrong: False}, f"{triton_row}: {ok}"
    ok = _run(task_name, apply_row, {"control": as_apply(two_pass_fp32), wrong: as_apply(WRONG[wrong])})
    assert ok == {"control": True, wrong: False}, f"{apply_row}: {ok}"


def test_offset_rows_are_what_they_claim() -> None:
    task = load_task(TASKS[0])
    for name in ("test_offset_fp32", "test_offset_fp32_large_group", "test_apply_offset_fp32"):
        row = next(w for w in task.workloads if w.name == name)
        x = row.args["x"]
        assert (x.dtype, x.mean, x.std) == ("float32", 1e4, 100.0) and "tiny" not in row.tags


# ------------------------------------------------------------------------------------------- interpreter shim

@pytest.fixture
def shimmed(monkeypatch: pytest.MonkeyPatch):
    from kda_lab.interpret import InterpreterUnavailable
    from kda_lab.interpret.shims.group_norm_silu import APPLY_MODULE, TRITON_MODULE, interpretable_group_norm

    try:
        fns = {"triton_group_norm_silu": interpretable_group_norm(TRITON_MODULE, "triton_group_norm_silu"),
               "apply_group_norm_silu": interpretable_group_norm(APPLY_MODULE, "apply_group_norm_silu")}
    except InterpreterUnavailable as e:
        pytest.fail(f"{e} (run pytest with TRITON_INTERPRET=1, as scripts/test.sh's environment should)")
    return fns


def test_shim_runs_sglangs_triton_kernels_not_the_torch_fallback(shimmed,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    def no_eager(*a, **k):
        raise AssertionError("the eager torch fallback ran instead of SGLang's Triton kernels")

    monkeypatch.setattr(F, "group_norm", no_eager)
    monkeypatch.setattr(nn.GroupNorm, "forward", no_eager)
    task = load_task(TASKS[0])
    for name in ("test_5d_odd", "test_chunked_tail", "test_apply_4d_tail"):
        row = next(w for w in task.workloads if w.name == name)
        res = check_row(task, row, contract(task.family, row.fn), {"sglang": shimmed[row.fn]}, seed=2,
                        device="cpu")
        assert all(r.ok for r in res), "\n".join(r.describe() for r in res)


def test_shim_keeps_sglangs_grad_fallback(shimmed) -> None:
    x = torch.randn(1, 32, 4, 4, requires_grad=True)
    norm, act = nn.GroupNorm(32, 32, eps=1e-6), nn.SiLU()
    y = shimmed["apply_group_norm_silu"](x, norm, act)  # grad enabled: activation(norm(x)), differentiable
    assert y.grad_fn is not None
    torch.testing.assert_close(y, act(norm(x)))


@pytest.mark.parametrize("row_name", ["test_offset_fp32", "test_apply_offset_fp32"])
def test_sglang_single_pass_variance_misses_the_offset_rows(shimmed, row_name: str) -> None:
    """Documents the known baseline weakness the task cards state (why these rows are not tagged 'tiny')."""
    task = load_task(TASKS[0])
    row = next(w for w in task.workloads if w.name == row_name)
    res = check_row(task, row, contract(task.family, row.fn), {"sglang": shimmed[row.fn]}, seed=5,
                    device="cpu")
    assert not res[0].ok and res[0].comparisons[0].max_abs > 1e-3, res[0].describe()


def test_install_routes_only_the_group_norm_functions(monkeypatch: pytest.MonkeyPatch) -> None:
    from kda_lab.interpret import interpreter as interp
    from kda_lab.interpret.shims import group_norm_silu as interpret_shims_gn

    seen = []
    monkeypatch.setattr(interp, "ROUTES", {})
    monkeypatch.setattr(interp, "recompiled", lambda m, f: seen.append((m, f)) or "stock")
    monkeypatch.setattr(interpret_shims_gn, "interpretable_group_norm", lambda m, f: "shim")
    assert interpret_shims_gn.install() is True
    assert interpret_shims_gn.install() is False  # idempotent
    assert interp.interpretable(interpret_shims_gn.TRITON_MODULE, "triton_group_norm_silu") == "shim"
    assert interp.interpretable(interpret_shims_gn.APPLY_MODULE, "apply_group_norm_silu") == "shim"
    assert interp.interpretable("sglang.x", "other") == "stock" and seen == [("sglang.x", "other")]


def test_make_inputs_honours_the_channels_last_row() -> None:
    task = load_task(TASKS[0])
    row = next(w for w in task.workloads if w.name == "test_5d_channels_last")
    x = make_inputs(row, "cpu", 0)["x"]
    assert x.stride() == (3840, 1, 1280, 320, 64) and x.is_contiguous(memory_format=torch.channels_last_3d)


# ------------------------------------------------------------------------------------------------ task tables

CAPTURES = {"h200": 96, "b200": 160}
HOME_CAPTURE = f"{TASKS[0]}.jsonl"


@pytest.mark.parametrize("task_name", TASKS)
def test_production_rows_are_every_capture(task_name: str) -> None:
    """Every call of the task's GPU's capture is a production row (none dropped or merged), with model and
    preset provenance. The b200 task takes the home's rows (rows_from: they cite the home's capture, and the
    b200 capture holds each of them too) and adds the calls only its capture holds, which cite it. Where the
    capture files are present (a directory named by KDA_CAPTURES_DIR), the tensors match the lines cited and
    every line of the task's own capture is a row."""
    import json
    import os
    from pathlib import Path

    from kda_lab.task.stamp import CAPTURES_DIR_ENV

    task = load_task(task_name)
    arch = task.arch
    prod = [w for w in task.workloads if w.kind == "production" and not w.derived]
    derived = [w for w in task.workloads if w.kind == "production" and w.derived]
    # Models with no capture (LTX-2 upsampler, FLUX/Z-Image VAE) come as derived rows that say how.
    assert {w.model for w in derived} == {"LTX-2", "FLUX / Z-Image"}
    assert all("latent_upsampler.py" in w.source or "flux3_image_vae.py" in w.source
               or "VAE decoder" in w.source for w in derived)
    capture = f"{arch}_diffusion_group_norm_silu__multi_shape.jsonl"
    cited: dict[str, list[int]] = {}
    for w in prod:
        assert w.source.startswith("captured:"), w.source
        file, _, line = w.source.removeprefix("captured:").rpartition(":")
        cited.setdefault(file, []).append(int(line))
    assert sorted(cited.pop(HOME_CAPTURE)) == list(range(1, CAPTURES["h200"] + 1))  # the home's rows
    own = cited.pop(capture, [])
    assert cited == {} and len(set(own)) == len(own) and all(1 <= n <= CAPTURES[arch] for n in own)
    assert len(prod) == CAPTURES[arch]  # one row per call of this GPU's capture
    assert {(w.model, w.preset) for w in prod} == {("HunyuanVideo", "hunyuanvideo")}
    for w in prod:
        assert (w.args["num_groups"], w.args["eps"]) == (32, 1e-6)
        assert w.args["weight"].shape == (w.args["x"].shape[1],)
        if w.fn == "apply_group_norm_silu":
            assert "hunyuanvae.py" in w.note  # where the <GroupNorm> placeholder's parameters come from
    captures = os.environ.get(CAPTURES_DIR_ENV)
    if captures:
        caps = {}
        for name in {HOME_CAPTURE, capture}:
            path = Path(captures) / name
            assert path.is_file(), f"{CAPTURES_DIR_ENV}={captures} has no {name}"
            caps[name] = [json.loads(line) for line in path.read_text().splitlines()]

        def x_of(cap: dict) -> tuple:
            x = cap["args"][0]
            return tuple(x["shape"]), x["dtype"], None if x["contiguous"] else tuple(x["strides"])

        def x_row(w: Workload) -> tuple:
            return w.args["x"].shape, w.args["x"].dtype, w.args["x"].strides

        for w in prod:
            file, _, line = w.source.removeprefix("captured:").rpartition(":")
            cap = caps[file][int(line) - 1]
            assert cap["kernel"].endswith(w.fn) and cap["model"] == "hunyuanvideo"
            assert x_of(cap) == x_row(w)
        assert len(caps[capture]) == CAPTURES[arch]
        for cap in caps[capture]:  # this GPU's every call is a row of the task, the home's or its own
            assert any(cap["kernel"].endswith(w.fn) and x_of(cap) == x_row(w) for w in prod), cap
