"""Ahead-of-time builds (kda_kernels.prebuilt / build / ``python -m kda_kernels``): a serving process never compiles.

The round trip is real: a small C++ torch extension is compiled once with the host's compiler into a temporary
cache, then loaded in a fresh interpreter in which ``torch.utils.cpp_extension.load`` raises (any compile there
would fail the test). The promoted GroupNorm impl's CUDA build itself is the GPU test (tests/test_prebuilt_gpu.py).
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

_spec = importlib.util.spec_from_file_location("kda_overlay_fixtures", Path(__file__).with_name("test_overlay_fixtures.py"))
fx = importlib.util.module_from_spec(_spec)
sys.modules.setdefault("kda_overlay_fixtures", fx)
_spec.loader.exec_module(fx)

# Plain CPython (no torch headers: those take minutes to compile on a 2-core CI host); the build still goes
# through torch.utils.cpp_extension.load like every impl's extension.
CPP = r'''
#include <Python.h>
static PyObject* answer(PyObject*, PyObject*) { return PyLong_FromLong(42); }
static PyMethodDef methods[] = {{"answer", answer, METH_NOARGS, ""}, {nullptr, nullptr, 0, nullptr}};
static struct PyModuleDef def = {PyModuleDef_HEAD_INIT, "kda_test_twice_0001", nullptr, -1, methods};
#define KDA_CAT2(a, b) a##b
#define KDA_CAT(a, b) KDA_CAT2(a, b)
PyMODINIT_FUNC KDA_CAT(PyInit_, TORCH_EXTENSION_NAME)(void) { return PyModule_Create(&def); }
'''

NO_COMPILE = '''
import torch.utils.cpp_extension as _cx
def _refuse(*a, **k):
    raise AssertionError("compiled in a process that must only load")
_cx.load = _refuse
'''


def _py(code: str, cache: Path, extra_path: Path | None = None, timeout: int = 600) -> subprocess.CompletedProcess:
    env = dict(os.environ, KDA_KERNELS_CACHE=str(cache))
    env["PYTHONPATH"] = os.pathsep.join([str(REPO)] + ([str(extra_path)] if extra_path else []))
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, env=env,
                          timeout=timeout, cwd=REPO)


def _ext_code(src: Path) -> str:
    return f'''
from kda_kernels.prebuilt import Extension
EXT = Extension(name="kda_test_twice_0001", arch="h200", sources=({str(src)!r},), cflags=("-O1",))
'''


def test_built_extension_loads_in_a_fresh_process_without_compiling(tmp_path):
    src = tmp_path / "answer.cpp"
    src.write_text(CPP)
    cache = tmp_path / "cache"
    # a process that may not build: nothing in the cache -> None, and require() names the command that builds it
    p = _py(NO_COMPILE + _ext_code(src) + '''
from kda_kernels.prebuilt import ExtensionNotBuilt
assert EXT.load(build=False) is None and not EXT.is_built()
try:
    EXT.require()
except ExtensionNotBuilt as e:
    assert "python -m kda_kernels build" in str(e), e
else:
    raise AssertionError("require() on a missing build must raise")
print("ok")
''', cache)
    assert p.returncode == 0 and p.stdout.strip() == "ok", p.stderr
    # build once (the real compiler), then load elsewhere with the compiler forbidden
    p = _py(_ext_code(src) + "EXT.build(); print(EXT.artifact())", cache)
    assert p.returncode == 0, p.stderr
    artifact = Path(p.stdout.strip().splitlines()[-1])
    assert artifact.is_file() and cache in artifact.parents
    info = json.loads((artifact.parent / "KDA_BUILD.json").read_text())
    assert info["name"] == "kda_test_twice_0001" and info["arch"] == "h200"
    p = _py(NO_COMPILE + _ext_code(src) + '''
import torch
m = EXT.load(build=False)
assert m is not None and EXT.is_built() and EXT.describe()["built"]
assert m.answer() == 42
print("loaded")
''', cache)
    assert p.returncode == 0 and p.stdout.strip() == "loaded", p.stderr
    # another toolchain tag (here: another arch) never loads this binary
    p = _py(NO_COMPILE + _ext_code(src).replace('arch="h200"', 'arch="b200"') + "print(EXT.load(build=False))", cache)
    assert p.returncode == 0 and p.stdout.strip() == "None", p.stderr


@fx.needs_sglang
def test_exported_groupnorm_copy_never_compiles_and_status_says_it_is_not_built(tmp_path):
    """The overlay's GroupNorm impl (the real exported copy) with an empty build cache: importing it, installing
    the overlay and asking for its extension compile nothing, and status() names the missing build."""
    p = _py(NO_COMPILE + '''
import warnings, torch, types
if not hasattr(torch.cpu, "get_device_properties"):
    torch.cpu.get_device_properties = lambda *a, **k: types.SimpleNamespace(warp_size=32)
import kda_kernels
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    st = kda_kernels.install()
from kda_kernels.diffusion.group_norm_silu._impls.h200 import register as impl
from kda_kernels.prebuilt import ExtensionNotBuilt
assert impl._BUILD_ON_FIRST_USE is False
assert impl.load_extension() is None
try:
    impl.group_norm_silu_cuda(torch.zeros(1, 4, 8), torch.ones(4), torch.zeros(4), 2)
except ExtensionNotBuilt:
    pass
else:
    raise AssertionError("the exported copy must refuse to compile")
s = kda_kernels.status()["triton_group_norm_silu"]
import json
print(json.dumps({"installed": s["installed"], "builds": s["builds"], "problems": s["problems"]}))
''', tmp_path / "empty-cache")
    assert p.returncode == 0, p.stderr
    s = json.loads(p.stdout.strip().splitlines()[-1])
    assert s["installed"], s
    assert s["builds"]["h200"]["built"] is False and s["builds"]["h200"]["extension"].startswith("kda_h200_gns_")
    msg = s["builds"]["h200"]["message"]
    assert "not built on this machine" in msg and "python -m kda_kernels build" in msg, msg
    assert msg not in s["problems"], "on a host with no h200 in use, a missing build is state, not a problem"


def test_task_folder_copy_may_build_on_first_use():
    """The lab imports the candidate from the task folder, where building on first use is allowed (not serving)."""
    from kda_lab.task import load_candidate, load_task

    task = load_task(REPO / "kernels" / "h200_diffusion_group_norm_silu__multi_shape")
    mod = load_candidate(task)
    assert mod._BUILD_ON_FIRST_USE is True
    assert mod.EXTENSION.name.startswith("kda_h200_gns_") and mod.EXTENSION.arch == "h200"


def test_cli_build_with_nothing_to_build_and_status(tmp_path):
    env = dict(os.environ, KDA_KERNELS_CACHE=str(tmp_path), PYTHONPATH=str(REPO))
    p = subprocess.run([sys.executable, "-m", "kda_kernels", "build", "--family", "fuse_scale_shift"],
                       capture_output=True, text=True, env=env, cwd=REPO, timeout=300)
    assert p.returncode == 0 and "nothing to build" in p.stdout, p.stdout + p.stderr
    p = subprocess.run([sys.executable, "-m", "kda_kernels", "build", "--bogus"], capture_output=True, text=True,
                       env=env, cwd=REPO, timeout=300)
    assert p.returncode == 2 and "unrecognized arguments" in p.stderr
    p = subprocess.run([sys.executable, "-m", "kda_kernels", "status"], capture_output=True, text=True, env=env,
                       cwd=REPO, timeout=300)
    assert p.returncode == 0, p.stderr
    assert set(json.loads(p.stdout)) >= {"triton_group_norm_silu", "apply_group_norm_silu"}


@pytest.mark.parametrize("family", ["group_norm_silu"])
def test_build_lists_the_promoted_impl_extensions(family):
    from kda_kernels.build_extensions import impl_extensions

    exts = impl_extensions(families=[family])
    assert list(exts) == [(family, "h200")]
    assert exts[(family, "h200")].name.startswith("kda_h200_gns_")


def test_build_lists_a_fast_path_impls_extension(monkeypatch):
    """A family promoted as a module-level fast path (replicate_pad3d: the HunyuanVideo VAE decoder) is built ahead
    like a swap target's when its exported register.py carries an EXTENSION (the VAE task's c006 does)."""
    import types

    from kda_kernels import build_extensions as build
    from kda_kernels import fast_paths
    from kda_kernels.registry import FAST_PATH_FAMILIES

    fp = FAST_PATH_FAMILIES["replicate_pad3d"]
    sentinel = object()
    monkeypatch.setattr(fast_paths, "stamps", lambda f: {"promoted": f is fp, "arches": ("h200",)})
    register = types.ModuleType("stand_in_register")  # the exported copy, as import_module would find it
    register.EXTENSION = sentinel
    monkeypatch.setitem(sys.modules, f"{fp.family_module}._impls.h200.register", register)
    exts = build.impl_extensions(families=["replicate_pad3d"])
    assert exts == {("replicate_pad3d", "h200"): sentinel}


def test_the_exporter_builds_ahead_or_says_where_to_build():
    """After a promotion the exporter builds the impl's extension where torch has CUDA; on this CPU host it must
    say, in one line, that `python -m kda_kernels build` is needed on the serving machine."""
    from kda_lab.export.promote import _build_ahead
    from kda_lab.export.task import load_task_meta

    meta = load_task_meta(REPO / "kernels" / "h200_diffusion_group_norm_silu__multi_shape")
    lines: list[str] = []
    _build_ahead(REPO, meta, out=lines.append)
    import torch

    if torch.cuda.is_available():
        pytest.skip("a CUDA host builds instead (tests/test_prebuilt_gpu.py)")
    assert len(lines) == 1 and "torch has no CUDA" in lines[0] and "python -m kda_kernels build" in lines[0], lines


def test_status_says_where_calls_go_without_a_build():
    """A kernel extension (device code) not built: SGLang serves; a host-only one (norm_scale_shift's C++ launch
    path): the impl's Python path to its own kernels. status() words its message from that."""
    from kda_kernels.overlay import _without_build
    from kda_kernels.prebuilt import Extension

    kernel = Extension(name="k", arch="h200", sources=("/x/gns_kernels.cu", "/x/gns_binding.cpp"))
    host = Extension(name="h", arch="h200", sources=("/x/nss_host.cpp",), with_cuda=True)
    assert _without_build(kernel) == "go to SGLang's kernel"
    assert "Python host path" in _without_build(host)


def test_status_from_a_shell_shows_the_build_state_of_every_promoted_extension() -> None:
    """`python -m kda_kernels status` (no install() in that process) reports each promoted CUDA extension's build
    state, as docs/overlay.md promises; before this it printed `builds: {}` everywhere (issue 37 item 9)."""
    import json
    import os
    import subprocess
    import sys

    from kda_kernels.build_extensions import impl_extensions

    env = {**os.environ, "KDA_KERNELS_CACHE": "/nonexistent-kda-cache"}  # nothing built there
    r = subprocess.run([sys.executable, "-m", "kda_kernels", "status"], capture_output=True, text=True, env=env,
                       timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    st = json.loads(r.stdout)
    families = {fam for fam, _ in impl_extensions()}
    assert families, "no promoted impl carries a CUDA extension: the test would check nothing"
    seen = {v["family"] for v in st.values() if v.get("builds")}
    assert families <= seen, (families, seen)
    for v in st.values():
        for arch, b in v.get("builds", {}).items():
            assert b["built"] is False, (v["family"], arch, b)


def test_kda_kernels_build_stays_callable_after_its_module_is_imported():
    """`kda_kernels.build` is the public function. Its module used to be `kda_kernels/build.py`, and importing that
    submodule (as build() itself does) rebound the package attribute to the module: a second `kda_kernels.build()`
    raised "'module' object is not callable", and which one a test saw depended on the order tests ran in."""
    import importlib

    import kda_kernels

    importlib.import_module("kda_kernels.build_extensions")
    assert callable(kda_kernels.build) and kda_kernels.build.__module__ == "kda_kernels"
    assert not importlib.util.find_spec("kda_kernels.build"), "a submodule named build shadows the function again"
