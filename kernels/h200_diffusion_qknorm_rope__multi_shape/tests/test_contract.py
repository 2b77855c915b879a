"""Which calls c008's CUDA kernel takes: src/qknorm_rope_contract.h's decide(), which the torch binding runs on
every call (False: register.py calls SGLang), checked on the CPU through the emulator library with CPU tensors
described as the binding describes CUDA ones. Every branch that hands a call to SGLang, the production
signatures it takes, and what it tells the launcher (layout, rope width, dtypes)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest
import torch

_spec = importlib.util.spec_from_file_location("qkr_emu_lib", Path(__file__).with_name("emu") / "emu_lib.py")
assert _spec is not None and _spec.loader is not None
E = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(E)


def base(n: int = 3, h: int = 2, d: int = 128, dtype: torch.dtype = torch.bfloat16) -> dict[str, Any]:
    return {"q": torch.randn(n, h, d).to(dtype), "k": torch.randn(n, h, d).to(dtype),
            "q_weight": torch.ones(d, dtype=dtype), "k_weight": torch.ones(d, dtype=dtype),
            "cos_sin_cache": torch.rand(n, d), "positions": torch.arange(n), "is_neox": False}


def test_production_signatures_are_taken() -> None:
    for n, h, eps in ((4096, 24, 1e-6), (19, 24, 1e-6), (32, 30, 1e-5)):
        d = E.decide(**base(n, h), eps=eps, head_dim=128, rope_dim=128)
        assert (d.ok, d.empty, d.layout, d.rope, d.head_dim, d.x_f16, d.cache_kind, d.pos_64) == \
            (1, 0, 0, 128, 128, 0, 0, 1)


def test_fused_qkv_views_are_taken() -> None:
    buf = torch.randn(47, 3 * 24 * 128).bfloat16()
    a = base(47, 24)
    a.update(q=buf[:, :3072].view(47, 24, 128), k=buf[:, 3072:6144].view(47, 24, 128))
    assert E.decide(**a).ok


def test_layouts_and_dtypes_reported() -> None:
    a = base(5, 3, 64, torch.float16)
    a.update(cos_sin_cache=torch.rand(7, 64).half(), positions=torch.arange(5, dtype=torch.int32), is_neox=True)
    d = E.decide(**a, cache_has_full_width=True)  # full width: rope = 32
    assert (d.ok, d.layout, d.rope, d.x_f16, d.cache_kind, d.pos_64) == (1, 3, 32, 1, 2, 0)


def test_nothing_to_do_is_taken_as_empty() -> None:
    a = base()
    a.update(q=a["q"][:0], k=a["k"][:0], positions=a["positions"][:0])
    d = E.decide(**a)
    assert d.ok and d.empty
    a = base()
    a.update(q=a["q"][:, :0], k=a["k"][:, :0])
    assert E.decide(**a).empty


FALLBACKS = {
    "head_dim 96": lambda a: a.update(q=a["q"][..., :96].contiguous(), k=a["k"][..., :96].contiguous(),
                                      q_weight=a["q_weight"][:96].contiguous(),
                                      k_weight=a["k_weight"][:96].contiguous(),
                                      cos_sin_cache=a["cos_sin_cache"][:, :96].contiguous()),
    "head_dim arg != D": lambda a: a.update(head_dim=64),
    "rope not a multiple of D/32": lambda a: a.update(cos_sin_cache=a["cos_sin_cache"][:, :6].contiguous()),
    "rope not a multiple of 8 (SGLang takes it)": lambda a: a.update(cos_sin_cache=a["cos_sin_cache"][:, :12]
                                                                     .contiguous()),
    "NeoX half not a multiple of 8": lambda a: a.update(is_neox=True, cos_sin_cache=a["cos_sin_cache"][:, :24]
                                                        .contiguous()),
    "NeoX with an odd lane count": lambda a: a.update(is_neox=True, cos_sin_cache=a["cos_sin_cache"][:, :4]
                                                      .contiguous()),
    "cache width != rope_dim": lambda a: a.update(rope_dim=64),
    "rope_dim > head_dim": lambda a: a.update(cos_sin_cache=torch.rand(3, 256), rope_dim=256),
    "strided cache": lambda a: a.update(cos_sin_cache=torch.cat([a["cos_sin_cache"]] * 2, 1)[:, :128]),
    "fp16 cache for bf16 q": lambda a: a.update(cos_sin_cache=a["cos_sin_cache"].half()),
    "misaligned cache": lambda a: a.update(cos_sin_cache=torch.rand(3 * 128 + 1)[1:].view(3, 128)),
    "weight dtype": lambda a: a.update(q_weight=a["q_weight"].float()),
    "weight strided": lambda a: a.update(k_weight=torch.ones(256, dtype=torch.bfloat16)[::2]),
    "weight misaligned": lambda a: a.update(q_weight=torch.ones(129, dtype=torch.bfloat16)[1:]),
    "different head strides": lambda a: a.update(k=torch.zeros(3, 2, 256, dtype=torch.bfloat16)[..., :128]),
    "last stride not 1": lambda a: a.update(q=a["q"].transpose(1, 2).contiguous().transpose(1, 2)),
    "head stride not a multiple of 8": lambda a: a.update(
        q=torch.zeros(3 * 2 * 132, dtype=torch.bfloat16).as_strided((3, 2, 128), (264, 132, 1)),
        k=torch.zeros(3 * 2 * 132, dtype=torch.bfloat16).as_strided((3, 2, 128), (264, 132, 1))),
    "misaligned q": lambda a: a.update(q=torch.zeros(3 * 256 + 4, dtype=torch.bfloat16)[4:].view(3, 2, 128)),
    "overlapping rows": lambda a: a.update(q=a["q"][:1].expand(3, 2, 128)),
    "overlapping heads": lambda a: a.update(
        q=torch.zeros(4 * 128, dtype=torch.bfloat16).as_strided((3, 2, 128), (128, 64, 1))),
    "float32 q/k": lambda a: a.update(q=a["q"].float(), k=a["k"].float(), q_weight=a["q_weight"].float(),
                                      k_weight=a["k_weight"].float()),
    "q/k dtypes differ": lambda a: a.update(k=a["k"].half()),
    "positions int16": lambda a: a.update(positions=a["positions"].to(torch.int16)),
    "positions strided": lambda a: a.update(positions=torch.arange(6)[::2]),
    "positions length": lambda a: a.update(positions=torch.arange(4)),
    "cache 3-D": lambda a: a.update(cos_sin_cache=a["cos_sin_cache"][None]),
    "empty cache": lambda a: a.update(cos_sin_cache=a["cos_sin_cache"][:0]),
    "q 2-D": lambda a: a.update(q=a["q"].flatten(1)),
    "k token count": lambda a: a.update(k=a["k"][:2]),
}


@pytest.mark.parametrize("name", list(FALLBACKS))
def test_outside_the_contract_goes_to_sglang(name: str) -> None:
    a = base()
    assert E.decide(**a).ok  # the base call is taken
    FALLBACKS[name](a)
    assert not E.decide(**a).ok, name


DEVICE_FALLBACKS = {
    "a CPU tensor": {"as_cuda": False},
    "another compute capability": {"cc": (10, 0)},
    "sm_90 but not 9.0": {"cc": (9, 1)},
    "not the current device": {"current_device": 1},
    "tensors on two devices": {"devices": (0, 0, 0, 0, 1, 0)},
}


@pytest.mark.parametrize("name", list(DEVICE_FALLBACKS))
def test_devices_outside_the_contract(name: str) -> None:
    assert not E.decide(**base(), **DEVICE_FALLBACKS[name]).ok


def test_autograd_recording_goes_to_sglang() -> None:
    a = base()
    a["q"].requires_grad_(True)
    assert not E.decide(**a, grad_mode=True).ok
    assert E.decide(**a, grad_mode=False).ok  # under no_grad / inference_mode the flag alone does not matter


def test_the_kernel_takes_the_production_calls_it_won_and_hands_back_the_rest() -> None:
    """c009's size rule (kernel_pays) over task.toml's production rows: the H200 bench of c008 won every call of
    >= 196608 rows and lost every call of <= 9360 rows; the rule sends exactly the winners to the kernel."""
    import tomllib

    won = {"qwen_T4096_H24_D128", "qwen_edit_T8424_H24_D128", "zimage_T4096_H30_D128", "zimage_T4128_H30_D128"}
    rows = [w for w in tomllib.loads((Path(__file__).parents[1] / "task.toml").read_text())["workloads"]
            if w["kind"] == "production"]
    assert len(rows) == 9
    for w in rows:
        n, hq, _ = w["args"]["q"]["shape"]
        hk = w["args"]["k"]["shape"][1]
        assert E.kernel_pays(n, hq, hk) == (w["name"] in won), w["name"]
    assert E.kernel_pays(1365, 24, 24) is False and E.kernel_pays(1366, 24, 24) is True  # 65520 / 65568 rows
