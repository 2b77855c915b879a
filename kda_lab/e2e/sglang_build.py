"""A VAE as SGLang 0.5.23 serves it: built, loaded, placed and decoded by SGLang's own functions.

A module built by calling its class is not what a default request runs. Between the class and
``vae.decode`` SGLang's loader, platform, component manager and decoding stage each change something; this
module applies exactly those steps to a freshly built module, calling the SGLang function that does each
one (paths under ``sglang/multimodal_gen/``):

==================
================================================================================================== here
SGLang ==================
==================================================================================================
``server_args`` ``runtime/server_args/server_args.py: ServerArgs`` (the real dataclass, explicit pipeline
config) ``build_vae`` ``runtime/loader/component_loaders/vae_loader.py: VAELoader.load_customized``: the
load dtype
                    (``utils/precision.py: resolve_component_precision``, else
                    ``PRECISION_TO_TYPE[vae_precision]``), ``vae_config.update_model_arch(<checkpoint
                    config.json>)`` + ``post_init``, the class from ``runtime/models/registry.py:
                    ModelRegistry.resolve_model_cls(_class_name)``, built by ``runtime/loader/utils.py:
                    initialize_model``; seeded random weights stand in for the checkpoint
``vae_as_loaded`` the rest of ``load_customized``: ``_should_use_channels_last_3d`` /
``_channels_last_3d_prefix`` /
                    ``_convert_conv3d_weights_to_channels_last_3d``,
                    ``_hold_decoder_weights_in_decode_dtype``, then ``current_platform.optimize_vae``
                    (``runtime/platforms/cuda.py: CudaPlatformBase.optimize_vae``: the quality-gated FLUX.2
                    / AutoencoderKL / Wan / Qwen-Image / MiniMax-H3 fast paths; a no-op on the CPU
                    platform)
``place_for_decode`` ``runtime/managers/memory_managers/component_residency_strategies.py:
_module_to_local_device``
                    with the stage's declared ``ComponentUse.target_dtype``
                    (``DecodingStage.component_uses``: the request-independent decode dtype): the VAE is
                    cast to it when the decode first uses it
``decode_dtype``    ``utils/precision.py: resolve_decode_precision(server_args, "vae", quality=...)`` (what
                    ``DecodingStage.forward`` passes as ``vae_dtype``)
``decode``          ``runtime/pipelines_core/stages/decoding.py: DecodingStage.forward``'s decode:
                    ``use_vae_fast_path(vae, quality_allows(quality, "lossless"))`` around
                    ``DecodingStage.decode`` (``decode_raw``: ``scale_and_shift``,
                    ``pipeline_config.preprocess_decoding``, ``autocast_context``, ``vae_tiling`` ->
                    ``vae.enable_tiling()``, the cast when autocast is off, ``temporary_module_dtype``,
                    ``_get_vae_decode_fn``; then ``_to_unit_range``). LTX-2 pipelines decode in
                    ``stages/model_specific_stages/ltx_2/decoding_av.py:
                    LTX2AVDecodingStage._decode_video`` (external de-normalization, no fast-path gate, no
                    quality in its dtype), called here as is
==================
==================================================================================================

SGLang's stages package imports its VLA (robot-action) stage, whose observation hashing imports the LLM
runtime's ``sglang.srt.managers.mm_utils``, which reaches ``openai`` (not a dependency of the lab's CPU or
GPU e2e environments). :func:`import_stages` stands in a ``mm_utils`` whose only name the VLA stage
imports, ``tensor_hash``, raises, when and only when the real module cannot be imported; nothing on a
decode or denoise path calls it.

Not reproduced: loading checkpoint tensors (random weights instead: ``models.init_weights``), the residency
manager's offload/prefetch strategies other than the cast-and-place above, ``post_decoding`` and the frame
encoder after the decode, trajectory decoding, and the multi-GPU parallel decode (one process, one device).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

import torch

PIPELINE_CONFIGS = "sglang.multimodal_gen.configs.pipeline_configs."


def pipeline_config(path: str) -> Any:
    """A fresh SGLang pipeline config from ``"module:Class"`` under ``configs/pipeline_configs`` (each VAE
    build updates its ``vae_config`` in place, as the loader does, so every build takes a fresh one)."""
    mod, _, cls = path.partition(":")
    return getattr(importlib.import_module(PIPELINE_CONFIGS + mod), cls)()


def server_args(pipeline_config: Any, *, num_gpus: int = 1, **kwargs: Any) -> Any:
    """SGLang's real ``ServerArgs`` around ``pipeline_config`` (a label for the model path: with an explicit
    pipeline config nothing is resolved from a hub). Needs ``runtime.init_sglang`` first only for what
    reads the global server args (the stages); constructing it does not."""
    from sglang.multimodal_gen.runtime.server_args import ServerArgs

    return ServerArgs(
        model_path="kda-e2e/random-weights", num_gpus=num_gpus, pipeline_config=pipeline_config, **kwargs
    )


def load_dtype(args: Any, component_name: str = "vae") -> torch.dtype:
    """The dtype ``VAELoader.load_customized`` builds the VAE in."""
    from sglang.multimodal_gen.runtime.utils.precision import resolve_component_precision
    from sglang.multimodal_gen.runtime.utils.precision_types import PRECISION_TO_TYPE

    resolved = resolve_component_precision(args, component_name)
    return resolved if resolved is not None else PRECISION_TO_TYPE[args.pipeline_config.vae_precision]


def build_vae(
    args: Any,
    checkpoint_config: dict[str, Any],
    *,
    device: str,
    seed: int,
    init: Callable[[torch.nn.Module, int], None],
) -> torch.nn.Module:
    """``VAELoader.load_customized`` up to the weights: the checkpoint's ``config.json`` (``_class_name`` and
    arch values) into the pipeline's ``vae_config``, SGLang's registered class built in the load dtype,
    then ``init(vae, seed)`` in place of the checkpoint, then :func:`vae_as_loaded`."""
    from sglang.multimodal_gen.runtime.loader.utils import initialize_model
    from sglang.multimodal_gen.runtime.models.registry import ModelRegistry

    config = dict(checkpoint_config)
    class_name = config.pop("_class_name")
    vae_config = args.pipeline_config.vae_config
    vae_config.update_model_arch(config)
    if hasattr(vae_config, "post_init"):
        vae_config.post_init()
    vae_cls, _ = ModelRegistry.resolve_model_cls(class_name)
    vae = initialize_model(vae_cls, {"config": vae_config}, load_dtype(args), torch.device(device))
    init(vae, seed)
    return vae_as_loaded(vae, args).eval()


def channels_last_3d_policy(args: Any, component_type: str = "vae") -> tuple[bool, str]:
    """SGLang's decision for this server: (convert Conv3d weights to channels_last_3d?, module-name prefix).
    """
    from sglang.multimodal_gen.runtime.loader.component_loaders import vae_loader

    return (
        vae_loader._should_use_channels_last_3d(args, component_type),
        vae_loader._channels_last_3d_prefix(args),
    )


def vae_as_loaded(vae: torch.nn.Module, args: Any, component_name: str = "vae") -> torch.nn.Module:
    """What ``VAELoader.load_customized`` does to a VAE after its weights are in, in SGLang's order."""
    from sglang.multimodal_gen.runtime.loader.component_loaders import vae_loader
    from sglang.multimodal_gen.runtime.platforms import current_platform

    convert, prefix = channels_last_3d_policy(args, component_name)
    if convert:
        vae_loader._convert_conv3d_weights_to_channels_last_3d(vae, prefix)
    vae_loader._hold_decoder_weights_in_decode_dtype(vae, args, component_name, component_type=component_name)
    return current_platform.optimize_vae(vae)


def import_stages() -> str:
    """Make ``sglang.multimodal_gen.runtime.pipelines_core.stages`` importable (see the module docstring);
    returns "" when SGLang's own ``mm_utils`` imports, else what stands in for it."""
    import sys
    import types

    name = "sglang.srt.managers.mm_utils"
    if name in sys.modules:
        return "" if hasattr(sys.modules[name], "__file__") else "stand-in"
    try:
        importlib.import_module(name)
        return ""
    except ModuleNotFoundError as err:
        missing = err.name

    def tensor_hash(*args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(
            f"{name} stands in for SGLang's (it needs {missing!r}): VLA stages do not run here"
        )

    stub = types.ModuleType(name)
    stub.tensor_hash = tensor_hash  # type: ignore[attr-defined]
    sys.modules[name] = stub
    return f"stand-in (missing {missing})"


def decode_stage(vae: torch.nn.Module, args: Any) -> Any:
    """The pipeline's decoding stage around ``vae`` (``LTX2AVDecodingStage`` for LTX-2 pipeline configs, the
    shared ``DecodingStage`` otherwise), outside a pipeline: no residency manager, so declared uses yield
    the module.
    """
    from sglang.multimodal_gen.configs.pipeline_configs.ltx_2 import LTX2PipelineConfig

    import_stages()
    from sglang.multimodal_gen.runtime.pipelines_core.stages.decoding import DecodingStage

    if isinstance(args.pipeline_config, LTX2PipelineConfig):
        from sglang.multimodal_gen.runtime.pipelines_core.stages.model_specific_stages.ltx_2.decoding_av import (  # noqa: E501
            LTX2AVDecodingStage,
        )

        stage = LTX2AVDecodingStage(vae, audio_vae=None, vocoder=None)
    else:
        stage = DecodingStage(vae)
    # a stage takes the global server args at construction; in a server they are the pipeline's own
    stage.server_args = args
    return stage


def place_for_decode(vae: torch.nn.Module, args: Any, device: str) -> torch.nn.Module:
    """The VAE on ``device`` in the dtype its decoding stage declares (``component_uses``), as the component
    manager's ``_module_to_local_device`` leaves it before the first decode. ``.to`` keeps
    channels_last_3d.
    """
    (use,) = [u for u in decode_stage(vae, args).component_uses(args) if u.component_name == "vae"]
    return vae.to(device=device, dtype=use.target_dtype)


def decode_dtype(args: Any, quality: str = "lossless") -> torch.dtype:
    """``DecodingStage.forward``'s ``vae_dtype`` for a request at ``quality``."""
    from sglang.multimodal_gen.runtime.utils.precision import resolve_decode_precision

    return resolve_decode_precision(args, "vae", quality=quality)


def decode(
    vae: torch.nn.Module,
    latents: torch.Tensor,
    args: Any,
    quality: str = "lossless",
    *,
    vae_dtype: torch.dtype | None = None,
) -> torch.Tensor:
    """One decode of denoised ``latents`` as a request at ``quality`` runs it (call under
    ``torch.no_grad()``).

    ``vae_dtype`` overrides the resolved decode dtype (the fp32 yardstick of ``Built.fp32_forward``)."""
    from sglang.multimodal_gen.configs.sample.sampling_params import normalize_quality, quality_allows
    from sglang.multimodal_gen.runtime.models.vaes.fast_path_gate import use_vae_fast_path

    quality = normalize_quality(quality)
    stage = decode_stage(vae, args)
    if type(stage).__name__ == "LTX2AVDecodingStage":
        # LTX-2's stage resolves its dtype without the request's quality and mounts no VAE fast-path gate
        return _ltx2_decode(stage, latents, args, vae_dtype)
    dtype = vae_dtype if vae_dtype is not None else decode_dtype(args, quality)
    with use_vae_fast_path(vae, quality_allows(quality, "lossless")):
        return stage.decode(latents, args, vae_dtype=dtype)


def _ltx2_decode(stage: Any, latents: torch.Tensor, args: Any, vae_dtype: torch.dtype | None) -> torch.Tensor:
    from types import SimpleNamespace

    batch = SimpleNamespace(latents=latents, use_diffusion_decoder=False)
    if vae_dtype is None:
        return stage._decode_video(batch, args)
    # the fp32 yardstick: the same stage code under a decode-only fp32 override
    saved = args.pipeline_config.vae_decode_precision
    args.pipeline_config.vae_decode_precision = "fp32"
    try:
        return stage._decode_video(batch, args)
    finally:
        args.pipeline_config.vae_decode_precision = saved
