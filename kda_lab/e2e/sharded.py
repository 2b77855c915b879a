"""e2e rows as SGLang runs them across worker processes (issue 42): inputs split, module called, outputs
gathered, each step by SGLang 0.5.23's own code, so the same row runs in one process and in every worker of
`kda e2e --sp N`.

A row has a parallel form here or `--sp` / `--tp` refuses it (one line, exit 2):

- ``flux_dit``: FLUX.1's denoising stage shards the packed image tokens over the SP ranks
  (``configs/pipeline_configs/base.py``: ``ImagePipelineConfig.shard_latents_for_sp``, zero tail pad to a
  multiple of the degree), hands the transformer the RoPE cache of its shard
  (``configs/pipeline_configs/flux.py``: ``FluxPipelineConfig.get_freqs_cis``, ``shard_rotary_emb_for_sp``),
  the transformer shards the text itself (``models/dits/flux.py``: ``FluxTransformer2DModel.forward``,
  ``should_shard_text`` / ``build_shard_plan``), its ``USPAttention`` exchanges K/V (all-gather at SP 2) or
  heads (Ulysses all-to-all), and the stage gathers the noise prediction
  (``ImagePipelineConfig.gather_latents_for_sp``) and cuts the pad. Under TP its parallel linears split the
  weights, loaded from the one-process weights through SGLang's own weight loaders
  (:func:`load_one_process_weights`), so both layouts compute the one-process model.
- ``hunyuanvideo_vae_decode``: built under a decode-parallel world > 1, SGLang's HunyuanVideo VAE turns
  spatial parallel on in its decoder (``models/vaes/hunyuanvae.py``: ``AutoencoderKLHunyuanVideo.__init__``)
  and its ``_decode`` splits the latent by height and gathers the rows when its policy says so, else decodes
  whole with the split switched off (``_decode``, ``should_run_spatial_shard_parallel_decode``). The untiled
  row's one-process forward (``decoder(post_quant_conv(z))``) is ``_decode`` in one process.

At one process every split and gather above is the identity, so the parent process of a run computes the
reference of the same form (kda_lab.e2e.multi).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from kda_lab.e2e.models import Built, _first, _forward_context, _in_fp32


@dataclass(frozen=True)
class Form:
    row: str
    degrees: tuple[str, ...]  # the layouts SGLang splits this row by: "sp", "tp"
    how: str  # what is split, one line (`kda e2e --list --sp 2`)
    heads: Callable[[bool], int]  # attention heads at tiny / production size (0: no attention split)
    make: Callable[[Built, str], Built]  # (the row as built, device) -> the row run SGLang's parallel way


def _flux(built: Built, device: str) -> Built:
    import torch
    from sglang.multimodal_gen.configs.pipeline_configs.flux import FluxPipelineConfig
    from sglang.multimodal_gen.configs.sample.sampling_params import SamplingParams, resolve_sequence_shard

    model, inp = built.module, built.inputs
    x, ctx = inp["hidden_states"], inp["encoder_hidden_states"]
    config = FluxPipelineConfig()
    config.vae_config.post_init()  # what SGLang's loader runs once it read the VAE config (vae_scale_factor)
    # the request: SGLang's Req delegates enable_sequence_shard to its SamplingParams (Req itself imports the
    # OpenAI protocol module, which the CPU environment does not install)
    request = SamplingParams()
    request.enable_sequence_shard = resolve_sequence_shard(config, None)
    side = math.isqrt(x.shape[1])
    pixels = side * 2 * config.vae_config.arch_config.vae_scale_factor
    freqs = config.get_freqs_cis(ctx, pixels, pixels, torch.device(device), model.rotary_emb, request,
                                 [ctx.shape[1]])
    local, sharded = config.shard_latents_for_sp(request, x)

    def run(xs: torch.Tensor, cast: torch.dtype | None = None) -> torch.Tensor:
        a = {k: v.to(cast) if cast is not None else v for k, v in inp.items() if k != "hidden_states"}
        out = _first(model(xs, a["encoder_hidden_states"], a["pooled_projections"], a["timestep"],
                           a["guidance"], freqs_cis=freqs))
        return config.gather_latents_for_sp(out)[:, : x.shape[1]] if sharded else out

    def fp32() -> torch.Tensor:
        model.float()
        try:
            return _forward_context(lambda: run(local.float(), torch.float32))().float()
        finally:
            model.to(x.dtype)

    return replace(built, forward=_forward_context(lambda: run(local)), fp32_forward=fp32,
                   shape=f"image tokens {x.shape[1]} ({local.shape[1]} per worker), text {ctx.shape[1]}, "
                         "RoPE")


def _hunyuan_vae(built: Built, device: str) -> Built:
    vae, z = built.module, built.inputs["z"]

    def run(x: Any) -> Any:
        return _first(vae._decode(x))  # what vae.decode runs for a latent it does not tile

    return replace(built, forward=lambda: run(z), fp32_forward=_in_fp32(vae, run, z, z.dtype))


FORMS: dict[str, Form] = {f.row: f for f in (
    Form("flux_dit", ("sp", "tp"), "image tokens split over SP ranks, text sharded in the model, K/V or "
         "heads exchanged in attention; TP: parallel linears", lambda tiny: 2 if tiny else 24, _flux),
    Form("hunyuanvideo_vae_decode", ("sp",), "SGLang's spatial-parallel decode: latent rows split by height, "
         "halos exchanged, rows gathered (when its policy splits)", lambda tiny: 0, _hunyuan_vae),
)}


def form(row: str, sp: int, tp: int) -> Form:
    """The row's parallel form; KeyError with the one line to print when it has none for these degrees."""
    f = FORMS.get(row)
    wanted = [k for k, n in (("sp", sp), ("tp", tp)) if n > 1]
    if f is None or any(k not in f.degrees for k in wanted):
        have = ", ".join(f"{r} ({'/'.join(x.degrees)})" for r, x in FORMS.items())
        raise KeyError(f"{row} has no {'/'.join(wanted) or 'worker'} form: its inputs are not split the way "
                       f"SGLang splits them yet (rows with one: {have}; docs/e2e.md, Multi-GPU)")
    return f


def load_one_process_weights(module: Any, weights: dict[str, Any]) -> int:
    """Load a one-process state dict into ``module`` built under TP, through SGLang's weight loaders (each
    parallel parameter takes its shard: ``layers/linear.py``; the rest are copied whole, the loader's
    ``default_weight_loader``). Returns the parameters loaded."""
    from sglang.multimodal_gen.runtime.loader.weight_utils import default_weight_loader

    n = 0
    for name, p in module.named_parameters():
        getattr(p, "weight_loader", default_weight_loader)(p, weights[name].to(p.device))
        n += 1
    return n
