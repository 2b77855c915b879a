"""The real SGLang 0.5.23 package and its diffusion modules import in the CPU environment."""

from __future__ import annotations

import importlib

import pytest

MODULES = [
    "sglang.kernels.ops.diffusion",
    "sglang.kernels.ops.diffusion.modulate.scale_shift_triton",
    "sglang.kernels.ops.diffusion.norm.group_norm_silu",
    "sglang.kernels.ops.diffusion.norm.group_norm_silu_triton",
    "sglang.kernels.ops.diffusion.rope.rotary_triton",
    "sglang.kernels.ops.diffusion.rope.ltx2_rotary_triton",
    "sglang.kernels.ops.diffusion.norm.rmsnorm_onepass_triton",
    "sglang.kernels.ops.diffusion.norm.native_bf16_rmsnorm_triton",
    "sglang.kernels.registry",
    "sglang.multimodal_gen.runtime.layers.elementwise",
    "sglang.multimodal_gen.runtime.layers.fused_scale_shift_gate",
]


def test_pinned_version():
    import sglang

    assert sglang.__version__ == "0.5.23"


@pytest.mark.parametrize("name", MODULES)
def test_module_imports(name):
    importlib.import_module(name)


def test_facade_resolves_every_fuse_scale_shift_function():
    import sglang.kernels.ops.diffusion as facade

    for fn in ("fuse_scale_shift_kernel", "fuse_layernorm_scale_shift_gate_select01_kernel",
               "fuse_residual_layernorm_scale_shift_gate_select01_kernel"):
        assert callable(getattr(facade, fn))
