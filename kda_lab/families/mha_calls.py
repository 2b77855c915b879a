"""SGLang 0.5.23's DiT attention calls: the production rows of ``kernels/h200_mha_diffusion__multi_shape``.

Each :class:`DitAttentionCall` says where a model's DiT calls attention (file:function under
``sglang/multimodal_gen/``), and computes the call's batch, sequence, heads and head_dim from SGLang's own
config objects (DiT arch configs, VAE compression, sampling defaults, pipeline text lengths) at a request
size written down here with its source. :func:`row_problems` holds the task's rows to these calls: a row whose
shape, dtype or mask differs from the call it names is refused (tests/families/test_mha.py runs it on the
task).

What SGLang runs there, on one H200 with no ``--attention-backend``: :func:`sglang_default_backend` runs
SGLang's own selection (``runtime/platforms/cuda.py: CudaPlatformBase.get_attn_backend_cls_str``) with the
device facts of an H200 (compute capability 9.0): ``FlashAttentionBackend`` for head_dim 64 and 128 (its
``get_supported_head_sizes``), whose impl calls ``sglang.kernels.ops.attention.flash_attention.
flash_attn_varlen_func(..., ver=fa_ver)`` with ``fa_ver`` 3 (``set_fa_ver(4)`` only on Blackwell), which loads
``sgl_kernel.flash_attn`` while ``SGLANG_USE_SGL_FA3_KERNEL`` is on (its default, ``srt/environ.py``). Every
single-GPU call below is unmasked: USPAttention.forward hands q/k/v to ``attn_impl.forward``
(``layers/attention/layer.py``, the ``get_sequence_parallel_world_size() == 1`` branch).

Imports SGLang's config modules (and, for the backend, ``runtime/platforms/cuda.py``, which turns cuDNN SDPA
off process-wide at import): call these from tests and tools, never from a timed process. On a CPU torch their
import deps come from ``.venv/e2e-site`` (``kda_lab.e2e.runtime.cpu_e2e_site()`` first).
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

DIT = "sglang.multimodal_gen.configs.models.dits."
VAE = "sglang.multimodal_gen.configs.models.vaes."
PIPE = "sglang.multimodal_gen.configs.pipeline_configs."
SAMPLE = "sglang.multimodal_gen.configs.sample."
# a row is sized like this: bf16 activations, q/k drawn with std 1.5 (the family's peaked-softmax convention)
DTYPE = "bfloat16"


@dataclass(frozen=True)
class DitAttentionCall:
    row: str  # the task.toml row name
    model: str
    call_site: str  # sglang/multimodal_gen/<file>:<function> that calls the attention layer
    sizes: str  # how batch and tokens follow from SGLang's configs, with the values
    batch: int
    tokens: int  # the q and k/v sequence (self-attention over a joint or single stream)
    heads: int
    head_dim: int
    key_lens: tuple[int, ...] | None = None  # a key-padding row: the valid keys per batch element
    in_sglang: bool = True  # False: SGLang 0.5.23 does not make this call (said why in ``sizes``)

    @property
    def shape(self) -> tuple[int, int, int, int]:
        return (self.batch, self.tokens, self.heads, self.head_dim)


def _cfg(module: str, cls: str) -> Any:
    return getattr(importlib.import_module(module), cls)()


def _video_tokens(frames: int, height: int, width: int, t_ratio: int, s_ratio: int,
                  patch: tuple[int, int, int]) -> tuple[int, int, int, int]:
    """Latent frames/height/width of a video VAE (causal in time: 1 + (frames-1)/t) and the patched tokens."""
    t, h, w = 1 + (frames - 1) // t_ratio, height // s_ratio, width // s_ratio
    return t, h, w, (t // patch[0]) * (h // patch[1]) * (w // patch[2])


def _image_tokens(height: int, width: int, vae_config: Any, patch: int = 2) -> int:
    s = vae_config.arch_config.scale_factor_spatial
    return (height // s // patch) * (width // s // patch)


def sglang_dit_attention_calls() -> tuple[DitAttentionCall, ...]:
    """Every call of the task, from SGLang 0.5.23's configs (module doc)."""
    calls: list[DitAttentionCall] = []

    # HunyuanVideo: MMDoubleStreamBlock / MMSingleStreamBlock run USPAttention over [image; text] (the text as
    # a replicated suffix, num_replicated_suffix=text_len). The lab's captured request: 65 frames at 480x848
    # (kda_lab/e2e/models.py: build_hunyuan; h200_diffusion_rotary_embedding__multi_shape rows
    # hunyuanvideo_rope_B1_T27030_H24_D128*: a 27085-token joint sequence, so 55 text tokens). SGLang's
    # default request (HunyuanSamplingParams 720x1280, 125 frames) is 32x45x80 = 115200 video tokens.
    hy = _cfg(DIT + "hunyuanvideo", "HunyuanVideoConfig").arch_config
    hv = _cfg(VAE + "hunyuanvae", "HunyuanVAEConfig").arch_config
    t, h, w, video = _video_tokens(65, 480, 848, hv.temporal_compression_ratio, hv.spatial_compression_ratio,
                                   (hy.patch_size_t, hy.patch_size, hy.patch_size))
    text = 55
    text_len = _cfg("sglang.multimodal_gen.configs.models.encoders.llama", "LlamaConfig").arch_config.text_len
    site = ("runtime/models/dits/hunyuanvideo.py:MMDoubleStreamBlock.forward and MMSingleStreamBlock.forward "
            "(self.attn(q, k, v, num_replicated_suffix=text_len), USPAttention)")
    calls.append(DitAttentionCall(
        "hunyuanvideo_joint_B1_S27085_H24_D128", "HunyuanVideo", site,
        f"65 frames at 480x848 -> latent {t}x{h}x{w} (HunyuanVAEConfig: temporal "
        f"{hv.temporal_compression_ratio}, spatial {hv.spatial_compression_ratio}) / patch "
        f"({hy.patch_size_t}, {hy.patch_size}, {hy.patch_size}) = {video} video tokens + {text} text tokens "
        "(the captured prompt; SGLang does not pad it: "
        "EncoderConfig.tokenizer_kwargs has truncation and max_length, no padding); HunyuanVideoConfig "
        f"{hy.num_attention_heads} heads x {hy.attention_head_dim}; guidance is embedded (no CFG): batch 1",
        1, video + text, hy.num_attention_heads, hy.attention_head_dim))
    calls.append(DitAttentionCall(
        "hunyuanvideo_joint_text256_keylens27085_B1_S27286_H24_D128", "HunyuanVideo", site,
        f"the same joint attention with the text padded to LlamaArchConfig.text_len = {text_len} and its "
        f"mask ({text} valid): {video} + {text_len} tokens, keys {video + text}.. masked. SGLang 0.5.23 does "
        "NOT make this call: llama_postprocess_text (configs/pipeline_configs/hunyuan.py) returns the text "
        "mask and HunyuanConfig.prepare_pos_cond_kwargs passes it as encoder_attention_mask, but "
        "HunyuanVideoTransformer3DModel.forward takes it in **kwargs and never uses it, and at batch 1 the "
        "text is unpadded (the dense row above). The row is the masked joint attention of a padded-prompt "
        "HunyuanVideo (diffusers' pipeline, max_sequence_length 256) on SGLang's shapes",
        1, video + text_len, hy.num_attention_heads, hy.attention_head_dim, key_lens=(video + text,),
        in_sglang=False))

    # Wan 2.2 T2V A14B: WanTransformerBlock.forward -> self.attn1(query, key, value) (USPAttention), batch 1
    # (CFG runs the conditional and unconditional forwards one after the other, stages/denoising.py).
    wan = _cfg(DIT + "wanvideo", "WanVideoConfig").arch_config
    wv = _cfg(VAE + "wanvae", "WanVAEConfig").arch_config
    sp = _cfg(SAMPLE + "wan", "Wan2_2_T2V_A14B_SamplingParam")
    width, height = sp.supported_resolutions[0]
    wan_site = ("runtime/models/dits/wanvideo.py:WanTransformerBlock.forward (self.attn1(query, key, value), "
                "USPAttention)")
    for frames_hw, name, why in (
            ((sp.num_frames, height, width), "wan22_t2v_720p_B1_S75600_H40_D128",
             f"Wan2_2_T2V_A14B_SamplingParam: {sp.num_frames} frames at {width}x{height} "
             "(supported_resolutions[0])"),
            ((sp.num_frames, 480, 960), "wan22_t2v_B1_S37800_H40_D128",
             f"{sp.num_frames} frames at 480x960, the lab's captured Wan 2.2 T2V size "
             "(kda_lab/e2e/models.py: build_wan, latent 21x60x120; "
             "h200_diffusion_norm_scale_shift__multi_shape:wan_t2v_nss_L37800_f32)")):
        t, h, w, tokens = _video_tokens(*frames_hw, wv.scale_factor_temporal, wv.scale_factor_spatial,
                                        wan.patch_size)
        calls.append(DitAttentionCall(
            name, "Wan 2.2 T2V A14B", wan_site,
            f"{why} -> latent {t}x{h}x{w} (WanVAEConfig: temporal {wv.scale_factor_temporal}, spatial "
            f"{wv.scale_factor_spatial}) / patch {tuple(wan.patch_size)} = {tokens} tokens; WanVideoConfig "
            f"{wan.num_attention_heads} heads x {wan.attention_head_dim}; CFG sequential: batch 1",
            1, tokens, wan.num_attention_heads, wan.attention_head_dim))

    # Qwen-Image: QwenImageCrossAttention.forward, joint [text; image], no mask at batch 1 (every prompt is
    # its own full length: QwenImagePipelineConfig._prepare_encoder_hidden_states_mask returns None).
    qw = _cfg(DIT + "qwenimage", "QwenImageDitConfig").arch_config
    qv = _cfg(PIPE + "qwen_image", "QwenImagePipelineConfig").vae_config
    img = _image_tokens(1024, 1024, qv)
    calls.append(DitAttentionCall(
        "qwen_image_joint_B1_S4115_H24_D128", "Qwen-Image",
        "runtime/models/dits/qwen_image.py:QwenImageCrossAttention.forward (self.attn(joint_query, ...), "
        "USPAttention)",
        f"1024x1024 (the OpenAI image API's default size; QwenImageSamplingParams leave it None) / VAE "
        f"{qv.arch_config.scale_factor_spatial} / 2x2 packing = {img} image tokens + 19 text tokens (the "
        f"captured prompt, h200_diffusion_qknorm_rope__multi_shape:qwen_T19_H24_D128); QwenImageDitConfig "
        f"{qw.num_attention_heads} heads x {qw.attention_head_dim}; CFG sequential: batch 1",
        1, img + 19, qw.num_attention_heads, qw.attention_head_dim))

    # Z-Image: ZImageTransformer2DModel.forward's unified layers (ZImageAttention.forward, USPAttention) over
    # [image; caption], the caption padded to a multiple of 32; no mask at batch 1
    # (_get_joint_attn_mask_and_meta returns None when every length is its target).
    zi = _cfg(DIT + "zimage", "ZImageDitConfig").arch_config
    zp = _cfg(PIPE + "zimage", "ZImagePipelineConfig")
    img = _image_tokens(1024, 1024, zp.vae_config, patch=zi.all_patch_size[0])
    cap = zp.SEQ_LEN_MULTIPLE
    calls.append(DitAttentionCall(
        "zimage_joint_B1_S4128_H30_D128", "Z-Image",
        "runtime/models/dits/zimage.py:ZImageAttention.forward (self.attn(...), USPAttention) in "
        "ZImageTransformer2DModel.forward's unified layers",
        f"1024x1024 / VAE {zp.vae_config.arch_config.scale_factor_spatial} / patch {zi.all_patch_size[0]} = "
        f"{img} image tokens + a caption padded to ZImagePipelineConfig.SEQ_LEN_MULTIPLE = {cap} (a prompt "
        f"of <= 32 tokens; h200_diffusion_qknorm_rope__multi_shape:zimage_T4128_H30_D128); ZImageDitConfig "
        f"dim {zi.dim} / {zi.num_attention_heads} heads; batch 1",
        1, img + cap, zi.num_attention_heads, zi.dim // zi.num_attention_heads))

    # LTX-2: LTX2TransformerBlock.forward -> attn1 (video) and audio_attn1 (audio) self-attention
    # (LTX2Attention, mask None), CFG batched into one forward of batch 2
    # (stages/model_specific_stages/ltx_2/denoising.py).
    lt = _cfg(DIT + "ltx_2", "LTX2Config").arch_config
    lp = _cfg(PIPE + "ltx_2", "LTX2PipelineConfig")
    ls = _cfg(SAMPLE + "ltx_2", "LTX2SamplingParams")
    req = SimpleNamespace(height=ls.height, width=ls.width, fps=ls.fps)
    lat_frames = 1 + (ls.num_frames - 1) // lp.vae_temporal_compression
    _, _, f, h, w = lp.prepare_latent_shape(req, 1, lat_frames)
    video = (f // lp.patch_size_t) * (h // lp.patch_size) * (w // lp.patch_size)
    audio = lp.prepare_audio_latent_shape(req, 1, ls.num_frames)[2]
    ltx_site = "runtime/models/dits/ltx_2.py:LTX2TransformerBlock.forward -> LTX2Attention.forward"
    calls.append(DitAttentionCall(
        "ltx2_video_B2_S6144_H32_D128", "LTX-2", ltx_site + " (attn1)",
        f"LTX2SamplingParams {ls.num_frames} frames at {ls.width}x{ls.height} -> LTX2PipelineConfig."
        f"prepare_latent_shape {f}x{h}x{w} / patch {lp.patch_size} = {video} video tokens; LTX2Config "
        f"{lt.num_attention_heads} heads x {lt.attention_head_dim}; CFG batched: batch 2",
        2, video, lt.num_attention_heads, lt.attention_head_dim))
    calls.append(DitAttentionCall(
        "ltx2_audio_B2_S126_H32_D64", "LTX-2", ltx_site + " (audio_attn1)",
        f"LTX2PipelineConfig.prepare_audio_latent_shape: {ls.num_frames} frames / {ls.fps} fps x sample rate "
        f"/ mel hop / temporal compression = {audio} audio tokens; LTX2Config {lt.audio_num_attention_heads} "
        f"heads x {lt.audio_attention_head_dim}; CFG batched: batch 2",
        2, audio, lt.audio_num_attention_heads, lt.audio_attention_head_dim))

    # FLUX.1-dev: FluxTransformerBlock / FluxSingleTransformerBlock -> FluxAttention.forward, joint
    # [text; image] over T5 padded to 512 (no text mask), embedded guidance: batch 1.
    fl = _cfg(DIT + "flux", "FluxConfig").arch_config
    fp = _cfg(PIPE + "flux", "FluxPipelineConfig")
    fs = _cfg(SAMPLE + "flux", "FluxSamplingParams")
    img = _image_tokens(fs.height, fs.width, fp.vae_config)
    t5 = fp.text_encoder_extra_args[1]["max_length"]
    calls.append(DitAttentionCall(
        "flux1_joint_B1_S4608_H24_D128", "FLUX.1-dev",
        "runtime/models/dits/flux.py:FluxAttention.forward (self.attn(...), USPAttention) in "
        "FluxTransformerBlock and FluxSingleTransformerBlock",
        f"FluxSamplingParams {fs.width}x{fs.height} / VAE {fp.vae_config.arch_config.scale_factor_spatial} / "
        f"2x2 packing = {img} image tokens + T5 padded to FluxPipelineConfig.text_encoder_extra_args[1]"
        f".max_length = {t5} (padding max_length, no mask); FluxConfig {fl.num_attention_heads} heads x "
        f"{fl.attention_head_dim}; guidance embedded: batch 1",
        1, img + t5, fl.num_attention_heads, fl.attention_head_dim))
    return tuple(calls)


def sglang_default_backend(head_dim: int, dtype: Any = None) -> str:
    """The attention backend class SGLang 0.5.23 picks on an H200 with no ``--attention-backend``: its own
    ``CudaPlatformBase.get_attn_backend_cls_str`` run with the device facts of compute capability 9.0."""
    import torch

    cuda = importlib.import_module("sglang.multimodal_gen.runtime.platforms.cuda")
    cap = importlib.import_module("sglang.multimodal_gen.runtime.platforms.interface").DeviceCapability(9, 0)

    class H200(cuda.CudaPlatformBase):
        @classmethod
        def get_device_capability(cls, device_id: int = 0) -> Any:
            return cap

        @classmethod
        def is_sm120(cls) -> bool:
            return False

        @classmethod
        def is_blackwell(cls) -> bool:
            return False

    return str(H200.get_attn_backend_cls_str(None, head_dim, dtype or torch.bfloat16))


def fa3_source() -> str:
    """Which FlashAttention SGLang's FlashAttentionBackend calls: ``fa_ver`` and the FA3 loader's switch."""
    fa = importlib.import_module("sglang.multimodal_gen.runtime.layers.attention.backends.flash_attn")
    envs = importlib.import_module("sglang.srt.environ").envs
    use_sgl = bool(envs.SGLANG_USE_SGL_FA3_KERNEL.get())
    return f"fa_ver {fa.fa_ver}, SGLANG_USE_SGL_FA3_KERNEL={use_sgl}" + (
        " (sgl_kernel.flash_attn)" if fa.fa_ver == 3 and use_sgl else "")


def _spec_problem(name: str, spec: Any, shape: tuple[int, ...]) -> str:
    """Why a row's tensor spec (kda_lab.task.workloads.TensorSpec, read by its fields: the families do not
    import the task layer, which imports them) is not SGLang's contiguous bf16 tensor of ``shape``."""
    if not hasattr(spec, "shape") or not hasattr(spec, "dtype"):
        return f"{name} is not a tensor"
    if tuple(spec.shape) != shape or spec.dtype != DTYPE or getattr(spec, "strides", None) is not None:
        return f"{name} {spec.dtype}{list(spec.shape)} != SGLang's contiguous {DTYPE}{list(shape)}"
    return ""


def row_problems(workloads: Iterable[Any], calls: Iterable[DitAttentionCall] | None = None) -> list[str]:
    """Why a task's production rows (kda_lab.task.workloads.Workload) differ from SGLang's calls (empty: each
    call is a row with its shape, dtype and mask, and every production row is a call)."""
    calls = tuple(sglang_dit_attention_calls() if calls is None else calls)
    rows = {w.name: w for w in workloads if w.kind == "production"}
    problems = [f"{c.row}: no production row for {c.model}'s call ({c.call_site})" for c in calls
                if c.row not in rows]
    problems += [f"{name}: a production row that is none of SGLang's calls" for name in rows
                 if name not in {c.row for c in calls}]
    for c in calls:
        w = rows.get(c.row)
        if w is None:
            continue
        where = [p for p in (_spec_problem(n, w.args.get(n), c.shape) for n in ("q", "k", "v")) if p]
        if w.args.get("causal", False) is not False or w.args.get("softmax_scale") is not None:
            where.append("SGLang's DiT attention is non-causal with the default scale 1/sqrt(head_dim)")
        lens = w.args.get("key_lens")
        if (None if lens is None else tuple(lens)) != c.key_lens:
            where.append(f"key_lens {lens} != {list(c.key_lens) if c.key_lens else None}")
        problems += [f"{c.row}: {p}" for p in where]
    return problems
