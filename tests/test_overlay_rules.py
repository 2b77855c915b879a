"""The overlay's rules against the real SGLang 0.5.23 package (issue #10 items 8-14, issue #24):

- install(), uninstall() and status() read module state only through ``__dict__``: lazy modules (PEP 562
  ``__getattr__`` that raises, imports, or removes itself from sys.modules) run no code and stop nothing (#24);
- SGLang's kernel registry and selector are exactly as before after uninstall(), and select KDA on its arch
  while installed (item 10);
- only SGLang's modules are rebound unless the caller names others (item 11);
- the wrapper looks ``triton_group_norm_silu`` up at call time, as SGLang does (item 12);
- ``KDA_FORCE_ARCH`` never routes an input to an impl that cannot run it (item 13);
- fake impls describe the real outputs' strides (item 14, CPU part; the GPU part is test_overlay_fuzz_gpu.py);
- install() problems never raise, also under an "error" warnings filter, and are in status() (item 8).

Every scenario runs in a fresh interpreter (SGLang state is process-global), see test_overlay_fixtures.py.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

_spec = importlib.util.spec_from_file_location("kda_overlay_fixtures", Path(__file__).with_name("test_overlay_fixtures.py"))
fx = importlib.util.module_from_spec(_spec)
sys.modules.setdefault("kda_overlay_fixtures", fx)
_spec.loader.exec_module(fx)

FORCE = {"KDA_FORCE_ARCH": "h200"}
pytestmark = fx.needs_sglang


@pytest.fixture(scope="module")
def full_tree(tmp_path_factory):
    return fx.make_tree(tmp_path_factory.mktemp("rules"))


# ------------------------------------------------------------------------------ #24: lazy third-party modules

LAZY_MODULES = """
import types
from sglang.kernels.ops.diffusion.modulate import scale_shift_triton as _sst
BASE = _sst.fuse_scale_shift_kernel
hooks = []
class _Boom(types.ModuleType):
    def __getattr__(self, name):
        hooks.append(("boom", name))
        raise RuntimeError(f"lazy hook ran for {name!r}")
class _Vanish(types.ModuleType):
    def __getattr__(self, name):
        hooks.append(("vanish", name))
        sys.modules.pop(self.__dict__["__name__"], None)
        raise AttributeError(name)
def _importer_getattr(name):  # PEP 562 module-level __getattr__, as transformers' alias modules do
    hooks.append(("importer", name))
    importlib.import_module("wave")
    raise AttributeError(name)
assert "wave" not in sys.modules
LAZY = {}
for name, mod in (("boom", _Boom("sglang._kda_test_boom")), ("vanish", _Vanish("sglang._kda_test_vanish")),
                  ("importer", types.ModuleType("sglang._kda_test_importer")),
                  ("user_boom", _Boom("third_party_boom"))):
    mod.__dict__["fuse_scale_shift_kernel"] = BASE  # each holds SGLang's function, like a call site
    if name == "importer":
        mod.__dict__["__getattr__"] = _importer_getattr
    sys.modules[mod.__dict__["__name__"]] = mod
    LAZY[name] = mod
"""


def _sites(with_lazy: bool) -> str:
    return ["""
    mods = import_call_sites()
    """, LAZY_MODULES if with_lazy else "LAZY = {}; hooks = []", """
    import kda_kernels
    extra = ["third_party_boom"] if LAZY else None
    st = kda_kernels.install(extra_modules=extra)
    st2 = kda_kernels.status()
    kda_now = {n: kda(m.__dict__["fuse_scale_shift_kernel"]) for n, m in LAZY.items()}
    un = kda_kernels.uninstall()
    restored = {n: m.__dict__["fuse_scale_shift_kernel"] is BASE for n, m in LAZY.items()}
    emit({"sites": {k: sorted(v["call_sites"]) for k, v in st.items()},
          "installed": sorted(k for k, v in st2.items() if v["installed"]), "kda_now": kda_now,
          "restored": restored, "hooks": hooks, "wave": "wave" in sys.modules,
          "problems": {k: v["problems"] for k, v in st.items() if v["problems"]},
          "left": {k: v["changed_since_install"] for k, v in un.items() if v["changed_since_install"]}})
    """]


def test_lazy_modules_run_no_code_and_stop_nothing(full_tree):
    plain = fx.run_py(full_tree, _sites(False), env=FORCE)
    lazy = fx.run_py(full_tree, _sites(True), env=FORCE)
    assert lazy["hooks"] == [], "install/status/uninstall ran a module's __getattr__"
    assert lazy["wave"] is False, "a lazy module's import hook ran inside install()"
    assert lazy["installed"] == plain["installed"] and len(plain["installed"]) == 12
    assert lazy["problems"] == plain["problems"] == {}
    # the same call sites, plus the lazy modules themselves (they hold SGLang's function; the user one is named)
    ours = {"sglang._kda_test_boom.fuse_scale_shift_kernel", "sglang._kda_test_vanish.fuse_scale_shift_kernel",
            "sglang._kda_test_importer.fuse_scale_shift_kernel", "third_party_boom.fuse_scale_shift_kernel"}
    for fn, sites in plain["sites"].items():
        extra = ours if fn == "fuse_scale_shift_kernel" else set()
        assert set(lazy["sites"][fn]) == set(sites) | extra, fn
    assert all(lazy["kda_now"].values()) and all(lazy["restored"].values()), lazy
    assert lazy["left"] == {}


# ------------------------------------------------------------------------------- item 11: rebinding scope

def test_user_modules_are_rebound_only_when_named(full_tree):
    r = fx.run_py(full_tree, """
    import sglang.kernels.ops.diffusion
    from sglang.kernels.ops.diffusion import fuse_scale_shift_kernel   # the user's own saved reference
    keep = {"saved": fuse_scale_shift_kernel}  # (a container: a global holding it would be a call site too)
    user = types.ModuleType("myapp.pipeline"); sys.modules["myapp.pipeline"] = user
    user.__dict__["f"] = keep["saved"]
    import kda_kernels
    mods = import_call_sites()
    st = kda_kernels.install()
    default = {"main": kda(fuse_scale_shift_kernel), "user": kda(user.f), "sglang": kda(mods[EW].fuse_scale_shift_kernel),
               "sites": [s for s in st["fuse_scale_shift_kernel"]["call_sites"] if not s.startswith("sglang.")]}
    st = kda_kernels.install(extra_modules=["__main__", "myapp"])   # already installed: extends to these modules
    named = {"main": kda(fuse_scale_shift_kernel), "user": kda(user.f),
             "sites": sorted(s for s in st["fuse_scale_shift_kernel"]["call_sites"] if not s.startswith("sglang."))}
    kda_kernels.uninstall()
    emit({"default": default, "named": named,
          "restored": fuse_scale_shift_kernel is keep["saved"] and user.f is keep["saved"] and not kda(mods[EW].fuse_scale_shift_kernel)})
    """, env=FORCE)
    assert r["default"] == {"main": False, "user": False, "sglang": True, "sites": []}, r["default"]
    assert r["named"] == {"main": True, "user": True,
                          "sites": ["__main__.fuse_scale_shift_kernel", "myapp.pipeline.f"]}, r["named"]
    assert r["restored"]


# ------------------------------------------------------------------------ item 10: registry and selector

REGISTRY = """
from sglang.kernels import selector
from sglang.kernels.registry import registry
from sglang.kernels.spec import PlatformInfo
if PLATFORM is not None:  # what SGLang's selector detects, pinned (its own lru_cached detection replaced)
    selector._platform = lambda: PlatformInfo(device_type="cuda", cuda_arch_major=PLATFORM[0], cuda_arch_minor=PLATFORM[1])
import sglang.kernels.ops.diffusion
OPS = ("diffusion.apply_group_norm_silu", "diffusion.fused_inplace_qknorm_rope", "diffusion.fuse_scale_shift_kernel")

def select(op):
    try:
        s = selector.select_kernel(op)
        return s.backend.value
    except Exception as e:
        return type(e).__name__

def snapshot():
    return {op: (op in registry._by_op, [id(s) for s in registry._by_op.get(op, [])]) for op in OPS}

import kda_kernels
before = {op: select(op) for op in OPS}
ids_before, resolved_before = snapshot(), selector.get_kernel("diffusion.apply_group_norm_silu")
st = kda_kernels.install()
during = {op: select(op) for op in OPS}
resolved_during = selector.get_kernel("diffusion.apply_group_norm_silu")
kda_kernels.uninstall()
after = {op: select(op) for op in OPS}
emit({"before": before, "during": during, "after": after, "same_specs": snapshot() == ids_before,
      "resolved_during_kda": kda(resolved_during), "resolved_after_is_before":
      selector.get_kernel("diffusion.apply_group_norm_silu") is resolved_before,
      "status": st["apply_group_norm_silu"]["kernel_registry"], "problems": st["apply_group_norm_silu"]["problems"]})
"""


@pytest.mark.parametrize(("platform", "force"), [(None, None), ((9, 0), None), ((10, 0), None), (None, "h200")],
                         ids=["cpu", "sm90", "sm100", "cpu-forced-h200"])
def test_uninstall_restores_sglangs_kernel_selection(full_tree, platform, force):
    r = fx.run_py(full_tree, [f"PLATFORM = {platform!r}", REGISTRY], env={"KDA_FORCE_ARCH": force} if force else {})
    before = {"diffusion.apply_group_norm_silu": "triton", "diffusion.fused_inplace_qknorm_rope": "jit",
              "diffusion.fuse_scale_shift_kernel": "KeyError"}
    assert r["before"] == before
    assert r["after"] == r["before"], "uninstall() must give SGLang's selection back exactly"
    assert r["same_specs"], "uninstall() must restore the registry's spec lists (same spec objects, ops absent again)"
    assert r["resolved_after_is_before"], "get_kernel's cache must not keep the KDA object after uninstall()"
    assert r["problems"] == []
    kda_here = platform == (9, 0) or force == "h200"
    # while installed: selection never raises; KDA on its arch (or forced), SGLang's backend elsewhere
    assert r["during"]["diffusion.apply_group_norm_silu"] == ("KDA" if kda_here else "triton")
    assert r["during"]["diffusion.fused_inplace_qknorm_rope"] == ("KDA" if kda_here else "jit")
    assert r["during"]["diffusion.fuse_scale_shift_kernel"] == "KDA"  # SGLang registers no spec: KDA's is the only one
    # the facade's function is the KDA object either way; the spec SGLang selects loads what call sites run
    assert r["resolved_during_kda"]
    assert (r["status"] == "diffusion.apply_group_norm_silu") == kda_here, r["status"]


# --------------------------------------------------------------------- item 12: call-time lookup (SGLang's spy)

def test_wrapper_looks_up_triton_group_norm_silu_at_call_time(full_tree):
    """SGLang's test_resblock_actually_uses_triton_kernel_cuda spies on group_norm_silu_triton's attribute."""
    r = fx.run_py(full_tree, """
    from unittest.mock import patch
    import kda_kernels
    kda_kernels.install(strict=True)
    from sglang.kernels.ops.diffusion import apply_group_norm_silu
    from sglang.kernels.ops.diffusion.norm import group_norm_silu_triton as triton_mod
    gn, act = torch.nn.GroupNorm(4, 16), torch.nn.SiLU()
    x = torch.randn(2, 16, 3, 5)
    with torch.no_grad(), patch.object(triton_mod, "triton_group_norm_silu", wraps=triton_mod.triton_group_norm_silu) as spy:
        y = apply_group_norm_silu(x, gn, act)
    with torch.no_grad():
        ok = torch.allclose(y, act(gn(x)), atol=1e-5)
    emit({"spied": spy.call_count, "kwargs": sorted(spy.call_args.kwargs) if spy.call_args else None, "ok": ok,
          "impl_calls": calls("group_norm_silu")})
    """, env=FORCE)
    assert r["spied"] == 1, "apply_group_norm_silu must read triton_group_norm_silu from its module at call time"
    assert r["kwargs"] == ["eps", "num_groups"]  # SGLang passes these by keyword
    assert r["ok"] and r["impl_calls"]["triton_group_norm_silu"] == 1


# ------------------------------------------------------------------- item 13: forced arch on CPU tensors

@pytest.mark.parametrize("arch", ["h200", "b200"])
def test_forced_arch_on_cpu_tensors_falls_back_like_sglang(arch):
    """The repository's own overlay (the promoted H200 GroupNorm). SGLang's Triton kernel cannot run CPU tensors
    (interpreter off): the forced arch must not route them to it where SGLang itself runs eager torch."""
    r = fx.run_py(None, """
    import kda_kernels
    st = kda_kernels.install()
    from sglang.kernels.ops.diffusion import apply_group_norm_silu
    gn, act = torch.nn.GroupNorm(8, 32), torch.nn.SiLU()
    x = torch.randn(2, 32, 4, 4)
    with torch.no_grad():
        y = apply_group_norm_silu(x, gn, act)
        ref = act(gn(x))
    with torch.enable_grad():
        yg = apply_group_norm_silu(x.requires_grad_(), gn, act)
    emit({"installed": st["apply_group_norm_silu"]["installed"], "equal": torch.equal(y, ref),
          "grad_path": yg.requires_grad})
    """, env={"KDA_FORCE_ARCH": arch, "TRITON_INTERPRET": "0"})
    assert r["installed"] and r["equal"] and r["grad_path"]


# ---------------------------------------------------------------------- item 14: fakes describe real strides

def test_group_norm_silu_fake_matches_the_real_layout_on_cpu(full_tree):
    """On CPU SGLang's layout rule is its eager path's (``F.silu(F.group_norm(x))``: channels_last stays
    channels_last; its Triton op has no CPU kernel), which the fixture impl follows: the fake must say so.
    opcheck compares the fake's strides with the real output's. (The GPU test runs the real impl.)"""
    r = fx.run_py(full_tree, """
    import kda_kernels
    kda_kernels.install(strict=True)
    op = torch.ops.kda.triton_group_norm_silu.default
    cl = torch.randn(2, 16, 3, 5).to(memory_format=torch.channels_last)
    cl3 = torch.randn(1, 16, 2, 3, 4).to(memory_format=torch.channels_last_3d)
    cases = {"contiguous": (torch.randn(2, 16, 3, 5), torch.rand(16), torch.randn(16), 4),
             "channels_last": (cl, torch.rand(16), torch.randn(16), 4),
             "channels_last_3d": (cl3, torch.rand(16), torch.randn(16), 8),
             "strided_affine": (torch.randn(2, 16, 7), torch.rand(32)[::2], torch.randn(16).expand(16), 4)}
    out, fails = {}, {}
    for name, args in cases.items():
        with torch.no_grad():
            out[name] = list(op(*args).stride())
        try:
            torch.library.opcheck(op, args, {"eps": 1e-5})
        except Exception as e:
            fails[name] = f"{type(e).__name__}: {e}"[:600]
    emit({"strides": out, "fails": fails})
    """, env=FORCE)
    assert r["strides"]["channels_last"] == [240, 1, 80, 16], r["strides"]
    assert r["fails"] == {}, r["fails"]


# ------------------------------------------------------------- item 8: problems never raise, status says them

BROKEN = 'raise ImportError("fixture: this impl needs a missing extension")\n'


def test_install_problems_under_error_filters_are_logged_and_in_status(tmp_path):
    root = fx.make_tree(tmp_path, {"fuse_scale_shift": {"fuse_scale_shift_kernel": 1.2}})
    fx.add_promotion(root, "rotary_embedding", "h200", {"apply_rotary_embedding": 1.3}, register=BROKEN)
    r = fx.run_py(root, """
    import logging
    records = []
    class H(logging.Handler):
        def emit(self, record):
            records.append(record.getMessage())
    logging.getLogger("kda_kernels").addHandler(H())
    mods = import_call_sites()
    import kda_kernels
    from kda_kernels import overlay
    warnings.simplefilter("error")           # python -W error / pytest filterwarnings=error
    st = kda_kernels.install()
    # an install() that fails as a whole: still no exception, the reason in status()
    real = overlay._install
    overlay._install = lambda *a, **k: (_ for _ in ()).throw(RuntimeError("install exploded"))
    st2 = kda_kernels.install(force=True)
    overlay._install = real
    emit({"records": records, "problems": st["apply_rotary_embedding"]["problems"],
          "other": st["fuse_scale_shift_kernel"]["installed"], "whole": st2["fuse_scale_shift_kernel"]["problems"]})
    """, env=FORCE)
    assert r["other"], "a problem with one function must not stop the others"
    assert any("failed to import" in p for p in r["problems"]), r["problems"]
    assert any("apply_rotary_embedding" in m and "failed to import" in m for m in r["records"]), r["records"]
    assert any("install exploded" in p for p in r["whole"]), r["whole"]
    assert any("install exploded" in m for m in r["records"])


# ------------------------------------------------------------------ #24: the install() timing script runs

def test_install_timing_script_reports_a_clean_install():
    """scripts/overlay_install_timing.py (docs/overlay.md): one run in this environment (transformers and
    diffusers are reported as absent when not installed; the e2e environment has them)."""
    import json
    import subprocess

    p = subprocess.run([sys.executable, str(fx.REPO / "scripts" / "overlay_install_timing.py"), "--runs", "1",
                        "--kda-root", str(fx.REPO)], capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr
    r = json.loads(p.stdout)
    assert r["error"] is None and r["problems"] == {}, r
    assert {"triton_group_norm_silu", "apply_group_norm_silu"} <= set(r["installed"])
    assert set(r["third_party"]) == {"transformers", "diffusers"}
    assert r["imported_by_install"] == [], "install() imported third-party modules"
    assert r["install_s_median"] > 0
    assert r["kda_kernels"] == str(fx.REPO / "kda_kernels" / "__init__.py")


def _strict_install(setup: str, family: str) -> dict:
    """A strict install of ``family`` after ``setup`` in a fresh interpreter: {"raised": its KdaInstallError or None}."""
    return fx.run_py(None, [setup, f"""
    import kda_kernels
    from kda_kernels.overlay import KdaInstallError
    try:
        kda_kernels.install(strict=True, families=[{family!r}])
        emit({{"raised": None}})
    except KdaInstallError as e:
        emit({{"raised": str(e)}})
    """])


def test_a_sglang_module_that_cannot_import_here_is_unavailable_not_a_problem():
    """A promoted family whose SGLang module needs a package this environment lacks (norm_scale_shift's CuTe DSL
    kernels need cuda-python) has nothing to swap: status() says so under ``unavailable`` and a strict install
    goes on. A missing SGLang module itself stays a problem, and strict install refuses."""
    missing_dep = fx.run_py(None, """
    sys.modules["cuda"] = None  # the dependency is absent (on a CPU host it is anyway; on the box it is not)
    for m in [m for m in sys.modules if m.startswith("cutlass")]:
        del sys.modules[m]
    import kda_kernels
    st = kda_kernels.install(strict=True, families=["norm_scale_shift"])
    emit({f: {k: st[f][k] for k in ("installed", "unavailable", "problems")}
          for f in ("fused_norm_scale_shift", "fused_scale_residual_norm_scale_shift")})
    """)
    for fn in ("fused_norm_scale_shift", "fused_scale_residual_norm_scale_shift"):
        rec = missing_dep[fn]
        assert not rec["installed"] and rec["problems"] == [], rec
        assert "does not import here" in rec["unavailable"] and "'cuda'" in rec["unavailable"], rec
    missing_sglang = _strict_install('''
    sys.modules["sglang.kernels.ops.diffusion.norm.scale_residual_norm_cutedsl"] = None
    ''', "norm_scale_shift")
    assert missing_sglang["raised"] and "cannot import SGLang's baseline" in missing_sglang["raised"], missing_sglang


def test_a_sglang_module_that_raises_at_import_on_this_host_is_unavailable():
    """SGLang's norm_triton asks the device module for its properties at import: on a CPU host that raises
    AttributeError, so SGLang's own norm_infer cannot run here either. Promoted since 2026-11-27, it made CI's
    install-timing check report a problem. A module that imports but lacks the function stays a problem."""
    raises = fx.run_py(None, """
    import torch
    if not torch.cuda.is_available():  # undo the fixtures' CPU shim: this is the host SGLang's module meets
        del torch.cpu.get_device_properties
    import kda_kernels
    st = kda_kernels.install(strict=True, families=["norm_infer"])
    emit({"cuda": torch.cuda.is_available(),
          **{f: {k: st[f][k] for k in ("installed", "unavailable", "problems")}
             for f in ("norm_infer",)}})
    """)
    if raises.pop("cuda"):
        pytest.skip("norm_triton imports on a CUDA host")
    rec = raises["norm_infer"]
    assert not rec["installed"] and rec["problems"] == [], rec
    assert "does not import here" in rec["unavailable"] and "AttributeError" in rec["unavailable"], rec
    no_function = _strict_install('''
    from kda_kernels.registry import target
    mod = types.ModuleType(target("norm_infer").module)  # imports, but without SGLang's function
    sys.modules[mod.__name__] = mod
    ''', "norm_infer")
    assert no_function["raised"] and "has no attribute" in no_function["raised"], no_function
