"""Swap targets: every SGLang 0.5.23 diffusion function the overlay can replace, and where its KDA twin lives.

Pure data (no torch, no sglang import), so ``import kda_kernels`` stays cheap inside ``import sglang``.
The defining modules are the owners named by the 0.5.23 facade's export table
(``sglang/kernels/ops/diffusion/__init__.py::_EXPORTS``); the facade itself is
``sglang.kernels.ops.diffusion`` (lazy PEP 562, caches resolved names into its globals).

Kinds (how the KDA object wraps its custom op, see ``kda_kernels.contracts``):

- ``op``        tensor-level function: a ``torch.library.custom_op("kda::<name>")``.
- ``out``       like ``op`` plus an optional ``out=`` tensor (a second, mutating op ``kda::<name>_out``).
- ``optional``  returns ``Tensor | None`` (``None``: the caller runs its eager path), as SGLang's does.
- ``wrapper``   takes non-tensor objects (``nn.Module``s): a plain Python wrapper that unpacks them into the
                custom op of the tensor-level function named by ``unpacks_into``.
"""

from __future__ import annotations

from dataclasses import dataclass

SGLANG_VERSION = "0.5.23"
FACADE = "sglang.kernels.ops.diffusion"
ARCH_CAPABILITY: dict[str, tuple[int, int]] = {"h200": (9, 0), "b200": (10, 0)}
CAPABILITY_ARCH: dict[tuple[int, int], str] = {cc: arch for arch, cc in ARCH_CAPABILITY.items()}

_D = FACADE + "."


@dataclass(frozen=True)
class SwapTarget:
    function: str
    family: str
    sglang: str  # "module:function" defining the SGLang 0.5.23 baseline
    kind: str = "op"
    unpacks_into: str | None = None  # wrapper kind: the tensor-level function whose op it calls
    # the lowest SGLang request quality that may run the KDA impl (kda_kernels.tiers): "exact" where the task's
    # contract (task.toml `exact = true`) holds every candidate bit for bit to SGLang, else "lossless"
    tier: str = "lossless"

    @property
    def module(self) -> str:
        return self.sglang.partition(":")[0]

    @property
    def kda(self) -> str:
        return f"kda_kernels.diffusion.{self.family}:{self.function}"

    @property
    def family_module(self) -> str:
        return f"kda_kernels.diffusion.{self.family}"

    @property
    def op_name(self) -> str:
        return f"kda::{self.function}"

    @property
    def registry_op(self) -> str:
        """Operator id used for the ``KernelSpec(backend=KernelBackend.KDA)`` record in SGLang's registry."""
        return f"diffusion.{self.function}"


TARGETS: tuple[SwapTarget, ...] = (
    SwapTarget("fused_inplace_qknorm_rope", "qknorm_rope", _D + "rope.qknorm_rope_jit:fused_inplace_qknorm_rope"),
    SwapTarget("norm_infer", "norm_infer", _D + "norm.norm_triton:norm_infer", kind="out"),
    SwapTarget("triton_one_pass_rms_norm", "norm_infer",
               _D + "norm.rmsnorm_onepass_triton:triton_one_pass_rms_norm"),
    SwapTarget("triton_group_norm_silu", "group_norm_silu",
               _D + "norm.group_norm_silu_triton:triton_group_norm_silu"),
    SwapTarget("apply_group_norm_silu", "group_norm_silu", _D + "norm.group_norm_silu:apply_group_norm_silu",
               kind="wrapper", unpacks_into="triton_group_norm_silu"),
    SwapTarget("apply_rotary_embedding", "rotary_embedding", _D + "rope.rotary_triton:apply_rotary_embedding",
               tier="exact"),
    SwapTarget("apply_ltx2_split_rotary_emb", "rotary_embedding",
               _D + "rope.ltx2_rotary_triton:apply_ltx2_split_rotary_emb", tier="exact"),
    SwapTarget("fuse_scale_shift_kernel", "fuse_scale_shift", _D + "modulate.scale_shift_triton:fuse_scale_shift_kernel"),
    SwapTarget("fuse_layernorm_scale_shift_gate_select01_kernel", "fuse_scale_shift",
               _D + "modulate.scale_shift_triton:fuse_layernorm_scale_shift_gate_select01_kernel"),
    SwapTarget("fuse_residual_layernorm_scale_shift_gate_select01_kernel", "fuse_scale_shift",
               _D + "modulate.scale_shift_triton:fuse_residual_layernorm_scale_shift_gate_select01_kernel"),
    SwapTarget("rmsnorm_scale", "norm_tanh_mul_add", _D + "norm.native_bf16_rmsnorm_triton:rmsnorm_scale",
               kind="optional", tier="exact"),
    SwapTarget("rmsnorm_tanh_residual", "norm_tanh_mul_add",
               _D + "norm.native_bf16_rmsnorm_triton:rmsnorm_tanh_residual", kind="optional", tier="exact"),
    SwapTarget("fused_norm_scale_shift", "norm_scale_shift",
               _D + "norm.scale_residual_norm_cutedsl:fused_norm_scale_shift"),
    SwapTarget("fused_scale_residual_norm_scale_shift", "norm_scale_shift",
               _D + "norm.scale_residual_norm_cutedsl:fused_scale_residual_norm_scale_shift"),
)

BY_FUNCTION: dict[str, SwapTarget] = {t.function: t for t in TARGETS}


@dataclass(frozen=True)
class FastPath:
    """A module-level fast path: SGLang has no function to swap, so the promoted impl patches the model classes of
    ``sglang`` itself (``register.py``'s ``FAST_PATHS[name]``: ``install(serves) / uninstall() / patched()``), the
    way SGLang's own ``maybe_optimize_*_vae`` wrap its Wan and FLUX.2 decoders. ``kernels`` are the task functions
    whose H200 evidence gates the export (the fast path is made of them)."""

    name: str
    family: str
    sglang: str  # the SGLang module whose classes it patches
    kernels: tuple[str, ...]
    # lowest request quality that may take it (kda_kernels.tiers); a decoder in channels-last moves cuDNN's roundings
    tier: str = "lossless"
    # For an impl without a fallbacks() of its own (an export whose hashed source predates them): the patched
    # ``Class.attr`` through which a call enters the fast path, and the module states on which its contract hands
    # the call to SGLang's own forward, (attribute of the entered module, reason). kda_kernels.fast_paths then
    # counts each entry the impl declined, by reason, in status()[name]["fallbacks"].
    entry: str = ""
    declines: tuple[tuple[str, str], ...] = ()

    @property
    def family_module(self) -> str:
        return f"kda_kernels.diffusion.{self.family}"

    @property
    def kda(self) -> str:
        return f"{self.family_module}:{self.name}"


FAST_PATHS: tuple[FastPath, ...] = (
    # SGLang sets spatial_parallel on every decoder of a HunyuanVideo VAE built with a decode-parallel world > 1
    # (hunyuanvae.py: AutoencoderKLHunyuanVideo.__init__, _enable_hunyuan_decoder_spatial_parallel), also when a
    # decode then runs unsplit: the impl hands those decoders to SGLang (their convs exchange halos across ranks)
    FastPath("hunyuanvideo_vae_decoder", "replicate_pad3d", "sglang.multimodal_gen.runtime.models.vaes.hunyuanvae",
             ("replicate_pad3d", "replicate_pad3d_channels_last"), entry="HunyuanVideoDecoder3D.forward",
             declines=(("spatial_parallel", "spatial-parallel decoder (SGLang's own forward)"),)),
    # lossless: its RMSNorm sums channels in another order than torch's reduce kernel (the family module)
    FastPath("ltx2_vae_decoder", "ltx2_rms_silu_pad", "sglang.multimodal_gen.runtime.models.vaes.ltx_2_vae",
             ("ltx2_rms_silu_pad", "ltx2_pad_cast")),
)
FAST_PATH_FAMILIES: dict[str, FastPath] = {fp.family: fp for fp in FAST_PATHS}

FAMILIES: dict[str, tuple[str, ...]] = {}
for _t in TARGETS:
    FAMILIES.setdefault(_t.family, ())
    FAMILIES[_t.family] = (*FAMILIES[_t.family], _t.function)
del _t


def target(function: str) -> SwapTarget:
    try:
        return BY_FUNCTION[function]
    except KeyError:
        raise KeyError(f"{function!r} is not a KDA swap target; known: {', '.join(BY_FUNCTION)}") from None


def family_targets(family: str) -> tuple[SwapTarget, ...]:
    if family not in FAMILIES:
        raise KeyError(f"unknown family {family!r}; known: {', '.join(FAMILIES)}")
    return tuple(BY_FUNCTION[f] for f in FAMILIES[family])
