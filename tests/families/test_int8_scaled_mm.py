"""The int8_scaled_mm reference-task family (kda_lab/families/int8_scaled_mm.py) and its baselines
(kda_lab/baselines.py): the fp64 oracle on hand-computed cases, the int8 row encoding, deliberately wrong
implementations the checker must reject (each next to a correct control on the same row: scales on the wrong
axes, the bias dropped, the column-major weight read row-major, fp16 accumulation), the torch baseline against
the oracle on CPU, and the lazily resolved GPU-only sgl_kernel baseline failing with a clear error where it is
missing."""

from __future__ import annotations

import sys
import types

import pytest
import torch

from kda_lab import baselines
from kda_lab.families import FAMILY_FUNCTIONS, family_module
from kda_lab.families import int8_scaled_mm as i8
from kda_lab.task import load_task
from tests.families import _helpers as H

INT8_TASKS = ("h200_int8_scaled_mm__m64_n2048_k2048_bias", "b200_int8_scaled_mm__m64_n2048_k2048_bias")


def test_families_are_registered() -> None:
    assert FAMILY_FUNCTIONS["int8_scaled_mm"] == ("int8_scaled_mm",)
    assert set(family_module("int8_scaled_mm").FUNCTIONS) == {"int8_scaled_mm"}


@pytest.mark.parametrize("slug", INT8_TASKS)
def test_both_tasks_time_sglangs_own_gemm(slug: str) -> None:
    """The box stages sgl-kernel (.gpu-stage-d1): both arches' baseline is sgl_kernel.int8_scaled_mm, and
    `kda new-task --family int8_scaled_mm` stamps the same (the family's BASELINES)."""
    spec = load_task(slug).functions["int8_scaled_mm"]
    assert spec.entry == i8.BASELINES["int8_scaled_mm"] == "kda_lab.baselines:sgl_int8_scaled_mm"
    assert spec.sglang == "sgl_kernel:int8_scaled_mm"


def test_the_baseline_call_binds_to_the_staged_sgl_kernel() -> None:
    """sgl-kernel 0.4.5's int8_scaled_mm (sgl_kernel/gemm.py in the staged wheel) takes the call the baseline
    makes: six positional arguments in SGLang's W8A8Int8LinearMethod.apply order."""
    source = H.staged_sgl_kernel_source("gemm.py")
    if source is None:
        pytest.skip("sgl_kernel is not staged here (scripts/gpu_stage_sgl_kernel.sh; KDA_GPU_STAGE_DIR)")
    sig = H.signature_in(source, "int8_scaled_mm")
    assert list(sig.parameters) == ["mat_a", "mat_b", "scales_a", "scales_b", "out_dtype", "bias"]
    sig.bind(*_int8_args())
    init = H.staged_sgl_kernel_source("__init__.py")
    assert init is not None and "int8_scaled_mm," in init  # exported at the package's top level


@pytest.mark.parametrize("slug", INT8_TASKS)
def test_task_entries_resolve_without_a_gpu(slug: str) -> None:
    H.assert_reference_task_entry_resolves(load_task(slug))


# --------------------------------------------------------------------------------------------- int8: encoding

def test_packed_int32_words_are_four_little_endian_int8() -> None:
    word = torch.tensor([[0x7F80FF01]], dtype=torch.int32)  # bytes 0x01, 0xFF, 0x80, 0x7F
    assert i8.as_int8(word).tolist() == [[1, -1, -128, 127]]
    a = torch.randint(-128, 128, (3, 16), dtype=torch.int8)
    assert torch.equal(i8.as_int8(a.view(torch.int32)), a)
    assert i8.as_int8(a) is a
    with pytest.raises(TypeError):
        i8.as_int8(torch.zeros(2, 2))


def test_prepare_gives_sglangs_arguments() -> None:
    args = {"mat_a": torch.zeros(64, 512, dtype=torch.int32),
            "mat_b": torch.zeros(2048, 512, dtype=torch.int32),
            "scales_a": torch.ones(64, 1), "scales_b": torch.ones(2048, 1), "bias": None,
            "out_like": torch.zeros(64, 2048, dtype=torch.bfloat16)}
    a = i8.prepare(args)
    assert "out_like" not in a and a["out_dtype"] is torch.bfloat16
    assert a["mat_a"].dtype == torch.int8 and a["mat_a"].shape == (64, 2048)
    assert a["mat_a"].stride() == (2048, 1)
    assert a["mat_b"].shape == (2048, 2048) and a["mat_b"].stride() == (1, 2048)  # column-major [K, N] view
    assert a["mat_b"].data_ptr() == args["mat_b"].data_ptr()  # a view, not a copy
    assert i8.prepare(a) is a


def test_byte_model_counts_int8_bytes() -> None:
    task = load_task(INT8_TASKS[0])
    row = task.workloads[0]
    m, n, k = 64, 2048, 2048
    expect_reads = m * k + n * k + 4 * m + 4 * n + 2 * n
    assert task.functions["int8_scaled_mm"].byte_model.read_bytes(row) == expect_reads
    assert task.functions["int8_scaled_mm"].byte_model.write_bytes(row) == 2 * m * n


def test_row_values_cover_the_int8_range() -> None:
    from kda_lab.measure.inputs import make_inputs

    task = load_task(INT8_TASKS[0])
    a = i8.prepare(make_inputs(task.workloads[0], "cpu", 0))
    vals = torch.cat([a["mat_a"].flatten(), a["mat_b"].flatten()])
    assert int(vals.min()) == -128 and int(vals.max()) == 127
    assert abs(float(vals.float().mean())) < 1.0


# ----------------------------------------------------------------------------------------------- int8: oracle

def test_int8_oracle_hand_computed() -> None:
    a = torch.tensor([[1, -2], [3, 4]], dtype=torch.int8)
    b = torch.tensor([[5, 6, -7], [8, 9, 10]], dtype=torch.int8)  # [K=2, N=3]
    sa, sb = torch.tensor([[0.5], [2.0]]), torch.tensor([[1.0], [0.25], [-1.0]])
    bias = torch.tensor([1.0, 0.0, -1.0])
    (y,) = i8.oracle({"mat_a": a, "mat_b": b, "scales_a": sa, "scales_b": sb, "out_dtype": torch.float16,
                      "bias": bias})
    acc = [[1 * 5 - 2 * 8, 1 * 6 - 2 * 9, 1 * -7 - 2 * 10],
           [3 * 5 + 4 * 8, 3 * 6 + 4 * 9, 3 * -7 + 4 * 10]]
    expect = [[acc[i][j] * [0.5, 2.0][i] * [1.0, 0.25, -1.0][j] + [1.0, 0.0, -1.0][j] for j in range(3)]
              for i in range(2)]
    assert y.dtype == torch.float64 and y.tolist() == expect


def test_int8_oracle_is_the_exact_integer_sum_at_the_extremes() -> None:
    k = 4096
    a = torch.full((2, k), -128, dtype=torch.int8)
    b = torch.randint(-128, 128, (k, 3), dtype=torch.int8)
    b[:, 0] = -128  # acc = 4096 * 16384 = 2^26 in column 0
    one = torch.ones(2, 1), torch.ones(3, 1)
    (y,) = i8.oracle({"mat_a": a, "mat_b": b, "scales_a": one[0], "scales_b": one[1], "bias": None})
    assert torch.equal(y, (a.long() @ b.long()).double()) and y[0, 0] == 2**26


# ---------------------------------------------------------------------------------------------- int8: checker

def scales_swapped(mat_a, mat_b, scales_a, scales_b, out_dtype, bias=None):
    """Wrong: per-token and per-channel scales applied along the wrong axes (broadcast of the means)."""
    acc = torch._int_mm(mat_a, mat_b).float()
    y = acc * scales_a.mean() * scales_b.reshape(1, -1).flip(1)
    return (y + bias if bias is not None else y).to(out_dtype)


def no_bias(mat_a, mat_b, scales_a, scales_b, out_dtype, bias=None):
    return baselines.torch_int8_scaled_mm(mat_a, mat_b, scales_a, scales_b, out_dtype, None)


def weight_not_transposed(mat_a, mat_b, scales_a, scales_b, out_dtype, bias=None):
    """Wrong: reads the weight storage as a row-major [K, N] matrix (ignores mat_b's column-major strides)."""
    raw = torch.as_strided(mat_b, mat_b.shape, (mat_b.shape[1], 1))
    return baselines.torch_int8_scaled_mm(mat_a, raw, scales_a, scales_b, out_dtype, bias)


def fp16_accumulate(mat_a, mat_b, scales_a, scales_b, out_dtype, bias=None):
    """Wrong: the int32 sums held in fp16 (rounded, and beyond 65504 overflowed)."""
    acc = (mat_a.float() @ mat_b.float()).half().float()
    y = acc * scales_a.reshape(-1, 1) * scales_b.reshape(1, -1)
    return (y + bias if bias is not None else y).to(out_dtype)


INT8_CASES = [
    ("scales_swapped", scales_swapped, "test_m17_n264_k512"),
    ("no_bias", no_bias, "test_m17_n264_k512"),
    ("weight_not_transposed", weight_not_transposed, "test_m17_n264_k512"),
    ("fp16_accumulate", fp16_accumulate, "int8_mm_m64_n2048_k2048_fp16_bias"),
]


@pytest.mark.parametrize(("name", "wrong", "row_name"), INT8_CASES, ids=[c[0] for c in INT8_CASES])
def test_checker_rejects_wrong_int8_implementations(name: str, wrong, row_name: str) -> None:
    impls = {"control": baselines.torch_int8_scaled_mm, name: wrong}
    res = H.check(load_task(INT8_TASKS[1]), row_name, impls)
    assert {r.impl: r.ok for r in res} == {"control": True, name: False}, "\n".join(r.describe() for r in res)


@pytest.mark.parametrize("row_name", ["int8_mm_m64_n2048_k2048_fp16_bias", "test_m17_n264_k512",
                                      "test_m1_decode", "test_no_bias", "test_bf16_out_k4096"])
def test_torch_int8_baseline_passes_on_cpu(row_name: str) -> None:
    res = H.check(load_task(INT8_TASKS[0]), row_name, {"baseline": baselines.torch_int8_scaled_mm}, seed=4)
    assert all(r.ok for r in res), "\n".join(r.describe() for r in res)


# ------------------------------------------------------------------------------------------- int8: sgl_kernel

@pytest.fixture
def fresh_sgl(monkeypatch: pytest.MonkeyPatch):
    baselines._sgl_int8_scaled_mm.cache_clear()
    yield monkeypatch
    baselines._sgl_int8_scaled_mm.cache_clear()


def _int8_args():
    a = torch.randint(-128, 128, (17, 32), dtype=torch.int8)
    b = torch.randint(-128, 128, (8, 32), dtype=torch.int8).t()
    return a, b, torch.rand(17, 1), torch.rand(8, 1), torch.float16, torch.randn(8).half()


def test_sgl_baseline_missing_package_is_a_clear_error(fresh_sgl) -> None:
    fresh_sgl.setitem(sys.modules, "sgl_kernel", None)  # import fails
    with pytest.raises(baselines.BaselineUnavailable, match="sgl_kernel"):
        baselines.sgl_int8_scaled_mm(*_int8_args())


def test_sgl_baseline_without_a_kernel_for_this_gpu_is_a_clear_error(fresh_sgl) -> None:
    def unsupported(*a, **k):
        raise NotImplementedError("No implemented int8_scaled_mm for current compute capability: 100")

    fresh_sgl.setitem(sys.modules, "sgl_kernel", types.SimpleNamespace(int8_scaled_mm=unsupported))
    with pytest.raises(baselines.BaselineUnavailable, match="no kernel for compute capability"):
        baselines.sgl_int8_scaled_mm(*_int8_args())


def test_sgl_baseline_passes_sglangs_positional_arguments(fresh_sgl) -> None:
    seen = {}

    def fake(mat_a, mat_b, scales_a, scales_b, out_dtype, bias=None):
        seen.update(mat_b_stride=mat_b.stride(), out_dtype=out_dtype, bias=bias)
        return baselines.torch_int8_scaled_mm(mat_a, mat_b, scales_a, scales_b, out_dtype, bias)

    fresh_sgl.setitem(sys.modules, "sgl_kernel", types.SimpleNamespace(int8_scaled_mm=fake))
    args = _int8_args()
    out = baselines.sgl_int8_scaled_mm(*args)
    assert out.shape == (17, 8) and out.dtype == torch.float16
    assert seen["mat_b_stride"] == (1, 32) and seen["out_dtype"] is torch.float16 and seen["bias"] is args[5]
