"""c008's CUDA kernel on the CPU: the kernel's own per-thread code (src/qknorm_rope_core.cuh) run by the emulator of
tests/emu for every thread of the planned grid (lanes as fibers, shuffles exchanged as a warp does), against the
lab's fp64 oracle at the task's tolerances, in bf16 and fp16.

The emulator also checks every memory access (each q/k row vector loaded once and stored once, cache reads inside
their row, positions/weights in bounds) and the per-lane order the design rests on (the PDL wait before any load,
launch_dependents last by default or first, with the double buffer the next row's q/k load before the current
row's store), and counts the cache loads (the speculated cache row: an arange loads each lane's entries once,
other positions reload). Covered: both RoPE layouts x half/full-width caches x rope_dim < head_dim x head_dim
64/128/256 x int32/int64 positions (random and arange) x fp32 and 16-bit caches x strided qkv views x Hq != Hk,
one-wave plans and persistent ones (several rows per group) with and without the double buffer; the task's rows
the kernel takes; the production plans; wrong variants the checks reject; the kernel's float roundings against
torch's, bit for bit. The device contracts a*b+c into FMAs and uses MUFU.RSQ where the emulator rounds each
operation: the emulator's results are within the tolerance of the device's, not bit-equal (both are checked
against the oracle, the device's on the GPU)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest
import torch

from kda_lab.families.qknorm_rope import qknorm_rope_oracle
from kda_lab.measure.correctness import compare
from kda_lab.measure.inputs import make_inputs
from kda_lab.task import load_task

TASK_DIR = Path(__file__).resolve().parents[1]
TASK = load_task(TASK_DIR)
_spec = importlib.util.spec_from_file_location("qkr_emu_lib", Path(__file__).with_name("emu") / "emu_lib.py")
assert _spec is not None and _spec.loader is not None
E = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(E)

H200_RESIDENT = 6 * 132  # resident CTAs of the production PIPE = 0 kernel (40 registers: 6 per SM)
H200_RESIDENT_PIPE = 4 * 132  # the PIPE = 1 kernel (64 registers: 4 per SM; a dev/sweep.py knob)


def make(n: int, hq: int, hk: int, d: int, dtype: torch.dtype, cache_dtype: torch.dtype | None, rope: int,
         full: bool, pos_dtype: torch.dtype, qkv_views: bool = False, std: float = 1.0, seed: int = 0,
         extra_rows: int = 3, arange: bool = False) -> dict[str, Any]:
    g = torch.Generator().manual_seed(seed)
    if qkv_views:  # q | k | v of one projection: token stride (hq + 2 hk) d, v must stay untouched
        buf = torch.randn(n, (hq + 2 * hk) * d, generator=g).mul(std).to(dtype)
        q = buf[:, : hq * d].view(n, hq, d)
        k = buf[:, hq * d:(hq + hk) * d].view(n, hk, d)
    else:
        buf = None
        q = torch.randn(n, hq, d, generator=g).mul(std).to(dtype)
        k = torch.randn(n, hk, d, generator=g).mul(std).to(dtype)
    p = n + extra_rows
    return {
        "q": q, "k": k, "buf": buf,
        "q_weight": (1 + 0.1 * torch.randn(d, generator=g)).to(dtype),
        "k_weight": (1 + 0.1 * torch.randn(d, generator=g)).to(dtype),
        "cos_sin_cache": (torch.rand(p, 2 * rope if full else rope, generator=g) * 2 - 1).to(cache_dtype or dtype),
        "positions": (torch.arange(n) if arange else torch.randint(0, p, (n,), generator=g)).to(pos_dtype),
        "rope_dim": rope, "cache_has_full_width": full,
    }


def failures(a: dict[str, Any], expected: tuple[torch.Tensor, torch.Tensor]) -> list[str]:
    tol = TASK.tolerance(str(a["q"].dtype).removeprefix("torch."))
    cmps = [compare(name, out, ref, tol) for name, out, ref in zip(("q", "k"), (a["q"], a["k"]), expected,
                                                                     strict=True)]
    return [c.describe() for c in cmps if not c.ok]


def oracle(a: dict[str, Any], is_neox: bool, eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    args = {k: a[k] for k in ("q_weight", "k_weight", "cos_sin_cache", "positions", "rope_dim",
                              "cache_has_full_width")}
    args.update(q=a["q"].clone(), k=a["k"].clone(), is_neox=is_neox, eps=eps)
    return qknorm_rope_oracle(args)


def run(a: dict[str, Any], is_neox: bool, eps: float, **knobs: Any) -> dict[str, Any]:
    return E.emulate(a["q"], a["k"], a["q_weight"], a["k_weight"], a["cos_sin_cache"], a["positions"],
                     is_neox=is_neox, full_width=a["cache_has_full_width"], rope_dim=a["rope_dim"], eps=eps, **knobs)


# (n, hq, hk, d, rope, full, is_neox, pos dtype, cache: None = the activation dtype, qkv views)
CASES = [
    (61, 2, 2, 128, 128, False, False, torch.int64, torch.float32, False),  # production layout, token tail
    (7, 24, 24, 128, 128, False, False, torch.int64, torch.float32, True),  # production heads, qkv views
    (5, 3, 5, 128, 64, False, True, torch.int32, torch.float32, False),  # NeoX partial, GQA, odd head counts
    (5, 4, 2, 128, 96, False, True, torch.int64, None, False),  # NeoX rope 96, 16-bit cache
    (6, 2, 3, 128, 96, True, False, torch.int32, torch.float32, False),  # interleaved, full width, partial
    (4, 8, 8, 64, 64, False, True, torch.int32, None, False),  # head_dim 64 NeoX, 16-bit cache
    (9, 7, 7, 64, 32, False, False, torch.int64, torch.float32, False),  # head_dim 64, rope 32 of 64
    (3, 2, 1, 64, 32, True, True, torch.int64, torch.float32, True),  # NeoX full width partial, views
    (3, 3, 3, 256, 128, False, False, torch.int32, torch.float32, True),  # head_dim 256, rope 128
    (2, 2, 2, 256, 256, True, True, torch.int64, None, False),  # head_dim 256 NeoX full width, 16-bit cache
    (4, 1, 0, 128, 128, False, False, torch.int64, None, False),  # no k heads, 16-bit interleaved cache
]
PLANS = {"one wave": {}, "persistent double buffer": {"resident_ctas": 1, "pipe_mode": 2},
         "persistent no buffer": {"resident_ctas": 1, "pipe_mode": 1},
         "one row a group, early trigger": {"resident_ctas": 1, "grid_mode": 1, "early_trigger": True},
         "half grid, double buffer": {"resident_ctas": 2, "grid_mode": 2, "pipe_mode": 2}}


def _case_id(c: tuple[Any, ...]) -> str:
    n, hq, hk, d, rope, full, neox, pos, cache, views = c
    return (f"N{n}_Hq{hq}_Hk{hk}_D{d}_R{rope}{'_full' if full else ''}{'_neox' if neox else ''}_{str(pos)[6:]}"
            f"_{'cache16' if cache is None else 'cache32'}{'_views' if views else ''}")


@pytest.mark.parametrize("arange", [False, True], ids=["random_pos", "arange_pos"])
@pytest.mark.parametrize("plan", list(PLANS))
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("case", CASES, ids=_case_id)
def test_kernel_matches_oracle_in_place(case: tuple[Any, ...], dtype: torch.dtype, plan: str, arange: bool) -> None:
    n, hq, hk, d, rope, full, neox, pos_dtype, cache_dtype, views = case
    a = make(n, hq, hk, d, dtype, cache_dtype, rope, full, pos_dtype, views, arange=arange)
    expected = oracle(a, neox, 1e-6)
    v_before = a["buf"][:, (hq + hk) * d:].clone() if views else None
    info = run(a, neox, 1e-6, **PLANS[plan])
    assert not failures(a, expected), failures(a, expected)
    if views:  # the v third of the projection is not written
        assert torch.equal(a["buf"][:, (hq + hk) * d:], v_before)
    if plan.startswith("persistent"):
        assert info["blocks"] == 1 and info["pipe"] == (plan == "persistent double buffer")
    rows = n * (hq + hk)
    if plan == "one row a group, early trigger":
        assert info["rounds"] == 1 and info["blocks"] == -(-rows // (8 * (32 // (d // 8))))
    # the speculated cache row: each lane of each row loads its entries once on an arange (lanes outside the rope
    # width load the row's first entries: no branch); other positions reload where the position is not the token
    # index
    per_row = (d // 8) * _loads_per_lane(neox, full, cache_dtype is None)
    loaded, finished, clamped, checked = _group_iterations(rows, d, info["blocks"], info["pipe"] == 1, hq + hk)
    assert finished == rows + clamped  # every row once, plus groups past the end (the last row, not stored)
    pos = a["positions"].long()
    guess = torch.arange(n).clamp(max=a["cos_sin_cache"].shape[0] - 1)
    misses = sum(int(pos[tok] != guess[tok]) for tok, _ in checked)
    assert info["cache_loads"] == (loaded + misses) * per_row
    if arange:
        assert misses == 0


def _group_iterations(rows: int, d: int, blocks: int, pipe: bool, heads: int) -> tuple[int, int, int, list]:
    """(row loads the groups issue, rows they finish, of which clamped, [(token, clamped)] of the rows whose
    speculated cache row is
    checked). Every group of a warp runs each of the warp's iterations (a group past the end: the last row,
    clamped); PIPE = 0 checks the speculation on a group's first row only (later rows' positions are loaded an
    iteration ahead), PIPE = 1 on every row and also loads a row ahead (the prologue's, and the next row of the
    last iteration, never finished)."""
    gpw = 32 // (d // 8)
    g = blocks * 8 * gpw
    loaded = finished = clamped_rows = 0
    checked: list = []
    for warp in range(blocks * 8):
        base0 = warp * gpw
        base, it = base0, 0
        while base < rows:
            for i in range(gpw):
                row = base + i
                tok, clamped = (row // heads, False) if row < rows else ((rows - 1) // heads, True)
                clamped_rows += clamped
                if pipe or it == 0:
                    checked.append((tok, clamped))
            it += 1
            base += g
        finished += it * gpw
        loaded += (it + (1 if pipe else 0)) * gpw
    return loaded, finished, clamped_rows, checked


def _loads_per_lane(neox: bool, full: bool, cache16: bool) -> int:
    """Cache loads a rotating lane issues for one row (cos and sin): 4 or 8 entries each, 16-byte vectors."""
    entries = 4 if not neox and not full else 8
    return 2 * max(1, entries * (2 if cache16 else 4) // 16)


def test_persistent_plans_run_several_rows_per_group() -> None:
    """One CTA for 300 tokens x 48 rows: each of its 16 groups takes 900 rows (the persistent loop's steady state;
    then the double buffer's: the next row's loads issued before the current row's store), arange positions (no
    second cache load)."""
    a = make(300, 24, 24, 128, torch.bfloat16, torch.float32, 128, False, torch.int64, arange=True)
    expected = oracle(a, False, 1e-6)
    info = run(a, False, 1e-6, resident_ctas=1)
    assert info["pipe"] == 0 and info["n_rows"] == 300 * 48 and info["blocks"] == 1 and info["rounds"] == 900
    assert info["cache_loads"] == 300 * 48 * 16 * 2
    assert not failures(a, expected)
    a = make(300, 24, 24, 128, torch.bfloat16, torch.float32, 128, False, torch.int64, arange=True)
    info = run(a, False, 1e-6, resident_ctas=1, pipe_mode=2)
    assert info["pipe"] == 1 and info["rounds"] == 900 and not failures(a, expected)


def test_tiny_variance_respects_eps() -> None:
    """mean(x^2) ~ 1e-6 next to eps 1e-5: eps must be inside the square root, in the right place."""
    a = make(16, 30, 30, 128, torch.bfloat16, torch.float32, 128, False, torch.int64, std=1e-3)
    expected = oracle(a, False, 1e-5)
    run(a, False, 1e-5)
    assert not failures(a, expected)


# ------------------------------------------------------------------------------------------- the task's rows

EMULATED_ROWS_MAX = 20000  # (token, head) rows; larger rows are checked on the GPU (and below, cut to 64 tokens)


def _row_args(name: str, seed: int = 3) -> dict[str, Any]:
    w = next(w for w in TASK.workloads if w.name == name)
    a = make_inputs(w, "cpu", seed)
    a.setdefault("rope_dim", 0)
    a.setdefault("cache_has_full_width", False)
    a.setdefault("head_dim", 0)
    return a


def _rows(w: Any) -> int:
    q, k = w.args["q"], w.args["k"]
    return q.shape[0] * (q.shape[1] + k.shape[1])


@pytest.mark.parametrize("name", [w.name for w in TASK.workloads])
def test_task_rows(name: str) -> None:
    """Every task row: the kernel takes it (the contract) unless it is a round_norm row (SGLang's bits), and the
    emulated kernel matches the oracle on it (rows over EMULATED_ROWS_MAX: their first 64 tokens, persistent)."""
    w = next(w for w in TASK.workloads if w.name == name)
    a = _row_args(name)
    verdict = E.decide(**{k: a[k] for k in ("q", "k", "q_weight", "k_weight", "cos_sin_cache", "positions")},
                       is_neox=a["is_neox"], head_dim=a["head_dim"], rope_dim=a["rope_dim"],
                       cache_has_full_width=a["cache_has_full_width"])
    if a.get("round_norm_before_rope"):
        pytest.skip("round_norm_before_rope: handed to SGLang (register.py), never reaches the kernel")
    assert verdict.ok, f"{name}: outside c008's contract"
    knobs: dict[str, Any] = {"resident_ctas": H200_RESIDENT}
    if _rows(w) > EMULATED_ROWS_MAX:  # the production rows' layout, a persistent plan over 64 tokens
        a["q"], a["k"], a["positions"] = a["q"][:64], a["k"][:64], a["positions"][:64]
        knobs = {"resident_ctas": 2}
    args = {k: a[k] for k in ("q_weight", "k_weight", "cos_sin_cache", "positions", "rope_dim",
                              "cache_has_full_width")}
    args.update(q=a["q"].clone(), k=a["k"].clone(), is_neox=a["is_neox"], eps=a["eps"], head_dim=a["head_dim"])
    expected = qknorm_rope_oracle(args)
    E.emulate(a["q"], a["k"], a["q_weight"], a["k_weight"], a["cos_sin_cache"], a["positions"],
              is_neox=a["is_neox"], full_width=a["cache_has_full_width"], rope_dim=verdict.rope, eps=a["eps"],
              **knobs)
    assert not failures(a, expected), failures(a, expected)


# (row, tokens, heads per tensor, double buffer, CTAs, rows per group)
PRODUCTION_PLANS = [
    ("qwen_T19", 19, 24, 0, 57, 1), ("qwen_T47", 47, 24, 0, 141, 1), ("zimage_T32", 32, 30, 0, 120, 1),
    ("qwen_edit_T189", 189, 24, 0, 567, 1), ("qwen_edit_T195", 195, 24, 0, 585, 1),
    ("qwen_T4096", 4096, 24, 0, 768, 16), ("qwen_edit_T8424", 8424, 24, 0, 790, 32),
    ("zimage_T4096", 4096, 30, 0, 768, 20), ("zimage_T4128", 4128, 30, 0, 774, 20),
]


@pytest.mark.parametrize("row", PRODUCTION_PLANS, ids=lambda r: r[0])
def test_production_plans(row: tuple[Any, ...]) -> None:
    """Small rows: one wave, one row per group (SGLang's grid: 57-585 CTAs of 8 warps, two rows a warp); large
    rows: the persistent grid (6 CTAs per SM), sized so that every group takes the same number of rows (no tail
    round); no double buffer (a sweep knob)."""
    _, n, h, pipe, blocks, rounds = row
    p = E.plan(n, 2 * h, 128, H200_RESIDENT, H200_RESIDENT_PIPE)
    assert (p["pipe"], p["blocks"], p["rounds"]) == (pipe, blocks, rounds)
    assert p["blocks"] <= (H200_RESIDENT_PIPE if pipe else H200_RESIDENT)
    groups = p["blocks"] * 16
    assert p["n_rows"] - (rounds - 1) * groups >= 0.95 * groups  # the last round (nearly) full
    assert p["step_tok"] * 2 * h + p["step_head"] == groups


# --------------------------------------------------------------------------- the comparison rejects wrong ones

@pytest.mark.parametrize("wrong", ["layout swapped", "rope on half the lanes", "eps x100", "speculation unchecked",
                                   "next row loaded after the store"])
def test_wrong_variants_are_rejected(wrong: str) -> None:
    neox, eps, std = True, 1e-5, 1.0
    if wrong == "eps x100":
        std = 1e-3
    a = make(6, 3, 5, 128, torch.bfloat16, torch.float32, 64, False, torch.int64, std=std)
    assert not torch.equal(a["positions"].long(), torch.arange(6))  # random positions: the guess misses
    expected = oracle(a, neox, eps)
    if wrong == "layout swapped":
        run(a, neox, eps, layout=0)  # interleaved pairs where the call is NeoX
    elif wrong == "rope on half the lanes":
        a2 = dict(a, rope_dim=32, cos_sin_cache=a["cos_sin_cache"][:, :32].contiguous())
        run(a2, neox, eps)
    elif wrong == "eps x100":
        run(a, neox, eps * 100)
    elif wrong == "speculation unchecked":  # cache row = token index whatever the position
        run(a, neox, eps, variant="no_verify")
    else:  # the double buffer's loads after the store: the order check must fail
        with pytest.raises(E.EmuError, match="stored before the next row was loaded"):
            run(a, neox, eps, resident_ctas=1, pipe_mode=2, variant="late_next")  # 3 rows a group
        return
    assert failures(a, expected), f"the comparison accepted a wrong kernel ({wrong})"


# ------------------------------------------------------------------------------------- the kernel's roundings

def _special_floats() -> torch.Tensor:
    g = torch.Generator().manual_seed(5)
    bits = torch.randint(-2**31, 2**31 - 1, (1 << 20,), generator=g, dtype=torch.int64).to(torch.int32)
    x = bits.view(torch.float32)
    x = x[torch.isfinite(x)]
    edges = torch.tensor([0.0, -0.0, 1.0, 65504.0, 65519.99, 65520.0, 65536.0, 2.0**-14, 2.0**-24, 2.0**-25,
                          2.0**-25 * 1.0000001, 3 * 2.0**-26, 2.0**-26, 1e-30, 3.0e38, float("inf"), float("-inf")])
    ties = (torch.arange(-4096, 4096, dtype=torch.float32) + 0.5) * 2.0**-10  # fp16 and bf16 halfway cases
    scaled = torch.randn(1 << 16, generator=g) * torch.exp2(torch.randint(-30, 20, (1 << 16,), generator=g).float())
    return torch.cat([x, edges, ties, -ties, scaled])


@pytest.mark.parametrize("to", [torch.bfloat16, torch.float16], ids=str)
def test_roundings_match_torch_bit_for_bit(to: torch.dtype) -> None:
    """The emulator's float -> bf16/fp16 (the device's cvt.rn) rounds as torch does, on 1M random bit patterns,
    halfway cases, subnormals, overflow and infinities."""
    x = _special_floats()
    ours = E.round_bits(x, to)
    ref = x.to(to).view(torch.int16)
    bad = (ours != ref).nonzero().flatten()
    assert bad.numel() == 0, f"{to}: {bad.numel()} differ, first x={x[bad[0]].item()!r}"


def test_fp16_widening_is_exact() -> None:
    bits = torch.arange(-32768, 32768, dtype=torch.int32).to(torch.int16)
    ref = bits.view(torch.float16).float()
    ours = E.widen_f16(bits)
    finite = torch.isfinite(ref)
    assert torch.equal(ours[finite], ref[finite])
    assert torch.equal(torch.isinf(ours), torch.isinf(ref)) and torch.equal(torch.isnan(ours), torch.isnan(ref))


@pytest.mark.parametrize("d", [1, 2, 3, 7, 12, 15, 24, 30, 48, 60, 64, 255, 1000, 65537, 2**31 - 1, 2**31, 2**32 - 1])
def test_row_to_token_division_is_exact(d: int) -> None:
    """row // (Hq + Hk) by a multiply-high (div_magic, once per thread): exact over random and edge numerators."""
    g = torch.Generator().manual_seed(d % 1000)
    n = torch.cat([torch.randint(0, 2**32, (1 << 18,), generator=g, dtype=torch.int64),
                   torch.tensor([0, 1, d - 1, d, d + 1, 2**32 - 1, 2**32 - 2, (2**32 - 1) // d * d,
                                 (2**32 - 1) // d * d - 1]).clamp(0, 2**32 - 1)])
    assert torch.equal(E.divide(n, d), n // d)
