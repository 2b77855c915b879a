"""The ltx2_rms_silu_pad family: the conv inputs of SGLang 0.5.23's LTX-2 VAE decoder under CUDA autocast.

The oracle against hand-computed cases; the baselines against SGLang's own modules and source; the checker
passing the baseline and rejecting realistic wrong implementations (a reflect pad off by one, a bf16 RMSNorm
as SGLang's CPU autocast computes it, the causal pad on the wrong side, the wrong layout); the production rows
against the committed capture; the candidate's Triton kernel in the interpreter (bf16 x included: it reads and
writes bf16 through integer views, so the interpreter's truncating bf16 cast never runs); and, at model level,
a tiny SGLang LTX-2 decoder with the fast path on vs off under an explicit CPU emulation of CUDA autocast's
casts (CPU autocast itself keeps ``x**2`` in bf16, which the first model test shows).
"""

from __future__ import annotations

import ast
import importlib
import inspect
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

from kda_lab.families import FAMILY_FUNCTIONS, MODEL_FAMILIES, contract
from kda_lab.families import ltx2_rms_silu_pad as fam
from kda_lab.measure.correctness import check_row
from kda_lab.task import all_task_dirs, load_task
from kda_lab.task.workloads import parse_workload
from tests.conftest import REPO

FAMILY = "ltx2_rms_silu_pad"
SLUG = "h200_vae_ltx2_rms_silu_pad__multi_shape"
TASK_DIR = REPO / "kernels" / SLUG
LTX = "sglang.multimodal_gen.runtime.models.vaes.ltx_2_vae"
# the decoder's pads: reflect 1 on H and W, replicate 1 frame on each side (decoder_causal is off)
PAD = [1, 1, 1, 1, 1, 1]
CAUSAL = [1, 1, 1, 1, 2, 0]
CL = torch.channels_last_3d
TASKS = [t for t in map(load_task, all_task_dirs()) if t.family == FAMILY]
ROWS = [(t, w) for t in TASKS for w in t.workloads if "tiny" in w.tags]
INTERPRET = os.environ.get("TRITON_INTERPRET") == "1" and not torch.cuda.is_available()
BASELINES = {"ltx2_rms_silu_pad": fam.sglang_ltx2_rms_silu_pad, "ltx2_pad_cast": fam.sglang_ltx2_pad_cast}


def bits(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().view(torch.int16).int()


def ulps(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """|a - b| in bf16 ulps (same-sign values; enough for these comparisons)."""
    return (bits(a) - bits(b)).abs()


def randn(shape: tuple[int, ...], dtype: torch.dtype = torch.bfloat16, seed: int = 0,
          layout: str = "cl") -> torch.Tensor:
    x = (torch.randn(shape, generator=torch.Generator().manual_seed(seed)) * 2).to(dtype)
    return x.contiguous(memory_format=CL) if layout == "cl" else x


# ----------------------------------------------------------------------------------------------- registration

def test_family_is_registered_as_a_model_family_with_a_lossless_fast_path() -> None:
    from kda_kernels.registry import FAST_PATH_FAMILIES

    assert FAMILY in MODEL_FAMILIES and FAMILY_FUNCTIONS[FAMILY] == ("ltx2_rms_silu_pad", "ltx2_pad_cast")
    fp = FAST_PATH_FAMILIES[FAMILY]
    assert fp.name == "ltx2_vae_decoder" and fp.sglang == LTX and fp.tier == "lossless"
    assert fp.kernels == ("ltx2_rms_silu_pad", "ltx2_pad_cast")
    task = load_task(TASK_DIR)
    assert task.functions["ltx2_pad_cast"].exact and not task.functions["ltx2_rms_silu_pad"].exact


# ----------------------------------------------------------------------------------------------- the oracle

def test_oracle_reflect_and_replicate_indices_hand_computed() -> None:
    d = torch.device("cpu")
    assert fam._source_index(4, 2, 2, True, d).tolist() == [2, 1, 0, 1, 2, 3, 2, 1]  # edge not repeated
    assert fam._source_index(2, 1, 1, True, d).tolist() == [1, 0, 1, 0]
    assert fam._source_index(3, 2, 1, False, d).tolist() == [0, 0, 0, 1, 2, 2]


def test_oracle_rms_silu_hand_computed() -> None:
    # one voxel of channels (3, 4): rms = sqrt((9 + 16) / 2 + eps), y = x / rms, silu(y) = y / (1 + e^-y)
    x = torch.tensor([3.0, 4.0]).view(1, 2, 1, 1, 1).expand(1, 2, 1, 2, 2).contiguous()
    (out,) = fam.ltx2_rms_silu_pad_oracle({"x": x, "pad": [0, 0, 0, 0, 1, 0], "eps": 0.0})
    y = torch.tensor([3.0, 4.0], dtype=torch.float64) / (12.5 ** 0.5)
    want = y / (1 + torch.exp(-y))
    assert out.shape == (1, 2, 2, 2, 2) and torch.allclose(out[0, :, 0, 0, 0], want, rtol=0, atol=1e-15)
    assert torch.equal(out[:, :, 0], out[:, :, 1])  # the replicated front frame


def test_pad_cast_oracle_rounds_once_to_bf16() -> None:
    x = torch.tensor([1.0 + 2 ** -8, 1.0 + 3 * 2 ** -8, -(1.0 + 2 ** -9)]).view(1, 3, 1, 1, 1)
    x = x.expand(1, 3, 1, 2, 2)
    (out,) = fam.ltx2_pad_cast_oracle({"x": x.contiguous(), "pad": [1, 0, 0, 1, 0, 0]})
    # ties to even: 1 + 2^-8 -> 1, 1 + 3*2^-8 -> 1 + 2^-6; below half an ulp -> -1
    assert out[0, :, 0, 0, 0].tolist() == [1.0, 1.0 + 2 ** -6, -1.0]


@pytest.mark.parametrize("pad", [[2, 0, 0, 0, 0, 0], [0, 0, 0, 0, -1, 0], [1, 1, 1, 1, 1]])
def test_oracle_refuses_pads_outside_the_contract(pad: list[int]) -> None:
    with pytest.raises(ValueError):
        fam.check_pad(torch.zeros(1, 1, 1, 2, 2), pad)


def test_baseline_matches_the_oracle_within_one_rounding() -> None:
    x = randn((1, 32, 3, 4, 5))
    ref = fam.ltx2_rms_silu_pad_oracle({"x": x, "pad": CAUSAL})[0]
    got = fam.sglang_ltx2_rms_silu_pad(x, CAUSAL)
    assert got.dtype == torch.bfloat16 and got.is_contiguous(memory_format=CL)
    assert ((got.double() - ref).abs() <= 2 ** -8 * ref.abs() + 1e-12).all()


# ------------------------------------------------------------------------------ the baselines are SGLang's

@pytest.fixture(scope="module")
def ltx():
    from kda_lab.e2e import runtime

    dist = ("MASTER_ADDR", "MASTER_PORT", "RANK", "LOCAL_RANK", "WORLD_SIZE")
    before = {k: os.environ.get(k) for k in dist}
    runtime.init_sglang("cpu")
    for k, v in before.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v
    return importlib.import_module(LTX)


def test_baselines_quote_sglangs_code(ltx) -> None:
    """The lines the baselines lift: PerChannelRMSNorm.forward, the channels-last temporal pad and the NDHWC
    reflect branch of LTX2VideoCausalConv3d.forward, the resnet's norm -> nonlinearity -> conv order."""
    norm = textwrap.dedent(inspect.getsource(ltx.PerChannelRMSNorm.forward))
    assert "mean_sq = torch.mean(x**2, dim=self.channel_dim, keepdim=True)" in norm
    assert "rms = torch.sqrt(mean_sq + self.eps)" in norm and "return x / rms" in norm
    assert inspect.signature(ltx.PerChannelRMSNorm.__init__).parameters["eps"].default == fam.EPS
    conv = ast.unparse(ast.parse(textwrap.dedent(inspect.getsource(ltx.LTX2VideoCausalConv3d.forward))))
    assert ("hidden_states = F.pad(hidden_states.permute(0, 2, 3, 4, 1), (0, 0, width_pad, width_pad, "
            "height_pad, height_pad), mode='reflect').permute(0, 4, 1, 2, 3)") in conv
    assert "left = right = (time_kernel_size - 1) // 2" in conv
    assert "left, right = (time_kernel_size - 1, 0)" in conv
    pad = ast.unparse(ast.parse(textwrap.dedent(
        inspect.getsource(ltx.LTX2VideoCausalConv3d._causal_temporal_pad_channels_last))))
    mine = ast.unparse(ast.parse(inspect.getsource(fam._causal_temporal_pad_channels_last)))
    for line in ("out[:, :, left:left + t].copy_(x)",
                 "out[:, :, :left].copy_(x[:, :, :1] if left_pad is None",
                 "x[:, :, -1:] if right_pad is None"):
        assert line in pad
    assert "out[:, :, left:left + t].copy_(x)" in mine
    res = ast.unparse(ast.parse(textwrap.dedent(inspect.getsource(ltx.LTX2VideoResnetBlock3d.forward))))
    steps = ("self.norm1(hidden_states)", "self.nonlinearity(hidden_states)", "self.conv1(",
             "self.norm2(hidden_states)", "self.dropout(hidden_states)", "self.conv2(")
    order = [res.index(s) for s in steps]
    assert order == sorted(order)


class CapturePaddedInput(TorchFunctionMode):
    """Records conv3d's input (SGLang's CPU branch: nn.Conv3d pads reflect itself, then conv3d with
    padding 0)."""

    def __init__(self) -> None:
        super().__init__()
        self.inputs: list[torch.Tensor] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func in (torch.conv3d, F.conv3d):
            self.inputs.append(args[0].clone())
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("causal", [False, True])
def test_baselines_are_sglangs_modules_values(ltx, causal: bool) -> None:
    """SGLang's PerChannelRMSNorm, nn.SiLU and LTX2VideoCausalConv3d (reflect) on fp32 x (what CUDA autocast
    computes them in) give the baseline's values before its one cast, bit for bit."""
    conv = ltx.LTX2VideoCausalConv3d(8, 4, 3, spatial_padding_mode="reflect").double()
    conv.conv.float()
    x = randn((1, 8, 3, 4, 5))
    with torch.no_grad():
        h = torch.nn.SiLU()(ltx.PerChannelRMSNorm()(x.float()))
        cap = CapturePaddedInput()
        with cap:
            conv(h, causal=causal)
    pad = [1, 1, 1, 1, 2, 0] if causal else PAD
    assert torch.equal(cap.inputs[0].to(torch.bfloat16), fam.sglang_ltx2_rms_silu_pad(x, pad))
    with cap:
        conv(x.float(), causal=causal)
    assert torch.equal(cap.inputs[1].to(torch.bfloat16), fam.sglang_ltx2_pad_cast(x.float(), pad))


def test_the_candidates_fallback_chain_is_the_baseline() -> None:
    from kda_lab.task import load_candidate

    chain = importlib.import_module(load_candidate(load_task(TASK_DIR)).__name__ + ".chain").sglang_chain
    for layout in ("cl", "ncdhw"):
        x = randn((2, 16, 3, 4, 5), layout=layout)
        assert torch.equal(chain(x, CAUSAL, True, fam.EPS), fam.sglang_ltx2_rms_silu_pad(x, CAUSAL))
        assert torch.equal(chain(x.float(), PAD, False, fam.EPS), fam.sglang_ltx2_pad_cast(x.float(), PAD))


# ----------------------------------------------------------------------------------------------- the checker

def off_by_one_reflect(x: torch.Tensor, pad: list[int]) -> torch.Tensor:
    """A 'symmetric' pad (the edge repeated) instead of reflection: torch has no such mode, so replicate."""
    y = F.silu(x / torch.sqrt(torch.mean(x.float() ** 2, dim=1, keepdim=True) + fam.EPS))
    wl, wr, ht, hb, tf, tb = pad
    y = F.pad(y, (wl, wr, ht, hb, tf, tb), mode="replicate")
    return y.to(torch.bfloat16).contiguous(memory_format=CL)


def bf16_rms_norm(x: torch.Tensor, pad: list[int]) -> torch.Tensor:
    """SGLang's chain with the norm in bf16 (what CPU autocast or a bf16 module without autocast computes)."""
    y = F.silu(x / torch.sqrt(torch.mean(x ** 2, dim=1, keepdim=True) + fam.EPS))
    return fam._sglang_pads_and_cast(y, pad)


def causal_pad_behind(x: torch.Tensor, pad: list[int]) -> torch.Tensor:
    wl, wr, ht, hb, tf, tb = pad
    return fam.sglang_ltx2_rms_silu_pad(x, [wl, wr, ht, hb, tb, tf])


def ncdhw_output(x: torch.Tensor, pad: list[int]) -> torch.Tensor:
    return fam.sglang_ltx2_rms_silu_pad(x, pad).contiguous()


def row(fn: str, shape: list[int], pad: list[int], dtype: str = "bfloat16", cl: bool = True) -> Any:
    b, c, t, h, w = shape
    spec: dict[str, Any] = {"shape": shape, "dtype": dtype}
    if cl:
        spec["strides"] = [c * t * h * w, 1, h * w * c, w * c, c]
    out = list(fam.padded_shape(tuple(shape), pad))
    return parse_workload({"name": "r", "fn": fn, "kind": "test", "args": {
        "x": spec, "pad": pad, "out_like": {"shape": out, "dtype": "bfloat16"}}})


def run_checker(fn: str, impl: Any, shape: list[int], pad: list[int]) -> Any:
    base_fn = BASELINES[fn]
    results = check_row(load_task(TASK_DIR), row(fn, shape, pad), contract(FAMILY, fn),
                        {"baseline": base_fn, "candidate": impl}, seed=3, device="cpu")
    base, cand = (next(r for r in results if r.impl == k) for k in ("baseline", "candidate"))
    assert base.ok, base.describe()
    return cand


@pytest.mark.parametrize("fn", ["ltx2_rms_silu_pad", "ltx2_pad_cast"])
def test_checker_passes_sglangs_chain(fn: str) -> None:
    base_fn = BASELINES[fn]
    assert run_checker(fn, base_fn, [1, 64, 3, 5, 7], CAUSAL).ok


@pytest.mark.parametrize("wrong", [off_by_one_reflect, bf16_rms_norm, causal_pad_behind])
def test_checker_rejects_realistic_wrong_implementations(wrong: Any) -> None:
    res = run_checker("ltx2_rms_silu_pad", wrong, [1, 64, 3, 5, 7], CAUSAL)
    assert not res.ok and "beyond tolerance" in res.describe(), res.describe()


def test_checker_rejects_an_ncdhw_output() -> None:
    res = run_checker("ltx2_rms_silu_pad", ncdhw_output, [1, 8, 3, 5, 7], CAUSAL)
    assert not res.ok and "LayoutError" in res.error and "channels_last_3d" in res.error, res.describe()


def test_checker_rejects_one_ulp_off_for_the_exact_pad_cast() -> None:
    def one_ulp(x: torch.Tensor, pad: list[int]) -> torch.Tensor:
        out = fam.sglang_ltx2_pad_cast(x, pad)
        out.view(torch.int16).view(-1)[:1].add_(1)
        return out

    res = run_checker("ltx2_pad_cast", one_ulp, [1, 8, 3, 5, 7], CAUSAL)
    assert not res.ok


# ---------------------------------------------------------------------------------------------- captured rows

def test_production_rows_are_the_capture() -> None:
    lines = [json.loads(s) for s in (TASK_DIR / "dev/captured_conv_inputs.jsonl").read_text().splitlines()]
    prod = [w for w in load_task(TASK_DIR).workloads if w.kind == "production"]
    assert len(prod) == len(lines) == 44
    for w in prod:
        path, _, n = w.source.removeprefix("captured:").rpartition(":")
        cap = lines[int(n) - 1]
        assert path == "dev/captured_conv_inputs.jsonl" and cap["kernel"] == w.fn
        x = w.args["x"]
        assert list(x.shape) == cap["args"][0]["shape"] and x.dtype == cap["args"][0]["dtype"]
        assert (list(x.strides) if x.strides else None) == cap["args"][0].get("strides")
        assert w.args["pad"] == cap["args"][1] == PAD  # decoder_causal False: (1, 1) frames, reflect 1
        assert f"{cap['calls']} calls per tiled decode" in w.note
    assert sum(c["calls"] for c in lines) == 180
    assert {c["args"][0]["dtype"] for c in lines if c["modules"] == ["conv_in"]} == {"float32"}


def test_capture_script_reproduces_the_committed_capture_and_rows(tmp_path: Path) -> None:
    out, rows = tmp_path / "cap.jsonl", tmp_path / "rows.toml"
    dist = ("RANK", "WORLD_SIZE", "MASTER_PORT", "MASTER_ADDR", "LOCAL_RANK")
    env = {k: v for k, v in os.environ.items() if k not in dist}
    script = TASK_DIR / "dev/capture_conv_inputs.py"
    cmd = [sys.executable, str(script), "--out", str(out), "--toml", str(rows)]
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert out.read_text() == (TASK_DIR / "dev/captured_conv_inputs.jsonl").read_text()
    assert rows.read_text().strip() in (TASK_DIR / "task.toml").read_text()  # the production rows, verbatim
    assert "180 conv inputs per decode, 28.49 GB moved" in proc.stdout


# ---------------------------------------------------------------------------------------------- the candidate

@pytest.fixture(scope="module")
def exports() -> dict[str, Any]:
    from kda_lab.task import load_candidate

    return load_candidate(load_task(TASK_DIR)).EXPORTS


needs_interpreter = pytest.mark.skipif(
    not INTERPRET, reason="CPU test: the Triton interpreter (TRITON_INTERPRET=1, set by conftest.py "
                          "without a GPU); kda check runs the candidate on the GPU")


@needs_interpreter
@pytest.mark.parametrize(("task", "row"), ROWS, ids=[f"{t.slug}-{w.name}" for t, w in ROWS])
def test_the_candidate_passes_the_tiny_rows_in_the_interpreter(exports, task, row, monkeypatch) -> None:
    """What `kda check --interpret` runs: the candidate's own kernel (SGLang's chain must not run) against the
    oracle, and bit for bit against SGLang for the exact ltx2_pad_cast."""
    register = importlib.import_module(exports["ltx2_pad_cast"].__module__)

    def no_chain(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the candidate fell back to SGLang's chain")

    monkeypatch.setattr(register, "sglang_chain", no_chain)
    base_fn = BASELINES[row.fn]
    results = check_row(task, row.with_dtype("float32"), contract(FAMILY, row.fn),
                        {"baseline": base_fn, "candidate": exports[row.fn]}, seed=1, device="cpu")
    assert all(r.ok for r in results), "\n".join(r.describe() for r in results)


def _smallest_production_rows(per_fn: int = 2) -> list[Any]:
    rows = [w for w in load_task(TASK_DIR).workloads if w.kind == "production"]
    out = []
    for fn in ("ltx2_rms_silu_pad", "ltx2_pad_cast"):
        mine = sorted((w for w in rows if w.fn == fn), key=lambda w: w.args["x"].numel)
        bf16 = [w for w in mine if w.args["x"].dtype == "bfloat16"][:per_fn]
        out += bf16 + [w for w in mine if w.args["x"].dtype == "float32"][:1]  # conv_in's fp32 latent tile
        out += [w for w in mine if w.name.endswith("_ncdhw")][:1]  # after an upsampler: strided channels
    return out


SMALL_PRODUCTION = _smallest_production_rows()


@needs_interpreter
@pytest.mark.parametrize("row", SMALL_PRODUCTION, ids=[w.name for w in SMALL_PRODUCTION])
def test_the_candidate_on_the_smallest_production_rows_as_captured(exports, row) -> None:
    """Production rows in their captured dtype (bf16, the fp32 latent tiles) and strides, in the interpreter:
    the kernel never does bf16 arithmetic, so bf16 rows run on CPU too (the check passes them by the oracle's
    tolerance, and ltx2_pad_cast bit for bit with SGLang)."""
    results = check_row(load_task(TASK_DIR), row, contract(FAMILY, row.fn),
                        {"baseline": BASELINES[row.fn], "candidate": exports[row.fn]}, seed=0, device="cpu")
    assert all(r.ok for r in results), "\n".join(r.describe() for r in results)


@needs_interpreter
@pytest.mark.parametrize("layout", ["cl", "ncdhw"])
@pytest.mark.parametrize("shape,pad", [((1, 64, 3, 5, 7), CAUSAL), ((2, 24, 2, 2, 3), PAD),
                                       ((1, 128, 3, 4, 9), [2, 0, 0, 3, 0, 2])])
def test_the_candidate_on_bf16_x_in_the_interpreter(exports, layout, shape, pad) -> None:
    """bf16 x, the production dtype: ltx2_pad_cast bit for bit; ltx2_rms_silu_pad at most one bf16 ulp from
    SGLang's chain (the channel-sum order) and within the task's tolerance of the oracle."""
    x = randn(shape, layout=layout, seed=sum(shape))
    got = exports["ltx2_pad_cast"](x, pad)
    assert got.is_contiguous(memory_format=CL) and torch.equal(got, fam.sglang_ltx2_pad_cast(x, pad))
    got = exports["ltx2_rms_silu_pad"](x, pad)
    want = fam.sglang_ltx2_rms_silu_pad(x, pad)
    ref = fam.ltx2_rms_silu_pad_oracle({"x": x, "pad": pad})[0]
    assert got.is_contiguous(memory_format=CL) and got.dtype == torch.bfloat16
    assert int(ulps(got, want).max()) <= 1
    assert ((got.double() - ref).abs() <= 4e-3 * ref.abs() + 1e-6).all()


def _exact_sum_case(c: int, layout: str, device: str) -> tuple[torch.Tensor, list[int]]:
    """bf16 x of small integers: every square is an integer <= 64 and a voxel's sum <= 64 C, exact in fp32 in
    any order, so the kernel's channel-sum order cannot matter and every other step must be SGLang's bit for
    bit. The NCDHW case takes the causal pad (2, 0)."""
    g = torch.Generator().manual_seed(c)
    x = torch.randint(-8, 9, (1, c, 3, 5, 6), generator=g).to(torch.bfloat16)
    x = x.contiguous(memory_format=CL) if layout == "cl" else x
    return x.to(device), CAUSAL if layout == "ncdhw" else PAD


@needs_interpreter
@pytest.mark.parametrize("c", [24, 64, 1024])
@pytest.mark.parametrize("layout", ["cl", "ncdhw"])
def test_the_candidate_is_sglangs_chain_bit_for_bit_when_the_channel_sum_is_exact(exports, c, layout) -> None:
    x, pad = _exact_sum_case(c, layout, "cpu")
    assert torch.equal(exports["ltx2_rms_silu_pad"](x, pad), fam.sglang_ltx2_rms_silu_pad(x, pad))


@pytest.mark.gpu
@pytest.mark.parametrize("c", [24, 128, 1024])
@pytest.mark.parametrize("layout", ["cl", "ncdhw"])
def test_on_the_gpu_the_candidate_is_sglangs_chain_bit_for_bit_when_the_channel_sum_is_exact(exports, c,
                                                                                            layout) -> None:
    """On CUDA: div_rn, sqrt_rn, libdevice expf against torch's SiLU, no FMA contraction, the rounding and the
    pads all bit for bit with SGLang's chain (which runs torch's CUDA kernels)."""
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    x, pad = _exact_sum_case(c, layout, "cuda")
    assert torch.equal(exports["ltx2_rms_silu_pad"](x, pad), fam.sglang_ltx2_rms_silu_pad(x, pad))
    assert torch.equal(exports["ltx2_pad_cast"](x.float(), pad), fam.sglang_ltx2_pad_cast(x.float(), pad))


@pytest.mark.gpu
def test_on_the_gpu_the_candidate_is_within_one_ulp_of_sglangs_chain_on_production_like_x(exports) -> None:
    """Random bf16 x at the mid block's width, channels-last as the conv returns it: at most one bf16 ulp from
    SGLang's chain (the channel-sum order), printed as the share of elements that differ."""
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    x = randn((1, 1024, 16, 16, 16)).cuda()
    got, want = exports["ltx2_rms_silu_pad"](x, PAD), fam.sglang_ltx2_rms_silu_pad(x, PAD)
    d = ulps(got, want)
    print(f"ltx2_rms_silu_pad vs SGLang's chain on CUDA: {int((d > 0).sum())} of {d.numel()} elements "
          f"differ, max {int(d.max())} ulp")
    assert int(d.max()) <= 1


def _special_case(kind: str) -> torch.Tensor:
    """bf16 x [1, 24, 2, 3, 4] of small integers (exact channel sums) with one voxel made special: the
    candidate divides x by rms through Markstein's reciprocal step unless a tile holds |x| below 2^-100 or a
    non-finite rms; each launch here is one tile, so each case takes the path its name says."""
    g = torch.Generator().manual_seed(7)
    x = torch.randint(-8, 9, (1, 24, 2, 3, 4), generator=g).to(torch.float32)
    if kind == "negative_zero_voxel":  # x/rms keeps x's sign: -0 in, -0 out (0x8000)
        x[0, :, 1, 2, 3] = -0.0
    elif kind == "tiny_tile":  # |x| 1e-36: x*x underflows, rms = sqrt(eps); the remainder would underflow
        x = x * 1e-36
    elif kind == "inf_voxel":  # rms = inf: finite channels give 0, the inf channel NaN
        x[0, 3, 0, 1, 1] = float("inf")
    elif kind == "overflowing_squares":  # finite x whose squares overflow fp32: rms = inf
        x[0, :, 1, 0, 0] = 3.0e30
    return x.to(torch.bfloat16).contiguous(memory_format=CL)


@needs_interpreter
@pytest.mark.parametrize("kind", ["plain", "negative_zero_voxel", "tiny_tile", "inf_voxel",
                                  "overflowing_squares"])
def test_both_division_paths_are_sglangs_chain_bit_for_bit(exports, kind: str) -> None:
    x = _special_case(kind)
    got, want = exports["ltx2_rms_silu_pad"](x, PAD), fam.sglang_ltx2_rms_silu_pad(x, PAD)
    nan = want.isnan()  # inf / inf: NaN on both sides, the payload each converter's own (the kernel: 0x7FC0)
    assert torch.equal(got.isnan(), nan), kind
    assert torch.equal(bits(got)[~nan], bits(want)[~nan]), kind
    assert nan.any() == (kind == "inf_voxel")
    if kind == "negative_zero_voxel":
        assert int(bits(got)[0, 0, 1 + PAD[4], 2 + PAD[2], 3 + PAD[0]]) & 0xFFFF == 0x8000


@needs_interpreter
def test_the_candidates_bf16_rounding_is_round_to_nearest_even(exports) -> None:
    """fp32 values at and around bf16 ties, and specials: the kernel's integer rounding equals torch's
    cast."""
    base = torch.tensor([1.0, -1.5, 3.0, 2.0 ** -126, 6.0e4, 0.0, -0.0])
    steps = torch.tensor([0, 1, 0x7FFF, 0x8000, 0x8001, 0x17FFF, 0x18000], dtype=torch.int32)
    vals = (base.view(torch.int32)[:, None] + steps[None, :]).view(torch.float32).flatten()
    vals = torch.cat([vals, torch.tensor([float("inf"), -float("inf"), 3.4e38])])
    x = vals.view(1, -1, 1, 1, 1).expand(1, vals.numel(), 1, 2, 2).contiguous()
    got = exports["ltx2_pad_cast"](x, [0, 0, 0, 0, 0, 0])
    assert torch.equal(bits(got), bits(x.to(torch.bfloat16).contiguous(memory_format=CL)))


def test_the_candidate_falls_back_to_sglangs_chain_outside_its_contract(exports) -> None:
    x = randn((1, 4, 2, 3, 4), dtype=torch.float32)
    xg = x.clone().requires_grad_(True)
    y = exports["ltx2_rms_silu_pad"](xg, PAD)  # autograd recording: SGLang's differentiable chain
    y.float().sum().backward()
    assert xg.grad is not None and torch.equal(y.detach(), fam.sglang_ltx2_rms_silu_pad(x, PAD))
    xd = x.double()  # a dtype outside the kernel's contract
    assert torch.equal(exports["ltx2_pad_cast"](xd, PAD), fam.sglang_ltx2_pad_cast(xd, PAD))
    with pytest.raises(RuntimeError):  # a reflect pad as large as W: SGLang's F.pad refuses it, so do we
        exports["ltx2_pad_cast"](x, [4, 0, 0, 0, 0, 0])


# ------------------------------------------------------------------------------------------------ model level

class CudaAutocastOnCpu(TorchFunctionMode):
    """CUDA autocast's casts for the ops SGLang's LTX-2 decoder calls, on the CPU: conv3d runs in bf16 (its
    input channels_last_3d, as cuDNN's NDHWC conv reads it on CUDA in both SGLang's reflect branch and the
    fast path), ``pow`` and ``layer_norm`` in fp32 (autocast's fp32 list); every other op as called.
    Records each conv input."""

    def __init__(self) -> None:
        super().__init__()
        self.conv_inputs: list[torch.Tensor] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = dict(kwargs or {})
        if func in (torch.conv3d, F.conv3d):
            x = args[0].to(torch.bfloat16).contiguous(memory_format=CL)
            self.conv_inputs.append(x)
            bias = args[2] if len(args) > 2 else kwargs.pop("bias", None)
            bias = None if bias is None else bias.to(torch.bfloat16)
            args = (x, args[1].to(torch.bfloat16), bias, *args[3:])
        elif func in (torch.Tensor.__pow__, torch.Tensor.pow, torch.pow) and args[0].is_floating_point():
            args = (args[0].float(), *args[1:])
        elif func in (F.layer_norm, torch.layer_norm):
            args = tuple(a.float() if isinstance(a, torch.Tensor) else a for a in args)
            kwargs = {k: v.float() if isinstance(v, torch.Tensor) else v for k, v in kwargs.items()}
        return func(*args, **kwargs)


def test_cpu_autocast_is_not_cudas_chain() -> None:
    """Why the model tests emulate CUDA autocast: CPU autocast keeps x**2 and LayerNorm in bf16."""
    x = randn((1, 4, 2, 2, 2))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert (x ** 2).dtype == torch.bfloat16
        assert F.layer_norm(x.movedim(1, -1), (4,)).dtype == torch.bfloat16
    with CudaAutocastOnCpu():
        assert (x ** 2).dtype == torch.float32


@pytest.fixture(scope="module")
def candidate_modules(ltx) -> dict[str, Any]:
    from kda_lab.task import load_candidate

    mod = load_candidate(load_task(TASK_DIR))
    return {"register": mod, "fast_path": importlib.import_module(f"{mod.__name__}.fast_path")}


@pytest.fixture()
def fast(candidate_modules):
    fp = candidate_modules["register"].FAST_PATHS["ltx2_vae_decoder"]
    yield fp
    fp.uninstall()


def _tiny_decoder():
    from sglang.multimodal_gen.runtime.loader.component_loaders import vae_loader

    from kda_lab.e2e.vae_rows import VAE_BY_NAME

    built = VAE_BY_NAME["ltx2_vae_decode"].build("cpu", True, None)  # SGLang's class, tiny widths, bf16
    # the single-GPU CUDA loader's channels_last_3d weights (SGLang's policy converts none on a CPU host)
    assert vae_loader._convert_conv3d_weights_to_channels_last_3d(built.module.decoder) > 0
    return built.module


def _decode(vae: Any, z: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
    mode = CudaAutocastOnCpu()
    with torch.no_grad(), mode:
        out = vae.decoder(z)
    return out, mode.conv_inputs


@needs_interpreter
def test_fast_path_on_vs_off_under_cuda_autocast(ltx, candidate_modules, fast, monkeypatch) -> None:
    """A tiny SGLang LTX-2 decoder (bf16, channels_last_3d weights, latent [1,128,3,3,4]) under the emulated
    CUDA autocast, fast path off vs on: conv_in's input (the fp32 latent, pads and cast) is bit-identical;
    every conv input agrees to one bf16 ulp until the first one-ulp difference of a channel sum propagates
    through a conv (not bit-identical: the RMSNorm's sum order); the decoded video passes the model-level
    criterion of `kda e2e`."""
    from kda_lab.e2e.measure import model_agreement

    vae = _tiny_decoder()
    z = torch.randn(1, 128, 3, 3, 4, generator=torch.Generator().manual_seed(5))
    off, conv_off = _decode(vae, z)
    originals = {n: getattr(ltx, n).__dict__["forward"] for n in
                 ("LTX2VideoDecoder3d", "LTX2VideoResnetBlock3d", "LTX2VideoCausalConv3d")}
    patched = fast.install(lambda device: True)
    assert sorted(patched) == sorted(f"{LTX}.{n}.forward" for n in originals)
    monkeypatch.setattr(candidate_modules["fast_path"], "_autocast_bf16", lambda x: True)
    on, conv_on = _decode(vae, z)
    fast.uninstall()
    assert all(getattr(ltx, n).__dict__["forward"] is f for n, f in originals.items())
    again, _ = _decode(vae, z)
    assert torch.equal(again, off)  # SGLang's own forward again, bit for bit
    assert candidate_modules["fast_path"].FALLBACKS == {}  # every module of the decoder took the fast path
    assert len(conv_on) == len(conv_off)
    same_input = True
    for a, b in zip(conv_off, conv_on, strict=True):
        assert a.shape == b.shape and a.dtype == b.dtype == torch.bfloat16
        if same_input:
            assert int(ulps(a, b).max()) <= 1  # until a difference propagates through a conv
            same_input = torch.equal(a, b)
    pad_convs = [i for i, a in enumerate(conv_off) if a.shape[1] == 128]  # conv_in: the 128-channel latent
    assert pad_convs and all(torch.equal(conv_off[i], conv_on[i]) for i in pad_convs)
    ok, text = model_agreement(off, on, _fp32_decode(vae, z))
    assert ok, text



def _fp32_decode(vae: Any, z: torch.Tensor) -> torch.Tensor:
    """The same decoder in fp32 with no autocast (the yardstick of kda e2e's model-level criterion)."""
    import copy

    v = copy.deepcopy(vae).to(torch.float32)
    with torch.no_grad():
        return v.decoder(z)


class CaptureConvInputs(TorchFunctionMode):
    """Each conv3d input as the conv computes on it under CUDA autocast: cast to bf16 (autocast's cast sits
    below the torch-function layer, so SGLang's fp32 inputs arrive here uncast)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv_inputs: list[torch.Tensor] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func in (torch.conv3d, F.conv3d):
            self.conv_inputs.append(args[0].to(torch.bfloat16))
        return func(*args, **(kwargs or {}))


@pytest.mark.gpu
def test_on_the_gpu_fast_path_on_vs_off_under_cuda_autocast(ltx, candidate_modules, fast) -> None:
    """The tiny decoder on CUDA under SGLang's real autocast (no emulation): conv_in's input bit-identical,
    every conv input within one bf16 ulp until a difference propagates, the decode within the model-level
    criterion, and no fallback."""
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    from kda_lab.e2e.measure import model_agreement

    vae = _tiny_decoder().cuda()
    z = torch.randn(1, 128, 3, 3, 4, generator=torch.Generator().manual_seed(5)).cuda()

    def decode() -> tuple[torch.Tensor, list[torch.Tensor]]:
        mode = CaptureConvInputs()
        with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16), mode:
            out = vae.decoder(z)
        return out, mode.conv_inputs

    off, conv_off = decode()
    fast.install(lambda device: True)
    on, conv_on = decode()
    fast.uninstall()
    assert candidate_modules["fast_path"].FALLBACKS == {}
    assert torch.equal(conv_off[0], conv_on[0])  # conv_in: the fp32 latent's pads and cast
    same_input = True
    for a, b in zip(conv_off, conv_on, strict=True):
        if same_input:
            assert int(ulps(a, b).max()) <= 1
            same_input = torch.equal(a, b)
    ok, text = model_agreement(off, on, _fp32_decode(vae, z))
    assert ok, text


@needs_interpreter
def test_fast_path_falls_back_to_sglang_outside_its_contract(ltx, candidate_modules, fast) -> None:
    """Without CUDA autocast to bf16 (here: the CPU, SGLang's fp32 decode or its bf16 module without autocast)
    the decoder is SGLang's own, bit for bit, and ``fallbacks()`` says why."""
    vae = _tiny_decoder()
    z = torch.randn(1, 128, 2, 2, 2, generator=torch.Generator().manual_seed(6))
    with torch.no_grad():
        off = vae.decoder(z.to(torch.bfloat16))
        fast.install(lambda device: True)
        on = vae.decoder(z.to(torch.bfloat16))
    assert torch.equal(on, off)
    assert fast.fallbacks() == {"no CUDA autocast to bf16": 1}
    fast.uninstall()


@needs_interpreter
def test_fast_path_refuses_spatial_parallel_convs(ltx, candidate_modules, fast, monkeypatch) -> None:
    vae = _tiny_decoder()
    ltx._enable_ltx_decoder_spatial_parallel(vae.decoder)  # SpatialParallelConv3d in every causal conv
    z = torch.randn(1, 128, 2, 2, 2, generator=torch.Generator().manual_seed(7))
    from sglang.multimodal_gen.runtime.layers.parallel_conv import disable_spatial_parallel_decode

    with disable_spatial_parallel_decode():
        off, _ = _decode(vae, z)
        fast.install(lambda device: True)
        monkeypatch.setattr(candidate_modules["fast_path"], "_autocast_bf16", lambda x: True)
        on, _ = _decode(vae, z)
    assert torch.equal(on, off)
    assert fast.fallbacks().get("spatial-parallel or custom conv", 0) > 0


def test_the_fast_path_serves_no_cpu_tensor_outside_the_interpreter(candidate_modules, monkeypatch) -> None:
    fp_mod = candidate_modules["fast_path"]
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    assert not fp_mod._device_ok(torch.zeros(1), lambda d: True)
    assert not fp_mod._autocast_bf16(torch.zeros(1))  # no CUDA tensor, no CUDA autocast


def test_status_reports_the_fast_paths_contract_and_fallbacks(candidate_modules, fast) -> None:
    from kda_kernels import fast_paths

    fast.install(lambda device: False)
    fast_paths._STATE[fast.name] = ("h200", fast, None)
    try:
        st = fast_paths.status()[fast.name]
        assert st["installed"] and st["tier"] == "lossless" and "CUDA autocast" in st["contract"]
        assert st["fallbacks"] == {}
        candidate_modules["fast_path"].FALLBACKS["no CUDA autocast to bf16"] += 1
        assert fast_paths.status()[fast.name]["fallbacks"] == {"no CUDA autocast to bf16": 1}
    finally:
        fast_paths._STATE.pop(fast.name, None)


def test_task_ledgers_hold_the_interpreter_verdict() -> None:
    events = [json.loads(s) for s in (TASK_DIR / "solutions.jsonl").read_text().splitlines() if s.strip()]
    assert any(e.get("event") == "interpret" for e in events), "run kda check --interpret (recorded)"


def test_box_commands_are_written_down() -> None:
    text = (TASK_DIR / "docs/box_commands.md").read_text()
    for cmd in (f"check {SLUG}", f"bench {SLUG} --aa", f"bench {SLUG}\"",
                "e2e --request ltx2 --stage decode"):
        assert cmd in text, cmd

