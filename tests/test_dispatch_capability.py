"""Runtime dispatch goes by compute capability alone (docs/overlay.md, Dispatch): every capability-(9, 0) GPU
(H100, GH200, H20, H200) gets the h200 impls and every (10, 0) GPU the b200 ones, whatever its name; other
capabilities get SGLang's baseline. The device query is replaced by each GPU's (name, capability); the arch
map is the real one.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kda_kernels import dispatch

REPO = Path(__file__).resolve().parents[1]
GPUS = [
    ("NVIDIA H200", (9, 0), "h200"),
    ("NVIDIA H100 80GB HBM3", (9, 0), "h200"),
    ("NVIDIA GH200 480GB", (9, 0), "h200"),
    ("NVIDIA H20", (9, 0), "h200"),
    ("NVIDIA B200", (10, 0), "b200"),
    ("NVIDIA GB200", (10, 0), "b200"),
    ("NVIDIA A100-SXM4-80GB", (8, 0), None),
    ("NVIDIA L40S", (8, 9), None),
    ("NVIDIA RTX PRO 6000", (12, 0), None),
]


@pytest.mark.parametrize(("name", "cc", "arch"), GPUS)
def test_dispatch_is_by_capability_not_by_name(
    monkeypatch: pytest.MonkeyPatch, name: str, cc: tuple[int, int], arch: str | None
) -> None:
    monkeypatch.setattr(dispatch, "_ARCH_BY_INDEX", {})
    monkeypatch.setattr(dispatch.torch.cuda, "get_device_capability", lambda index=None: cc)
    monkeypatch.setattr(dispatch.torch.cuda, "get_device_name", lambda index=None: name)
    assert dispatch.device_arch(0) == arch


def test_the_docs_say_so() -> None:
    text = " ".join((REPO / "docs" / "overlay.md").read_text().split())
    assert (
        "every capability-(9, 0) GPU — H100, GH200, H20 as well as the H200 — runs the `h200` impls" in text
    )
