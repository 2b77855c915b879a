"""Per-family numerics: the lab's fp64 oracles, eager torch references (the torch.compile peer) and how a
function's outputs are read (returned tensors, or mutated arguments for in-place ops).

A family module defines ``FUNCTIONS: dict[str, FunctionContract]`` keyed by the SGLang function name.
"""

from __future__ import annotations

from importlib import import_module
from types import ModuleType
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the family tables stay importable without torch (the launcher generator reads them)
    from kda_lab.families.base import FunctionContract

# The seven SGLang diffusion families, in the lab's order (DESIGN.md "Families"; launcher numbering follows it).
DIFFUSION_FAMILIES: tuple[str, ...] = (
    "qknorm_rope", "norm_infer", "group_norm_silu", "rotary_embedding",
    "fuse_scale_shift", "norm_tanh_mul_add", "norm_scale_shift",
)
# The single-shape reference tasks (not diffusion kernels; no facade entry).
REFERENCE_FAMILIES: tuple[str, ...] = ("int8_scaled_mm", "mha")
FAMILIES: tuple[str, ...] = DIFFUSION_FAMILIES + REFERENCE_FAMILIES

# SGLang 0.5.23 functions per family (../shared/DESIGN.md).
FAMILY_FUNCTIONS: dict[str, tuple[str, ...]] = {
    "qknorm_rope": ("fused_inplace_qknorm_rope",),
    "norm_infer": ("norm_infer", "triton_one_pass_rms_norm"),
    "group_norm_silu": ("triton_group_norm_silu", "apply_group_norm_silu"),
    "rotary_embedding": ("apply_rotary_embedding", "apply_ltx2_split_rotary_emb"),
    "fuse_scale_shift": (
        "fuse_scale_shift_kernel",
        "fuse_layernorm_scale_shift_gate_select01_kernel",
        "fuse_residual_layernorm_scale_shift_gate_select01_kernel",
    ),
    "norm_tanh_mul_add": ("rmsnorm_scale", "rmsnorm_tanh_residual"),
    "norm_scale_shift": ("fused_norm_scale_shift", "fused_scale_residual_norm_scale_shift"),
    # Reference tasks: the function names are the lab's (their baselines live in kda_lab/baselines.py).
    "int8_scaled_mm": ("int8_scaled_mm",),
    "mha": ("mha_forward",),
}


class FamilyNotImplemented(LookupError):
    """The family's oracle module has not been written yet."""


def family_module(family: str) -> ModuleType:
    if family not in FAMILY_FUNCTIONS:
        raise KeyError(f"unknown family {family!r}; known: {', '.join(FAMILIES)}")
    try:
        return import_module(f"kda_lab.families.{family}")
    except ModuleNotFoundError as e:
        if e.name == f"kda_lab.families.{family}":
            raise FamilyNotImplemented(f"no oracle module kda_lab/families/{family}.py yet") from e
        raise


def contract(family: str, fn: str) -> FunctionContract:
    functions = family_module(family).FUNCTIONS
    if fn not in functions:
        raise KeyError(f"family {family!r} has no contract for {fn!r}; it has {sorted(functions)}")
    return functions[fn]


__all__ = ["DIFFUSION_FAMILIES", "FAMILIES", "REFERENCE_FAMILIES", "FAMILY_FUNCTIONS", "contract", "family_module", "FamilyNotImplemented"]
