"""A row's SGLang request quality, applied the way SGLang's stages apply it, and what it mounted.

- DiT (and the LTX-2 latent upsampler, which runs between denoising stages): the denoising stage's
  ``toggle_quality_fusions([transformer], quality)`` (``pipelines_core/stages/denoising.py``): SGLang's
  quality-gated fusions mount or unmount, and so does the overlay's own entry in that table
  (``kda_kernels.tiers.KDA_FUSION``) while the overlay is installed. Re-applied after every overlay switch.
- VAE: each decode inside the decoding stage's ``use_vae_fast_path(vae, quality_allows(quality,
  "lossless"))`` (``pipelines_core/stages/decoding.py``), which opens SGLang's own VAE fast paths and the
  overlay's.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

QUALITIES = ("exact", "lossless", "high")
DEFAULT_QUALITY = "lossless"  # SGLang 0.5.23's SamplingParams.quality default


def check_quality(quality: str) -> str:
    if quality not in QUALITIES:
        raise ValueError(f"unknown quality tier {quality!r}; SGLang 0.5.23's tiers: {', '.join(QUALITIES)}")
    return quality


def mount(module: Any, quality: str) -> None:
    """The denoising stage's toggle for one transformer at ``quality``."""
    from kda_lab.e2e.sglang_build import import_stages

    import_stages()
    from sglang.multimodal_gen.runtime.pipelines_core.stages.denoising import toggle_quality_fusions

    toggle_quality_fusions([module], quality)


def vae_forward(vae: Any, forward: Callable[[], Any], quality: str) -> Callable[[], Any]:
    """``forward`` inside the decoding stage's fast-path gate for ``quality``."""
    from sglang.multimodal_gen.configs.sample.sampling_params import quality_allows
    from sglang.multimodal_gen.runtime.models.vaes.fast_path_gate import use_vae_fast_path

    allowed = quality_allows(quality, "lossless")

    def run() -> Any:
        with use_vae_fast_path(vae, allowed):
            return forward()

    return run


def fusions(module: Any, kind: str) -> dict[str, Any]:
    """SGLang's quality-gated fusions with sites in ``module`` (name -> [enabled sites, sites]) and, for a
    VAE, whether SGLang installed a fast path gate for it (``optimize_vae``)."""
    out: dict[str, Any] = {}
    if kind in ("dit", "upsampler"):
        from kda_lab.e2e.sglang_build import import_stages

        import_stages()
        from sglang.multimodal_gen.runtime.pipelines_core.stages import denoising

        for _tier, fusion in denoising._QUALITY_FUSION_HANDLERS:
            sites = list(fusion.iter_sites(module))
            if sites:
                out[fusion.name] = [sum(1 for s in sites if fusion.is_enabled(s)), len(sites)]
    else:
        from sglang.multimodal_gen.runtime.models.vaes import fast_path_gate

        out["sglang_vae_fast_path"] = module in fast_path_gate._VAE_FAST_PATH_GATES
    return out


def applier(row_kind: str, built: Any, quality: str) -> tuple[Callable[[], None], Callable[[], Any]]:
    """(re-apply after an overlay switch, the row's forward at ``quality``) for a row of ``row_kind``.

    Every row re-mounts at ``quality`` after a switch: in a request the denoising stage has set the tier
    before anything else runs, and a decode with no gate of its own (LTX-2's stage) runs in that tier. A
    VAE row's forward then runs inside the decoding stage's gate: its own (``Built.at_quality``) or one put
    around it here."""
    module = built.module

    def retier() -> None:
        mount(module, quality)

    if built.at_quality is not None:
        return retier, built.at_quality(quality)
    if row_kind == "vae":
        return retier, vae_forward(module, built.forward, quality)
    return retier, built.forward
