"""The replicate_pad3d family (kda_lab/families/replicate_pad3d.py) and its task h200_vae_hunyuan_causal_conv.

- the oracle on hand-computed cases, and equal to F.pad bit for bit;
- the baselines are SGLang's own call (read from hunyuanvae.py's source);
- the byte model on a hand-computed row, and as the harness computes it from task.toml;
- the real checker (kda_lab.measure.correctness.check_row) rejects deliberately wrong pads: a zero pad, an
  off-by-one clamp, a wrong layout for the channels-last variant, an unwritten border;
- the task's production rows are the capture's lines, and dev/capture_pads.py reproduces the committed
  capture;
- the candidate's own Triton code is what runs in the interpreter (F.pad made to raise);
- GPU (marker gpu): the candidate on the one captured shape too large for the harness's fp64 check.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F

from kda_lab.families import FAMILY_FUNCTIONS, contract
from kda_lab.families import replicate_pad3d as fam
from kda_lab.measure.correctness import check_row
from kda_lab.task import load_task
from kda_lab.task.workloads import parse_workload
from tests.conftest import REPO

SLUG = "h200_vae_hunyuan_causal_conv__multi_shape"
TASK_DIR = REPO / "kernels" / SLUG
CAUSAL = [1, 1, 1, 1, 2, 0]


def test_family_is_registered_with_both_functions() -> None:
    assert FAMILY_FUNCTIONS["replicate_pad3d"] == ("replicate_pad3d", "replicate_pad3d_channels_last")
    functions = set(FAMILY_FUNCTIONS["replicate_pad3d"])
    assert set(fam.FUNCTIONS) == set(fam.BYTE_MODELS) == set(fam.BASELINES) == functions


# ------------------------------------------------------------------------------------------------ oracle

def test_oracle_hand_computed_1d_rows() -> None:
    # x[0,0,0,0,:] = [1, 2, 3], pad w (2, 1): [1, 1, 1, 2, 3, 3]
    x = torch.tensor([1.0, 2.0, 3.0]).view(1, 1, 1, 1, 3)
    (y,) = fam.oracle({"x": x, "pad": [2, 1, 0, 0, 0, 0]})
    assert y.dtype == torch.float64
    assert y.flatten().tolist() == [1, 1, 1, 2, 3, 3]


def test_oracle_hand_computed_causal_volume() -> None:
    # x [1,1,2,2,2] = 0..7 (t, h, w); causal pad (1,1,1,1,2,0): T' = 4 (planes t0, t0, t0, t1), H' = W' = 4
    x = torch.arange(8, dtype=torch.float32).view(1, 1, 2, 2, 2)
    (y,) = fam.oracle({"x": x, "pad": CAUSAL})
    assert tuple(y.shape) == (1, 1, 4, 4, 4)
    plane0 = [[0, 0, 1, 1], [0, 0, 1, 1], [2, 2, 3, 3], [2, 2, 3, 3]]
    plane1 = [[4, 4, 5, 5], [4, 4, 5, 5], [6, 6, 7, 7], [6, 6, 7, 7]]
    assert y[0, 0].tolist() == [plane0, plane0, plane0, plane1]


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
@pytest.mark.parametrize("pad", [CAUSAL, [0, 2, 3, 0, 1, 1], [3, 3, 2, 2, 4, 1], [0, 0, 0, 0, 0, 0]])
def test_oracle_is_f_pad_bit_for_bit(dtype: torch.dtype, pad: list[int]) -> None:
    x = torch.randn(2, 3, 2, 3, 4).to(dtype)
    (y,) = fam.oracle({"x": x, "pad": pad})
    assert torch.equal(y.to(dtype), F.pad(x, pad, mode="replicate"))
    assert torch.equal(y, y.to(dtype).double())  # the fp64 values are the input's values exactly


@pytest.mark.parametrize("pad", [[1, 1, 1, 1], [1, 1, 1, 1, 2, -1], (1.0, 1, 1, 1, 2, 0)])
def test_oracle_refuses_pads_outside_the_contract(pad: Any) -> None:
    with pytest.raises(ValueError, match="pad must be"):
        fam.oracle({"x": torch.zeros(1, 1, 1, 1, 1), "pad": pad})


# ------------------------------------------------------------------------------------------ baseline = SGLang

def test_baselines_are_sglangs_call() -> None:
    """hunyuanvae.py pads with F.pad(hidden_states, padding, mode=self.pad_mode), pad_mode 'replicate' by
    default, padding (k//2, k//2, k//2, k//2, k-1, 0): if SGLang changes any of it, the baselines no longer
    stand for it."""
    spec = importlib.util.find_spec("sglang.multimodal_gen.runtime.models.vaes.hunyuanvae")
    assert spec and spec.origin
    tree = ast.parse(Path(spec.origin).read_text())
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "HunyuanVideoCausalConv3d")
    methods = {n.name: n for n in cls.body if isinstance(n, ast.FunctionDef)}
    calls = [ast.unparse(n) for n in ast.walk(methods["forward"]) if isinstance(n, ast.Call)]
    assert "F.pad(hidden_states, padding, mode=self.pad_mode)" in calls
    init = methods["__init__"]
    names = [a.arg for a in init.args.args][-len(init.args.defaults):]
    defaults = dict(zip(names, init.args.defaults, strict=True))
    assert ast.literal_eval(defaults["pad_mode"]) == "replicate"
    src = ast.unparse(init)
    assert ("self.time_causal_padding = (kernel_size[0] // 2, kernel_size[0] // 2, kernel_size[1] // 2, "
            "kernel_size[1] // 2, kernel_size[2] - 1, 0)") in src
    x = torch.randn(1, 2, 3, 4, 5)
    assert torch.equal(fam.hunyuan_causal_pad(x, CAUSAL), F.pad(x, CAUSAL, mode="replicate"))
    cl = fam.hunyuan_causal_pad_channels_last(x, CAUSAL)
    assert cl.is_contiguous(memory_format=torch.channels_last_3d)
    assert torch.equal(cl, F.pad(x, CAUSAL, mode="replicate"))


# ------------------------------------------------------------------------------------------------ byte model

def test_byte_model_hand_computed() -> None:
    # x [1,128,17,256,256] fp16: 142,606,336 elements read; padded [1,128,19,258,258] = 2432 x 66564 =
    # 161,883,648 written
    assert fam.model_bytes((1, 128, 17, 256, 256), CAUSAL, 2) == 2 * (142_606_336 + 161_883_648)
    assert fam.model_bytes((1, 128, 17, 256, 256), CAUSAL, 2) == 608_979_968
    assert fam.out_bytes((1, 128, 17, 256, 256), CAUSAL, 2) == 323_767_296


def test_task_byte_model_is_the_familys_on_every_row() -> None:
    task = load_task(TASK_DIR)
    for w in task.workloads:
        x = w.args["x"]
        itemsize = torch.empty((), dtype=getattr(torch, x.dtype)).element_size()
        want = fam.model_bytes(x.shape, w.args["pad"], itemsize)
        assert task.functions[w.fn].byte_model.bytes(w) == want, w.name


def test_prepare_checks_and_drops_out_like() -> None:
    x = torch.randn(1, 2, 3, 4, 5)
    good = fam.prepare({"x": x, "pad": CAUSAL, "out_like": torch.empty(1, 2, 5, 6, 7)})
    assert set(good) == {"x", "pad"}
    with pytest.raises(ValueError, match="not the padded output"):
        fam.prepare({"x": x, "pad": CAUSAL, "out_like": torch.empty(1, 2, 5, 6, 8)})
    with pytest.raises(ValueError, match="not the padded output"):
        fam.prepare({"x": x, "pad": CAUSAL, "out_like": torch.empty(1, 2, 5, 6, 7, dtype=torch.float16)})


# ------------------------------------------------------------------------------------------- wrong candidates

def zero_pad(x: torch.Tensor, pad: list[int]) -> torch.Tensor:
    return F.pad(x, pad, mode="constant", value=0.0)


def off_by_one(x: torch.Tensor, pad: list[int]) -> torch.Tensor:
    """Clamps the front time pad one plane late: t' = 1 reads plane 1 instead of plane 0."""
    out = F.pad(x, pad, mode="replicate")
    if x.shape[2] > 1 and pad[4] >= 2:
        out[:, :, pad[4] - 1] = F.pad(x[:, :, 1:2], [*pad[:4], 0, 0], mode="replicate")[:, :, 0]
    return out


def border_unwritten(x: torch.Tensor, pad: list[int]) -> torch.Tensor:
    """Writes the interior into a fresh (poisoned) tensor and leaves the border as it was."""
    b, c, t, h, w = x.shape
    wl, wr, hl, hr, tl, tr = pad
    out = torch.empty(b, c, t + tl + tr, h + hl + hr, w + wl + wr, dtype=x.dtype)
    out[:, :, tl:tl + t, hl:hl + h, wl:wl + w] = x
    return out


def contiguous_not_channels_last(x: torch.Tensor, pad: list[int]) -> torch.Tensor:
    return F.pad(x, pad, mode="replicate")  # right values, wrong layout for the channels-last variant


def row(fn: str, shape: list[int], pad: list[int], dtype: str = "float32") -> Any:
    out = list(fam.padded_shape(tuple(shape), pad))
    return parse_workload({"name": "r", "fn": fn, "kind": "test", "args": {
        "x": {"shape": shape, "dtype": dtype}, "pad": pad, "out_like": {"shape": out, "dtype": dtype}}})


def run_checker(fn: str, impl: Any, shape: list[int], pad: list[int]) -> Any:
    task = load_task(TASK_DIR)
    results = check_row(task, row(fn, shape, pad), contract("replicate_pad3d", fn),
                        {"baseline": fam.BASELINE_CALLS[fn], "candidate": impl}, seed=3, device="cpu")
    base, cand = (next(r for r in results if r.impl == k) for k in ("baseline", "candidate"))
    assert base.ok, base.describe()
    return cand


@pytest.mark.parametrize("fn", ["replicate_pad3d", "replicate_pad3d_channels_last"])
def test_checker_passes_the_right_answer(fn: str) -> None:
    assert run_checker(fn, fam.BASELINE_CALLS[fn], [1, 4, 3, 5, 7], CAUSAL).ok


@pytest.mark.parametrize("wrong, why", [(zero_pad, "beyond tolerance"), (off_by_one, "beyond tolerance"),
                                        (border_unwritten, "NaN")])
def test_checker_rejects_wrong_values(wrong: Any, why: str) -> None:
    res = run_checker("replicate_pad3d", wrong, [1, 4, 3, 5, 7], CAUSAL)
    assert not res.ok and why in res.describe(), res.describe()


def test_checker_rejects_the_wrong_layout_for_the_channels_last_variant() -> None:
    res = run_checker("replicate_pad3d_channels_last", contiguous_not_channels_last, [1, 4, 3, 5, 7], CAUSAL)
    assert not res.ok and "LayoutError" in res.error and "channels_last_3d" in res.error, res.describe()


def test_checker_rejects_one_ulp_off_as_not_bit_identical() -> None:
    def one_ulp(x: torch.Tensor, pad: list[int]) -> torch.Tensor:
        out = F.pad(x, pad, mode="replicate")
        out.view(-1)[:1].view(torch.int32).add_(1)
        return out

    res = run_checker("replicate_pad3d", one_ulp, [1, 4, 3, 5, 7], CAUSAL)
    assert not res.ok and "not bit-identical to SGLang" in res.describe()


# ---------------------------------------------------------------------------------------------- captured rows

def capture_lines() -> list[dict[str, Any]]:
    return [json.loads(line) for line in (TASK_DIR / "dev/captured_pads.jsonl").read_text().splitlines()]


def test_production_rows_are_the_capture() -> None:
    lines = capture_lines()
    task = load_task(TASK_DIR)
    prod = [w for w in task.workloads if w.kind == "production"]
    cited = set()
    for w in prod:
        path, _, n = w.source.removeprefix("captured:").rpartition(":")
        assert path == "dev/captured_pads.jsonl", w.source
        cap = lines[int(n) - 1]
        cited.add(int(n))
        assert cap["kernel"] == w.fn and list(w.args["x"].shape) == cap["args"][0]["shape"]
        assert w.args["pad"] == cap["args"][1] and w.args["x"].dtype == "float16"
        calls = cap["calls"]
        assert f"{calls['tiled']} calls in the tiled decode, {calls['untiled']} untiled" in w.note
    left_out = {i + 1 for i in range(len(lines))} - cited
    # the notes say why
    assert {tuple(lines[i - 1]["args"][0]["shape"]) for i in left_out} == {(1, 256, 33, 480, 848)}
    per_shape = lines[::2]
    assert sum(c["calls"]["tiled"] for c in per_shape) == 1485
    assert sum(c["calls"]["untiled"] for c in per_shape) == 33


def test_capture_script_reproduces_the_committed_capture(tmp_path: Path) -> None:
    out = tmp_path / "pads.jsonl"
    dist = ("RANK", "WORLD_SIZE", "MASTER_PORT", "LOCAL_RANK")
    env = {k: v for k, v in os.environ.items() if k not in dist}
    proc = subprocess.run([sys.executable, str(TASK_DIR / "dev/capture_pads.py"), "--out", str(out)],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert out.read_text() == (TASK_DIR / "dev/captured_pads.jsonl").read_text()
    assert "tiled: 1485 pad calls, 214.59 GB moved" in proc.stdout


# ---------------------------------------------------------------------------------------------- the candidate

def load_candidate_exports() -> dict[str, Any]:
    from kda_lab.task import load_candidate

    return load_candidate(load_task(TASK_DIR)).EXPORTS


def test_candidates_own_triton_code_runs_in_the_interpreter(monkeypatch: pytest.MonkeyPatch) -> None:
    if os.environ.get("TRITON_INTERPRET") != "1":
        pytest.skip("the Triton interpreter runs on CPU hosts (TRITON_INTERPRET=1, set by conftest.py "
                    "without a GPU)")
    exports = load_candidate_exports()
    x = torch.randn(1, 3, 2, 4, 9, dtype=torch.float16)
    want = F.pad(x, CAUSAL, mode="replicate")

    def no_f_pad(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the candidate fell back to F.pad")

    monkeypatch.setattr(F, "pad", no_f_pad)
    plain = exports["replicate_pad3d"](x, CAUSAL)
    cl = exports["replicate_pad3d_channels_last"](x, CAUSAL)
    assert torch.equal(plain, want) and plain.is_contiguous()
    assert torch.equal(cl, want) and cl.is_contiguous(memory_format=torch.channels_last_3d)


def test_candidate_falls_back_to_sglangs_pad_outside_its_contract() -> None:
    exports = load_candidate_exports()
    x = torch.randn(1, 2, 3, 4, 5, requires_grad=True)
    y = exports["replicate_pad3d"](x, CAUSAL)  # autograd recording: F.pad's differentiable path
    y.sum().backward()
    assert x.grad is not None and torch.equal(y.detach(), F.pad(x.detach(), CAUSAL, mode="replicate"))
    x4 = torch.randn(1, 2, 4, 5)
    assert torch.equal(exports["replicate_pad3d"](x4, [1, 1, 1, 1]),
                       F.pad(x4, [1, 1, 1, 1], mode="replicate"))
    xd = torch.randn(1, 2, 3, 4, 5, dtype=torch.float64)  # a dtype outside the kernel's contract
    assert torch.equal(exports["replicate_pad3d_channels_last"](xd, CAUSAL),
                       F.pad(xd, CAUSAL, mode="replicate"))


@pytest.mark.gpu
def test_candidate_on_the_shape_too_large_for_the_harness() -> None:
    """x [1,256,33,480,848] fp16 (the untiled decode's largest pad, 2 calls; 3.67 G output elements, past
    2^31): bit for bit against SGLang's F.pad, compared a time plane at a time (the harness's fp64 check would
    need ~190 GB)."""
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU (H200): the shape is 14.2 GB per call")
    exports = load_candidate_exports()
    g = torch.Generator(device="cuda").manual_seed(5)
    x = torch.randn(1, 256, 33, 480, 848, device="cuda", dtype=torch.float16, generator=g)
    with torch.no_grad():
        want = F.pad(x, CAUSAL, mode="replicate")
        for fn in ("replicate_pad3d", "replicate_pad3d_channels_last"):
            got = exports[fn](x, CAUSAL)
            assert got.is_contiguous(memory_format=torch.channels_last_3d if fn.endswith("last") else
                                     torch.contiguous_format)
            for t in range(want.shape[2]):
                assert torch.equal(got[:, :, t], want[:, :, t]), f"{fn}: plane {t} differs"
            del got


# ----------------------------------------------------------------------------------------------- kda new-task

def test_stamper_takes_an_off_facade_family(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`kda new-task --family replicate_pad3d --captures dev/captured_pads.jsonl` (how this task was made):
    sglang/entry are the family's BASELINES (SGLang's facade has no such function, and asking it used to
    raise), the pad tuple becomes a TOML list, and the stamped register.py imports and passes the baseline
    through."""
    from kda_lab.task.stamp import new_task

    (tmp_path / "kernels").mkdir()
    (tmp_path / "kda_lab").mkdir()
    monkeypatch.setenv("KDA_ROOT", str(tmp_path))
    d = new_task("h200_pad_stamp_probe", "replicate_pad3d", "probe", TASK_DIR / "dev/captured_pads.jsonl")
    task = load_task(d)
    for fn in FAMILY_FUNCTIONS["replicate_pad3d"]:
        assert task.functions[fn].sglang == task.functions[fn].entry == fam.BASELINES[fn]
    first = next(w for w in task.workloads if w.kind == "production")
    assert first.args["pad"] == CAUSAL and first.source == "captured:captured_pads.jsonl:1"
    register = (d / "src/register.py").read_text()
    assert "import_module(\"kda_lab.families.replicate_pad3d\").hunyuan_causal_pad," in register
    from kda_lab.task import load_candidate

    exports = load_candidate(task).EXPORTS
    assert exports["replicate_pad3d"] is fam.hunyuan_causal_pad
    assert "`kda_lab.families.replicate_pad3d:hunyuan_causal_pad` |" in (d / "prompt.md").read_text()
