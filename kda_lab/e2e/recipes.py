"""Whole default requests of SGLang 0.5.23 diffusion models, as data an e2e runner can use directly.

One :class:`Recipe` per served model: the pipeline and its configs, the default sampling (steps, guidance and
how classifier-free guidance runs the transformer), the default size and the tokens the DiT sees there, the
DiT class and the checkpoint arch over SGLang's config defaults, the VAE decode at ``quality="lossless"`` (the
request default), the breakable-CUDA-graph default and the quality-gated DiT fusions that mark sites in the
DiT. Paths below are under ``sglang/multimodal_gen/`` (0.5.23):

- registry: ``configs/pipeline_configs/<model>.py: register()`` maps ``hf_id`` to ``(sampling_params,
  pipeline_config)`` (wan.py:558-571, qwen_image.py:882-885, zimage.py:548-560, flux.py:912-916,
  hunyuan.py:181-185, ltx_2.py:695-698); ``pipeline``: the ``pipeline_name`` the checkpoint's
  ``model_index.json`` selects (``runtime/pipelines/*.py``), ``LTX2TwoStagePipeline`` by
  ``--pipeline-class-name``.
- steps / guidance / size: the sampling-params class defaults (sample/qwenimage.py:10-15,
sample/zimage.py:11-34,
  sample/flux.py:11-19, sample/hunyuan.py:11-19, sample/ltx_2.py:9-29, sample/wan.py:218-226). FastWan's 3
  steps are ``FastWan2_2_TI2V_5B_Config.dmd_denoising_steps`` (pipeline_configs/wan.py:273-277) run by
  ``DmdDenoisingStage`` (stages/denoising_dmd.py:76-86), which ignores the step count and guidance of its
  sampling params. Qwen-Image and Z-Image leave height/width ``None``: the OpenAI image API's default
  ``size="1024x1024"`` (entrypoints/openai/protocol.py:57) is the served default (the offline ``generate``
  path falls back to 1280x720, stages/input_validation.py:477).
- CFG: ``SamplingParams.should_use_classifier_free_guidance`` (sample/sampling_params.py:592; Z-Image's
  sample/zimage.py:18) decides; the shared ``DenoisingStage._predict_noise_with_cfg`` then runs the
  conditional and unconditional branches as two transformer forwards one after the other
  (stages/denoising.py:2294); LTX-2's stage concatenates them into one forward of batch 2
  (stages/model_specific_stages/ltx_2/denoising.py:1747-1795) and its two-stage refinement runs positive-only
  (same file, 1748-1752). ``should_use_guidance``: the pipeline config's flag (base.py:165): the pipeline
  hands the DiT a guidance value (FLUX.1 and HunyuanVideo embed it; no second forward).
- decode dtype: ``utils/precision.py: resolve_decode_precision`` over ``vae_decode_precision`` /
``vae_precision``
  (pipeline_configs/wan.py:102-103,253; qwen_image.py:160; zimage.py:88; flux.py:52; hunyuan.py:116;
  ltx_2.py:196); ``vae_tiling``: the pipeline config (base.py:187 default True; wan.py:86, qwen_image.py:156,
  flux.py:45 False).
- BCG: ``ServerArgs._breakable_cuda_graph_default`` (runtime/server_args/server_args.py:867-911) turns it on
only
  for a pipeline in its config's ``bcg_default_pipeline_class_names`` (only LTX-2's ``LTX2TwoStagePipeline``,
  pipeline_configs/ltx_2.py:213) on CUDA with >= 130 GB (``LTX2_RESIDENT_AUTO_ENABLE_MEM_GB``,
  server_args.py:104: an H200, not an H100), server warmup, no offload/LoRA/compile; ``bcg_validated``: the
  config is in ``BREAKABLE_CUDA_GRAPH_SUPPORTED_PIPELINE_CONFIGS`` and the model id in ``..._MODEL_IDS``
  (server_args.py:195-270), i.e. ``--enable-breakable-cuda-graph`` runs without the "not validated" warning.
- fusions: the entries of ``_QUALITY_FUSION_HANDLERS`` (stages/denoising.py:182-202) whose fusion marks a site
in
  the DiT class (``FUSED_LINEAR_GELU.mark`` etc. in models/dits/*.py), all tier "lossless": mounted by
  ``toggle_quality_fusions`` for a default request.
- DiT arch: the checkpoint's ``transformer/config.json`` values that differ from SGLang's DiT config defaults
  (Qwen-Image: 60 layers, 3584-wide text; Wan 2.2 TI2V-5B: 30 layers, 24x128 heads, FFN 14336, 48 channels;
  LTX-2: split RoPE); tokens are the DiT's sequence at the default size after patchify.

``tests/test_e2e_vae_rows.py`` reads every value SGLang's own objects hold back from them (``recipe_check``),
so the table cannot drift silently from the installed SGLang.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch


@dataclass(frozen=True)
class Recipe:
    name: str
    hf_id: str  # the registered model path (registry lookup key)
    pipeline: str  # pipeline_name of the ComposedPipelineBase that serves it
    pipeline_config: str  # "module:Class" under configs/pipeline_configs
    sampling_params: str  # "module:Class" under configs/sample
    steps: int  # denoising steps a default request runs
    guidance_scale: float  # the sampling params' guidance_scale (0.0/1.0: off)
    cfg: str  # "none" | "sequential" (2 DiT forwards per step) | "batched" (1 forward of batch 2)
    should_use_guidance: (
        bool  # pipeline_config.should_use_guidance (DiTs without a guidance embedding ignore it)
    )
    height: int
    width: int
    frames: int  # 1 for images
    resolution_source: str  # "sampling_params" | "openai_image_api" (sampling params leave it None)
    latent: tuple[int, ...]  # the denoised latent the decoding stage receives
    dit_module: str  # "module:Class" under runtime/models
    dit_config: str  # "module:Class" under configs/models/dits
    dit_arch: dict[str, Any]  # checkpoint values over the config defaults (DiTConfig.update_model_arch)
    tokens: int  # the DiT's (video/image) sequence at the default size
    text_tokens: int  # the text sequence the DiT attends to (padded length where the pipeline pads)
    vae_module: str  # "module:Class" under runtime/models
    vae_row: str  # the kda_lab.e2e row that times this decode ("" when none)
    decode_dtype: torch.dtype  # resolve_decode_precision at quality="lossless"
    vae_tiling: bool  # pipeline_config.vae_tiling: the decoding stage enables the VAE's tiling
    bcg_default: bool  # BCG on by default where the platform conditions hold
    bcg_validated: bool  # config and model id on SGLang's validated BCG lists
    fusions: tuple[str, ...]  # names in sglang.kernels.ops.diffusion of the lossless fusions marking the DiT
    stage2_steps: int = 0  # two-stage pipelines: refinement steps at full size (positive-only)
    stage2_tokens: int = 0
    # the `model` names of task.toml production rows this request runs (coverage: the families it should call)
    task_models: tuple[str, ...] = ()
    notes: str = field(default="", compare=False)

    @property
    def dit_forwards_per_step(self) -> int:
        return 2 if self.cfg == "sequential" else 1

    @property
    def dit_batch(self) -> int:
        return 2 if self.cfg == "batched" else 1


_WAN22_5B = dict(
    num_layers=30,
    num_attention_heads=24,
    attention_head_dim=128,
    ffn_dim=14336,
    in_channels=48,
    out_channels=48,
    text_dim=4096,
    freq_dim=256,
)

RECIPES: tuple[Recipe, ...] = (
    Recipe(
        name="qwen_image",
        hf_id="Qwen/Qwen-Image",
        pipeline="QwenImagePipeline",
        pipeline_config="qwen_image:QwenImagePipelineConfig",
        sampling_params="qwenimage:QwenImageSamplingParams",
        steps=50,
        guidance_scale=4.0,
        cfg="sequential",
        should_use_guidance=False,
        height=1024,
        width=1024,
        frames=1,
        resolution_source="openai_image_api",
        latent=(1, 16, 1, 128, 128),
        dit_module="dits.qwen_image:QwenImageTransformer2DModel",
        dit_config="qwenimage:QwenImageDitConfig",
        dit_arch=dict(num_layers=60, joint_attention_dim=3584),
        tokens=4096,
        text_tokens=19,
        vae_module="vaes.autoencoder_kl_qwenimage:AutoencoderKLQwenImage",
        vae_row="qwen_image_vae_decode",
        decode_dtype=torch.bfloat16,
        vae_tiling=False,
        bcg_default=False,
        bcg_validated=True,
        fusions=("FUSED_LINEAR_GELU", "QWEN_IMAGE_ADDED_QKV"),
        task_models=('Qwen-Image',),
        notes="text tokens: prompt-dependent (template tokens dropped); 19 is the captured production prompt",
    ),
    Recipe(
        name="zimage_turbo",
        hf_id="Tongyi-MAI/Z-Image-Turbo",
        pipeline="ZImagePipeline",
        pipeline_config="zimage:ZImagePipelineConfig",
        sampling_params="zimage:ZImageTurboSamplingParams",
        steps=9,
        guidance_scale=0.0,
        cfg="none",
        should_use_guidance=False,
        height=1024,
        width=1024,
        frames=1,
        resolution_source="sampling_params",
        latent=(1, 16, 128, 128),
        dit_module="dits.zimage:ZImageTransformer2DModel",
        dit_config="zimage:ZImageDitConfig",
        dit_arch={},
        tokens=4096,
        text_tokens=32,
        vae_module="vaes.autoencoder:AutoencoderKL",
        vae_row="flux1_vae_decode",
        decode_dtype=torch.bfloat16,
        vae_tiling=True,
        bcg_default=False,
        bcg_validated=True,
        fusions=(),
        task_models=('Z-Image', 'FLUX / Z-Image'),
        notes="caption padded to a multiple of 32 (ZImagePipelineConfig.SEQ_LEN_MULTIPLE); vae_tiling is "
              "the base "
        "default but AutoencoderKL does not tile below its 1024 sample size",
    ),
    Recipe(
        name="zimage",
        hf_id="Tongyi-MAI/Z-Image",
        pipeline="ZImagePipeline",
        pipeline_config="zimage:ZImagePipelineConfig",
        sampling_params="zimage:ZImageSamplingParams",
        steps=50,
        guidance_scale=5.0,
        cfg="sequential",
        should_use_guidance=False,
        height=1024,
        width=1024,
        frames=1,
        resolution_source="openai_image_api",
        latent=(1, 16, 128, 128),
        dit_module="dits.zimage:ZImageTransformer2DModel",
        dit_config="zimage:ZImageDitConfig",
        dit_arch={},
        tokens=4096,
        text_tokens=32,
        vae_module="vaes.autoencoder:AutoencoderKL",
        vae_row="flux1_vae_decode",
        decode_dtype=torch.bfloat16,
        vae_tiling=True,
        bcg_default=False,
        bcg_validated=True,
        fusions=(),
        task_models=('Z-Image', 'FLUX / Z-Image'),
    ),
    Recipe(
        name="flux1_dev",
        hf_id="black-forest-labs/FLUX.1-dev",
        pipeline="FluxPipeline",
        pipeline_config="flux:FluxPipelineConfig",
        sampling_params="flux:FluxSamplingParams",
        steps=50,
        guidance_scale=3.5,
        cfg="none",
        should_use_guidance=True,
        height=1024,
        width=1024,
        frames=1,
        resolution_source="sampling_params",
        latent=(1, 16, 128, 128),
        dit_module="dits.flux:FluxTransformer2DModel",
        dit_config="flux:FluxConfig",
        dit_arch={},
        tokens=4096,
        text_tokens=512,
        vae_module="vaes.autoencoder:AutoencoderKL",
        vae_row="flux1_vae_decode",
        decode_dtype=torch.bfloat16,
        vae_tiling=False,
        bcg_default=False,
        bcg_validated=True,
        fusions=("FUSED_LINEAR_GELU", "FUSED_LN_MODULATE"),
        task_models=('FLUX / Z-Image',),
        notes="guidance 3.5 is the embedded (distilled) guidance: negative_prompt is None, so no CFG; T5 "
              "padded "
        "to 512",
    ),
    Recipe(
        name="hunyuanvideo",
        hf_id="hunyuanvideo-community/HunyuanVideo",
        pipeline="HunyuanVideoPipeline",
        pipeline_config="hunyuan:HunyuanConfig",
        sampling_params="hunyuan:HunyuanSamplingParams",
        steps=50,
        guidance_scale=1.0,
        cfg="none",
        should_use_guidance=True,
        height=720,
        width=1280,
        frames=125,
        resolution_source="sampling_params",
        latent=(1, 16, 32, 90, 160),
        dit_module="dits.hunyuanvideo:HunyuanVideoTransformer3DModel",
        dit_config="hunyuanvideo:HunyuanVideoConfig",
        dit_arch={},
        tokens=115200,
        text_tokens=55,
        vae_module="vaes.hunyuanvae:AutoencoderKLHunyuanVideo",
        vae_row="hunyuanvideo_vae_decode_tiled",
        decode_dtype=torch.float16,
        vae_tiling=True,
        bcg_default=False,
        bcg_validated=False,
        fusions=("FUSED_LINEAR_GELU", "HUNYUAN_QKNORM"),
        task_models=('HunyuanVideo',),
        notes="embedded guidance 6.0 (HunyuanConfig.embedded_cfg_scale); text tokens prompt-dependent (55 "
        "captured); the VAE row decodes 33x480x848, not this 125x720x1280",
    ),
    Recipe(
        name="ltx2",
        hf_id="Lightricks/LTX-2",
        pipeline="LTX2Pipeline",
        pipeline_config="ltx_2:LTX2PipelineConfig",
        sampling_params="ltx_2:LTX2SamplingParams",
        steps=40,
        guidance_scale=4.0,
        cfg="batched",
        should_use_guidance=True,
        height=512,
        width=768,
        frames=121,
        resolution_source="sampling_params",
        latent=(1, 128, 16, 16, 24),
        dit_module="dits.ltx_2:LTX2VideoTransformer3DModel",
        dit_config="ltx_2:LTX2Config",
        dit_arch=dict(rope_type="split"),
        tokens=6144,
        text_tokens=1024,
        vae_module="vaes.ltx_2_vae:AutoencoderKLLTX2Video",
        vae_row="ltx2_vae_decode",
        decode_dtype=torch.bfloat16,
        vae_tiling=True,
        bcg_default=False,
        bcg_validated=True,
        fusions=("FUSED_LINEAR_GELU", "LTX2_QKNORM_SPLIT_ROPE", "LTX2_RMS_NORM_MODULATE"),
        task_models=('LTX-2',),
        notes="plus 126 audio tokens (5.04 s at 16 kHz / 160 hop / 4x); Gemma text padded to 1024; CFG "
              "batched "
        "(batch 2)",
    ),
    Recipe(
        name="ltx2_two_stage",
        hf_id="Lightricks/LTX-2",
        pipeline="LTX2TwoStagePipeline",
        pipeline_config="ltx_2:LTX2PipelineConfig",
        sampling_params="ltx_2:LTX2SamplingParams",
        steps=40,
        guidance_scale=4.0,
        cfg="batched",
        should_use_guidance=True,
        height=512,
        width=768,
        frames=121,
        resolution_source="sampling_params",
        latent=(1, 128, 16, 16, 24),
        dit_module="dits.ltx_2:LTX2VideoTransformer3DModel",
        dit_config="ltx_2:LTX2Config",
        dit_arch=dict(rope_type="split"),
        tokens=1536,
        text_tokens=1024,
        vae_module="vaes.ltx_2_vae:AutoencoderKLLTX2Video",
        vae_row="ltx2_vae_decode",
        decode_dtype=torch.bfloat16,
        vae_tiling=True,
        bcg_default=True,
        bcg_validated=True,
        fusions=("FUSED_LINEAR_GELU", "LTX2_QKNORM_SPLIT_ROPE", "LTX2_RMS_NORM_MODULATE"),
        task_models=('LTX-2', 'LTX-2.3 (two-stage)'),
        stage2_steps=3,
        stage2_tokens=6144,
        notes="the distilled path: stage 1 at half size (256x384: 16x8x12 = 1536 tokens, CFG batched), the "
              "latent "
        "upsampler, then 3 steps of the distilled-LoRA DiT at full size, positive-only "
        "(STAGE_2_DISTILLED_SIGMA_VALUES, pipeline_configs/ltx_2.py:33); BCG on by default on >= 130 GB",
    ),
    Recipe(
        name="fastwan22_ti2v_5b",
        hf_id="FastVideo/FastWan2.2-TI2V-5B-Diffusers",
        pipeline="WanDMDPipeline",
        pipeline_config="wan:FastWan2_2_TI2V_5B_Config",
        sampling_params="wan:Wan2_2_TI2V_5B_SamplingParam",
        steps=3,
        guidance_scale=5.0,
        cfg="none",
        should_use_guidance=True,
        height=704,
        width=1280,
        frames=121,
        resolution_source="sampling_params",
        latent=(1, 48, 31, 44, 80),
        dit_module="dits.wanvideo:WanTransformer3DModel",
        dit_config="wanvideo:WanVideoConfig",
        dit_arch=_WAN22_5B,
        tokens=27280,
        text_tokens=512,
        vae_module="vaes.wanvae:AutoencoderKLWan",
        vae_row="wan22_vae_decode",
        decode_dtype=torch.float32,
        vae_tiling=False,
        bcg_default=False,
        bcg_validated=False,
        fusions=("FUSED_LINEAR_GELU",),
        task_models=('Wan 2.2 TI2V',),
        notes="DMD: dmd_denoising_steps [1000, 757, 522], one positive forward per step whatever the "
              "sampling "
        "params' guidance 5.0 / 50 steps say; latent 48x31x44x80 (Wan 2.2 VAE 4x16x16) / (1,2,2) patches = "
        "31x22x40 tokens; T5 padded to 512",
    ),
)
BY_NAME: dict[str, Recipe] = {r.name: r for r in RECIPES}
