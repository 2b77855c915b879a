"""The HunyuanVideo VAE decoder fast path (kernels/h200_vae_hunyuan_causal_conv__multi_shape/src/fast_path.py) on
SGLang 0.5.23's own decoder, on the CPU under the Triton interpreter (conftest sets TRITON_INTERPRET=1 without a
GPU): the gather kernel bit for bit against SGLang's upsample + cat + pad, the decode judged by the model-level
criterion of `kda e2e` (and a wrong GroupNorm rejected by it), exact restoration of SGLang's classes, and the
overlay installing the promoted export (``kda_kernels.fast_paths``)."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

REPO = Path(__file__).resolve().parents[1]
SLUG = "h200_vae_hunyuan_causal_conv__multi_shape"
HUNYUAN = "sglang.multimodal_gen.runtime.models.vaes.hunyuanvae"
_DIST_ENV = ("MASTER_ADDR", "MASTER_PORT", "RANK", "LOCAL_RANK", "WORLD_SIZE")

pytestmark = pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1" or torch.cuda.is_available(),
                                reason="CPU test: the Triton interpreter (TRITON_INTERPRET=1, set by conftest.py "
                                       "without a GPU); tests/families/test_replicate_pad3d.py covers the GPU")


@pytest.fixture(scope="module")
def candidate():
    from kda_lab.e2e import runtime
    from kda_lab.task.schema import load_candidate, load_task

    before = {k: os.environ.get(k) for k in _DIST_ENV}
    runtime.init_sglang("cpu")
    for k, v in before.items():  # this process holds its rendezvous port: child processes must pick their own
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v
    mod = load_candidate(load_task(REPO / "kernels" / SLUG))
    return {name: importlib.import_module(f"{mod.__name__}.{name}") for name in ("fast_path", "gn_silu_cl")} | {
        "register": mod}


@pytest.fixture()
def fast(candidate):
    fp = candidate["register"].FAST_PATHS["hunyuanvideo_vae_decoder"]
    yield fp
    fp.uninstall()


def _sglang_upsample_pad(x: torch.Tensor, factors: tuple[int, int, int]) -> torch.Tensor:
    """HunyuanVideoUpsampleCausal3D.forward's copies and the causal conv's pad, as SGLang 0.5.23 runs them."""
    first = F.interpolate(x[:, :, :1].squeeze(2), scale_factor=factors[1:], mode="nearest").unsqueeze(2)
    if x.shape[2] > 1:
        rest = F.interpolate(x[:, :, 1:].contiguous(), scale_factor=factors, mode="nearest")
        first = torch.cat((first, rest), dim=2)
    return F.pad(first, (1, 1, 1, 1, 2, 0), mode="replicate")


@pytest.mark.parametrize("shape,factors", [((1, 8, 3, 4, 5), (2, 2, 2)), ((1, 16, 2, 3, 3), (1, 2, 2)),
                                           ((2, 4, 1, 3, 2), (2, 2, 2)), ((1, 8, 4, 2, 3), (2, 1, 1))])
@pytest.mark.parametrize("layout", ["ncdhw", "ndhwc"])
def test_the_gather_is_sglangs_upsample_cat_and_pad_bit_for_bit(candidate, shape, factors, layout):
    x = torch.randn(shape, dtype=torch.float16)
    ref = _sglang_upsample_pad(x, factors)
    xi = x.contiguous(memory_format=torch.channels_last_3d) if layout == "ndhwc" else x
    out = candidate["fast_path"].padded_channels_last(xi, (1, 1, 1, 1, 2, 0), factors)
    assert out.is_contiguous(memory_format=torch.channels_last_3d)
    assert torch.equal(out, ref)
    if factors[0] > 1 and shape[2] > 1:  # a wrong time mapping (no frame repeated) must not pass
        wrong = candidate["fast_path"].padded_channels_last(xi, (1, 1, 1, 1, 2, 0), (1, factors[1], factors[2]))
        assert wrong.shape != ref.shape or not torch.equal(wrong, ref)


@pytest.mark.parametrize("shape,pad", [((1, 3, 2, 7, 13), (1, 1, 1, 1, 2, 0)), ((2, 2, 3, 5, 1), (1, 1, 1, 1, 2, 0)),
                                       ((1, 2, 1, 41, 99), (3, 0, 2, 5, 1, 2)), ((1, 1, 2, 9, 850), (1, 1, 1, 1, 2, 0))])
@pytest.mark.parametrize("row_tiles", [False, True])
def test_the_plain_pad_kernels_are_f_pad_bit_for_bit(candidate, monkeypatch, shape, pad, row_tiles):
    # the plane kernel splits flat positions into rows with an fp32 reciprocal: widths 1..850 and planes that
    # span several blocks must land on the right row; the row-tile kernel is its path for planes >= 2^23
    pk = importlib.import_module(candidate["register"].__name__.rsplit(".", 1)[0] + ".pad_kernels")
    if row_tiles:
        monkeypatch.setattr(pk, "_PLANE_MAX", 1)
    x = torch.randn(shape, dtype=torch.float16)
    ref = F.pad(x, pad, mode="replicate")
    out = torch.full_like(ref, float("nan"))
    pk.launch_ncdhw(x, out, pad, **({} if row_tiles else {"block": 64}))
    assert torch.equal(out, ref)
    # a row split one column off (what an uncorrected reciprocal would give) must not pass this comparison
    assert not torch.equal(torch.roll(out.flatten(), 1).view_as(ref), ref)


def test_group_norm_silu_on_ndhwc_within_the_group_norm_tolerance(candidate):
    torch.manual_seed(0)
    x = (torch.randn(1, 32, 3, 5, 7) * 3 + 4).half().contiguous(memory_format=torch.channels_last_3d)
    w, b = torch.randn(32).half(), torch.randn(32).half()
    y = candidate["gn_silu_cl"].group_norm_silu_cl(x, w, b, 8, 1e-6)
    ref = F.silu(F.group_norm(x.double(), 8, w.double(), b.double(), 1e-6))
    assert y.is_contiguous(memory_format=torch.channels_last_3d)
    assert float((y.double() - ref).abs().max()) < 2e-3 + 2e-3 * float(ref.abs().max())
    # the statistics are per (sample, group): one group over all channels is a different answer
    bad = candidate["gn_silu_cl"].group_norm_silu_cl(x, w, b, 1, 1e-6)
    assert float((bad.double() - ref).abs().max()) > 1e-2


def _tiny_vae(tiled: bool):
    from kda_lab.e2e import models

    return models._hunyuan_vae("cpu", True, (1, 16, 2, 2, 2), seed=3, tiled=tiled)


@pytest.mark.parametrize("tiled", [False, True])
def test_decode_agrees_at_model_level_and_uninstall_restores_sglang(candidate, fast, tiled):
    from kda_lab.e2e.measure import model_agreement

    hy = importlib.import_module(HUNYUAN)
    originals = {n: hy.HunyuanVideoCausalConv3d.__dict__["forward"] for n in ("conv",)}
    built = _tiny_vae(tiled)
    with torch.no_grad():
        off = built.forward().clone()
        patched = fast.install(lambda device: True)
        assert len(patched) == 5 and all(p.startswith(HUNYUAN + ".") for p in patched)
        assert hy.HunyuanVideoCausalConv3d.__dict__["forward"] is not originals["conv"]
        on = built.forward().clone()
        fast.uninstall()
        again = built.forward().clone()
        fp32 = built.fp32_forward()
    assert hy.HunyuanVideoCausalConv3d.__dict__["forward"] is originals["conv"]
    assert torch.equal(again, off)  # SGLang's own decode again, bit for bit
    assert on.shape == off.shape and on.is_contiguous() and not torch.equal(on, off)
    ok, text = model_agreement(off, on, fp32)
    assert ok, text


def test_model_level_criterion_rejects_a_wrong_group_norm(candidate, fast, monkeypatch):
    from kda_lab.e2e.measure import model_agreement

    fp_mod = candidate["fast_path"]
    real = fp_mod.group_norm_silu_cl
    monkeypatch.setattr(fp_mod, "group_norm_silu_cl", lambda x, w, b, g, eps: real(x, w, b, 1, eps))
    built = _tiny_vae(False)
    with torch.no_grad():
        off = built.forward().clone()
        fast.install(lambda device: True)
        on = built.forward().clone()
        fast.uninstall()
        fp32 = built.fp32_forward()
    ok, text = model_agreement(off, on, fp32)
    assert not ok, text


def test_autograd_recording_runs_sglangs_forward(candidate, fast):
    """The gather kernels record no backward, so a decode that records autograd must be SGLang's own: the
    gradient reaches the latent only if no fast-path kernel ran."""
    built = _tiny_vae(False)
    fast.install(lambda device: True)
    z = torch.randn(1, 16, 2, 2, 2, dtype=torch.float16, requires_grad=True)
    with torch.enable_grad():
        y = built.module.decoder(built.module.post_quant_conv(z))
        y.float().sum().backward()
    assert z.grad is not None and torch.isfinite(z.grad.float()).all() and z.grad.abs().sum() > 0


def test_the_overlay_installs_the_promoted_export_and_restores_sglang():
    """`kda_kernels.install()` in a fresh interpreter (KDA_FORCE_ARCH=h200 stands in for the GPU): the exported
    fast path is promoted, installed, listed by status(), and uninstall() puts SGLang's forwards back."""
    code = f"""
import importlib, json
from kda_lab.e2e import runtime
runtime.init_sglang("cpu")
hy = importlib.import_module({HUNYUAN!r})
before = hy.HunyuanVideoCausalConv3d.__dict__["forward"]
import kda_kernels
st = kda_kernels.install()["hunyuanvideo_vae_decoder"]
during = hy.HunyuanVideoCausalConv3d.__dict__["forward"]
back = kda_kernels.uninstall()
after = hy.HunyuanVideoCausalConv3d.__dict__["forward"]
print(json.dumps({{"st": st, "swapped": during is not before, "restored": after is before,
                  "back": sorted(back), "after": kda_kernels.status()["hunyuanvideo_vae_decoder"]["installed"]}}))
"""
    env = {**{k: v for k, v in os.environ.items() if k not in _DIST_ENV}, "KDA_FORCE_ARCH": "h200",
           "PYTHONPATH": str(REPO)}
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=REPO, timeout=600)
    assert p.returncode == 0, p.stderr[-2000:]
    r = json.loads(p.stdout.strip().splitlines()[-1])
    st = r["st"]
    assert st["promoted"] and st["installed"] and st["installed_arch"] == "h200" and st["kind"] == "fast_path", st
    assert len(st["rebound"]) == 5 and not st["problems"], st
    assert r["swapped"] and r["restored"] and "hunyuanvideo_vae_decoder" in r["back"] and not r["after"]


def test_install_before_sglang_imports_the_vae_waits_for_the_import():
    """Inside `import sglang` the diffusion runtime is not imported: install() leaves the fast path pending and
    patches when SGLang's hunyuanvae module is imported, without importing it itself."""
    code = f"""
import importlib, json, sys
from kda_lab.e2e import runtime
runtime.cpu_e2e_site()
import kda_kernels
st = kda_kernels.install()["hunyuanvideo_vae_decoder"]
loaded_by_install = {HUNYUAN!r} in sys.modules
hy = importlib.import_module({HUNYUAN!r})
after = kda_kernels.status()["hunyuanvideo_vae_decoder"]
patched = hy.HunyuanVideoCausalConv3d.forward.__qualname__
kda_kernels.uninstall()
print(json.dumps({{"pending": st["pending_import"], "installed": st["installed"], "loaded_by_install": loaded_by_install,
                  "after": [after["installed"], after["pending_import"], len(after["rebound"])], "patched": patched,
                  "restored": hy.HunyuanVideoCausalConv3d.forward.__qualname__}}))
"""
    env = {**{k: v for k, v in os.environ.items() if k not in _DIST_ENV}, "KDA_FORCE_ARCH": "h200",
           "PYTHONPATH": str(REPO)}
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=REPO, timeout=600)
    assert p.returncode == 0, p.stderr[-2000:]
    r = json.loads(p.stdout.strip().splitlines()[-1])
    assert r["pending"] and not r["installed"] and not r["loaded_by_install"], r
    assert r["after"] == [True, False, 5], r
    assert "causal_conv_forward" in r["patched"] and r["restored"] == "HunyuanVideoCausalConv3d.forward", r
