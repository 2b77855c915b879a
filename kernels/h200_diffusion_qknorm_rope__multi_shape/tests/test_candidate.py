"""c008's Python entry point (src/register.py) on the CPU: what reaches the CUDA extension and what goes to SGLang.

The extension cannot run here (sm_90a, CUDA tensors); a recording stand-in takes its place and answers as the
binding does (True: launched; False: outside the contract). The kernel itself is checked by
test_emulated_kernel.py, the contract by test_contract.py. Also: importing register.py builds nothing, CPU tensors
never trigger a build, and the extension is declared for sm_90a with the sources the source hash covers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from kda_lab.task import load_task
from kda_lab.task.schema import load_candidate
from kda_lab.testing import HandedOver

TASK = load_task(Path(__file__).resolve().parents[1])
CAND = load_candidate(TASK)


class StubExtension:
    """Stands in for the torch binding: records each call, answers ``answer`` (or raises ``raises``)."""

    def __init__(self, answer: bool = True, raises: type[Exception] | None = None) -> None:
        self.calls: list[tuple[Any, ...]] = []
        self.answer, self.raises = answer, raises

    def qknorm_rope(self, *args: Any) -> bool:
        self.calls.append(args)
        if self.raises is not None:
            raise self.raises("stand-in")
        return self.answer


@pytest.fixture
def sglang(monkeypatch: pytest.MonkeyPatch) -> HandedOver:
    rec = HandedOver()
    monkeypatch.setattr(CAND, "_sglang_qknorm_rope", rec)
    return rec


def install(monkeypatch: pytest.MonkeyPatch, ext: Any) -> Any:
    monkeypatch.setattr(CAND, "_ext", ext)
    monkeypatch.setattr(CAND, "_ext_tried", True)
    return ext


def args(**over: Any) -> dict[str, Any]:
    a = {"q": torch.randn(3, 2, 128).bfloat16(), "k": torch.randn(3, 2, 128).bfloat16(),
         "q_weight": torch.ones(128, dtype=torch.bfloat16), "k_weight": torch.ones(128, dtype=torch.bfloat16),
         "cos_sin_cache": torch.rand(3, 128), "positions": torch.arange(3), "is_neox": False, "eps": 1e-5}
    a.update(over)
    return a


def test_in_contract_call_reaches_the_extension_once(monkeypatch: pytest.MonkeyPatch, sglang: HandedOver) -> None:
    ext = install(monkeypatch, StubExtension())
    a = args(is_neox=True, cache_has_full_width=True, rope_dim=64, head_dim=128)
    assert CAND.fused_inplace_qknorm_rope(**a) is None
    assert sglang.calls == 0 and len(ext.calls) == 1
    q, k, qw, kw, cache, pos, eps, head_dim, rope_dim, flags = ext.calls[0]
    assert (q, k, qw, kw, cache, pos) == (a["q"], a["k"], a["q_weight"], a["k_weight"], a["cos_sin_cache"],
                                          a["positions"])
    assert (eps, head_dim, rope_dim, flags) == (1e-5, 128, 64, 3)  # bit 0 NeoX, bit 1 full width, no dev knobs


def test_parameters_are_taken_as_weights(monkeypatch: pytest.MonkeyPatch, sglang: HandedOver) -> None:
    ext = install(monkeypatch, StubExtension())
    w = torch.nn.Parameter(torch.ones(128, dtype=torch.bfloat16), requires_grad=False)
    CAND.fused_inplace_qknorm_rope(**args(q_weight=w, k_weight=w))
    assert len(ext.calls) == 1 and sglang.calls == 0


class OddTensor(torch.Tensor):
    pass


HANDED_TO_SGLANG = {
    "round_norm_before_rope": {"round_norm_before_rope": True},
    "non-bool is_neox": {"is_neox": 1},
    "non-bool cache_has_full_width": {"cache_has_full_width": 0},
    "a tensor subclass": {"q": torch.randn(3, 2, 128).bfloat16().as_subclass(OddTensor)},
    "a non-tensor positions": {"positions": [0, 1, 2]},
}


@pytest.mark.parametrize("name", list(HANDED_TO_SGLANG))
def test_python_checks_hand_calls_to_sglang(name: str, monkeypatch: pytest.MonkeyPatch, sglang: HandedOver) -> None:
    ext = install(monkeypatch, StubExtension())
    CAND.fused_inplace_qknorm_rope(**args(**HANDED_TO_SGLANG[name]))
    assert sglang.calls == 1 and not ext.calls, name


def test_outside_the_kernels_contract_goes_to_sglang(monkeypatch: pytest.MonkeyPatch, sglang: HandedOver) -> None:
    ext = install(monkeypatch, StubExtension(answer=False))
    CAND.fused_inplace_qknorm_rope(**args())
    assert len(ext.calls) == 1 and sglang.calls == 1


def test_unconvertible_arguments_go_to_sglang(monkeypatch: pytest.MonkeyPatch, sglang: HandedOver) -> None:
    install(monkeypatch, StubExtension(raises=TypeError))
    CAND.fused_inplace_qknorm_rope(**args(eps="1e-6"))
    assert sglang.calls == 1


def test_launch_errors_propagate(monkeypatch: pytest.MonkeyPatch, sglang: HandedOver) -> None:
    install(monkeypatch, StubExtension(raises=RuntimeError))
    with pytest.raises(RuntimeError):
        CAND.fused_inplace_qknorm_rope(**args())
    assert sglang.calls == 0


def test_under_torch_compile_tracing_goes_to_sglang(monkeypatch: pytest.MonkeyPatch, sglang: HandedOver) -> None:
    ext = install(monkeypatch, StubExtension())
    monkeypatch.setattr(CAND, "_is_compiling", lambda: True)
    CAND.fused_inplace_qknorm_rope(**args())
    assert sglang.calls == 1 and not ext.calls


def test_cpu_calls_never_build(monkeypatch: pytest.MonkeyPatch, sglang: HandedOver) -> None:
    """No extension loaded yet and CPU tensors: SGLang's function, and no load or build is attempted."""
    monkeypatch.setattr(CAND, "_ext", None)
    monkeypatch.setattr(CAND, "_ext_tried", False)
    monkeypatch.setattr(CAND, "load_extension", lambda *a, **k: pytest.fail("tried to load the extension"))
    CAND.fused_inplace_qknorm_rope(**args())
    assert sglang.calls == 1


def test_import_builds_nothing_and_declares_the_sm90a_extension() -> None:
    ext = CAND.EXTENSION
    assert ext.module is None and CAND._ext is None  # nothing loaded by the import (or by the tests above)
    assert ext.arch == "h200" and "-gencode=arch=compute_90a,code=sm_90a" in ext.cuda_cflags
    assert sorted(Path(s).name for s in ext.sources) == ["qknorm_rope.cu", "qknorm_rope_binding.cpp"]
    assert "--use_fast_math" not in ext.cuda_cflags + ext.cflags
    src = TASK.src_dir
    hashed = {"qknorm_rope.cu", "qknorm_rope_binding.cpp", "qknorm_rope_core.cuh", "qknorm_rope_contract.h",
              "qknorm_rope_launch.h"}
    assert hashed <= {p.name for p in src.iterdir()}
    assert ext.name.startswith("kda_h200_qknorm_rope_")  # a changed source, a new name: no stale binary loads


def test_dev_knob_flags() -> None:
    assert CAND._knob_flags(True, False, 2, 1, True) == 1 + (2 << 4) + (1 << 8) + (1 << 12) + (1 << 13)
    assert CAND._knob_flags(False, True, 0, 0, False) == 2 + (1 << 13)
