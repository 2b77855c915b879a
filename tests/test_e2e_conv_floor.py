"""``kda e2e --conv-floor`` (kda_lab.e2e.conv_floor): the capture of a real SGLang decode's convolutions,
their shapes and FLOPs, and the command's refusals. On a CPU only the mechanics run; the timings are the
GPU's."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest
import torch

from kda_lab.e2e import conv_floor
from tests.conftest import REPO

# One process for everything that needs SGLang's runtime (process-global; each import costs ~10 s on CI):
# the documented commands through kda's own main(), and the meta decode against SGLang's CPU decode.
_SCRIPT = """
import contextlib, io, json, sys, torch
from kda_lab.cli import main
from kda_lab.e2e.runtime import init_sglang, native_custom_ops

out_dir = sys.argv[1]
res = {}
for key, argv in (("dit_row", ["e2e", "--conv-floor", "--rows", "zimage_dit", "--device", "cpu"]),
                  ("meta_no_floor", ["e2e", "--rows", "wan22_vae_decode", "--device", "meta",
                                     "--no-record"])):
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        res[key] = [main(argv), err.getvalue()]
init_sglang("cpu")
for key, device in (("cpu", "cpu"), ("meta", "meta")):
    res[key] = main(["e2e", "--conv-floor", "--rows", "wan22_vae_decode", "--device", device, "--out",
                     f"{out_dir}/{key}"])
from kda_lab.e2e import conv_floor, vae_rows

def key(calls):  # the memory-format flag aside: a meta kernel may give an op's output other strides
    out = {}
    for c, n in calls.items():
        k = repr({**c.__dict__, "channels_last": None})
        out[k] = out.get(k, 0) + n
    return sorted(out.items())

for name in vae_rows.VAE_SOURCES:
    built = vae_rows.VAE_BY_NAME[name].build("cpu", True, None)
    native_custom_ops(built.module)
    with torch.no_grad(), conv_floor.capture() as real:
        built.forward()
    with torch.no_grad(), conv_floor.capture() as meta:
        vae_rows.meta_decode(name, tiny=True)()
    res[name] = [key(real) == key(meta), sum(real.values())]
print("CONV-FLOOR " + json.dumps(res))
"""


@pytest.fixture(scope="module")
def session(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("conv_floor")
    before = (REPO / "e2e" / "rows.csv").read_bytes()
    r = subprocess.run([sys.executable, "-c", _SCRIPT, str(out)], cwd=REPO, capture_output=True, text=True,
                       timeout=900)
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("CONV-FLOOR ")]
    assert r.returncode == 0 and lines, r.stderr[-3000:]
    assert (REPO / "e2e" / "rows.csv").read_bytes() == before, "--conv-floor must not append to e2e/rows.csv"
    recs = {}
    for key in ("cpu", "meta"):
        files = list((out / key).glob("conv-floor-wan22_vae_decode-*.json"))
        assert len(files) == 1, (key, files)
        recs[key] = json.loads(files[0].read_text())
    return {"res": json.loads(lines[-1].removeprefix("CONV-FLOOR ")), **recs, "stdout": r.stdout}


def test_capture_counts_every_convolution_of_sglangs_decode(session: dict[str, Any]) -> None:
    assert session["res"]["cpu"] == 0
    rec = session["cpu"]
    # every captured convolution was replayed
    assert sum(r["count"] for r in rec["results"]) == rec["decode_conv_calls"] > 10
    gflop = sum(r["gflop"] * r["count"] for r in rec["results"])
    assert gflop == pytest.approx(rec["decode_conv_gflop"], rel=1e-9)
    assert rec["summary"]["distinct"] == len(rec["results"]) < rec["decode_conv_calls"]
    # on a CPU only SGLang's own settings replay; every distinct conv ran
    assert set(rec["summary"]["variants"]) == {"sglang"}
    assert all(r["times"]["sglang"]["ms"] > 0 for r in rec["results"])
    assert rec["quality"] == "lossless" and rec["env"]["git_commit"]
    assert "all " in session["stdout"] and "distinct" in session["stdout"]


def test_the_meta_decode_runs_the_convolutions_of_sglangs_decode(session: dict[str, Any]) -> None:
    """``--device meta`` (no data) sees the same convolutions as SGLang's own CPU decode of every VAE row's
    tiny configuration; at production size it counts the Wan 2.2 decode's work, with no timing."""
    from kda_lab.e2e.vae_rows import VAE_SOURCES

    res = session["res"]
    for name in VAE_SOURCES:
        same, calls = res[name]
        assert same and calls > 10, (name, res[name])
    assert res["meta"] == 0
    rec = session["meta"]
    # 31 latent frames through SGLang's chunked causal decoder: 1208 conv calls, 2.01 PFLOP (2 x MACs)
    assert rec["decode_conv_calls"] == 1208 and round(rec["decode_conv_gflop"] / 1e3, 1) == 2009.6
    assert rec["gpu_name"] == "meta (shapes only)" and rec["summary"]["variants"] == {}


def test_conv_floor_refuses_a_dit_row_and_meta_without_it(session: dict[str, Any]) -> None:
    rc, err = session["res"]["dit_row"]
    assert rc == 2 and "--conv-floor measures VAE decode rows; not one: zimage_dit" in err
    rc, err = session["res"]["meta_no_floor"]
    assert rc == 2 and "--device meta runs no data" in err


def test_capture_sees_what_aten_convolution_sees() -> None:
    """The functional-level capture against a dispatch-mode count at ``aten.convolution`` (outside autocast,
    where both see every call): the same calls, shapes and FLOPs."""
    from torch.utils._python_dispatch import TorchDispatchMode

    seen: list[conv_floor.ConvCall] = []

    class _Aten(TorchDispatchMode):
        def __torch_dispatch__(self, func: Any, types: Any, args: tuple[Any, ...] = (),
                               kwargs: dict[str, Any] | None = None) -> Any:
            if func.overloadpacket is torch.ops.aten.convolution:
                seen.append(conv_floor.call_of(args))
            return func(*args, **(kwargs or {}))

    conv = torch.nn.Conv3d(4, 8, 3, padding=(0, 1, 1)).to(memory_format=torch.channels_last_3d)
    up = torch.nn.ConvTranspose2d(8, 4, 2, stride=2)
    x = torch.randn(1, 4, 5, 6, 6).contiguous(memory_format=torch.channels_last_3d)
    with torch.no_grad(), conv_floor.capture() as calls, _Aten():
        y = conv(x)
        z = torch.nn.functional.conv2d(y[:, :, 0], torch.randn(8, 8, 3, 3), padding="same", dilation=2)
        up(z)
        torch.conv1d(torch.randn(2, 3, 9), torch.randn(5, 3, 4), stride=2)
    assert len(seen) == sum(calls.values()) == 4
    assert sorted(map(repr, seen)) == sorted(map(repr, calls))
    assert sum(c.flops for c in seen) == sum(c.flops * n for c, n in calls.items())


@pytest.mark.parametrize("transposed", [False, True])
def test_conv_call_shape_and_flops_match_torch(transposed: bool) -> None:
    x = torch.randn(1, 6, 5, 9, 7)
    w = torch.randn(6, 4, 3, 3, 2) if transposed else torch.randn(4, 3, 3, 3, 2)
    args = (x, w, None, [1, 2, 1], [1, 0, 1], [1, 1, 2], transposed, [0, 1, 0] if transposed else [0, 0, 0],
            1 if transposed else 2)
    out = torch.ops.aten.convolution(*args)
    c = conv_floor.call_of(args)
    assert c.out_shape == tuple(out.shape)
    k = 3 * 3 * 2
    assert c.flops == (2 * x.numel() * w.shape[1] * k if transposed else 2 * out.numel() * w.shape[1] * k)
    # a wrong shape rule must be caught: the same call with another stride is another shape
    other = conv_floor.ConvCall(**{**c.__dict__, "stride": (1, 1, 1)})
    assert other.out_shape != tuple(out.shape)


def test_channels_last_inputs_replay_in_channels_last() -> None:
    x = torch.randn(1, 8, 3, 6, 6).contiguous(memory_format=torch.channels_last_3d)
    w = torch.randn(8, 8, 3, 3, 3).contiguous(memory_format=torch.channels_last_3d)
    c = conv_floor.call_of((x, w, None, [1, 1, 1], [1, 1, 1], [1, 1, 1], False, [0, 0, 0], 1))
    assert c.channels_last
    xr, wr, _ = conv_floor._tensors(c, "cpu", torch.Generator("cpu").manual_seed(0))
    assert xr.is_contiguous(memory_format=torch.channels_last_3d) and not xr.is_contiguous()
    assert not conv_floor.call_of((x.contiguous(), w, None, [1, 1, 1], [1, 1, 1], [1, 1, 1], False, [0, 0, 0],
                                   1)).channels_last


def test_a_variant_missing_on_one_conv_has_no_floor() -> None:
    a = conv_floor.ConvCall((1, 4, 2, 4, 4), False, (4, 4, 1, 1, 1), False, (1, 1, 1), (0, 0, 0), (1, 1, 1),
                            False, (0, 0, 0), 1, "float32")
    b = conv_floor.ConvCall(**{**a.__dict__, "x_shape": (1, 4, 2, 8, 8)})
    results = [conv_floor.ConvResult(a, 2, {"sglang": conv_floor.VariantTime(1.0),
                                            "bf16": conv_floor.VariantTime(0.5)}),
               conv_floor.ConvResult(b, 1, {"sglang": conv_floor.VariantTime(3.0),
                                            "bf16": conv_floor.VariantTime(error="OutOfMemoryError")})]
    s = conv_floor.summary(results, "NVIDIA H200")
    assert set(s["variants"]) == {"sglang"}
    assert s["variants"]["sglang"]["ms"] == pytest.approx(2 * 1.0 + 3.0)
    assert s["variants"]["sglang"]["peak_tflops"] == conv_floor.PEAK_TFLOPS[("H200", "tf32")]
    with pytest.raises(ValueError, match="unknown conv-floor variant"):
        conv_floor._runner(a, "fp8", torch.zeros(1), torch.zeros(1), None)


def test_frames_2d_is_the_3d_conv_summed_over_time_taps() -> None:
    x = torch.randn(1, 8, 6, 10, 12).contiguous(memory_format=torch.channels_last_3d)
    w = torch.randn(5, 8, 3, 3, 3).contiguous(memory_format=torch.channels_last_3d)
    b = torch.randn(5)
    args = (x, w, b, [1, 1, 1], [0, 1, 1], [1, 1, 1], False, [0, 0, 0], 1)
    c = conv_floor.call_of(args)
    assert conv_floor.frames_2d_applies(c)
    ref = torch.ops.aten.convolution(*args)
    out = conv_floor._frames_2d(c, x, w, b)()
    assert out.shape == ref.shape
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-4)
    # the time taps in the wrong order are another convolution: the comparison above can fail
    flipped = conv_floor._frames_2d(c, x, w.flip(2), b)()
    assert (flipped - ref).abs().max() > 1e-2
    # padding in time, a 2-D conv, a transposed conv: not this variant's
    for other in ({"padding": (1, 1, 1)}, {"x_shape": (1, 8, 10, 12), "w_shape": (5, 8, 3, 3)},
                  {"transposed": True}):
        assert not conv_floor.frames_2d_applies(conv_floor.ConvCall(**{**c.__dict__, **other}))


def test_a_variant_that_does_not_apply_counts_sglangs_time() -> None:
    bf = conv_floor.ConvCall((1, 4, 2, 4, 4), False, (4, 4, 1, 1, 1), False, (1, 1, 1), (0, 0, 0), (1, 1, 1),
                             False, (0, 0, 0), 1, "bfloat16")
    f32 = conv_floor.ConvCall(**{**bf.__dict__, "dtype": "float32"})
    results = [conv_floor.ConvResult(bf, 3, {"sglang": conv_floor.VariantTime(2.0)}),
               conv_floor.ConvResult(f32, 1, {"sglang": conv_floor.VariantTime(4.0),
                                              "bf16": conv_floor.VariantTime(1.0)})]
    s = conv_floor.summary(results, "NVIDIA H200")
    assert s["variants"]["bf16"]["ms"] == pytest.approx(3 * 2.0 + 1.0)
    assert s["variants"]["bf16"]["peak_tflops"] == conv_floor.PEAK_TFLOPS[("H200", "bf16")]
    assert s["variants"]["sglang"]["peak_tflops"] is None  # bf16 and TF32 convs mixed: no one peak
