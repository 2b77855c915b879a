"""The c006 dev variants of LTX-2 split RoPE (dev/ltx2_variants.py: flat and persistent launches) against SGLang's
kernel, bit for bit, on tiny LTX-2-like shapes (Triton's interpreter on a CPU host with fp32/fp16 copies, as the
candidate's own tests run; the GPU with every float dtype). Deliberately wrong copies of the variants (a wrong
partner index, the bf16 rounding of x*cos dropped, a skipped tile) must fail the same comparison, so the check
can fail. The geometry test covers every LTX-2 production row of task.toml (no masks needed, int32 offsets)."""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from kda_lab.testing import candidate_under_test

UNDER_TEST = candidate_under_test(__file__)  # installs the interpreter shims on a CPU host
TASK, DEVICE = UNDER_TEST.task, UNDER_TEST.device
FLOATS = UNDER_TEST.floats
DEV_FILE = Path(__file__).resolve().parents[1] / "dev" / "ltx2_variants.py"
FN = "apply_ltx2_split_rotary_emb"


def _import(path: Path, name: str) -> Any:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


DEV = _import(DEV_FILE, "_kda_dev_ltx2_variants")


def sglang() -> Callable[..., torch.Tensor]:
    """SGLang's own kernel: on a CPU host its wrapper made runnable in the interpreter (RNE bf16 cast shim)."""
    module, _, name = TASK.functions[FN].sglang.partition(":")
    if DEVICE == "cuda":
        return getattr(importlib.import_module(module), name)
    from kda_lab.interpret import interpretable

    return interpretable(module, name)


def uniform(*shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return (torch.rand(*shape, device=DEVICE) * 2 - 1).to(dtype)


def case(name: str, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """x [B,S,H*D], cos/sin [B,H,S,D/2] (LTX-2's transposed view unless said otherwise)."""
    b, s, h, half, tdtype = {
        "tail_h3_d32": (2, 5, 3, 16, dtype),  # 960 elements: masked flat tail, masked head block
        "even_h32_d64": (1, 8, 32, 32, dtype),  # 16384 elements: every plan unmasked (production's D=64 layout)
        "even_h32_d128_b2": (2, 3, 32, 64, dtype),  # 24576 elements, batch 2 (production's D=128 layout)
        "fp32_tables_promote": (2, 4, 4, 16, torch.float32),  # x*cos in fp32 for fp16 x
    }[name]
    x = uniform(b, s, h * 2 * half, dtype=dtype)
    cos = uniform(b, s, h, half, dtype=tdtype).transpose(1, 2)
    sin = uniform(b, h, s, half, dtype=tdtype) if name == "fp32_tables_promote" else \
        uniform(b, s, h, half, dtype=tdtype).transpose(1, 2)
    return x, cos, sin


CASES = ("tail_h3_d32", "even_h32_d64", "even_h32_d128_b2", "fp32_tables_promote")


def nan_out(x: torch.Tensor) -> torch.Tensor:
    return torch.full_like(x, float("nan"))  # an element a kernel skips stays NaN (never equal to SGLang's)


def bits_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)


@pytest.mark.parametrize("variant", list(DEV.VARIANTS))
@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("name", CASES)
def test_variant_is_bit_exact_with_sglang(name: str, dtype: torch.dtype, variant: str) -> None:
    torch.manual_seed(11)
    x, cos, sin = case(name, dtype)
    want = sglang()(x, cos, sin)
    assert bits_equal(DEV.run_variant(x, cos, sin, variant, out=nan_out(x)), want)
    if isinstance(DEV.VARIANTS[variant], DEV.PersistPlan):  # 3 programs: several tiles each, uneven shares
        assert bits_equal(DEV.run_variant(x, cos, sin, variant, programs=3, out=nan_out(x)), want)


def _mutant(tmp_path: Path, edits: list[tuple[str, str, int]]) -> Any:
    """dev/ltx2_variants.py with each ``(old, new, count)`` edit applied (``old`` must occur ``count`` times: a
    mutation that no longer applies fails here instead of testing nothing), imported from ``tmp_path``."""
    text = DEV_FILE.read_text()
    here = 'SRC_DIR = Path(__file__).resolve().parents[1] / "src"'
    assert text.count(here) == 1
    text = text.replace(here, f"SRC_DIR = Path({str(DEV_FILE.parents[1] / 'src')!r})")
    for old, new, count in edits:
        assert text.count(old) == count, f"mutation target {old!r} occurs {text.count(old)} times, not {count}"
        text = text.replace(old, new)
    path = tmp_path / "ltx2_variants_mutant.py"
    path.write_text(text)
    return _import(path, f"_kda_dev_ltx2_mutant_{tmp_path.name}")


MUTANTS = {
    # the partner read is the element itself: x1*cos - x1*sin instead of x1*cos - x2*sin
    "flat_no_partner": ("flat_x1024_w4", [("partner = idx + tl.where(first, HALF_DIM, -HALF_DIM)",
                                           "partner = idx", 1)]),
    # the sign of the sine term on the wrong half
    "flat_sign_swapped": ("flat_x2048_w8", [("tl.where(first, -other_f, other_f)",
                                             "tl.where(first, other_f, -other_f)", 1)]),
    # x*cos not rounded to bf16 (both the GPU cast and the interpreter's integer RNE)
    "flat_no_bf16_rounding": ("flat_x1024_w4", [
        ("own_cos = (own * cos).to(tl.bfloat16).to(tl.float32)", "own_cos = (own * cos).to(tl.float32)", 1),
        ("own_cos = _round_to_bf16((own * cos).to(tl.float32))", "own_cos = (own * cos).to(tl.float32)", 1)]),
    "persist_no_bf16_rounding": ("persist", [
        ("first_cos = (x_first * cos).to(tl.bfloat16).to(tl.float32)", "first_cos = (x_first * cos).to(tl.float32)",
         1),
        ("first_cos = _round_to_bf16((x_first * cos).to(tl.float32))", "first_cos = (x_first * cos).to(tl.float32)",
         1)]),
    # the tile loop stops one tile early (the last tile of the launch is never written)
    "persist_skips_last_tile": ("persist", [("tl.range(start, N_TILES, step", "tl.range(start, N_TILES - 1, step",
                                             1)]),
}


@pytest.mark.parametrize("mutant", list(MUTANTS))
def test_wrong_variants_are_rejected(mutant: str, tmp_path: Path) -> None:
    variant, edits = MUTANTS[mutant]
    module = _mutant(tmp_path, edits)
    torch.manual_seed(12)
    x, cos, sin = case("even_h32_d64", torch.float32)  # fp32: x*cos has bits below bf16 precision
    want = sglang()(x, cos, sin)
    assert bits_equal(DEV.run_variant(x, cos, sin, variant, out=nan_out(x)), want)  # the original passes ...
    assert not bits_equal(module.run_variant(x, cos, sin, variant, out=nan_out(x)), want)  # ... the mutant fails


def test_plans_cover_every_production_row() -> None:
    """Every LTX-2 production row runs unmasked, with int32 offsets and the whole output covered exactly once."""
    rows = [w for w in TASK.workloads if w.kind == "production" and w.fn == FN]
    assert len(rows) == 10
    for w in rows:
        b, s, inner = w.args["x"].shape
        _, h, _, half = w.args["cos"].shape
        n = b * s * inner
        assert inner == h * 2 * half and half in (32, 64) and h == 32
        for name, plan in DEV.VARIANTS.items():
            if isinstance(plan, DEV.FlatPlan):
                assert n % plan.xblock == 0, (w.name, name)  # EVEN: no masked tail
                assert plan.xblock % (2 * half) == 0 or (2 * half) % plan.xblock == 0
                assert plan.xblock // (32 * plan.num_warps) * 2 >= 16, name  # >= 16 bytes per thread per tensor
            else:
                block_heads = min(plan.max_heads, 32)
                assert h % block_heads == 0 and 0 < plan.occupancy <= 1 and plan.num_stages >= 1
            assert n + 4096 < DEV.INT32_LIMIT


def test_persistent_grid_fills_the_gpu_once() -> None:
    """The persistent grid from the compiled kernel's resources (H200: 40 registers x 4 warps -> 12 programs per
    SM; 8 KB of shared memory is not the limit; 1-warp programs stop at 32 per SM)."""

    class Compiled:
        def __init__(self, regs: int, shared: int) -> None:
            self.n_regs, self.metadata = regs, type("M", (), {"shared": shared})()

        def _init_handles(self) -> None:
            pass

    assert DEV._resident_per_sm(Compiled(40, 0), 4) == 12
    assert DEV._resident_per_sm(Compiled(44, 8192), 4) == 10
    assert DEV._resident_per_sm(Compiled(40, 0), 2) == 25
    assert DEV._resident_per_sm(Compiled(48, 0), 1) == 32
    assert DEV._resident_per_sm(Compiled(32, 65536), 4) == 3
