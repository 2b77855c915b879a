"""The candidate's MulAdd kernel (c006, ``fuse_scale_shift_kernel``) on every layout SGLang's wrapper maps onto
its ``blc_opt`` kernel: scalar, [B,C], [B|1,L|1,C] and strided (chunk-view) scale and shift, a 1-D shift SGLang
expands, fp32 modulation of fp16 x, both scale constants, tiles that straddle a batch boundary, masked columns,
every tile size of the plan; bit for bit with SGLang's kernel and within the task tolerance of the fp64 oracle;
deliberately wrong inputs the comparison must reject; and every branch that goes to SGLang. Runs in the Triton
interpreter on a CPU host (conftest.py sets TRITON_INTERPRET=1) or on the GPU."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

import pytest
import torch

from kda_lab.families.fuse_scale_shift import fuse_scale_shift_oracle
from kda_lab.testing import HandedOver, candidate_under_test

UNDER_TEST = candidate_under_test(__file__)
TASK, CAND, DEVICE = UNDER_TEST.task, UNDER_TEST.module, UNDER_TEST.device
FN = "fuse_scale_shift_kernel"
FLOATS = UNDER_TEST.floats
DNAME = {torch.float32: "float32", torch.float16: "float16", torch.bfloat16: "bfloat16"}
MULADD = CAND.muladd  # the module register.py launches through


def sglang() -> Callable[..., Any]:
    module, _, name = TASK.functions[FN].sglang.partition(":")
    if DEVICE == "cuda":
        return getattr(importlib.import_module(module), name)
    from kda_lab.interpret import interpretable

    return interpretable(module, name)


def rand(*shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.randn(shape, device=DEVICE).to(dtype)


def close_to_oracle(y: torch.Tensor, a: dict[str, Any]) -> bool:
    tol = TASK.tolerance(DNAME[a["x"].dtype])
    if a["shift"].dim() == 1 and a["shift"].numel() > 1:  # the oracle's contract has no [C] shift: same math
        a = dict(a, shift=a["shift"][None, None])
    (ref,) = fuse_scale_shift_oracle(a)
    o = y.double().cpu()
    r = ref.expand(y.shape).double().cpu()
    return y.shape == a["x"].shape and y.dtype == a["x"].dtype and bool(torch.isfinite(o).all()) \
        and bool(((o - r).abs() <= tol.atol + tol.rtol * r.abs()).all())


def chunk(b: int, length: int, c: int, k: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Wan's per-token modulation: chunk k of a [B, L, 6, C] tensor (strides [6LC, 6C, 1], offset kC)."""
    return rand(b, length, 6, c, dtype=dtype)[:, :, k]


# name -> (x shape, scale maker, shift maker, scale_constant); makers take (B, L, C, dtype)
Maker = Callable[[int, int, int, torch.dtype], torch.Tensor]
CASES: dict[str, tuple[tuple[int, int, int], Maker, Maker, float]] = {
    "bc_scale_bc_shift": ((2, 37, 200), lambda b, l_, c, d: rand(b, c, dtype=d),
                          lambda b, l_, c, d: rand(b, c, dtype=d), 1.0),
    "broadcast_scale_token_shift": ((1, 19, 3072), lambda b, l_, c, d: rand(1, 1, c, dtype=d),
                                    lambda b, l_, c, d: rand(b, l_, c, dtype=d), 1.0),
    "one_c_scale_two_batches": ((2, 7, 3072), lambda b, l_, c, d: rand(1, c, dtype=d),
                                lambda b, l_, c, d: rand(b, l_, c, dtype=d), 1.0),
    "fp32_chunk_scale": ((1, 33, 96), lambda b, l_, c, d: chunk(b, l_, c, 2),
                         lambda b, l_, c, d: rand(b, l_, c, dtype=d), 0.0),
    "token_scale_bc_shift": ((3, 5, 1000), lambda b, l_, c, d: rand(b, l_, c, dtype=d),
                             lambda b, l_, c, d: rand(1, c, dtype=d), 1.0),
    "scalar_scale": ((1, 16, 64), lambda b, l_, c, d: rand(dtype=d),
                     lambda b, l_, c, d: rand(1, 1, c, dtype=d), 1.0),
    "one_element_scale_token_shift": ((2, 3, 130), lambda b, l_, c, d: rand(1, dtype=d),
                                      lambda b, l_, c, d: rand(b, l_, c, dtype=d), 0.0),
    "scalar_shift": ((2, 9, 48), lambda b, l_, c, d: rand(b, 1, c, dtype=d),
                     lambda b, l_, c, d: rand(dtype=d), 1.0),
    "one_d_shift": ((2, 5, 40), lambda b, l_, c, d: rand(b, c, dtype=d),
                    lambda b, l_, c, d: rand(c, dtype=d), 1.0),  # SGLang expands any other shift
    "transposed_scale": ((2, 6, 24), lambda b, l_, c, d: rand(b, c, l_, dtype=d).transpose(1, 2),
                         lambda b, l_, c, d: rand(b, l_, c, dtype=d), 1.0),
    "int_constant": ((1, 3, 64), lambda b, l_, c, d: rand(1, 1, c, dtype=d),
                     lambda b, l_, c, d: rand(1, l_, c, dtype=d), 1),
}


def make(case: str, dtype: torch.dtype, scale_dtype: torch.dtype | None = None) -> dict[str, Any]:
    (b, length, c), scale_fn, shift_fn, const = CASES[case]
    return {"x": rand(b, length, c, dtype=dtype), "scale": scale_fn(b, length, c, scale_dtype or dtype),
            "shift": shift_fn(b, length, c, dtype), "scale_constant": const}


@pytest.mark.parametrize("dtype", FLOATS, ids=lambda d: DNAME[d])
@pytest.mark.parametrize("case", sorted(CASES))
def test_matches_sglang_bits_and_oracle(case: str, dtype: torch.dtype, monkeypatch: pytest.MonkeyPatch) -> None:
    torch.manual_seed(17)
    a = make(case, dtype)
    ran = []
    for entry in ("launch", "launch_flat"):  # the 2-D tile or the flat kernel (c009: the production layout)
        real = getattr(MULADD, entry)
        monkeypatch.setattr(MULADD, entry, lambda *args, _real=real, **kw: ran.append(1) or _real(*args, **kw))
    ours = CAND.EXPORTS[FN](**a)
    assert ran, "the candidate's own kernel must take this layout"
    assert torch.equal(ours, sglang()(**a)), "y must be SGLang's bits"
    assert close_to_oracle(ours, a)


@pytest.mark.parametrize("dtype", [torch.float16] if torch.float16 in FLOATS else FLOATS, ids=lambda d: DNAME[d])
def test_fp32_modulation_of_half_x(dtype: torch.dtype) -> None:
    torch.manual_seed(19)
    for case in ("broadcast_scale_token_shift", "fp32_chunk_scale"):
        a = make(case, dtype, scale_dtype=torch.float32)
        ours = CAND.EXPORTS[FN](**a)
        assert torch.equal(ours, sglang()(**a)), case
        assert close_to_oracle(ours, a), case


@pytest.mark.parametrize("tile", [4096, 2048, 1024])
def test_every_tile_size_gives_sglangs_bits(tile: int) -> None:
    """4096-element tiles (4 rows of 1024 at C = 1000: masked columns, tiles across the batch boundary at L = 5),
    2048 and 1024 (one row of BLOCK_C) give SGLang's bits."""
    torch.manual_seed(23)
    a = make("token_scale_bc_shift", torch.float32)
    x = a["x"]
    scale_arg, s_strides, s_scalar = CAND._as_blc(a["scale"], x.shape, is_shift=False)
    shift_arg, h_strides, h_scalar = CAND._as_blc(a["shift"], x.shape, is_shift=True)
    p = MULADD.tile_plan(x.shape[0] * x.shape[1], x.shape[2], tile)
    assert p.block_l * p.block_c == max(tile, p.block_c)
    y, _ = MULADD.launch(x, scale_arg, s_strides, s_scalar, shift_arg, h_strides, h_scalar, 1.0, plan_override=p)
    assert torch.equal(y, sglang()(**a))


def test_plan_on_the_production_rows() -> None:
    """1024-element tiles everywhere but the ~190-token rows (2048); every tile covers its rows exactly once."""
    for rows, c, tile in ((27030, 3072, 1024), (18144, 3072, 1024), (37800, 5120, 1024), (8424, 3072, 1024),
                          (4096, 3072, 1024), (19, 3072, 1024), (55, 3072, 1024), (189, 3072, 2048),
                          (195, 3072, 2048)):
        p = MULADD.plan(rows, c)
        assert p.block_l * p.block_c == tile, (rows, c)
        assert (p.grid // p.n_col_blocks) * p.block_l >= rows > (p.grid // p.n_col_blocks - 1) * p.block_l


# ------------------------------------------------------------------------------------ the check bites

def test_wrong_inputs_are_rejected() -> None:
    """The comparison that passes the candidate fails on a dropped scale constant, a shift from the wrong token,
    and a transposed scale read as if it were dense."""
    torch.manual_seed(29)
    a = make("broadcast_scale_token_shift", torch.float32)
    ours = CAND.EXPORTS[FN](**a)
    assert close_to_oracle(ours, a)
    assert not close_to_oracle(CAND.EXPORTS[FN](**dict(a, scale_constant=0.0)), a)
    assert not close_to_oracle(CAND.EXPORTS[FN](**dict(a, shift=a["shift"].flip(1))), a)
    t = make("transposed_scale", torch.float32)
    dense_misread = t["scale"].contiguous().view(-1).view(t["scale"].shape[0], t["scale"].shape[2],
                                                          t["scale"].shape[1]).transpose(1, 2)
    assert close_to_oracle(CAND.EXPORTS[FN](**t), t)
    assert not close_to_oracle(CAND.EXPORTS[FN](**dict(t, scale=dense_misread)), t)


# ------------------------------------------------------------------------------------ fallbacks

@pytest.fixture
def handed_over(monkeypatch: pytest.MonkeyPatch) -> HandedOver:
    rec = HandedOver()
    monkeypatch.setattr(CAND, "_sglang_muladd", rec)
    return rec


OUTSIDE: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
    "x_not_contiguous": lambda a: dict(a, x=a["x"].transpose(0, 1).contiguous().transpose(0, 1)),
    "x_2d": lambda a: dict(a, x=a["x"][0]),
    "x_fp64": lambda a: dict(a, x=a["x"].double()),
    "scale_fp64": lambda a: dict(a, scale=a["scale"].double()),
    "empty": lambda a: dict(a, x=a["x"][:, :0], shift=a["shift"][:, :0]),
    "per_frame_4d_scale": lambda a: dict(a, scale=rand(2, 1, 1, 48)),
    "both_scalars": lambda a: dict(a, scale=rand(), shift=rand(1)),
    "one_d_c_scale": lambda a: dict(a, scale=rand(48)),  # SGLang raises ValueError
    "shift_does_not_broadcast": lambda a: dict(a, shift=rand(2, 4, 48)),
    "scale_constant_tensor": lambda a: dict(a, scale_constant=torch.tensor(1.0)),
    "requires_grad": lambda a: dict(a, scale=a["scale"].clone().requires_grad_(True)),
    "not_a_tensor": lambda a: dict(a, shift=0.5),
}


def test_outside_the_contract_goes_to_sglang(handed_over: HandedOver) -> None:
    base = {"x": rand(2, 9, 48), "scale": rand(2, 1, 48), "shift": rand(2, 9, 48), "scale_constant": 1.0}
    for name, edit in OUTSIDE.items():
        before = handed_over.calls
        assert CAND.EXPORTS[FN](**edit(base)) is handed_over.result, name
        assert handed_over.calls == before + 1, name


def test_the_hot_path_is_not_taken_on_the_cpu() -> None:
    """Kept launches are keyed on CUDA tensors only (the interpreter keeps none): a CPU call always runs the
    checks, so a CPU test exercises the checked path."""
    a = {"x": rand(1, 2, 8), "scale": rand(1, 1, 8), "shift": rand(1, 2, 8), "scale_constant": 1.0}
    if DEVICE == "cpu":
        assert CAND._muladd_signature(a["x"], a["scale"], a["shift"], 1.0) is None
    assert CAND._muladd_signature(a["x"], a["scale"], 0.5, 1.0) is None


def test_flat_kernel_takes_the_production_layout_and_gives_sglangs_bits(monkeypatch: pytest.MonkeyPatch) -> None:
    """c009's flat kernel serves dense x and shift with one broadcast scale row (every production row but the
    per-token-scale ones); the other layouts keep the 2-D tile. Both xblocks give SGLang's bits, and a dropped
    scale constant is caught by the same comparison."""
    flat_calls: list[int] = []
    real = MULADD.launch_flat
    monkeypatch.setattr(MULADD, "launch_flat", lambda *a, **k: flat_calls.append(1) or real(*a, **k))
    for case, takes_flat in (("broadcast_scale_token_shift", True), ("one_c_scale_two_batches", True),
                             ("token_scale_bc_shift", False), ("fp32_chunk_scale", False), ("scalar_scale", False),
                             ("bc_scale_bc_shift", False)):
        a = make(case, torch.float32)
        before = len(flat_calls)
        assert torch.equal(CAND.EXPORTS[FN](**a), sglang()(**a)), case
        assert (len(flat_calls) > before) == takes_flat, case
    a = make("broadcast_scale_token_shift", torch.float32)
    want = sglang()(**a)
    for xb in (2048, 1024, 512):
        assert torch.equal(real(a["x"], a["scale"], a["shift"], 1.0, xblock=xb)[0], want), xb
    assert not torch.equal(real(a["x"], a["scale"], a["shift"], 0.0)[0], want)
    assert [MULADD.flat_xblock(r * 3072) for r in (19, 55, 189, 195, 4096, 27030)] == [1024, 1024, 2048, 2048,
                                                                                        1024, 1024]
