"""The VAE rows, ``sglang_build`` and the recipe table against SGLang 0.5.23 on the CPU.

SGLang's runtime state is process-global (and ``runtime.cpu_e2e_site`` puts transformers on the path), so the
checks run once in a subprocess (``python -m tests.test_e2e_vae_rows``), as ``kda e2e`` runs; it prints one
JSON record per check and the tests assert on them.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from typing import Any

import pytest

from tests.conftest import REPO

QUALITIES = ("exact", "lossless", "high")


# ------------------------------------------------------------------------------------------------ in the
# subprocess


def _rows() -> dict[str, Any]:
    import torch

    from kda_lab.e2e.runtime import native_custom_ops
    from kda_lab.e2e.vae_rows import VAE_ROWS

    out: dict[str, Any] = {}
    for row in VAE_ROWS:
        built = row.build("cpu", True, None)
        native_custom_ops(built.module)
        with torch.no_grad():
            y, y32 = built.forward(), built.fp32_forward()
        dtypes = {str(p.dtype) for p in built.module.parameters()}
        out[row.name] = dict(
            shape=list(y.shape),
            finite=bool(torch.isfinite(y).all()),
            fp32_shape=list(y32.shape),
            err=float((y.float() - y32).abs().max()),
            lo=float(y.min()),
            hi=float(y.max()),
            param_dtypes=sorted(dtypes),
            row_dtype=str(row.dtype),
            config=built.config,
        )
    return out


def _channels_last() -> dict[str, Any]:
    """SGLang's policy per pipeline config as a CUDA server decides it, and the loader's conversion it drives.
    """
    from types import SimpleNamespace

    import torch
    from sglang.multimodal_gen.runtime.loader.component_loaders import vae_loader

    from kda_lab.e2e import sglang_build as sb
    from kda_lab.e2e.models import init_weights
    from kda_lab.e2e.vae_rows import TINY, WAN21_VAE

    real = vae_loader.current_platform
    cuda_like = SimpleNamespace(is_cuda=lambda: True, is_rocm=lambda: False, is_xpu=lambda: False)
    policy: dict[str, Any] = {}
    try:
        vae_loader.current_platform = cuda_like
        for path in (
            "wan:WanT2V480PConfig",
            "wan:FastWan2_2_TI2V_5B_Config",
            "qwen_image:QwenImagePipelineConfig",
            "ltx_2:LTX2PipelineConfig",
            "flux:FluxPipelineConfig",
            "zimage:ZImagePipelineConfig",
            "hunyuan:HunyuanConfig",
        ):
            for gpus in (1, 2):
                args = SimpleNamespace(pipeline_config=sb.pipeline_config(path), num_gpus=gpus)
                policy[f"{path}@{gpus}"] = list(sb.channels_last_3d_policy(args))
        # the loader's conversion as vae_as_loaded applies it on such a server: every Conv3d weight NDHWC
        args = sb.server_args(sb.pipeline_config("wan:WanT2V480PConfig"))
        vae = sb.build_vae(args, {**WAN21_VAE, **TINY["wan21"]}, device="cpu", seed=1, init=init_weights)
        convs = [m for m in vae.modules() if isinstance(m, torch.nn.Conv3d)]
        converted = [m.weight.is_contiguous(memory_format=torch.channels_last_3d) for m in convs]
        moved = [not m.weight.is_contiguous() for m in convs]  # 1x1x1 kernels are both layouts at once
    finally:
        vae_loader.current_platform = real
    on_cpu = list(sb.channels_last_3d_policy(sb.server_args(sb.pipeline_config("wan:WanT2V480PConfig"))))
    return dict(policy=policy, convs=len(convs), converted=sum(converted), moved=sum(moved), on_cpu=on_cpu)


def _decode_dtypes() -> dict[str, Any]:
    from sglang.multimodal_gen.runtime.utils.precision import resolve_decode_precision

    from kda_lab.e2e import sglang_build as sb

    out: dict[str, Any] = {}
    for path in (
        "wan:FastWan2_2_TI2V_5B_Config",
        "wan:WanT2V480PConfig",
        "wan:WanT2V720PConfig",
        "ltx_2:LTX2PipelineConfig",
        "qwen_image:QwenImagePipelineConfig",
        "flux:FluxPipelineConfig",
        "zimage:ZImagePipelineConfig",
        "hunyuan:HunyuanConfig",
    ):
        pc = sb.pipeline_config(path)
        pc.vae_decode_precision_high = "bf16"  # a tier-dependent override: "high" must differ from the others
        args = sb.server_args(pc)
        out[path] = {
            q: [str(sb.decode_dtype(args, q)), str(resolve_decode_precision(args, "vae", quality=q))]
            for q in QUALITIES
        }
    return out


def _recipes() -> dict[str, Any]:
    import torch

    from kda_lab.e2e import models
    from kda_lab.e2e.recipe_check import fusion_mismatches, mismatches
    from kda_lab.e2e.recipes import RECIPES

    dit_rows = {
        "dits.wanvideo:WanTransformer3DModel": "wan22_t2v_dit",
        "dits.hunyuanvideo:HunyuanVideoTransformer3DModel": "hunyuanvideo_dit",
        "dits.qwen_image:QwenImageTransformer2DModel": "qwen_image_dit",
        "dits.zimage:ZImageTransformer2DModel": "zimage_dit",
        "dits.flux:FluxTransformer2DModel": "flux_dit",
        "dits.ltx_2:LTX2VideoTransformer3DModel": "ltx2_dit",
    }
    dits = {m: models.BY_NAME[r].build("cpu", True, 1).module for m, r in dit_rows.items()}
    out: dict[str, Any] = {}
    for r in RECIPES:
        dit = dits[r.dit_module]
        wrong = {
            "steps": dataclasses.replace(r, steps=r.steps + 1),
            "guidance_scale": dataclasses.replace(r, guidance_scale=r.guidance_scale + 0.5),
            "cfg": dataclasses.replace(r, cfg="batched" if r.cfg != "batched" else "sequential"),
            "height": dataclasses.replace(r, height=r.height + 64),
            "tokens": dataclasses.replace(r, tokens=r.tokens + 1),
            "decode_dtype": dataclasses.replace(
                r, decode_dtype=torch.float16 if r.decode_dtype != torch.float16 else torch.bfloat16
            ),
            "bcg_default": dataclasses.replace(r, bcg_default=not r.bcg_default),
            "bcg_validated": dataclasses.replace(r, bcg_validated=not r.bcg_validated),
            "dit_arch": dataclasses.replace(r, dit_arch={**r.dit_arch, "num_layerz": 1}),
        }
        out[r.name] = dict(
            ok=mismatches(r) + fusion_mismatches(r, dit),
            wrong={k: mismatches(v) for k, v in wrong.items()},
            wrong_fusions=fusion_mismatches(
                dataclasses.replace(
                    r,
                    fusions=(*r.fusions, "HUNYUAN_QKNORM")
                    if "HUNYUAN_QKNORM" not in r.fusions
                    else r.fusions[1:],
                ),
                dit,
            ),
        )
    return out


def _main() -> None:
    import torch

    from kda_lab.e2e.runtime import init_sglang

    # the opposite of SGLang's defaults first: init_sglang must set both switches the way SGLang's worker does
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = False
    ready = init_sglang("cpu")
    from sglang.multimodal_gen.runtime.server_args import ServerArgs

    numerics = {"sglang": [ServerArgs.allow_cudnn_tf32, ServerArgs.allow_bf16_reduced_precision_reduction],
                "ready": [ready["cudnn_tf32"], ready["bf16_reduced_precision_reduction"]],
                "torch": [torch.backends.cudnn.allow_tf32,
                          torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction]}
    from kda_lab.e2e import sglang_build

    stages = sglang_build.import_stages()
    results = {
        "stages": stages,
        "rows": _rows(),
        "channels_last": _channels_last(),
        "decode_dtypes": _decode_dtypes(),
        "recipes": _recipes(),
        "numerics": numerics,
    }
    print("E2E-VAE-RESULTS " + json.dumps(results, default=str))


# ------------------------------------------------------------------------------------------------ the tests


@pytest.fixture(scope="module")
def results() -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if k != "OUT"}
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    r = subprocess.run(
        [sys.executable, "-m", "tests.test_e2e_vae_rows"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    lines = [x for x in r.stdout.splitlines() if x.startswith("E2E-VAE-RESULTS ")]
    assert r.returncode == 0 and lines, r.stdout[-3000:] + r.stderr[-6000:]
    return json.loads(lines[-1].removeprefix("E2E-VAE-RESULTS "))


def test_every_vae_row_builds_and_decodes_tiny_through_sglang_build(results: dict[str, Any]) -> None:
    from kda_lab.e2e.vae_rows import VAE_ROWS

    rows = results["rows"]
    assert set(rows) == {r.name for r in VAE_ROWS}
    for r in VAE_ROWS:
        rec = rows[r.name]
        assert r.kind == "vae" and rec["finite"], rec
        assert rec["shape"] == rec["fp32_shape"] and rec["shape"][1] == 3, rec  # RGB frames / images
        # DecodingStage.decode maps to [0, 1]; LTX-2's _decode_video returns the raw decoder output (its video
        # processor clamps later)
        if r.name != "ltx2_vae_decode":
            assert rec["lo"] >= 0.0 and rec["hi"] <= 1.0, rec
        assert rec["err"] < 0.1, rec  # the decode-dtype output is near its fp32 yardstick
        # placed in the decode dtype the stage declares, which is the row's dtype
        assert rec["param_dtypes"] == [rec["row_dtype"]] == [rec["config"]["decode_dtype"]], rec
    assert rows["wan22_vae_decode"]["shape"] == [
        1,
        3,
        5,
        32,
        32,
    ]  # 2 latent frames -> 5, 16x spatial (8 x patch 2)
    assert rows["qwen_image_vae_decode"]["shape"] == [1, 3, 1, 32, 32]
    assert rows["flux1_vae_decode"]["shape"] == [1, 3, 32, 32]
    assert rows["ltx2_vae_decode"]["config"]["vae_tiling"] is True


def test_production_latents_are_the_default_requests() -> None:
    from kda_lab.e2e.recipes import RECIPES
    from kda_lab.e2e.vae_rows import LATENTS, VAE_BY_NAME

    assert set(LATENTS) == set(VAE_BY_NAME)
    for r in RECIPES:
        if r.vae_row in LATENTS:
            assert LATENTS[r.vae_row] == r.latent, (
                r.name
            )  # recipe_check derives r.latent from SGLang's configs
    # the Wan 2.1 rows are not a recipe's default request: 81 frames at 4x8x8 over 480x832 and 720x1280
    assert LATENTS["wan21_vae_decode_480p"] == (1, 16, (81 - 1) // 4 + 1, 480 // 8, 832 // 8)
    assert LATENTS["wan21_vae_decode_720p"] == (1, 16, (81 - 1) // 4 + 1, 720 // 8, 1280 // 8)


def test_channels_last_3d_follows_sglang_policy(results: dict[str, Any]) -> None:
    rec = results["channels_last"]
    policy = {k: tuple(v) for k, v in rec["policy"].items()}
    # a CUDA server: Wan (incl. Wan 2.2 TI2V) and Qwen-Image always; LTX-2 on one GPU; multi-GPU Wan the
    # decoder only
    assert policy["wan:WanT2V480PConfig@1"] == (True, "")
    assert policy["wan:WanT2V480PConfig@2"] == (True, "decoder.")
    assert policy["wan:FastWan2_2_TI2V_5B_Config@1"] == (True, "")
    assert policy["qwen_image:QwenImagePipelineConfig@1"] == (True, "")
    assert policy["ltx_2:LTX2PipelineConfig@1"] == (True, "")
    assert policy["ltx_2:LTX2PipelineConfig@2"][0] is False
    for path in ("flux:FluxPipelineConfig", "zimage:ZImagePipelineConfig", "hunyuan:HunyuanConfig"):
        assert policy[f"{path}@1"][0] is False
    # the loader's conversion ran on every Conv3d (the kernels wider than 1 now have NDHWC strides)
    assert rec["convs"] > 0 and rec["converted"] == rec["convs"] and rec["moved"] > 0, rec
    assert rec["on_cpu"] == [False, ""]  # the CPU platform keeps the default layout


def test_decode_dtype_is_resolve_decode_precision_for_every_tier(results: dict[str, Any]) -> None:
    table = results["decode_dtypes"]
    for path, tiers in table.items():
        for q in QUALITIES:
            ours, sglang = tiers[q]
            assert ours == sglang, (path, q)
        assert tiers["high"][0] == "torch.bfloat16", path  # the tier reaches SGLang's function
    assert table["wan:FastWan2_2_TI2V_5B_Config"]["lossless"][0] == "torch.float32"
    assert table["wan:WanT2V480PConfig"]["lossless"][0] == "torch.bfloat16"
    assert table["hunyuan:HunyuanConfig"]["lossless"][0] == "torch.float16"


def test_recipes_match_sglang_and_a_wrong_value_is_rejected(results: dict[str, Any]) -> None:
    from kda_lab.e2e.recipes import RECIPES

    recs = results["recipes"]
    assert set(recs) == {r.name for r in RECIPES}
    for name, rec in recs.items():
        assert rec["ok"] == [], (name, rec["ok"])
        for field_name, found in rec["wrong"].items():
            assert found and any(
                field_name.split("_")[0] in f or "latent" in f or "width" in f for f in found
            ), (name, field_name, found)
        assert rec["wrong_fusions"], name


def test_numerics_policy_is_sglangs_worker_default(results: dict[str, Any]) -> None:
    want = results["numerics"]["sglang"]
    assert want == [True, True]  # SGLang 0.5.23 keeps PyTorch's defaults: an fp32 decode's convs run TF32
    assert results["numerics"] == {"sglang": want, "ready": want, "torch": want}


def test_sglang_stages_import(results: dict[str, Any]) -> None:
    # "" where SGLang's own mm_utils imports; else the stand-in names what it lacks
    assert results["stages"] == "" or results["stages"].startswith("stand-in"), results["stages"]


if __name__ == "__main__":
    _main()
