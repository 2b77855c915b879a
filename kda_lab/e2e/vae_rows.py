"""e2e rows of the VAE decodes a default SGLang 0.5.23 request runs, built and decoded through
``sglang_build``.

Each row takes the pipeline config SGLang registers for the model, the VAE checkpoint's ``config.json``
values (the arch the loader reads into ``vae_config``; the Wan 2.2 values are
``Wan-AI/Wan2.2-TI2V-5B-Diffusers``' ``vae/config.json``), builds SGLang's registered class through the
loader's steps (``sglang_build.build_vae``: channels_last_3d where SGLang's policy says so, the platform's
quality-gated fast paths), places it in the decode dtype the decoding stage declares, and times
``sglang_build.decode`` at ``quality="lossless"`` (the request default): scale/shift, the pipeline's tiling
default and the fast-path gate as the decoding stage applies them. Latents are the denoising stage's output
at the model's default size, fp32 (the dtype the denoising loop keeps them in).

``tiny`` shrinks the VAE widths and depths and the latent for CPU CI (same classes, same code path). The
rows with no production row of a task folder to cite have ``cites=""``: no task measures a Wan, Qwen-Image
or LTX-2 VAE kernel.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from kda_lab.e2e import sglang_build as sb
from kda_lab.e2e.models import Built, Row, init_weights

# Wan-AI/Wan2.2-TI2V-5B-Diffusers vae/config.json (48 latent channels, 16x16 spatial, patchified 2x2 RGB io)
WAN22_VAE: dict[str, Any] = {
    "_class_name": "AutoencoderKLWan",
    "base_dim": 160,
    "decoder_base_dim": 256,
    "z_dim": 48,
    "dim_mult": (1, 2, 4, 4),
    "num_res_blocks": 2,
    "attn_scales": (),
    "temperal_downsample": (False, True, True),
    "dropout": 0.0,
    "in_channels": 12,
    "out_channels": 12,
    "patch_size": 2,
    "scale_factor_spatial": 16,
    "scale_factor_temporal": 4,
    "is_residual": True,
    "clip_output": False,
    "latents_mean": (
        -0.2289,
        -0.0052,
        -0.1323,
        -0.2339,
        -0.2799,
        0.0174,
        0.1838,
        0.1557,
        -0.1382,
        0.0542,
        0.2813,
        0.0891,
        0.1570,
        -0.0098,
        0.0375,
        -0.1825,
        -0.2246,
        -0.1207,
        -0.0698,
        0.5109,
        0.2665,
        -0.2108,
        -0.2158,
        0.2502,
        -0.2055,
        -0.0322,
        0.1109,
        0.1567,
        -0.0729,
        0.0899,
        -0.2799,
        -0.1230,
        -0.0313,
        -0.1649,
        0.0117,
        0.0723,
        -0.2839,
        -0.2083,
        -0.0520,
        0.3748,
        0.0152,
        0.1957,
        0.1433,
        -0.2944,
        0.3573,
        -0.0548,
        -0.1681,
        -0.0667,
    ),
    "latents_std": (
        0.4765,
        1.0364,
        0.4514,
        1.1677,
        0.5313,
        0.4990,
        0.4818,
        0.5013,
        0.8158,
        1.0344,
        0.5894,
        1.0901,
        0.6885,
        0.6165,
        0.8454,
        0.4978,
        0.5759,
        0.3523,
        0.7135,
        0.6804,
        0.5833,
        1.4146,
        0.8986,
        0.5659,
        0.7069,
        0.5338,
        0.4889,
        0.4917,
        0.4069,
        0.4999,
        0.6866,
        0.4093,
        0.5709,
        0.6065,
        0.6415,
        0.4944,
        0.5726,
        1.2042,
        0.5458,
        1.6887,
        0.3971,
        1.0600,
        0.3943,
        0.5537,
        0.5444,
        0.4089,
        0.7468,
        0.7744,
    ),
}
# Wan-AI/Wan2.1-T2V-*-Diffusers vae/config.json: SGLang's WanVAEArchConfig defaults are this VAE (z_dim 16,
# base 96,
# the 16 latent statistics); the checkpoint restates them.
WAN21_VAE: dict[str, Any] = {"_class_name": "AutoencoderKLWan", "base_dim": 96, "z_dim": 16}
# Qwen/Qwen-Image vae/config.json: the Wan 2.1 VAE architecture and its 16 latent statistics (WAN21_LATENTS_*,
# the
# values of SGLang's WanVAEArchConfig) under Qwen-Image's class
WAN21_LATENTS_MEAN = (
    -0.7571,
    -0.7089,
    -0.9113,
    0.1075,
    -0.1745,
    0.9653,
    -0.1517,
    1.5508,
    0.4134,
    -0.0715,
    0.5517,
    -0.3632,
    -0.1922,
    -0.9497,
    0.2503,
    -0.2921,
)
WAN21_LATENTS_STD = (
    2.8184,
    1.4541,
    2.3275,
    2.6558,
    1.2196,
    1.7708,
    2.6052,
    2.0743,
    3.2687,
    2.1526,
    2.8652,
    1.5579,
    1.6382,
    1.1253,
    2.8251,
    1.9160,
)
QWEN_IMAGE_VAE: dict[str, Any] = {
    "_class_name": "AutoencoderKLQwenImage",
    "base_dim": 96,
    "z_dim": 16,
    "latents_mean": WAN21_LATENTS_MEAN,
    "latents_std": WAN21_LATENTS_STD,
}
# Lightricks/LTX-2 vae: SGLang's LTXVideoVAEArchConfig defaults are LTX-2's video VAE (128 latent channels,
# 32x32x8)
LTX2_VAE: dict[str, Any] = {"_class_name": "AutoencoderKLLTX2Video"}
# black-forest-labs/FLUX.1-dev vae/config.json (Tongyi-MAI/Z-Image(-Turbo) ships the same VAE)
FLUX1_VAE: dict[str, Any] = {
    "_class_name": "AutoencoderKL",
    "act_fn": "silu",
    "block_out_channels": (128, 256, 512, 512),
    "down_block_types": ("DownEncoderBlock2D",) * 4,
    "up_block_types": ("UpDecoderBlock2D",) * 4,
    "in_channels": 3,
    "out_channels": 3,
    "latent_channels": 16,
    "layers_per_block": 2,
    "norm_num_groups": 32,
    "mid_block_add_attention": True,
    "sample_size": 1024,
    "scaling_factor": 0.3611,
    "shift_factor": 0.1159,
    "force_upcast": True,
    "use_quant_conv": False,
    "use_post_quant_conv": False,
}


def _tiny_wan(z_dim: int) -> dict[str, Any]:
    return {"base_dim": 8, "decoder_base_dim": 16 if z_dim == 48 else None, "num_res_blocks": 1}


TINY: dict[str, dict[str, Any]] = {
    "wan22": _tiny_wan(48),
    "wan21": _tiny_wan(16),
    "qwen": {"base_dim": 8, "num_res_blocks": 1},
    "ltx2": {
        "block_out_channels": [8, 16, 32, 64],
        "layers_per_block": [1, 1, 1, 1, 1],
        "decoder_block_out_channels": [16, 32, 64],
        "decoder_layers_per_block": [1, 1, 1, 1],
    },
    "flux1": {"block_out_channels": (16, 32, 32, 32), "layers_per_block": 1, "norm_num_groups": 8},
}


def vae_row(
    pipeline_config: str,
    checkpoint: dict[str, Any],
    tiny_key: str,
    latent: tuple[int, ...],
    tiny_latent: tuple[int, ...],
    seed: int,
) -> Callable[[str, bool, int | None], Built]:
    """A ``Row.build`` for one VAE decode (``blocks`` is ignored: a VAE has no block count to choose)."""

    def build(device: str, tiny: bool, blocks: int | None) -> Built:
        args = sb.server_args(sb.pipeline_config(pipeline_config))
        arch = {**checkpoint, **(TINY[tiny_key] if tiny else {})}
        vae = sb.place_for_decode(
            sb.build_vae(args, arch, device=device, seed=seed, init=init_weights), args, device
        )
        shape = tiny_latent if tiny else latent
        gen = torch.Generator().manual_seed(seed + 1)
        z = torch.randn(shape, generator=gen).to(device)
        converted = sum(
            1
            for m in vae.modules()
            if isinstance(m, torch.nn.Conv3d)
            and m.weight.is_contiguous(memory_format=torch.channels_last_3d)
            and not m.weight.is_contiguous()
        )
        config = {k: v for k, v in TINY[tiny_key].items()} if tiny else {}
        config.update(
            pipeline_config=pipeline_config,
            decode_dtype=str(sb.decode_dtype(args, "lossless")),
            vae_tiling=bool(args.pipeline_config.vae_tiling),
            channels_last_3d_convs=converted,
        )

        def fp32() -> torch.Tensor:
            # SGLang's own decode at a decode-only fp32 dtype: decode_raw casts the module to fp32 for the
            # call
            # (temporary_module_dtype) and back; "exact" runs the reference path of any gated fast path
            return sb.decode(vae, z, args, "exact", vae_dtype=torch.float32).float()

        def at_quality(quality: str) -> Callable[[], torch.Tensor]:
            return lambda: sb.decode(vae, z, args, quality)

        return Built(vae, at_quality("lossless"), config, f"latent {list(shape)}", fp32, at_quality)

    return build


# the production latent of each row: the denoised latent of the model's default request
# (recipes.Recipe.latent)
LATENTS: dict[str, tuple[int, ...]] = {
    "wan22_vae_decode": (1, 48, 31, 44, 80),
    "wan21_vae_decode_480p": (1, 16, 21, 60, 104),
    "wan21_vae_decode_720p": (1, 16, 21, 90, 160),
    "ltx2_vae_decode": (1, 128, 16, 16, 24),
    "qwen_image_vae_decode": (1, 16, 1, 128, 128),
    "flux1_vae_decode": (1, 16, 128, 128),
}


@dataclass(frozen=True)
class RequestVae:
    """How a VAE row's or a request recipe's decode is built (a recipe's latent is its own)."""

    pipeline_config: str
    checkpoint: dict[str, Any]
    tiny_key: str
    tiny_latent: tuple[int, ...]
    seed: int


# how each VAE row's decode is built (one source for the row and its meta-device decode)
VAE_SOURCES: dict[str, RequestVae] = {
    "wan22_vae_decode": RequestVae("wan:FastWan2_2_TI2V_5B_Config", WAN22_VAE, "wan22", (1, 48, 2, 2, 2), 31),
    "wan21_vae_decode_480p": RequestVae("wan:WanT2V480PConfig", WAN21_VAE, "wan21", (1, 16, 2, 4, 4), 33),
    "wan21_vae_decode_720p": RequestVae("wan:WanT2V720PConfig", WAN21_VAE, "wan21", (1, 16, 2, 4, 4), 35),
    "ltx2_vae_decode": RequestVae("ltx_2:LTX2PipelineConfig", LTX2_VAE, "ltx2", (1, 128, 2, 2, 2), 37),
    "qwen_image_vae_decode": RequestVae("qwen_image:QwenImagePipelineConfig", QWEN_IMAGE_VAE, "qwen",
                                        (1, 16, 1, 4, 4), 39),
    "flux1_vae_decode": RequestVae("flux:FluxPipelineConfig", FLUX1_VAE, "flux1", (1, 16, 4, 4), 41),
}


def _source_row(name: str) -> Callable[[str, bool, int | None], Built]:
    src = VAE_SOURCES[name]
    return vae_row(src.pipeline_config, src.checkpoint, src.tiny_key, LATENTS[name], src.tiny_latent,
                   src.seed)


VAE_ROWS: tuple[Row, ...] = (
    # FastWan 2.2 TI2V-5B (Wan 2.2 VAE), 704x1280, 121 frames: latent [1, 48, 31, 44, 80] (4x16x16
    # compression);
    # the pipeline config decodes in fp32 (vae_decode_precision="fp32"). No task row measures this VAE: cites
    # "".
    Row(
        "wan22_vae_decode",
        "FastWan 2.2 TI2V-5B",
        "vae",
        "vaes.wanvae:AutoencoderKLWan",
        torch.float32,
        "",
        _source_row("wan22_vae_decode"),
    ),
    # Wan 2.1 T2V 480P (1.3B config), 480x832, 81 frames: latent [1, 16, 21, 60, 104], bf16 decode. No task
    # row.
    Row(
        "wan21_vae_decode_480p",
        "Wan 2.1 T2V",
        "vae",
        "vaes.wanvae:AutoencoderKLWan",
        torch.bfloat16,
        "",
        _source_row("wan21_vae_decode_480p"),
    ),
    # Wan 2.1 T2V 720P (14B config), 720x1280, 81 frames: latent [1, 16, 21, 90, 160], bf16 decode. No task
    # row.
    Row(
        "wan21_vae_decode_720p",
        "Wan 2.1 T2V",
        "vae",
        "vaes.wanvae:AutoencoderKLWan",
        torch.bfloat16,
        "",
        _source_row("wan21_vae_decode_720p"),
    ),
    # LTX-2 one-stage, 768x512, 121 frames: latent [1, 128, 16, 16, 24] (32x32 spatial, 8x temporal), bf16,
    # SGLang's
    # default tiled decode (LTX2PipelineConfig.vae_tiling is the base default True). No task row.
    Row(
        "ltx2_vae_decode",
        "LTX-2",
        "vae",
        "vaes.ltx_2_vae:AutoencoderKLLTX2Video",
        torch.bfloat16,
        "",
        _source_row("ltx2_vae_decode"),
    ),
    # Qwen-Image 1024x1024: latent [1, 16, 1, 128, 128] (post_denoising_loop's 5-D unpack), bf16. No task row.
    Row(
        "qwen_image_vae_decode",
        "Qwen-Image",
        "vae",
        "vaes.autoencoder_kl_qwenimage:AutoencoderKLQwenImage",
        torch.bfloat16,
        "",
        _source_row("qwen_image_vae_decode"),
    ),
    # FLUX.1-dev 1024x1024 (Z-Image decodes the same VAE the same way): latent [1, 16, 128, 128], bf16; its
    # GroupNorm+SiLU at 128x1024x1024 is a production row.
    Row(
        "flux1_vae_decode",
        "FLUX.1 / Z-Image",
        "vae",
        "vaes.autoencoder:AutoencoderKL",
        torch.bfloat16,
        "h200_diffusion_group_norm_silu__multi_shape:flux_vae_apply_1x128x1024x1024",
        _source_row("flux1_vae_decode"),
    ),
)
VAE_BY_NAME: dict[str, Row] = {r.name: r for r in VAE_ROWS}


def meta_decode(name: str, tiny: bool = False) -> Callable[[], Any]:
    """The VAE row ``name``'s decode of its production latent on the ``meta`` device: SGLang's decoder as the
    loader builds it, in the decode dtype, tiled where the pipeline config tiles, with no data and no
    compute. Every convolution's shape comes out (``kda e2e --conv-floor --device meta``: the conv work of a
    decode, on a CPU, in seconds). It calls ``vae.decode`` as the decoding stage does, without the stage's
    latent scaling, which changes no shape."""
    src = VAE_SOURCES[name]
    args = sb.server_args(sb.pipeline_config(src.pipeline_config))
    checkpoint = {**src.checkpoint, **(TINY[src.tiny_key] if tiny else {})}
    dtype = sb.decode_dtype(args, "lossless")
    try:
        vae = sb.build_vae(args, checkpoint, device="meta", seed=0, init=lambda module, seed: None)
    except NotImplementedError:  # a constructor that copies data (Qwen-Image's): built on the CPU, then moved
        vae = sb.build_vae(args, checkpoint, device="cpu", seed=0, init=lambda module, seed: None).to("meta")
    vae = vae.to(dtype)
    if args.pipeline_config.vae_tiling and hasattr(vae, "enable_tiling"):
        vae.enable_tiling()
    z = torch.empty(src.tiny_latent if tiny else LATENTS[name], device="meta", dtype=dtype)
    return lambda: vae.decode(z)


# hunyuanvideo-community/HunyuanVideo vae/config.json: SGLang's HunyuanVAEArchConfig defaults are this VAE
HUNYUAN_VAE: dict[str, Any] = {"_class_name": "AutoencoderKLHunyuanVideo"}
TINY["hunyuan"] = {"block_out_channels": (16, 16, 32, 32), "layers_per_block": 1, "norm_num_groups": 8}
REQUEST_VAES: dict[str, RequestVae] = {
    "qwen_image": RequestVae(
        "qwen_image:QwenImagePipelineConfig", QWEN_IMAGE_VAE, "qwen", (1, 16, 1, 4, 4), 39
    ),
    "zimage_turbo": RequestVae("zimage:ZImagePipelineConfig", FLUX1_VAE, "flux1", (1, 16, 4, 4), 41),
    "zimage": RequestVae("zimage:ZImagePipelineConfig", FLUX1_VAE, "flux1", (1, 16, 4, 4), 41),
    "flux1_dev": RequestVae("flux:FluxPipelineConfig", FLUX1_VAE, "flux1", (1, 16, 4, 4), 41),
    "hunyuanvideo": RequestVae("hunyuan:HunyuanConfig", HUNYUAN_VAE, "hunyuan", (1, 16, 2, 2, 2), 43),
    "ltx2": RequestVae("ltx_2:LTX2PipelineConfig", LTX2_VAE, "ltx2", (1, 128, 2, 2, 2), 37),
    "fastwan22_ti2v_5b": RequestVae(
        "wan:FastWan2_2_TI2V_5B_Config", WAN22_VAE, "wan22", (1, 48, 2, 2, 2), 31
    ),
}
