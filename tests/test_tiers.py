"""Request quality tiers (issue #35 item 3): the overlay serves a lossless impl only where SGLang's request
says so.

The tier reaches the overlay through SGLang's own mechanisms (kda_kernels.tiers): the denoising stage's
``toggle_quality_fusions`` over ``_QUALITY_FUSION_HANDLERS`` (the overlay's entry mounts with SGLang's
lossless fusions) and the decoding stage's ``use_vae_fast_path`` gate. These tests drive both with SGLang's
real functions and check that an exact-tier call through the overlay is SGLang's call.
"""

from __future__ import annotations

import importlib.util
import sys
import tomllib
from pathlib import Path

import pytest

_spec = importlib.util.spec_from_file_location(
    "kda_overlay_fixtures", Path(__file__).with_name("test_overlay_fixtures.py")
)
fx = importlib.util.module_from_spec(_spec)
sys.modules.setdefault("kda_overlay_fixtures", fx)
_spec.loader.exec_module(fx)

REPO = Path(__file__).resolve().parents[1]
NO_QUALITY = {
    "KDA_TEST_QUALITY": "none"
}  # the prelude opens no quality() block: only SGLang's stages set the tier


def tier_mismatches(targets: tuple, kernels: Path) -> list[str]:
    """Swap targets whose registry tier is not what the task contracts say: ``exact`` exactly where a task of
    the target's family declares the function ``exact = true`` (checked bit for bit against SGLang on every
    row).
    """
    exact: dict[str, bool] = {}
    for toml in sorted(kernels.glob("h200_*/task.toml")):
        for f in tomllib.loads(toml.read_text()).get("functions", []):
            exact[f["name"]] = exact.get(f["name"], True) and bool(f.get("exact", False))
    bad = []
    for t in targets:
        name = t.unpacks_into or t.function
        want = "exact" if exact.get(name) else "lossless"
        if t.tier != want:
            bad.append(f"{t.function}: registry tier {t.tier!r}, task contract says {want!r}")
    return bad


def test_registry_tiers_follow_the_task_contracts() -> None:
    import dataclasses

    from kda_kernels.registry import FAST_PATHS, TARGETS

    assert tier_mismatches(TARGETS, REPO / "kernels") == []
    assert {t.function for t in TARGETS if t.tier == "exact"} == {
        "apply_rotary_embedding",
        "apply_ltx2_split_rotary_emb",
        "rmsnorm_scale",
        "rmsnorm_tanh_residual",
    }
    # the checker rejects a wrong table: a lossless kernel claimed exact, an exact one demoted
    wrong = tuple(dataclasses.replace(t, tier="exact") if t.function == "norm_infer" else t for t in TARGETS)
    assert tier_mismatches(wrong, REPO / "kernels") == [
        "norm_infer: registry tier 'exact', task contract says 'lossless'"
    ]
    demoted = tuple(
        dataclasses.replace(t, tier="lossless") if t.function == "rmsnorm_scale" else t for t in TARGETS
    )
    assert len(tier_mismatches(demoted, REPO / "kernels")) == 1
    # the HunyuanVideo decoder fast path converts convs to channels-last (cuDNN's roundings move), the LTX-2
    # one sums the RMSNorm's channels in its own order (ltx2_rms_silu_pad is not exact): both lossless
    assert {fp.name: fp.tier for fp in FAST_PATHS} == {"hunyuanvideo_vae_decoder": "lossless",
                                                       "ltx2_vae_decoder": "lossless"}


def test_tier_stack_and_quality_blocks() -> None:
    from kda_kernels import tiers

    assert tiers.current() == "exact" and not tiers.allows_lossless()
    with tiers.quality("extra-high") as level:  # SGLang's old name for lossless
        assert level == "lossless" and tiers.allows("lossless") and not tiers.allows("high")
        with tiers.quality("exact"):
            assert not tiers.allows_lossless()
        assert tiers.allows_lossless()
    assert tiers.current() == "exact"
    with pytest.raises(ValueError, match="quality must be one of"):
        with tiers.quality("fast"):
            pass
    assert tiers.current() == "exact"


@fx.needs_sglang
def test_sglang_stages_drive_the_tier_and_uninstall_unhooks() -> None:
    r = fx.run_py(
        None,
        """
    from kda_lab.e2e.runtime import cpu_e2e_site
    cpu_e2e_site()  # SGLang's stages import its model deps (kda e2e's CPU site), before sglang is imported
    import kda_kernels
    from kda_kernels import tiers
    kda_kernels.install()
    before_import = {n: n in sys.modules for n in (tiers.DENOISING, tiers.VAE_GATE)}
    from kda_lab.e2e.sglang_build import import_stages
    import_stages()
    from sglang.multimodal_gen.runtime.pipelines_core.stages import denoising
    from sglang.multimodal_gen.runtime.models.vaes import fast_path_gate as g
    hooked = any(f is tiers.KDA_FUSION for _, f in denoising._QUALITY_FUSION_HANDLERS)
    dit = torch.nn.Linear(2, 2)
    seen = {"start": tiers.current()}
    for q in ("lossless", "exact", "high", "lossless"):
        denoising.toggle_quality_fusions([dit], q)
        seen["dit_" + q] = tiers.current()
    # a VAE with SGLang's own gate (as optimize_vae registers for Wan/Qwen/FLUX.2) and one without
    vae, bare = torch.nn.Conv2d(1, 1, 1), torch.nn.Conv2d(1, 1, 1)
    sgl_gate = g.VaeFastPathGate()
    g.register_vae_fast_path_gate(vae, sgl_gate)
    denoising.toggle_quality_fusions([dit], "lossless")
    with g.use_vae_fast_path(vae, False):
        seen["decode_exact"] = tiers.current()
        seen["sglang_gate_in_exact"] = sgl_gate.enabled
    with g.use_vae_fast_path(vae, True):
        seen["decode_lossless"] = tiers.current()
        seen["sglang_gate_in_lossless"] = sgl_gate.enabled
    seen["after_decode"] = tiers.current()
    seen["sglang_gate_after"] = sgl_gate.enabled
    try:
        with g.use_vae_fast_path(bare, False):
            seen["bare_decode"] = tiers.current()
            raise RuntimeError("decode failed")
    except RuntimeError:
        pass
    seen["after_failed_decode"] = tiers.current()
    st = tiers.state()
    kda_kernels.uninstall()
    unhooked = not any(f is tiers.KDA_FUSION for _, f in denoising._QUALITY_FUSION_HANDLERS)
    denoising.toggle_quality_fusions([dit], "lossless")
    emit({"before_import": before_import, "hooked": hooked, "seen": seen, "state": st, "unhooked": unhooked,
          "after_uninstall": tiers.current(), "table": type(g._VAE_FAST_PATH_GATES).__name__,
          "sglang_gate_still_registered": vae in g._VAE_FAST_PATH_GATES})
    """,
        env=NO_QUALITY,
    )
    # install() inside `import sglang` imports neither hooked module: they are hooked when SGLang imports them
    assert r["before_import"] == {
        "sglang.multimodal_gen.runtime.pipelines_core.stages.denoising": False,
        "sglang.multimodal_gen.runtime.models.vaes.fast_path_gate": False,
    }
    assert r["hooked"]
    s = r["seen"]
    assert s["start"] == "exact"  # as SGLang's fusion sites: unmounted until a request mounts them
    assert (s["dit_lossless"], s["dit_exact"], s["dit_high"]) == ("lossless", "exact", "lossless")
    assert (s["decode_exact"], s["decode_lossless"], s["after_decode"]) == ("exact", "lossless", "lossless")
    assert (s["sglang_gate_in_exact"], s["sglang_gate_in_lossless"], s["sglang_gate_after"]) == (
        False,
        True,
        False,
    )
    assert s["bare_decode"] == "exact" and s["after_failed_decode"] == "lossless"
    assert r["state"]["calls"]["decode"] == 3 and r["state"]["hooks"] == {
        "sglang.multimodal_gen.runtime.pipelines_core.stages.denoising": True,
        "sglang.multimodal_gen.runtime.models.vaes.fast_path_gate": True,
    }
    assert r["unhooked"] and r["after_uninstall"] == "exact"
    assert r["table"] == "WeakKeyDictionary" and r["sglang_gate_still_registered"]


@fx.needs_sglang
def test_an_exact_request_gets_sglangs_function_and_a_lossless_one_the_impl(tmp_path: Path) -> None:
    """A lossless impl (fixture norm_infer, fp32 math) serves only lossless work; exact work gets SGLang's
    call (its torch CPU path here), bit for bit; an exact-tier impl (fixture rotary) serves both."""
    root = fx.make_tree(
        tmp_path, {"norm_infer": {"norm_infer": 1.2}, "rotary_embedding": {"apply_rotary_embedding": 1.1}}
    )
    r = fx.run_py(
        root,
        """
    import kda_kernels
    from kda_kernels import tiers
    from kda_kernels.dispatch import trace_impl_calls
    kda_kernels.install(strict=True)
    from sglang.kernels.ops import diffusion as D
    base = kda_kernels.baseline("norm_infer")
    x, w, b = torch.randn(64, 96), torch.rand(96) + 0.5, torch.randn(96)
    rot = torch.randn(1, 6, 2, 16)
    cos, sin = torch.rand(6, 8), torch.rand(6, 8)
    # the fixture impl's call counter
    from kda_kernels.diffusion.rotary_embedding._impls.h200.register import CALLS
    out = {}
    for q in ("exact", "lossless"):
        before = CALLS["apply_rotary_embedding"]
        with tiers.quality(q), trace_impl_calls() as ran, torch.no_grad():
            y = D.norm_infer(x, w, b, 1e-5)
            D.apply_rotary_embedding(rot, cos, sin)
        out[q] = {"calls": ran.calls, "equal_sglang": bool(torch.equal(y, base(x, w, b, 1e-5))),
                  "rotary_impl_calls": CALLS["apply_rotary_embedding"] - before}
    emit(out)
    """,
        env={"KDA_FORCE_ARCH": "h200", **NO_QUALITY},
    )
    assert r["exact"]["calls"]["norm_infer"] == {"kda": 0, "sglang": 1}
    assert r["exact"]["equal_sglang"]
    assert (
        r["exact"]["rotary_impl_calls"] == 1
    )  # exact tier: a forced arch's impl without supports() runs bare
    assert r["lossless"]["calls"]["norm_infer"] == {"kda": 1, "sglang": 0}
    assert r["lossless"]["rotary_impl_calls"] == 1
