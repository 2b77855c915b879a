"""The e2e rows: SGLang 0.5.23 model classes, the configuration they are built at, their inputs.

Each row names the production row of a task folder its size comes from (``cites``: ``task:row``). ``tiny``
shrinks widths, depths and sequence lengths for CPU CI (same classes, same code paths); ``blocks`` sets the
depth of a DiT stack (``None``: the model's full depth). Weights are random, seeded, scaled like a trained
model's (see :func:`init_weights`); nothing is downloaded.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch


@dataclass(frozen=True)
class Built:
    module: torch.nn.Module
    forward: Callable[[], Any]  # one forward of the module on fixed inputs (call under torch.no_grad())
    config: dict[str, Any]  # the arch values that differ from SGLang's defaults, plus depth
    shape: str  # input shape summary
    # the same forward with the module and its inputs in fp32 (overlay off): the yardstick of measure.model_agreement
    fp32_forward: Callable[[], torch.Tensor] | None = None
    # the forward of a request at SGLang quality tier q, where the row's own code applies the tier (a decode through
    # the decoding stage); None: kda_lab.e2e.tiering applies it around ``forward``
    at_quality: Callable[[str], Callable[[], Any]] | None = None
    # the forward's inputs by name, for a row that also runs split across workers (kda_lab.e2e.sharded)
    inputs: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Row:
    name: str
    model: str
    kind: str  # "dit" | "vae" | "upsampler"
    module: str  # "module:Class" in sglang.multimodal_gen.runtime.models
    dtype: torch.dtype
    cites: str  # "task:row" the production size comes from
    build: Callable[[str, bool, int | None], Built] = field(repr=False)  # (device, tiny, blocks)
    cpu_forward: bool = True  # False: SGLang's CPU path needs sgl_kernel's CPU ops (construction only on CPU)


PKG = "sglang.multimodal_gen.runtime.models."


def sglang_class(path: str) -> type:
    mod, _, cls = path.partition(":")
    return getattr(importlib.import_module(PKG + mod), cls)


def init_weights(module: torch.nn.Module, seed: int) -> None:
    """Seeded random weights scaled like a trained model's: matrices and conv kernels N(0, 1/fan_in) (unit-scale
    activations through each layer), norm scales 1 + N(0, 0.02²), biases and other vectors N(0, 0.02²)."""
    gens: dict[torch.device, torch.Generator] = {}
    with torch.no_grad():
        for name, p in module.named_parameters():
            if p.numel() == 0 or not p.dtype.is_floating_point or p.device.type == "meta":
                continue  # a meta module (shape captures) holds no values to draw
            # drawn where the parameter lives: a full-depth DiT (10-20 B parameters) draws in seconds on a GPU
            gen = gens.get(p.device)
            if gen is None:
                gen = gens[p.device] = torch.Generator(device=p.device).manual_seed(seed)
            kw = dict(generator=gen, device=p.device, dtype=torch.float32)
            if p.dim() >= 2:
                fan_in = p[0].numel()
                vals = torch.randn(p.shape, **kw) * (fan_in ** -0.5)
            elif name.endswith("weight") or name.endswith("scale") or name.endswith(".g") or name.endswith("gamma"):
                vals = 1.0 + 0.02 * torch.randn(p.shape, **kw)
            else:
                vals = 0.02 * torch.randn(p.shape, **kw)
            p.copy_(vals.to(p.dtype))
            del vals


def _rand(gen: torch.Generator, shape: tuple[int, ...], dtype: torch.dtype, device: str) -> torch.Tensor:
    return torch.randn(shape, generator=gen).to(device=device, dtype=dtype)


def _dit(config_cls: str, model_cls: str, arch: dict[str, Any], device: str, dtype: torch.dtype,
         seed: int) -> tuple[torch.nn.Module, dict[str, Any]]:
    cfg_mod, _, cfg_name = config_cls.partition(":")
    cfg = getattr(importlib.import_module("sglang.multimodal_gen.configs.models.dits." + cfg_mod), cfg_name)()
    cfg.update_model_arch(dict(arch))
    # SGLang's loader sets the compute dtype before it builds a DiT (loader/fsdp_load.py); its attention layers
    # pick their backend from it, and under the fp32 default an H200 DiT would get torch SDPA instead of FA3.
    from sglang.multimodal_gen.runtime.loader.utils import set_default_torch_dtype
    from sglang.multimodal_gen.runtime.utils.precision import set_mixed_precision_policy

    set_mixed_precision_policy(param_dtype=dtype, reduce_dtype=torch.float32)
    # the loader builds a DiT under its param dtype (loader/utils.py: initialize_model), buffers included
    with torch.device(device), set_default_torch_dtype(dtype):
        model = sglang_class(model_cls)(cfg, {})
    model = model.to(dtype=dtype).eval()
    init_weights(model, seed)
    return model, cfg


def _forward_context(fn: Callable[[], Any]) -> Callable[[], Any]:
    from sglang.multimodal_gen.runtime.managers.forward_context import set_forward_context

    def run() -> Any:
        with set_forward_context(current_timestep=0, attn_metadata=None):
            return fn()
    return run


def _first(out: Any) -> torch.Tensor:
    if isinstance(out, torch.Tensor):
        return out
    if isinstance(out, (tuple, list)):
        return _first(out[0])
    sample = getattr(out, "sample", None)
    if isinstance(sample, torch.Tensor):
        return sample
    raise TypeError(f"cannot find the output tensor in {type(out).__name__}")


# ------------------------------------------------------------------------------------------------ DiTs

def build_wan(device: str, tiny: bool, blocks: int | None, arch_over: dict[str, Any] | None = None,
              latent: tuple[int, ...] | None = None) -> Built:
    # Wan 2.2 T2V A14B, 81 frames: latent 21x60x120 / (1,2,2) patches = 37800 tokens of 5120 (40 heads x 128).
    # arch_over/latent: another Wan checkpoint at its own size (a request recipe, e.g. FastWan 2.2 TI2V-5B).
    if tiny:
        arch = dict(num_attention_heads=2, attention_head_dim=32, num_layers=blocks or 2, ffn_dim=128, text_dim=64,
                    freq_dim=32)
        if arch_over and "in_channels" in arch_over:
            arch.update(in_channels=arch_over["in_channels"], out_channels=arch_over["out_channels"])
        latent, text = (1, arch.get("in_channels", 16), 2, 8, 8), (1, 12, 64)
    else:
        arch = dict(num_layers=40, num_attention_heads=40, attention_head_dim=128, ffn_dim=13824,
                    text_dim=4096, freq_dim=256, in_channels=16, out_channels=16)
        arch.update(arch_over or {})
        if blocks:
            arch["num_layers"] = blocks
        latent, text = latent or (1, 16, 21, 60, 120), (1, 512, 4096)
    dtype = torch.bfloat16
    model, _ = _dit("wanvideo:WanVideoConfig", "dits.wanvideo:WanTransformer3DModel", arch, device, dtype, 1)
    gen = torch.Generator().manual_seed(2)
    x, ctx = _rand(gen, latent, dtype, device), _rand(gen, text, dtype, device)
    t = torch.tensor([500], device=device)
    return Built(model, _forward_context(lambda: _first(model(x, ctx, t))), arch,
                 f"latent {list(latent)}, text {list(text)}")


def build_hunyuan(device: str, tiny: bool, blocks: int | None, latent: tuple[int, ...] | None = None) -> Built:
    # HunyuanVideo 65 frames at 480x848: latent 17x60x106 / (1,2,2) patches = 27030 video tokens (+ 55 text);
    # latent: another size (the request recipe's 125x720x1280: 32x90x160 -> 115200 tokens).
    want = latent
    if tiny:
        arch = dict(num_attention_heads=2, attention_head_dim=32, num_layers=blocks or 1, num_single_layers=blocks or 1,
                    num_refiner_layers=1, text_embed_dim=64, pooled_projection_dim=32, rope_axes_dim=(8, 12, 12))
        latent, text, pooled = (1, 16, 2, 8, 8), (1, 8, 64), (1, 32)
    else:
        n = blocks or 20
        arch = dict(num_layers=n, num_single_layers=2 * n)
        latent, text, pooled = want or (1, 16, 17, 60, 106), (1, 55, 4096), (1, 768)
    dtype = torch.bfloat16
    model, _ = _dit("hunyuanvideo:HunyuanVideoConfig", "dits.hunyuanvideo:HunyuanVideoTransformer3DModel", arch,
                    device, dtype, 3)
    gen = torch.Generator().manual_seed(4)
    x, ctx, pool = _rand(gen, latent, dtype, device), _rand(gen, text, dtype, device), _rand(gen, pooled, dtype, device)
    t = torch.tensor([500], device=device)
    return Built(model, _forward_context(lambda: _first(model(x, ctx, t, pooled_projections=pool))), arch,
                 f"latent {list(latent)}, text {list(text)}")


def build_qwen(device: str, tiny: bool, blocks: int | None) -> Built:
    # Qwen-Image 1024x1024: 64x64 packed latent tokens = 4096 image tokens of 3072 (24 heads x 128), 19 text.
    if tiny:
        arch = dict(num_layers=blocks or 2, num_attention_heads=2, attention_head_dim=32, joint_attention_dim=64,
                    axes_dims_rope=(8, 12, 12))
        side, txt = 8, (1, 7, 64)
    else:
        arch = dict(num_layers=blocks or 60, joint_attention_dim=3584)  # Qwen2.5-VL-7B text states
        side, txt = 64, (1, 19, 3584)
    dtype = torch.bfloat16
    model, _ = _dit("qwenimage:QwenImageDitConfig", "dits.qwen_image:QwenImageTransformer2DModel", arch, device,
                    dtype, 5)
    gen = torch.Generator().manual_seed(6)
    x = _rand(gen, (1, side * side, 64), dtype, device)
    ctx = _rand(gen, txt, dtype, device)
    mask = torch.ones(txt[:2], dtype=torch.int64, device=device)
    t = torch.tensor([0.5], device=device, dtype=dtype)
    return Built(model, _forward_context(lambda: _first(model(
        x, ctx, mask, t, img_shapes=[[(1, side, side)]], txt_seq_lens=[txt[1]], return_dict=False))), arch,
        f"image tokens {side * side}, text {list(txt)}")


def build_zimage(device: str, tiny: bool, blocks: int | None) -> Built:
    # Z-Image 1024x1024: 128x128 latent / 2x2 patches = 4096 image tokens (+ 32 caption) of 3840 (30 heads).
    if tiny:
        arch = dict(dim=64, num_layers=blocks or 2, n_refiner_layers=1, num_attention_heads=2, n_kv_heads=2,
                    cap_feat_dim=32, axes_dims=(8, 12, 12))
        latent, cap = (16, 1, 16, 16), (32, 32)
    else:
        arch = dict(num_layers=blocks or 30)
        latent, cap = (16, 1, 128, 128), (32, 2560)
    dtype = torch.bfloat16
    model, _ = _dit("zimage:ZImageDitConfig", "dits.zimage:ZImageTransformer2DModel", arch, device, dtype, 7)
    gen = torch.Generator().manual_seed(8)
    x, c = _rand(gen, latent, dtype, device), _rand(gen, cap, dtype, device)
    t = torch.tensor([0.5], device=device, dtype=dtype)
    # SGLang's Z-Image pipeline hands the transformer its RoPE caches (pipeline_configs/zimage.py:get_freqs_cis);
    # the transformer's own batched builder gives the same caches for one image and one caption.
    img_tokens = latent[1] * (latent[2] // 2) * (latent[3] // 2)
    freqs = model._get_cached_batched_freqs_cis([x], [c], 2, 1, image_target_len=img_tokens,
                                                cap_target_len=cap[0], device=torch.device(device))
    return Built(model, _forward_context(lambda: _first(model([x], [c], t, freqs_cis=freqs))), arch,
                 f"latent {list(latent)}, caption {list(cap)}")


def build_flux(device: str, tiny: bool, blocks: int | None) -> Built:
    # FLUX.1-dev 1024x1024: 4096 packed latent tokens (the VAE rows' 1024x1024 image) + 512 T5 tokens.
    if tiny:
        arch = dict(num_layers=blocks or 1, num_single_layers=blocks or 1, num_attention_heads=2,
                    attention_head_dim=32, joint_attention_dim=64, pooled_projection_dim=32,
                    axes_dims_rope=(8, 12, 12))
        img, txt, pooled = (1, 64, 64), (1, 8, 64), (1, 32)
    else:
        n = blocks or 19
        arch = dict(num_layers=n, num_single_layers=2 * n)
        img, txt, pooled = (1, 4096, 64), (1, 512, 4096), (1, 768)
    dtype = torch.bfloat16
    model, _ = _dit("flux:FluxConfig", "dits.flux:FluxTransformer2DModel", arch, device, dtype, 9)
    gen = torch.Generator().manual_seed(10)
    x, ctx, pool = _rand(gen, img, dtype, device), _rand(gen, txt, dtype, device), _rand(gen, pooled, dtype, device)
    t = torch.tensor([0.5], device=device, dtype=dtype)
    g = torch.tensor([3.5], device=device, dtype=dtype)
    return Built(model, _forward_context(lambda: _first(model(x, ctx, pool, t, g))), arch,
                 f"image tokens {img[1]}, text {list(txt)}",
                 inputs={"hidden_states": x, "encoder_hidden_states": ctx, "pooled_projections": pool,
                         "timestep": t, "guidance": g})


def build_ltx2(device: str, tiny: bool, blocks: int | None, batch: int = 1, text_tokens: int | None = None) -> Built:
    # LTX-2 video+audio DiT: 6144 video tokens of 4096 (32 heads x 128), 126 audio tokens of 2048 (32 x 64).
    # batch/text_tokens: a default request's forward (CFG batched: batch 2; Gemma text padded to 1024).
    if tiny:
        arch = dict(num_layers=blocks or 1, num_attention_heads=2, attention_head_dim=32, cross_attention_dim=64,
                    caption_channels=32, in_channels=16, out_channels=16, audio_num_attention_heads=2,
                    audio_attention_head_dim=16, audio_in_channels=16, audio_out_channels=16,
                    audio_cross_attention_dim=32)
        frames, h, w, audio, text = 2, 4, 4, 6, 8
    else:
        arch = dict(num_layers=blocks or 48)
        frames, h, w, audio, text = 16, 16, 24, 126, text_tokens or 128
    # LTX2Config defaults to interleaved RoPE; the production rows this row cites are split RoPE (the captured
    # LTX-2 / LTX-2.3 calls of apply_ltx2_split_rotary_emb; SGLang's LTX-2.5 config also says SPLIT). Under the
    # default the split kernel never runs and the row measures nothing of the rotary family.
    arch["rope_type"] = "split"
    dtype = torch.bfloat16
    model, cfg = _dit("ltx_2:LTX2Config", "dits.ltx_2:LTX2VideoTransformer3DModel", arch, device, dtype, 11)
    ac = cfg.arch_config
    gen = torch.Generator().manual_seed(12)
    b = batch
    video = _rand(gen, (b, frames * h * w, ac.in_channels), dtype, device)
    audio_x = _rand(gen, (b, audio, getattr(ac, "audio_in_channels", 128)), dtype, device)
    ctx = _rand(gen, (b, text, ac.caption_channels), dtype, device)
    actx = _rand(gen, (b, text, ac.caption_channels), dtype, device)
    t = torch.tensor([0.5] * b, device=device, dtype=dtype)
    return Built(model, _forward_context(lambda: _first(model(
        video, audio_x, ctx, actx, t, num_frames=frames, height=h, width=w, audio_num_frames=audio))), arch,
        f"batch {b}, video tokens {frames * h * w}, audio tokens {audio}, text {text}")


# ------------------------------------------------------------------------------------------------ VAEs

def build_hunyuan_vae(device: str, tiny: bool, blocks: int | None) -> Built:
    # Untiled decode of latent [1,16,5,32,32]: every GroupNorm+SiLU of it is a production row
    # (hunyuanvideo_apply_1x512x5x32x32 ... hunyuanvideo_apply_1x128x17x256x256), fp16.
    return _hunyuan_vae(device, tiny, (1, 16, 5, 32, 32), seed=13, tiled=False)


def build_hunyuan_vae_tiled(device: str, tiny: bool, blocks: int | None) -> Built:
    # SGLang's default (tiled) decode, vae.decode(z), of a 33x480x848 video: latent [1,16,9,60,106]; its tiles give
    # the width-10/12 GroupNorm+SiLU rows (hunyuanvideo_apply_1x512x5x32x10 ... hunyuanvideo_apply_1x128x17x96x80).
    return _hunyuan_vae(device, tiny, (1, 16, 9, 60, 106), seed=19, tiled=True)


def _hunyuan_vae(device: str, tiny: bool, latent: tuple[int, ...], seed: int, tiled: bool) -> Built:
    from sglang.multimodal_gen.configs.models.vaes import HunyuanVAEConfig
    from sglang.multimodal_gen.runtime.models.vaes.hunyuanvae import AutoencoderKLHunyuanVideo

    cfg = HunyuanVAEConfig()
    cfg.load_encoder = False
    if tiny:
        cfg.arch_config.block_out_channels = (16, 16, 32, 32)
        cfg.arch_config.layers_per_block = 1
        cfg.arch_config.norm_num_groups = 8
        latent = (1, 16, 2, 2, 2)
    dtype = torch.float16
    with torch.device(device):
        vae = AutoencoderKLHunyuanVideo(cfg)
    vae = vae.to(dtype=dtype).eval()
    init_weights(vae, seed)
    gen = torch.Generator().manual_seed(seed + 1)
    z = _rand(gen, latent, dtype, device)
    # tiled: SGLang's vae.decode (its default tiling); untiled: the decoder on the whole latent
    def run(x: torch.Tensor) -> torch.Tensor:  # tiled: SGLang's vae.decode; untiled: the decoder on the whole latent
        return _first(vae.decode(x)) if tiled else _first(vae.decoder(vae.post_quant_conv(x)))

    return Built(vae, lambda: run(z), {"block_out_channels": list(cfg.arch_config.block_out_channels),
                                       "tiling": "SGLang default" if tiled else False}, f"latent {list(latent)}",
                 _in_fp32(vae, run, z, dtype), inputs={"z": z})


def _in_fp32(module: torch.nn.Module, run: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor,
             dtype: torch.dtype) -> Callable[[], torch.Tensor]:
    """``run(x)`` with the module and x in fp32 (Built.fp32_forward); the module goes back to ``dtype`` after
    (fp16/bf16 -> fp32 -> fp16/bf16 is exact: the weights come back unchanged)."""

    def forward() -> torch.Tensor:
        module.float()
        try:
            return run(x.float()).float()
        finally:
            module.to(dtype)

    return forward


def build_flux_vae(device: str, tiny: bool, blocks: int | None) -> Built:
    # FLUX.2 image VAE decoder: z [1,32,128,128] -> 1024x1024 (the FLUX/Z-Image GroupNorm rows' image size), bf16.
    from sglang.multimodal_gen.configs.models.vaes.flux3_image import Flux3ImageVAEConfig
    from sglang.multimodal_gen.runtime.models.vaes.flux3_image_vae import Flux3ImageVAE

    cfg = Flux3ImageVAEConfig()
    if tiny:
        cfg.arch_config.ch = 32
        cfg.arch_config.num_res_blocks = 1
        side = 4
    else:
        side = 128
    dtype = torch.bfloat16
    with torch.device(device):
        vae = Flux3ImageVAE(cfg)
    vae = vae.to(dtype=dtype).eval()
    init_weights(vae, 15)
    gen = torch.Generator().manual_seed(16)
    z = _rand(gen, (1, cfg.arch_config.z_channels, side, side), dtype, device)
    return Built(vae, lambda: _first(vae.decoder(z)), {"ch": cfg.arch_config.ch},
                 f"z [1, {cfg.arch_config.z_channels}, {side}, {side}]",
                 _in_fp32(vae, lambda x: _first(vae.decoder(x)), z, dtype))


def build_ltx2_upsampler(device: str, tiny: bool, blocks: int | None) -> Built:
    # LTX-2 spatial latent upsampler on a [1,128,16,16,24] latent: its GroupNorm+SiLU rows are
    # ltx2_upsampler_apply_1x512x16x16x24 and ltx2_upsampler_apply_1x512x16x32x48 (bf16).
    from sglang.multimodal_gen.runtime.models.upsampler.latent_upsampler import LatentUpsampler

    if tiny:
        kw = dict(in_channels=16, mid_channels=64, num_blocks_per_stage=1)
        latent = (1, 16, 2, 4, 4)
    else:
        kw = dict(in_channels=128, mid_channels=512, num_blocks_per_stage=4)
        latent = (1, 128, 16, 16, 24)
    dtype = torch.bfloat16
    with torch.device(device):
        up = LatentUpsampler(**kw)
    up = up.to(dtype=dtype).eval()
    init_weights(up, 17)
    gen = torch.Generator().manual_seed(18)
    z = _rand(gen, latent, dtype, device)
    return Built(up, lambda: _first(up(z)), kw, f"latent {list(latent)}", _in_fp32(up, lambda x: _first(up(x)), z, dtype))


GN = "h200_diffusion_group_norm_silu__multi_shape"
ROWS: tuple[Row, ...] = (
    Row("wan22_t2v_dit", "Wan 2.2 T2V A14B", "dit", "dits.wanvideo:WanTransformer3DModel", torch.bfloat16,
        "h200_diffusion_norm_scale_shift__multi_shape:wan_t2v_nss_L37800_f32", build_wan, cpu_forward=False),
    Row("hunyuanvideo_dit", "HunyuanVideo", "dit", "dits.hunyuanvideo:HunyuanVideoTransformer3DModel",
        torch.bfloat16, "h200_diffusion_norm_scale_shift__multi_shape:hyvideo_nss_L27030", build_hunyuan,
        cpu_forward=False),
    Row("qwen_image_dit", "Qwen-Image", "dit", "dits.qwen_image:QwenImageTransformer2DModel", torch.bfloat16,
        "h200_diffusion_qknorm_rope__multi_shape:qwen_T4096_H24_D128", build_qwen, cpu_forward=False),
    Row("zimage_dit", "Z-Image", "dit", "dits.zimage:ZImageTransformer2DModel", torch.bfloat16,
        "h200_diffusion_qknorm_rope__multi_shape:zimage_T4128_H30_D128", build_zimage),
    Row("flux_dit", "FLUX.1", "dit", "dits.flux:FluxTransformer2DModel", torch.bfloat16,
        f"{GN}:flux_vae_apply_1x128x1024x1024", build_flux),
    Row("ltx2_dit", "LTX-2", "dit", "dits.ltx_2:LTX2VideoTransformer3DModel", torch.bfloat16,
        "h200_diffusion_rotary_embedding__multi_shape:ltx2_split_B1_S6144_H32_D128", build_ltx2),
    Row("hunyuanvideo_vae_decode", "HunyuanVideo", "vae", "vaes.hunyuanvae:AutoencoderKLHunyuanVideo",
        torch.float16, f"{GN}:hunyuanvideo_apply_1x128x17x256x256", build_hunyuan_vae),
    Row("hunyuanvideo_vae_decode_tiled", "HunyuanVideo", "vae", "vaes.hunyuanvae:AutoencoderKLHunyuanVideo",
        torch.float16, f"{GN}:hunyuanvideo_apply_1x128x17x96x80", build_hunyuan_vae_tiled),
    Row("flux2_vae_decode", "FLUX.2", "vae", "vaes.flux3_image_vae:Flux3ImageVAE", torch.bfloat16,
        f"{GN}:flux_vae_apply_1x128x1024x1024", build_flux_vae),
    Row("ltx2_latent_upsampler", "LTX-2", "upsampler", "upsampler.latent_upsampler:LatentUpsampler",
        torch.bfloat16, f"{GN}:ltx2_upsampler_apply_1x512x16x16x24", build_ltx2_upsampler),
)
BY_NAME: dict[str, Row] = {r.name: r for r in ROWS}
