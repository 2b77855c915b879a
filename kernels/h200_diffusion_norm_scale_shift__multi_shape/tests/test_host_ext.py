"""c008's C++ host path (src/nss_host.cpp) on a CPU host: the binding builds against torch's headers, its size
pre-check (src/nss_host_rules.h) is register.py's, the parameter block register.py hands it is the one Triton's
own generated launcher builds (checked against ``triton.backends.nvidia.driver.make_launcher`` on the real kernel
compiled for sm_90a offline), registration passes the call's arguments and that block, and the public functions
dispatch on what the extension returns (a stand-in extension: the real one needs a GPU; on the H200 `kda check`
runs every production signature through it, second seed onwards)."""

from __future__ import annotations

import ctypes
import json
import re
import struct
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

TASK_DIR = Path(__file__).resolve().parents[1]
SRC = TASK_DIR / "src"


# ------------------------------------------------------------------------------------------------ the binding

def test_binding_compiles_against_torch_headers(tmp_path: Path) -> None:
    from kda_lab.testing import assert_binding_compiles

    assert_binding_compiles(SRC / "nss_host.cpp", SRC, tmp_path)


# ------------------------------------------------------------------------------- the pre-check, C++ vs Python

_SHIM = """
#include "nss_host_rules.h"
extern "C" int nss(long long n, long long e, long long se, long long he, long long lim) {
  return kda_nss_host::surely_handed_back_nss(n, e, se, he, lim);
}
extern "C" int srnss(long long n, long long e, long long rn, long long re, long long lim) {
  return kda_nss_host::surely_handed_back_srnss(n, e, rn, re, lim);
}
"""


def _rules_lib(tmp_path: Path, header: str) -> ctypes.CDLL:
    from kda_lab.testing import compile_host_cpp

    (tmp_path / "nss_host_rules.h").write_text(header)
    (tmp_path / "shim.cpp").write_text(_SHIM)
    lib = ctypes.CDLL(str(compile_host_cpp(tmp_path / "shim.cpp", tmp_path, tmp_path / "rules.so", shared=True)))
    for f in (lib.nss, lib.srnss):
        f.argtypes = [ctypes.c_longlong] * 5
    return lib


def _disagreements(lib: ctypes.CDLL) -> list[str]:
    """Where the header's pre-check differs from register.py's, on meta tensors around both thresholds."""
    from kda_lab.testing import candidate_under_test

    cand = candidate_under_test(__file__).module
    bad = []
    d = 3072
    for xd in (torch.float32, torch.float16, torch.bfloat16):
        for md in (torch.float32, torch.float16, torch.bfloat16):
            for limit, residual in ((cand.SAME_WIDTH_HANDBACK_BYTES, False), (cand.RESIDUAL_HANDBACK_BYTES, True)):
                for frac in (0.2, 0.249, 0.26, 0.33, 0.34, 0.49, 0.5, 0.51, 0.99, 1.0, 1.01, 3.0):
                    s = max(1, int(frac * limit / (d * xd.itemsize)))
                    x = torch.empty(1, s, d, dtype=xd, device="meta")
                    other = torch.empty(1, s, d, dtype=md, device="meta")
                    mod = torch.empty(1, 1, d, dtype=md, device="meta")
                    if residual:
                        py = cand._surely_handed_back_srnss(x, other)
                        cc = lib.srnss(x.numel(), x.element_size(), other.numel(), other.element_size(), limit)
                    else:
                        py = cand._surely_handed_back_nss(x, mod, mod)
                        cc = lib.nss(x.numel(), x.element_size(), mod.element_size(), mod.element_size(), limit)
                    if bool(cc) != py:
                        bad.append(f"{'srnss' if residual else 'nss'} x {xd} {md} {s} tokens: C++ {cc}, Python {py}")
    return bad


def test_the_headers_precheck_is_registers(tmp_path: Path) -> None:
    assert _disagreements(_rules_lib(tmp_path, (SRC / "nss_host_rules.h").read_text())) == []


def test_a_different_precheck_is_told_apart(tmp_path: Path) -> None:
    wrong = (SRC / "nss_host_rules.h").read_text().replace("return 2 * x_numel", "return 4 * x_numel")
    assert wrong != (SRC / "nss_host_rules.h").read_text()
    assert _disagreements(_rules_lib(tmp_path, wrong))


# ------------------------------------------------------ the parameter block against Triton's generated launcher

def _child() -> None:
    """Offline sm_90a builds of production-like signatures: for each, the kept launch wrapped as a DirectLaunch
    over a CudaLauncher whose C launch records, host_params, the signature, the recorded launch arguments, and what
    registration handed the extension."""
    from kda_kernels import launch_direct
    from kda_lab.interpret.offline_launch import cuda_launcher, offline_candidate

    rec, reg = offline_candidate(TASK_DIR)

    def as_direct(kept: Any) -> Any:
        kept.launcher = cuda_launcher(lambda *a: None)
        return launch_direct.direct(kept)

    real_keep = reg.launch_and_keep_direct
    reg.launch_and_keep_direct = lambda *a, **k: as_direct(real_keep(*a, **k))  # the GPU's launcher shape

    class Ext:  # records registrations; every call misses (None), so each signature takes the checked path
        HANDBACK = object()
        kept: list[Any] = []

        def nss(self, *a: Any) -> None:
            return None

        srnss = nss

        def keep_nss(self, args: tuple[Any, ...], spec: tuple[Any, ...]) -> None:
            self.kept.append(("nss", [id(a) for a in args], spec))

        def keep_srnss(self, args: tuple[Any, ...], spec: tuple[Any, ...]) -> None:
            self.kept.append(("srnss", [id(a) for a in args], spec))

    ext = Ext()
    reg._ext = ext
    bf, f32 = torch.bfloat16, torch.float32
    d = 3072
    mod = torch.randn(1, 1, 6 * d, dtype=bf)
    mod32 = torch.randn(1, 1, 6 * d, dtype=f32)
    x = torch.randn(1, 47, d, dtype=bf)
    big = torch.randn(1, 4096, d, dtype=bf)
    res = torch.randn(1, 47, d, dtype=bf)
    cases = {
        "nss_small": (reg.fused_norm_scale_shift, (x, None, None, mod[..., d:2 * d], mod[..., :d], "layer", 1e-6)),
        "nss_multi_row": (reg.fused_norm_scale_shift,
                          (big, None, None, mod[..., d:2 * d], mod[..., :d], "layer", 1e-6)),
        "nss_f32_tok_rms": (reg.fused_norm_scale_shift,
                            (x, torch.randn(d, dtype=bf), None, torch.randn(1, 47, d, dtype=f32),
                             torch.randn(1, 47, d, dtype=f32), "rms", 1e-5)),
        "srnss_gate": (reg.fused_scale_residual_norm_scale_shift,
                       (res, x, mod[..., 2 * d:3 * d], None, None, mod[..., d:2 * d], mod[..., :d], "layer", 1e-6)),
        "srnss_scalar_affine_f32gate": (reg.fused_scale_residual_norm_scale_shift,
                                        (res, x, mod32[..., :d], torch.randn(d, dtype=f32), torch.randn(d, dtype=f32),
                                         torch.randn(1, dtype=bf), torch.randn(1, dtype=bf), "layer", 1e-6)),
    }
    out = {}
    for name, (fn, args) in cases.items():
        start = len(rec.compiled)
        n_launch = len(rec.launches)
        fn(*args)
        kernel = rec.compiled[start]
        sig = kernel.src.signature
        names = list(kernel.src.fn.arg_names)  # as CudaLauncher.__init__ keys them
        constants = {(names.index(k),) if isinstance(k, str) else k: v for k, v in kernel.src.constants.items()}
        form, arg_ids, spec = ext.kept[-1]
        out[name] = {"signature": list(sig.values()), "constants": [[list(k), repr(v)] for k, v in constants.items()],
                     "args": rec.launches[n_launch]["args"], "form": form,
                     "same_args": arg_ids == [id(a) for a in args], "spec": list(spec),
                     "function": rec.launches[n_launch]["function"], "packed": rec.launches[n_launch]["packed"],
                     "grid": rec.launches[n_launch]["grid"]}
    print(json.dumps(out))


@pytest.fixture(scope="module")
def offline() -> dict[str, Any]:
    from kda_lab.interpret.offline_launch import child_report

    return child_report(__file__)


def _tritons_params(signature: list[str], constants: list[list[Any]]) -> list[tuple[str, int | None]]:
    """(C type, argument index) of each kernel parameter in the launcher Triton generates for this signature
    (``void *params[]`` and ``_launch``'s declarations of triton.backends.nvidia.driver.make_launcher)."""
    from triton.backends.nvidia.driver import make_launcher

    src = make_launcher({tuple(k): v for k, v in constants}, dict(enumerate(signature)), None)
    params = re.search(r"void \*params\[\] = \{ (.*?) \};", src).group(1).split(", ")
    decl = re.search(r"static void _launch\((.*?)\) \{", src, re.S).group(1)
    types = dict((name, ty) for ty, name in (p.rsplit(" ", 1) for p in decl.split(", ")))
    out = []
    for p in params:
        name = p.lstrip("&")
        out.append((types[name], int(name[3:]) if name.startswith("arg") else None))
    return out


_C_PACK = {"CUdeviceptr": None, "int8_t": "<b", "int16_t": "<h", "int32_t": "<i", "int64_t": "<q", "uint8_t": "<B",
           "uint16_t": "<H", "uint32_t": "<f", "uint64_t": "<d"}  # uint32/64_t: Triton's fp32 / fp64 storage


CASES = ["nss_small", "nss_multi_row", "nss_f32_tok_rms", "srnss_gate", "srnss_scalar_affine_f32gate"]


def block_mismatches(got: dict[str, Any], slots: list[int], bits: list[int]) -> list[str]:
    """Where a parameter block differs from the one Triton's generated launcher builds for this launch."""
    expected = _tritons_params(got["signature"], got["constants"])
    if len(slots) != len(expected) or len(bits) != len(expected):
        return [f"{len(slots)} parameters, Triton's launcher passes {len(expected)}"]
    bad = []
    for i, ((ctype, index), slot, value) in enumerate(zip(expected, slots, bits, strict=True)):
        if index is None:  # global_scratch / profile_scratch: null
            ok = (slot, value) == (-1, 0)
        elif ctype == "CUdeviceptr":
            ok = slot == index < 9
        else:
            raw = got["args"][index]
            arg = float(raw) if _C_PACK[ctype] in ("<f", "<d") else int(eval(raw))
            ok = slot == -1 and value == int.from_bytes(struct.pack(_C_PACK[ctype], arg), "little")
        if not ok:
            bad.append(f"parameter {i} ({ctype} arg{index}): slot {slot} bits {value:#x}")
    return bad


@pytest.mark.parametrize("case", CASES)
def test_parameter_block_is_tritons(offline: dict[str, Any], case: str) -> None:
    got = offline[case]
    function, grid, block, smem, dense, slots, bits = got["spec"]
    assert block_mismatches(got, slots, bits) == []
    warps, ctas, shared = eval(got["packed"])
    assert (function, grid, block, smem) == (int(got["function"]), got["grid"][0], 32 * warps, shared)
    assert ctas == 1 and dense is True and got["same_args"]
    assert got["form"] == ("srnss" if case.startswith("srnss") else "nss")


def test_a_wrong_parameter_block_is_told_apart(offline: dict[str, Any]) -> None:
    """The comparison rejects a block that drops one constant, one that swaps two pointer slots, and one whose
    fp32 eps is packed as its double's low bits."""
    got = offline["nss_small"]
    slots, bits = got["spec"][5], got["spec"][6]
    assert block_mismatches(got, slots[:10] + slots[11:], bits[:10] + bits[11:])
    assert block_mismatches(got, [slots[1], slots[0], *slots[2:]], bits)
    eps_at = [i for i, (c, _) in enumerate(_tritons_params(got["signature"], got["constants"])) if c == "uint32_t"]
    assert eps_at
    wrong = list(bits)
    wrong[eps_at[0]] = int.from_bytes(struct.pack("<d", 1e-6), "little") & 0xFFFFFFFF
    assert block_mismatches(got, slots, wrong)


# -------------------------------------------------------------------------- the public functions' dispatch

class StubExt:
    """Returns what it is told to; records calls."""

    def __init__(self, result: Any) -> None:
        self.HANDBACK = object()
        self.result = result
        self.calls = 0

    def nss(self, *a: Any) -> Any:
        self.calls += 1
        return self.HANDBACK if self.result == "handback" else self.result

    srnss = nss


@pytest.fixture
def cand(monkeypatch: pytest.MonkeyPatch) -> Any:
    from kda_lab.testing import candidate_under_test

    mod = candidate_under_test(__file__).module
    monkeypatch.setattr(mod, "_ext_tried", True)
    return mod


def _install(monkeypatch: pytest.MonkeyPatch, cand: Any, result: Any) -> StubExt:
    ext = StubExt(result)
    monkeypatch.setattr(cand, "_ext", ext)
    monkeypatch.setattr(cand, "_HANDBACK", ext.HANDBACK)
    return ext


def _args() -> tuple[Any, ...]:
    d = 256
    return (torch.randn(1, 3, d), None, None, torch.randn(d), torch.randn(d), "layer", 1e-6)


def test_a_result_is_returned_as_is(cand: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    y = torch.empty(1)
    ext = _install(monkeypatch, cand, y)
    monkeypatch.setattr(cand, "nss_python", lambda *a: pytest.fail("the Python path ran"))
    assert cand.fused_norm_scale_shift(*_args()) is y and ext.calls == 1


def test_handback_goes_to_sglang(cand: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    _install(monkeypatch, cand, "handback")
    seen = []
    monkeypatch.setattr(cand, "_sglang_nss", lambda *a: seen.append(a) or "sglang")
    monkeypatch.setattr(cand, "_sglang_srnss", lambda *a: seen.append(a) or "sglang-res")
    assert cand.fused_norm_scale_shift(*_args()) == "sglang"
    x = torch.randn(1, 3, 256)
    assert cand.fused_scale_residual_norm_scale_shift(x, x, None, None, None, x[0, 0], x[0, 0], "rms", 1e-6) \
        == "sglang-res"
    assert len(seen) == 2


def test_none_takes_the_python_path(cand: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    _install(monkeypatch, cand, None)
    monkeypatch.setattr(cand, "nss_python", lambda *a: "python")
    assert cand.fused_norm_scale_shift(*_args()) == "python"


def test_under_torch_compile_the_extension_is_not_called(cand: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    ext = _install(monkeypatch, cand, torch.empty(1))
    monkeypatch.setattr(cand, "_is_compiling", lambda: True)
    monkeypatch.setattr(cand, "nss_python", lambda *a: "python")
    assert cand.fused_norm_scale_shift(*_args()) == "python" and ext.calls == 0


def test_no_build_on_a_cpu_call(monkeypatch: pytest.MonkeyPatch) -> None:
    """A CPU tensor never loads (or builds) the extension: the Python path, as c007."""
    from kda_lab.testing import candidate_under_test

    mod = candidate_under_test(__file__).module
    monkeypatch.setattr(mod, "_ext", None)
    monkeypatch.setattr(mod, "_ext_tried", False)
    monkeypatch.setattr(mod, "load_extension", lambda *a: pytest.fail("loaded on a CPU call"))
    monkeypatch.setattr(mod, "nss_python", lambda *a: "python")
    assert mod.fused_norm_scale_shift(*_args()) == "python"


def test_the_exported_copy_never_builds() -> None:
    """The extension builds on first use only in the lab: imported under kda_kernels it only loads."""
    text = (SRC / "register.py").read_text()
    assert '_BUILD_ON_FIRST_USE = not __name__.startswith("kda_kernels.")' in text
    assert "EXTENSION.load(build=_BUILD_ON_FIRST_USE" in text


if __name__ == "__main__" and sys.argv[1:] == ["--child"]:
    _child()
