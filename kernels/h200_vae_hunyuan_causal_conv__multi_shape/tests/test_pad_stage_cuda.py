"""c006's CUDA plain pad on a CPU host, from its parked copy (dev/c006/, README.md there): src/ is c004, and
dev/c006/restore.sh assembles c006's src/ files from dev/c006 (register.py, the binding, pad_stage.cu's header
comment) and dev/pad_cuda (the kernel and launcher, both headers). Here that assembly runs into a temporary copy of
src/ and must reproduce c006's registered source hash; the binding compiles against torch's headers; and
register.py's dispatch, imported from the assembled folder, sends exactly the calls it should to the extension
(a stand-in here), falls back to c004's Triton kernel on any nonzero code, and never loads or builds the extension
for a call that is not on a CUDA device of compute capability 9.0.

The nvcc sm_90a build with its no-spills mark is tests/test_cuda_sources.py's: it builds dev/pad_cuda/pad_stage.cu,
which is c006's pad_stage.cu from the first #include on; the chunk logic itself is checked by
tests/test_pad_stage_core.py on dev/pad_cuda's headers, the ones c006 ships."""

from __future__ import annotations

import hashlib
import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest
import torch
import torch.nn.functional as F

from kda_lab.task.schema import source_hash
from kda_lab.testing import assert_binding_compiles

TASK_DIR = Path(__file__).resolve().parents[1]
C006 = TASK_DIR / "dev" / "c006"
DEV = TASK_DIR / "dev" / "pad_cuda"
C006_SOURCE_HASH = "918bfa6173332746"  # solutions.jsonl: c006's register row
C004_SOURCE_HASH = "ae70f88601b7258b"
PAD = [1, 1, 1, 1, 2, 0]
INCLUDE = "#include <cstdint>"


@pytest.fixture(scope="module")
def c006_src(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """c006's src/: a copy of the task's src/ (c004's) with dev/c006/restore.sh run over it."""
    dest = tmp_path_factory.mktemp("c006") / "src"
    shutil.copytree(TASK_DIR / "src", dest, ignore=shutil.ignore_patterns("__pycache__", "build", "*.so", "*.o"))
    subprocess.run(["sh", str(C006 / "restore.sh"), str(dest)], check=True, timeout=60)
    return dest


def test_restore_reproduces_c006s_source_hash(c006_src: Path) -> None:
    """c006 = c004 + the CUDA pad: restore.sh over c004's src/ gives back the registered hash byte for byte."""
    assert source_hash(TASK_DIR / "src") == C004_SOURCE_HASH, (
        "src/ is no longer c004: rebase dev/c006 on the new src/ (and this test) or drop it")
    assert source_hash(c006_src) == C006_SOURCE_HASH
    assert (c006_src / "register.py").read_bytes() == (C006 / "register.py").read_bytes()
    assert (c006_src / "pad_stage_binding.cpp").read_bytes() == (C006 / "pad_stage_binding.cpp").read_bytes()
    for name in ("pad_stage_core.cuh", "pad_vec_core.cuh"):
        assert (c006_src / name).read_bytes() == (DEV / name).read_bytes(), name


def test_shipped_pad_stage_is_the_measured_one(c006_src: Path) -> None:
    """dev/pad_sweep.py --cuda timed dev/pad_cuda/pad_stage.cu and test_cuda_sources.py builds it without spills:
    c006's pad_stage.cu is that file from the first #include on, after its own header comment (comments only)."""
    shipped, dev = (c006_src / "pad_stage.cu").read_text(), (DEV / "pad_stage.cu").read_text()
    assert shipped[shipped.index(INCLUDE):] == dev[dev.index(INCLUDE):]
    head = (C006 / "pad_stage.cu.head").read_text()
    assert shipped == head + dev[dev.index(INCLUDE):]
    assert all(line.startswith("//") for line in head.splitlines())
    assert "// kda: no-spills" in head and "// kda: no-spills" in dev[:dev.index(INCLUDE)]
    # one copy of the kernel in the repo: nothing under dev/c006 for test_cuda_sources.py to build twice
    assert not list(C006.rglob("*.cu")) and not list(C006.rglob("*.cuh"))


def _import_c006(src: Path) -> ModuleType:
    """src/register.py imported by path as a package (its .fast_path and .pad_kernels siblings), as the lab does."""
    name = "_kda_c006_register_probe"
    spec = importlib.util.spec_from_file_location(name, src / "register.py", submodule_search_locations=[str(src)])
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture()
def reg(c006_src: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    mod = _import_c006(c006_src)
    monkeypatch.setenv("TRITON_INTERPRET", "1")  # CPU tensors inside _padded_shape's contract
    monkeypatch.setattr(mod, "_sm90", {})
    return mod


def test_import_builds_nothing_and_names_the_extension_by_its_sources(reg: Any, c006_src: Path) -> None:
    assert reg.EXTENSION.module is None and reg._ext is None and not reg._ext_tried
    h = hashlib.sha256()
    for name in ("pad_stage.cu", "pad_stage_binding.cpp", "pad_stage_core.cuh", "pad_vec_core.cuh"):
        h.update(name.encode() + b"\0" + (c006_src / name).read_bytes())
    assert reg.EXTENSION.name == f"kda_h200_pad_stage_{h.hexdigest()[:12]}"
    assert any("compute_90a,code=sm_90a" in f for f in reg.EXTENSION.cuda_cflags)
    assert reg._BUILD_ON_FIRST_USE  # the lab's task-folder copy may build on its first CUDA call


def test_the_exported_copy_never_builds(reg: Any, c006_src: Path, tmp_path: Path,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """Imported under the overlay's module name, the copy only loads: an empty cache leaves the extension None
    (the Triton kernel serves) and nvcc never runs."""
    monkeypatch.setenv("KDA_KERNELS_CACHE", str(tmp_path))  # an empty cache: nothing prebuilt
    text = (C006 / "register.py").read_text()
    # run register.py's own text under the overlay's module name, its two sibling imports served by the lab copy's
    code = compile(text.replace("from .fast_path import", "from kda_lab_probe_fast_path import")
                   .replace("from .pad_kernels import", "from kda_lab_probe_pad_kernels import"), "register.py", "exec")
    monkeypatch.setitem(sys.modules, "kda_lab_probe_fast_path", SimpleNamespace(FAST_PATH=reg.FAST_PATH))
    monkeypatch.setitem(sys.modules, "kda_lab_probe_pad_kernels",
                        SimpleNamespace(launch_ncdhw=reg.launch_ncdhw, launch_ndhwc=reg.launch_ndhwc))
    ns: dict[str, Any] = {"__name__": "kda_kernels.diffusion.replicate_pad3d._impls.h200.register",
                          "__file__": str(c006_src / "register.py")}
    exec(code, ns)
    assert not ns["_BUILD_ON_FIRST_USE"]
    monkeypatch.setattr(ns["EXTENSION"], "_build_locked", lambda verbose: pytest.fail("the exported copy compiled"))
    assert ns["load_extension"]() is None and ns["_ext_tried"]
    assert ns["load_extension"]() is None  # tried once: no second look at the cache


class StandIn:
    """The extension's pad(): records each call, answers with ``code``; on 0 it writes out as the kernel would."""

    def __init__(self, code: int) -> None:
        self.code = code
        self.calls: list[tuple[tuple[int, ...], torch.dtype, int, int, int]] = []

    def pad(self, x: torch.Tensor, out: torch.Tensor, pad_w: int, pad_h: int, pad_t: int) -> int:
        self.calls.append((tuple(x.shape), x.dtype, pad_w, pad_h, pad_t))
        if self.code == 0:
            out.copy_(F.pad(x, PAD, mode="replicate"))
        return self.code


def _route(reg: Any, monkeypatch: pytest.MonkeyPatch, ext: StandIn | None, cuda: bool = True) -> list[str]:
    """Stand CPU tensors in for CUDA ones (``cuda``), serve ``ext`` as the extension, record Triton launches."""
    triton_calls: list[str] = []

    def ncdhw(x: torch.Tensor, out: torch.Tensor, pad: tuple[int, ...]) -> None:
        triton_calls.append("ncdhw")
        out.copy_(F.pad(x, list(pad), mode="replicate"))

    def ndhwc(x: torch.Tensor, out: torch.Tensor, pad: tuple[int, ...]) -> None:
        triton_calls.append("ndhwc")
        out.copy_(F.pad(x, list(pad), mode="replicate"))

    monkeypatch.setattr(reg, "_on_cuda", lambda x: cuda)
    monkeypatch.setattr(reg, "_stage_ext", lambda x: ext)
    monkeypatch.setattr(reg, "launch_ncdhw", ncdhw)
    monkeypatch.setattr(reg, "launch_ndhwc", ndhwc)
    return triton_calls


# out [1, 8, 5, 66, 130] fp32 = 1.37 MB: over the 1 MiB rule; bf16 / fp16 rows of the same size class below
LARGE = (1, 8, 3, 64, 128)
SMALL = (1, 4, 3, 16, 30)  # out 4 * 5 * 18 * 32 * 4 B = 46 KB


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_cuda_calls_over_1mib_go_to_the_extension(reg: Any, monkeypatch: pytest.MonkeyPatch,
                                                  dtype: torch.dtype) -> None:
    ext = StandIn(0)
    triton_calls = _route(reg, monkeypatch, ext)
    shape = LARGE if dtype == torch.float32 else (1, 16, 3, 64, 128)
    x = torch.randn(shape).to(dtype)
    y = reg.replicate_pad3d(x, PAD)
    assert ext.calls == [(shape, dtype, 1, 1, 2)] and triton_calls == []
    assert y.is_contiguous() and torch.equal(y, F.pad(x, PAD, mode="replicate"))


@pytest.mark.parametrize("code", [1, 5, 6, 100 + 1, 100 + 74])
def test_a_nonzero_code_falls_back_to_the_triton_kernel(reg: Any, monkeypatch: pytest.MonkeyPatch,
                                                        code: int) -> None:
    ext = StandIn(code)
    triton_calls = _route(reg, monkeypatch, ext)
    x = torch.randn(LARGE)
    y = reg.replicate_pad3d(x, PAD)
    assert len(ext.calls) == 1 and triton_calls == ["ncdhw"]
    assert torch.equal(y, F.pad(x, PAD, mode="replicate"))


def test_no_extension_means_the_triton_kernel(reg: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    triton_calls = _route(reg, monkeypatch, None)  # not sm_90, or the exported copy without a prebuilt binary
    x = torch.randn(LARGE)
    assert torch.equal(reg.replicate_pad3d(x, PAD), F.pad(x, PAD, mode="replicate"))
    assert triton_calls == ["ncdhw"]


def test_calls_c004_sends_elsewhere_never_reach_the_extension(reg: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    ext = StandIn(0)
    triton_calls = _route(reg, monkeypatch, ext)
    small = torch.randn(SMALL)
    strided = torch.randn(LARGE).transpose(3, 4).contiguous().transpose(3, 4)  # same values, not contiguous
    for x, pad in ((small, PAD), (strided, PAD), (torch.randn(LARGE).double(), PAD)):
        assert torch.equal(reg.replicate_pad3d(x, pad), F.pad(x, pad, mode="replicate"))
    with torch.enable_grad():
        g = torch.randn(LARGE, requires_grad=True)
        assert reg.replicate_pad3d(g, PAD).requires_grad
    assert ext.calls == [] and triton_calls == []  # every one of them is SGLang's F.pad
    # the channels-last pad is c004's Triton gather on every row, extension or not
    x = torch.randn(LARGE)
    y = reg.replicate_pad3d_channels_last(x, PAD)
    assert ext.calls == [] and triton_calls == ["ndhwc"]
    assert y.is_contiguous(memory_format=torch.channels_last_3d) and torch.equal(y, F.pad(x, PAD, mode="replicate"))


def test_cpu_interpreter_calls_never_touch_the_extension(reg: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    ext = StandIn(0)
    triton_calls = _route(reg, monkeypatch, ext, cuda=False)
    monkeypatch.setattr(reg, "_stage_ext", lambda x: pytest.fail("a CPU call asked for the extension"))
    x = torch.randn(SMALL)  # under the interpreter even small rows run the Triton kernel (the 1 MiB rule is CUDA's)
    assert torch.equal(reg.replicate_pad3d(x, PAD), F.pad(x, PAD, mode="replicate"))
    assert triton_calls == ["ncdhw"] and ext.calls == []


def test_stage_ext_loads_only_on_compute_capability_9_0(reg: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    loads: list[int] = []
    monkeypatch.setattr(reg, "_ext", None)
    monkeypatch.setattr(reg, "_ext_tried", False)
    monkeypatch.setattr(reg.EXTENSION, "load", lambda build=False, verbose=False: loads.append(build) or "module")
    x = SimpleNamespace(device=torch.device("cuda", 1))
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda idx: (10, 0))
    assert reg._stage_ext(x) is None and loads == [] and reg._sm90 == {1: False} and not reg._ext_tried
    reg._sm90.clear()
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda idx: (9, 0))
    assert reg._stage_ext(x) == "module" and loads == [True] and reg._sm90 == {1: True}
    assert reg._stage_ext(x) == "module" and loads == [True]  # loaded once; later calls read _ext


def test_binding_compiles_against_torch_headers(tmp_path: Path) -> None:
    """dev/c006/pad_stage_binding.cpp against torch's headers and dev/pad_cuda's (g++ syntax check, warnings as
    errors): the box builds it."""
    assert_binding_compiles(C006 / "pad_stage_binding.cpp", DEV, tmp_path)


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
