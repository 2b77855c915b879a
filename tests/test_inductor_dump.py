"""kda_lab.measure.inductor_dump on a CPU host: Inductor generates C++ there (Triton on a GPU), and the dump must
hold the generated code itself, not a cached stub, under a header naming the torch version."""

from __future__ import annotations

from pathlib import Path

import torch

from kda_lab.measure.inductor_dump import dump_inductor


def muladd(x: torch.Tensor, scale: torch.Tensor, shift: torch.Tensor) -> torch.Tensor:
    return x * (1 + scale) + shift


def test_dump_writes_the_generated_code(tmp_path: Path) -> None:
    torch._dynamo.reset()
    compiled = torch.compile(muladd, dynamic=False)
    args = {"x": torch.randn(4, 8), "scale": torch.randn(1, 8), "shift": torch.randn(4, 8)}
    compiled(**args)  # a warm cache must not hide the code: the dump compiles with caches off
    path = tmp_path / "inductor.py"
    kept = dump_inductor(compiled, args, path)
    text = path.read_text()
    assert text.startswith(f"# Inductor output code for the torch.compile peer (torch {torch.__version__})")
    assert "# kept config:" in text
    assert "def call(" in text  # Inductor's entry point of the compiled graph
    assert isinstance(kept, list)
