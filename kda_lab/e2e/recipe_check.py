"""Check a :class:`recipes.Recipe` against the installed SGLang: every value SGLang's own objects hold is read
back from them (registry, pipeline config, sampling params, decode precision, BCG lists, quality-gated
fusion sites).

``mismatches(recipe)`` lists the differences (empty: the recipe is what SGLang serves);
``fusion_mismatches(recipe, dit)`` checks the fusion names against the sites a built DiT of the recipe's
class carries. Needs ``runtime.init_sglang`` first (the registry and the stages import SGLang's model
modules).
"""

from __future__ import annotations

import importlib
import math
from typing import Any

import torch

from kda_lab.e2e import sglang_build as sb
from kda_lab.e2e.recipes import Recipe

SAMPLE = "sglang.multimodal_gen.configs.sample."
DITS = "sglang.multimodal_gen.configs.models.dits."


def _cls(prefix: str, path: str) -> type:
    mod, _, name = path.partition(":")
    return getattr(importlib.import_module(prefix + mod), name)


def _diff(out: list[str], what: str, recipe_value: Any, sglang_value: Any) -> None:
    if recipe_value != sglang_value:
        out.append(f"{what}: recipe {recipe_value!r}, SGLang {sglang_value!r}")


def _openai_image_size() -> tuple[int, int]:
    from sglang.multimodal_gen.runtime.entrypoints.openai.protocol import ImageGenerationsRequest

    w, h = ImageGenerationsRequest.model_fields["size"].default.split("x")
    return int(w), int(h)


def _spatial_stride(pc: Any) -> tuple[int, int]:
    """(temporal, spatial) compression of the pipeline's VAE as its config states it."""
    if hasattr(pc, "vae_stride"):  # Wan 2.2 TI2V: the 48-channel VAE's stride (4, 16, 16)
        return int(pc.vae_stride[0]), int(pc.vae_stride[1])
    arch = pc.vae_config.arch_config
    spatial = next(
        int(v)
        for a in ("scale_factor_spatial", "spatial_compression_ratio")
        if (v := getattr(arch, a, None)) is not None and int(v) > 1
    )
    temporal = next(
        (
            int(v)
            for a in ("scale_factor_temporal", "temporal_compression_ratio")
            if (v := getattr(arch, a, None)) is not None
        ),
        1,
    )
    return temporal, spatial


def _patch(pc: Any, arch: Any, latent_channels: int) -> tuple[int, int]:
    """(temporal, spatial) patch of the DiT's sequence over the latent."""
    if hasattr(pc, "PATCH_SIZE"):  # Z-Image
        return int(pc.F_PATCH_SIZE), int(pc.PATCH_SIZE)
    if type(pc).__name__.startswith("LTX2"):  # LTX-2 patchifies 1x1x1 (LTX2PipelineConfig.patch_size)
        return int(pc.patch_size_t), int(pc.patch_size)
    ps = arch.patch_size
    if isinstance(ps, (tuple, list)):  # Wan: (1, 2, 2)
        return int(ps[0]), int(ps[1])
    if hasattr(arch, "patch_size_t"):  # HunyuanVideo
        return int(arch.patch_size_t), int(ps)
    # FLUX / Qwen-Image pack 2x2 latent pixels into one token: in_channels = 4 x latent channels
    return 1, math.isqrt(int(arch.in_channels) // latent_channels)


def mismatches(recipe: Recipe) -> list[str]:
    from sglang.multimodal_gen.registry import _get_config_info, get_pipeline_class
    from sglang.multimodal_gen.runtime.server_args import server_args as sa_mod
    from sglang.multimodal_gen.runtime.utils.precision import resolve_decode_precision

    out: list[str] = []
    pc_cls = _cls(sb.PIPELINE_CONFIGS, recipe.pipeline_config)
    sp_cls = _cls(SAMPLE, recipe.sampling_params)
    info = _get_config_info(recipe.hf_id)
    if info is None:
        return [f"hf_id {recipe.hf_id!r} is not registered"]
    _diff(out, "registered pipeline config", pc_cls, info.pipeline_config_cls)
    _diff(out, "registered sampling params", sp_cls, info.sampling_param_cls)
    pipe = get_pipeline_class(recipe.pipeline)
    if pipe is None:
        out.append(f"pipeline {recipe.pipeline!r} is not a registered SGLang pipeline")
    pc, sp = pc_cls(), sp_cls()

    # steps, guidance, size
    dmd = getattr(pc, "dmd_denoising_steps", None)
    _diff(out, "steps", recipe.steps, len(dmd) if dmd else sp.num_inference_steps)
    if recipe.stage2_steps:
        from sglang.multimodal_gen.configs.pipeline_configs.ltx_2 import STAGE_2_DISTILLED_SIGMA_VALUES

        _diff(out, "stage2_steps", recipe.stage2_steps, len(STAGE_2_DISTILLED_SIGMA_VALUES) - 1)
    _diff(out, "guidance_scale", recipe.guidance_scale, sp.guidance_scale)
    if sp.height is None and sp.width is None:
        _diff(out, "resolution_source", recipe.resolution_source, "openai_image_api")
        _diff(out, "width x height", (recipe.width, recipe.height), _openai_image_size())
    else:
        _diff(out, "resolution_source", recipe.resolution_source, "sampling_params")
        _diff(out, "width x height", (recipe.width, recipe.height), (sp.width, sp.height))
    _diff(out, "frames", recipe.frames, sp.num_frames)

    # how guidance runs the DiT
    uses_cfg = sp.should_use_classifier_free_guidance()
    if dmd:
        cfg = "none"  # DmdDenoisingStage: one positive forward per step
    elif type(pc).__name__.startswith("LTX2"):
        cfg = "batched" if uses_cfg else "none"
    else:
        cfg = "sequential" if uses_cfg else "none"
    _diff(out, "cfg", recipe.cfg, cfg)
    _diff(out, "should_use_guidance", recipe.should_use_guidance, pc.should_use_guidance)

    # latent and tokens
    t, s = _spatial_stride(pc)
    h, w = recipe.height // s, recipe.width // s
    c = recipe.latent[1]
    want = (1, c, (recipe.frames - 1) // t + 1, h, w) if len(recipe.latent) == 5 else (1, c, h, w)
    if recipe.frames == 1 and len(recipe.latent) == 5:  # Qwen-Image decodes a one-frame video latent
        want = (1, c, 1, h, w)
    _diff(out, "latent", recipe.latent, want)
    dit_cfg = _cls(DITS, recipe.dit_config)()
    _diff(out, "pipeline DiT config", type(pc.dit_config), type(dit_cfg))
    unknown = [k for k in recipe.dit_arch if not hasattr(dit_cfg.arch_config, k)]
    if unknown:
        out.append(f"dit_arch keys {unknown} are not fields of {type(dit_cfg.arch_config).__name__}")
    else:
        dit_cfg.update_model_arch(dict(recipe.dit_arch))
    pt, ps = _patch(pc, dit_cfg.arch_config, c)
    frames = want[2] if len(want) == 5 else 1
    scale = 2 if recipe.stage2_steps else 1  # two-stage: stage 1 at half width and height
    _diff(out, "tokens", recipe.tokens, (frames // pt) * (h // scale // ps) * (w // scale // ps))
    if recipe.stage2_steps:
        _diff(out, "stage2_tokens", recipe.stage2_tokens, (frames // pt) * (h // ps) * (w // ps))

    # decode
    args = sb.server_args(pc)
    _diff(out, "decode_dtype", recipe.decode_dtype, resolve_decode_precision(args, "vae", quality="lossless"))
    _diff(out, "vae_tiling", recipe.vae_tiling, bool(pc.vae_tiling))
    if recipe.vae_row:
        from kda_lab.e2e.vae_rows import VAE_BY_NAME

        row = VAE_BY_NAME.get(recipe.vae_row)
        from kda_lab.e2e.models import BY_NAME as ROW_BY_NAME

        row = row or ROW_BY_NAME.get(recipe.vae_row)
        _diff(out, "vae_row module", recipe.vae_module, row.module if row else None)

    # breakable CUDA graphs
    deploy = pc.get_model_deployment_config()
    _diff(out, "bcg_default", recipe.bcg_default, recipe.pipeline in deploy.bcg_default_pipeline_class_names)
    refs = sa_mod._normalized_bcg_model_refs(recipe.hf_id)
    validated = type(pc).__name__ in sa_mod.BREAKABLE_CUDA_GRAPH_SUPPORTED_PIPELINE_CONFIGS and bool(
        refs & sa_mod.BREAKABLE_CUDA_GRAPH_SUPPORTED_MODEL_IDS
    )
    _diff(out, "bcg_validated", recipe.bcg_validated, validated)
    return out


def fusions_marked(dit: torch.nn.Module, quality: str = "lossless") -> tuple[str, ...]:
    """Names (in ``sglang.kernels.ops.diffusion``) of the ``_QUALITY_FUSION_HANDLERS`` fusions that mark a
    site in ``dit`` and that ``toggle_quality_fusions`` mounts at ``quality``."""
    sb.import_stages()
    import sglang.kernels.ops.diffusion as ops
    from sglang.multimodal_gen.configs.sample.sampling_params import quality_allows
    from sglang.multimodal_gen.runtime.pipelines_core.stages.denoising import _QUALITY_FUSION_HANDLERS

    names = {id(v): k for k, v in vars(ops).items() if isinstance(v, ops.QualityGatedFusion)}
    return tuple(
        names[id(f)]
        for tier, f in _QUALITY_FUSION_HANDLERS
        if quality_allows(quality, tier) and next(iter(f.iter_sites(dit)), None) is not None
    )


def fusion_mismatches(recipe: Recipe, dit: torch.nn.Module) -> list[str]:
    out: list[str] = []
    _diff(out, "fusions", tuple(sorted(recipe.fusions)), tuple(sorted(fusions_marked(dit))))
    return out
