"""CPU checks of candidate c001 (no GPU): what they prove and what they cannot.

1. ``test_interpreter_bit_for_bit``: the candidate's kernels and SGLang's own ``_rmsnorm_scale_kernel`` /
   ``_rmsnorm_tanh_residual_kernel`` run in Triton's interpreter on bf16 inputs, under a test-local emulation of
   bf16 arithmetic (Triton 3.6's interpreter stores bf16 as uint16 and would multiply the bit patterns; here
   every bf16 add/sub/mul/div is computed exactly and rounded to nearest even, fp32 -> bf16 casts round to
   nearest even, bf16 scalar constants exist, and ``tl.sum`` of bf16 folds left to right in bf16). Equal bits
   prove the two kernels round at the same points in the same dtypes; a variant with one rounding point moved
   must be told apart (``test_interpreter_rejects_moved_rounding``). They do NOT prove the GPU's reduction order:
   the interpreter's sum is a left fold, the GPU's is Triton's layout-driven tree with fma contraction.
2. ``test_ptx_dataflow_matches_sglang``: the GPU's order. Both kernels are compiled offline for sm_90a and the
   value graph of every global store is compared (profile/ptx_compare.py): identical graphs mean the same
   instructions (fma.rn.bf16 chain, butterfly shuffles, shared-memory step, div.full, rsqrt.approx) applied to the
   same loaded elements in the same tree. A variant with one rounding moved must compare unequal.
3. ``test_plan_inside_sglang_predicate`` / ``test_cpu_operands_get_sglangs_none``: the candidate computes only
   inside SGLang's predicate, and returns what SGLang returns (None) outside it.
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
import types
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest
import torch

TASK_DIR = Path(__file__).resolve().parents[1]
REPO = TASK_DIR.parents[1]
INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"


def _src():
    if "ntma_src" not in sys.modules:
        pkg = types.ModuleType("ntma_src")
        pkg.__path__ = [str(TASK_DIR / "src")]
        sys.modules["ntma_src"] = pkg
    return importlib.import_module("ntma_src.bf16_rmsnorm"), importlib.import_module("ntma_src.register")


# ----------------------------------------------------------------------------- bf16 emulation in the interpreter

def _bf16_to_f64(bits: np.ndarray) -> np.ndarray:
    return (np.asarray(bits).astype(np.uint32) << 16).view(np.float32).astype(np.float64)


def _f64_to_bf16(v: np.ndarray) -> np.ndarray:
    """Round to nearest even. Via fp32: p' = 24 >= 2*8 + 2, so the double rounding is innocuous for +, -, *, /."""
    from kda_lab.interpret.shims.rotary_embedding import f32_to_bf16_bits

    return f32_to_bf16_bits(np.asarray(v, dtype=np.float64).astype(np.float32))


@contextmanager
def bf16_arithmetic() -> Iterator[None]:
    import triton.language as tl
    from triton.runtime import interpreter as it

    b, r = it.InterpreterBuilder, it.ReduceOps
    saved = (b.binary_op, b.cast_impl, getattr(b, "get_bf16", None), r.sum)
    ops = {np.add, np.subtract, np.multiply, np.divide}

    def binary_op(self, lhs, rhs, op):
        if lhs.dtype.scalar == tl.bfloat16 and op in ops:
            return it.TensorHandle(_f64_to_bf16(op(_bf16_to_f64(lhs.data), _bf16_to_f64(rhs.data))), tl.bfloat16)
        return saved[0](self, lhs, rhs, op)

    def cast_impl(self, src, dst_type):
        if src.dtype.scalar == tl.float32 and dst_type.scalar == tl.bfloat16:
            return it.TensorHandle(_f64_to_bf16(src.data.astype(np.float64)), tl.bfloat16)
        return saved[1](self, src, dst_type)

    def get_bf16(self, value):
        return it.TensorHandle(_f64_to_bf16(np.array([value], dtype=np.float64)), tl.bfloat16)

    def reduce_sum(self, inp):
        if inp.dtype.scalar != tl.bfloat16:
            return saved[3](self, inp)
        data = np.moveaxis(inp.handle.data, self.axis, 0)
        acc = data[0]
        for k in range(1, data.shape[0]):
            acc = _f64_to_bf16(_bf16_to_f64(acc) + _bf16_to_f64(data[k]))
        if self.keep_dims:
            acc = np.expand_dims(acc, self.axis)
        return self.to_tensor(acc, inp.dtype)

    b.binary_op, b.cast_impl, b.get_bf16, r.sum = binary_op, cast_impl, get_bf16, reduce_sum
    try:
        yield
    finally:
        b.binary_op, b.cast_impl, r.sum = saved[0], saved[1], saved[3]
        if saved[2] is None:
            del b.get_bf16
        else:
            b.get_bf16 = saved[2]


# ----------------------------------------------------------------------------- a deliberately wrong variant

def _moved_rounding_kernel():
    """The candidate's rmsnorm_scale with one rounding point moved: x * rstd * w rounded once, not twice."""
    import triton
    import triton.language as tl

    @triton.jit
    def moved_scale_kernel(y_ptr, x_ptr, weight_ptr, scale_ptr, x_row_stride, scale_row_stride, seq_len,
                           dim: tl.constexpr, eps: tl.constexpr, block_dim: tl.constexpr):
        row = tl.program_id(0)
        offsets = tl.arange(0, block_dim)
        mask = offsets < dim
        batch = row // seq_len
        x = tl.load(x_ptr + row * x_row_stride + offsets, mask=mask, other=0.0)
        weight = tl.load(weight_ptr + offsets, mask=mask, other=0.0)
        scale = tl.load(scale_ptr + batch * scale_row_stride + offsets, mask=mask, other=0.0)
        square = (x * x).to(tl.bfloat16)
        mean_square = (tl.sum(square, axis=0) / dim).to(tl.bfloat16)
        rstd = tl.rsqrt((mean_square + eps).to(tl.bfloat16).to(tl.float32)).to(tl.bfloat16)
        n = (x.to(tl.float32) * rstd.to(tl.float32) * weight.to(tl.float32)).to(tl.bfloat16)
        y = (n * scale).to(tl.bfloat16)
        tl.store(y_ptr + row * dim + offsets, y, mask=mask)

    return moved_scale_kernel


# ----------------------------------------------------------------------------- interpreter comparisons

CASES = [  # (x rows, D, modulation rows, x row stride)
    (6, 96, 1, 96), (8, 256, 2, 256), (5, 320, 5, 384), (3, 384, 1, 448),
]


def _inputs(rows: int, d: int, mod_rows: int, stride: int, seed: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    base = torch.randn(rows, stride, generator=g)
    x = base[:, :d].to(torch.bfloat16) if stride == d else base.to(torch.bfloat16)[:, :d]
    return {
        "x": x,
        "residual": torch.randn(rows, d, generator=g).to(torch.bfloat16),
        "weight": (1 + 0.1 * torch.randn(d, generator=g)).to(torch.bfloat16),
        "scale": (1 + 0.25 * torch.randn(mod_rows, d, generator=g)).to(torch.bfloat16),
        "gate": torch.randn(mod_rows, d, generator=g).to(torch.bfloat16),
    }


def _run_scale(kernel, a: dict[str, torch.Tensor], eps: float = 1e-5) -> torch.Tensor:
    import triton

    x, d = a["x"], a["x"].shape[-1]
    y = torch.full((x.shape[0], d), float("nan"), dtype=torch.bfloat16)
    kernel[(x.shape[0],)](y, x, a["weight"], a["scale"], x.stride(0), a["scale"].stride(0),
                          x.shape[0] // a["scale"].shape[0], d, eps, triton.next_power_of_2(d), num_warps=8)
    return y


def _run_tanh(kernel, a: dict[str, torch.Tensor], eps: float = 1e-5) -> torch.Tensor:
    import triton

    x, d = a["x"], a["x"].shape[-1]
    y = torch.full((x.shape[0], d), float("nan"), dtype=torch.bfloat16)
    kernel[(x.shape[0],)](y, x, a["gate"], a["residual"], a["weight"], x.stride(0), a["gate"].stride(0),
                          a["residual"].stride(0), x.shape[0] // a["gate"].shape[0], d, eps,
                          triton.next_power_of_2(d), num_warps=8)
    return y


needs_interpreter = pytest.mark.skipif(not INTERPRET, reason="runs in Triton's CPU interpreter (TRITON_INTERPRET=1)")


@needs_interpreter
@pytest.mark.parametrize("case", CASES, ids=[f"rows{c[0]}_d{c[1]}_mod{c[2]}_stride{c[3]}" for c in CASES])
def test_interpreter_bit_for_bit(case: tuple[int, int, int, int]) -> None:
    from sglang.kernels.ops.diffusion.norm import native_bf16_rmsnorm_triton as sg

    cand, _ = _src()
    from kda_lab.families.norm_tanh_mul_add import rmsnorm_scale_oracle, rmsnorm_tanh_residual_oracle

    a = _inputs(*case, seed=sum(case))
    with bf16_arithmetic():
        ys = (_run_scale(sg._rmsnorm_scale_kernel, a), _run_scale(cand.rmsnorm_scale_kernel, a))
        yt = (_run_tanh(sg._rmsnorm_tanh_residual_kernel, a), _run_tanh(cand.rmsnorm_tanh_residual_kernel, a))
    for sglang_y, cand_y in (ys, yt):
        assert not torch.isnan(cand_y).any()
        assert torch.equal(sglang_y.view(torch.int16), cand_y.view(torch.int16))
    # The emulation is sane (not garbage): near the eager-chain oracle. Not within the task's tolerance: a left
    # fold of a few hundred bf16 squares in bf16 drifts by several percent (the GPU's tree of 16-element fma
    # chains and butterflies does not), which moves rstd, and with it whole rows.
    oracle_s = rmsnorm_scale_oracle({"x": a["x"], "weight": a["weight"], "scale": a["scale"], "eps": 1e-5})[0]
    oracle_t = rmsnorm_tanh_residual_oracle({"x": a["x"], "gate": a["gate"], "residual": a["residual"],
                                             "weight": a["weight"], "eps": 1e-5})[0]
    for y, o in ((ys[1], oracle_s), (yt[1], oracle_t)):
        assert torch.allclose(y.double(), o.double(), atol=0.25, rtol=0.1)


@needs_interpreter
def test_interpreter_rejects_moved_rounding() -> None:
    from sglang.kernels.ops.diffusion.norm import native_bf16_rmsnorm_triton as sg

    moved = _moved_rounding_kernel()
    differs = 0
    with bf16_arithmetic():
        for case in CASES:
            a = _inputs(*case, seed=sum(case))
            differs += not torch.equal(_run_scale(sg._rmsnorm_scale_kernel, a).view(torch.int16),
                                       _run_scale(moved, a).view(torch.int16))
    assert differs == len(CASES)


# ----------------------------------------------------------------------------- the GPU's code, compiled offline

def _ptx_child() -> None:
    sys.path.insert(0, str(TASK_DIR / "profile"))
    import ptx_compare

    rows = ptx_compare.compare()
    moved = _moved_rounding_kernel()
    from sglang.kernels.ops.diffusion.norm import native_bf16_rmsnorm_triton as sg

    a = ptx_compare.compile_kernel(sg._rmsnorm_scale_kernel, 4, 3, 3840, 1e-5)
    b = ptx_compare.compile_kernel(moved, 4, 3, 3840, 1e-5)
    rows.append({"function": "moved_rounding", "spec": "D3840",
                 "same": ptx_compare.dataflow(a["ptx"]) == ptx_compare.dataflow(b["ptx"])})
    print("RESULT " + json.dumps([{k: r[k] for k in ("function", "spec", "same")} for r in rows]))


def test_ptx_dataflow_matches_sglang() -> None:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")])
    res = subprocess.run([sys.executable, __file__, "--ptx-child"], capture_output=True, text=True, env=env,
                         cwd=REPO, timeout=600)
    line = next((ln for ln in res.stdout.splitlines() if ln.startswith("RESULT ")), None)
    assert line is not None, res.stdout[-2000:] + res.stderr[-4000:]
    rows = json.loads(line[len("RESULT "):])
    same = {(r["function"], r["spec"]): r["same"] for r in rows}
    assert same.pop(("moved_rounding", "D3840")) is False
    assert same and all(same.values()), same


# ----------------------------------------------------------------------------- contract

def _operand_zoo() -> Iterator[tuple[str, dict[str, torch.Tensor]]]:
    bf = torch.bfloat16
    d = 384
    x = torch.randn(2, 7, d).to(bf)
    w = torch.ones(d, dtype=bf)
    yield "ok", {"x": x, "weight": w, "other": torch.ones(2, 1, d, dtype=bf), "residual": x.clone()}
    yield "fp16", {"x": x.half(), "weight": w.half(), "other": torch.ones(1, 1, d).half(), "residual": x.half()}
    yield "1d_x", {"x": x[0, 0], "weight": w, "other": torch.ones(1, d, dtype=bf), "residual": x[0, 0]}
    yield "d200", {"x": torch.randn(1, 4, 200).to(bf), "weight": torch.ones(200, dtype=bf),
                   "other": torch.ones(1, 1, 200, dtype=bf), "residual": torch.randn(1, 4, 200).to(bf)}
    yield "d8200", {"x": torch.randn(1, 2, 8200).to(bf), "weight": torch.ones(8200, dtype=bf),
                    "other": torch.ones(1, 1, 8200, dtype=bf), "residual": torch.randn(1, 2, 8200).to(bf)}
    yield "transposed_x", {"x": torch.randn(d, 7).to(bf).t(), "weight": w, "other": torch.ones(1, d, dtype=bf),
                           "residual": torch.randn(7, d).to(bf)}
    yield "rows_not_multiple", {"x": torch.randn(1, 7, d).to(bf), "weight": w,
                                "other": torch.ones(1, 2, d, dtype=bf), "residual": torch.randn(1, 7, d).to(bf)}
    yield "weight_strided", {"x": x, "weight": torch.ones(2 * d, dtype=bf)[::2], "other": torch.ones(1, 1, d,
                             dtype=bf), "residual": x.clone()}
    yield "gate_chunk", {"x": x, "weight": w, "other": torch.randn(2, 1, 4 * d).to(bf)[:, :, d:2 * d],
                         "residual": x.clone()}
    yield "padded_rows", {"x": torch.randn(1, 7, 448).to(bf)[:, :, :d], "weight": w,
                          "other": torch.ones(1, 1, d, dtype=bf), "residual": x[:1].clone()}
    yield "misaligned_x", {"x": torch.randn(1, 7 * d + 1).to(bf)[:, 1:].view(1, 7, d), "weight": w,
                           "other": torch.ones(1, 1, d, dtype=bf), "residual": x[:1].clone()}
    yield "residual_shape", {"x": x, "weight": w, "other": torch.ones(1, 1, d, dtype=bf),
                             "residual": torch.randn(2, 8, d).to(bf)}
    yield "empty_gate", {"x": x, "weight": w, "other": torch.ones(0, 1, d, dtype=bf), "residual": x.clone()}


def test_plan_inside_sglang_predicate() -> None:
    """Where the candidate computes (plan is not None), SGLang's predicate (the family's ``accepts``, its device
    clauses aside) holds; the production-like layouts are planned, the others handed to SGLang."""
    from kda_lab.families.norm_tanh_mul_add import accepts

    _, reg = _src()
    planned = set()
    for name, t in _operand_zoo():
        for residual in (None, t["residual"]):
            try:
                p = reg.plan(t["x"], t["weight"], t["other"], residual)
            except Exception as e:  # noqa: BLE001 - a plan that raises is a failure too
                pytest.fail(f"{name}: plan raised {e!r}")
            if p is not None:
                planned.add((name, residual is not None))
                assert t["x"].numel() and t["other"].numel()
                assert accepts(t["x"], t["weight"], t["other"], residual) is None, name
    computed = {"ok", "gate_chunk", "padded_rows"}
    assert planned == {(n, True) for n in computed} | {(n, False) for n in computed | {"residual_shape"}}


def test_cpu_operands_get_sglangs_none() -> None:
    """CPU tensors are outside SGLang's predicate: SGLang's function answers (None), so does the candidate."""
    _, reg = _src()
    for name, t in _operand_zoo():
        if name == "empty_gate":
            continue
        assert reg.rmsnorm_scale(t["x"], t["weight"], t["other"], 1e-5) is None, name
        assert reg.rmsnorm_tanh_residual(t["x"], t["other"], t["residual"], t["weight"], 1e-5) is None, name


if __name__ == "__main__" and "--ptx-child" in sys.argv:
    sys.path.insert(0, str(REPO))
    _ptx_child()
