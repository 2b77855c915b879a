"""Per-family numerics: the lab's fp64 oracles, eager torch references (the torch.compile peer) and how a
function's outputs are read (returned tensors, or mutated arguments for in-place ops).

A family module defines ``FUNCTIONS: dict[str, FunctionContract]`` keyed by the SGLang function name.
"""

from __future__ import annotations

from importlib import import_module
from types import ModuleType
from typing import TYPE_CHECKING

from kda_kernels.registry import FAMILIES as _SWAP_FAMILIES

if TYPE_CHECKING:  # the family tables stay importable without torch (the launcher generator reads them)
    from kda_lab.families.base import FunctionContract

# The seven SGLang diffusion families and their SGLang 0.5.23 functions come from the overlay's registry of swap
# targets (one source of truth; the registry's order, which launcher numbering follows for the first seven).
DIFFUSION_FAMILIES: tuple[str, ...] = tuple(_SWAP_FAMILIES)
# The single-shape reference tasks (not diffusion kernels, no facade entry); the function names are the lab's
# and their baselines live in kda_lab/baselines.py.
REFERENCE_FAMILIES: tuple[str, ...] = ("int8_scaled_mm", "mha")
# Model-level families: code inside an SGLang model class that SGLang has no function (and no facade entry)
# for; the family module's BASELINES name the lab's verbatim copy of that code.
MODEL_FAMILIES: tuple[str, ...] = ("replicate_pad3d", "ltx2_rms_silu_pad")
FAMILIES: tuple[str, ...] = DIFFUSION_FAMILIES + REFERENCE_FAMILIES + MODEL_FAMILIES

FAMILY_FUNCTIONS: dict[str, tuple[str, ...]] = {
    **_SWAP_FAMILIES,
    "int8_scaled_mm": ("int8_scaled_mm",),
    "mha": ("mha_forward",),
    "replicate_pad3d": ("replicate_pad3d", "replicate_pad3d_channels_last"),
    "ltx2_rms_silu_pad": ("ltx2_rms_silu_pad", "ltx2_pad_cast"),
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


__all__ = ["DIFFUSION_FAMILIES", "FAMILIES", "MODEL_FAMILIES", "REFERENCE_FAMILIES", "FAMILY_FUNCTIONS", "contract", "family_module", "FamilyNotImplemented"]
