"""c007's CUDA kernel on the CPU: the kernel's own per-thread code (src/qknorm_rope_core.cuh) run by the emulator of
tests/emu for every thread of the planned grid (lanes as fibers, shuffles exchanged as a warp does), against the
lab's fp64 oracle at the task's tolerances, in bf16 and fp16.

The emulator also checks every memory access (each q/k row vector loaded once and stored once, cache reads inside
their row, positions/weights in bounds, the L2 prefetch covering the cache) and the per-lane order the design
rests on (the PDL wait before any load, launch_dependents first, the next item's position loaded before the
current item's stores). Covered: both RoPE layouts x half/full-width caches x rope_dim < head_dim x head_dim
64/128/256 x int32/int64 positions x fp32 and 16-bit caches x strided qkv views x Hq != Hk, one-wave plans and
persistent ones (several items per group), rows per item 1/2/4; the task's rows the kernel takes; wrong variants
the comparison rejects; the kernel's float roundings against torch's, bit for bit."""

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

H200_RESIDENT = 4 * 132  # resident CTAs of the production kernel on the H200 (64 registers: 4 per SM)


def make(n: int, hq: int, hk: int, d: int, dtype: torch.dtype, cache_dtype: torch.dtype | None, rope: int,
         full: bool, pos_dtype: torch.dtype, qkv_views: bool = False, std: float = 1.0, seed: int = 0,
         extra_rows: int = 3) -> dict[str, Any]:
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
        "positions": torch.randint(0, p, (n,), generator=g).to(pos_dtype),
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
PLANS = {"one wave": {}, "persistent": {"resident_ctas": 1, "force_rows": 4},
         "R1": {"resident_ctas": 1, "force_rows": 1},
         "R2 late trigger": {"resident_ctas": 1, "force_rows": 2, "late_trigger": True},
         "prefetch on": {"prefetch_mode": 2}}


def _case_id(c: tuple[Any, ...]) -> str:
    n, hq, hk, d, rope, full, neox, pos, cache, views = c
    return (f"N{n}_Hq{hq}_Hk{hk}_D{d}_R{rope}{'_full' if full else ''}{'_neox' if neox else ''}_{str(pos)[6:]}"
            f"_{'cache16' if cache is None else 'cache32'}{'_views' if views else ''}")


@pytest.mark.parametrize("plan", list(PLANS))
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("case", CASES, ids=_case_id)
def test_kernel_matches_oracle_in_place(case: tuple[Any, ...], dtype: torch.dtype, plan: str) -> None:
    n, hq, hk, d, rope, full, neox, pos_dtype, cache_dtype, views = case
    a = make(n, hq, hk, d, dtype, cache_dtype, rope, full, pos_dtype, views)
    expected = oracle(a, neox, 1e-6)
    v_before = a["buf"][:, (hq + hk) * d:].clone() if views else None
    info = run(a, neox, 1e-6, **PLANS[plan])
    assert not failures(a, expected), failures(a, expected)
    if views:  # the v third of the projection is not written
        assert torch.equal(a["buf"][:, (hq + hk) * d:], v_before)
    if plan in ("persistent", "R1"):
        assert info["blocks"] == 1 and info["rows_per_item"] == PLANS[plan]["force_rows"]
    if plan == "prefetch on":
        assert info["prefetched_bytes"] == a["cos_sin_cache"].numel() * a["cos_sin_cache"].element_size()


def test_persistent_plans_run_several_items_per_group() -> None:
    """One CTA for 300 tokens x 48 rows: each of its 16 groups takes ~225 items (the pipelined loop's steady
    state, the next item's position loaded one iteration ahead), rows per item 4."""
    a = make(300, 24, 24, 128, torch.bfloat16, torch.float32, 128, False, torch.int64)
    expected = oracle(a, False, 1e-6)
    info = run(a, False, 1e-6, resident_ctas=1)
    assert info["rows_per_item"] == 4 and info["n_items"] == 300 * 12 and info["blocks"] == 1
    assert not failures(a, expected)


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
    assert verdict.ok, f"{name}: outside c007's contract"
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


# (row, tokens, heads per tensor, rows per item, CTAs, L2 prefetch)
PRODUCTION_PLANS = [
    ("qwen_T19", 19, 24, 1, 57, True), ("qwen_T47", 47, 24, 1, 141, True), ("zimage_T32", 32, 30, 1, 120, True),
    ("qwen_edit_T189", 189, 24, 2, 284, True), ("qwen_edit_T195", 195, 24, 2, 293, True),
    ("qwen_T4096", 4096, 24, 4, 512, False), ("qwen_edit_T8424", 8424, 24, 4, 527, False),
    ("zimage_T4096", 4096, 30, 4, 480, False), ("zimage_T4128", 4128, 30, 4, 484, False),
]


@pytest.mark.parametrize("row", PRODUCTION_PLANS, ids=lambda r: r[0])
def test_production_plans(row: tuple[Any, ...]) -> None:
    """Small rows: one wave, one row per group where it fits (the most SMs; SGLang's 57-141 CTAs of 8 warps on
    T19-T47), two on T189/T195, the whole cache prefetched into L2; large rows: the persistent grid with 4 rows
    per item (64 KB of q/k loads in flight per SM), sized so that every group takes the same number of items,
    no prefetch."""
    _, n, h, rows, blocks, prefetch = row
    qk_bytes = n * 2 * h * 128 * 2
    p = E.plan(n, 2 * h, 128, H200_RESIDENT, n * 128 * 4, qk_bytes)
    assert (p["rows_per_item"], p["blocks"], p["prefetch_bytes"] > 0) == (rows, blocks, prefetch)
    # no tail: at least 95 % of the groups take the full number of rounds (the grid is sized to the rounds)
    groups = p["blocks"] * 16
    rounds = -(-p["n_items"] // groups)
    assert p["n_items"] - (rounds - 1) * groups >= 0.95 * groups


# --------------------------------------------------------------------------- the comparison rejects wrong ones

@pytest.mark.parametrize("wrong", ["layout swapped", "rope on half the lanes", "eps x100", "no pipeline order"])
def test_wrong_variants_are_rejected(wrong: str) -> None:
    neox, eps, std = True, 1e-5, 1.0
    if wrong == "eps x100":
        std = 1e-3
    a = make(6, 3, 5, 128, torch.bfloat16, torch.float32, 64, False, torch.int64, std=std)
    expected = oracle(a, neox, eps)
    if wrong == "layout swapped":
        run(a, neox, eps, layout=0)  # interleaved pairs where the call is NeoX
    elif wrong == "rope on half the lanes":
        a2 = dict(a, rope_dim=32, cos_sin_cache=a["cos_sin_cache"][:, :32].contiguous())
        run(a2, neox, eps)
    elif wrong == "eps x100":
        run(a, neox, eps * 100)
    else:  # the position -> cache chain inside each iteration: the order check must fail
        with pytest.raises(E.EmuError, match="position loaded after the previous store"):
            run(a, neox, eps, resident_ctas=1, force_rows=1, variant="no_pipeline")  # 3 items a group
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
def test_item_to_token_division_is_exact(d: int) -> None:
    """item // chunks_per_token by a multiply-high (div_magic): exact over random and edge 32-bit numerators."""
    g = torch.Generator().manual_seed(d % 1000)
    n = torch.cat([torch.randint(0, 2**32, (1 << 18,), generator=g, dtype=torch.int64),
                   torch.tensor([0, 1, d - 1, d, d + 1, 2**32 - 1, 2**32 - 2, (2**32 - 1) // d * d,
                                 (2**32 - 1) // d * d - 1]).clamp(0, 2**32 - 1)])
    assert torch.equal(E.divide(n, d), n // d)
