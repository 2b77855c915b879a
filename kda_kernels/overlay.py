"""install() / uninstall() / status(): swap promoted KDA kernels into a running SGLang process and back.

A swap of function ``fn`` (defining module ``M``, facade ``F = sglang.kernels.ops.diffusion``):

1. captures the baseline: ``M.fn`` (or, if that is already a KDA object, the baseline it carries: the true
   original is never replaced by a replacement, whatever ``force`` does);
2. rebinds, by identity, every global of every loaded module that holds the baseline (or the value ``F``
   cached for ``fn``): ``M.fn`` itself, ``F``'s cache, and module-level ``from ... import fn`` call sites;
3. sets ``F.fn`` (the facade cache) even when ``F`` had not resolved ``fn`` yet, so later imports and
   in-function ``from sglang.kernels.ops.diffusion import fn`` get the KDA object without touching ``M``;
4. registers ``KernelSpec(op="diffusion.<fn>", backend=KernelBackend.KDA, target="kda_kernels.diffusion.<family>:<fn>")``.

``uninstall()`` puts back exactly the recorded previous values where the KDA object is still in place
(identity checks), also at modules imported after the install that picked the KDA object up.
Problems are warnings (``KdaKernelsWarning``) and the baseline stays; ``strict=True`` raises instead and rolls
back what that call installed. Nothing here ever raises out of a non-strict ``install()``.
"""

from __future__ import annotations

import importlib
import sys
import threading
import types
import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from kda_kernels._env import DISABLE_ENV, disabled, forced_arch
from kda_kernels.registry import ARCH_CAPABILITY, FACADE, FAMILIES, TARGETS, SwapTarget

STAMP_KEYS = ("task", "commit", "date", "speedup", "arches")
# Modules whose globals are never rebound: our own (impls may hold the baseline on purpose) and the lab's
# task candidates loaded by the harness.
_SKIP_PREFIXES = ("kda_kernels", "_kda_candidate_")
_MISSING = object()
_lock = threading.RLock()


class KdaKernelsWarning(RuntimeWarning):
    """install() kept SGLang's baseline for a function (details in the message and in status())."""


class KdaInstallError(RuntimeError):
    """Raised by install(strict=True) when any promoted function could not be swapped in."""


@dataclass
class Site:
    module: types.ModuleType
    name: str
    previous: Any  # _MISSING: the name did not exist (facade cache not yet filled)


@dataclass
class Installed:
    target: SwapTarget
    public: Callable[..., Any]
    baseline: Callable[..., Any]
    arches: tuple[str, ...]
    forced: str | None
    sites: list[Site] = field(default_factory=list)
    registry: str = ""  # registered KernelSpec op id, or why not

    def call_sites(self) -> list[str]:
        """Rebound globals outside the defining module and the facade (module-level import call sites)."""
        own = {self.target.module, FACADE}
        return [f"{s.module.__name__}.{s.name}" for s in self.sites if s.module.__name__ not in own]

    def rebound(self) -> list[str]:
        return [f"{s.module.__name__}.{s.name}" for s in self.sites]


_STATE: dict[str, Installed] = {}
_PROBLEMS: dict[str, list[str]] = {}
_STANDALONE: dict[str, Callable[..., Any]] = {}  # KDA objects built for attribute access, not installed
_LAST: dict[str, Any] = {"forced": None, "disabled": False}


# ------------------------------------------------------------------------------------------------ stamps

def family_module(family: str) -> types.ModuleType:
    return importlib.import_module(f"kda_kernels.diffusion.{family}")


def stamps(target: SwapTarget) -> dict[str, Any]:
    fam = family_module(target.family)
    fn = target.function
    out = {"promoted": bool(getattr(fam, f"KDA_OPTIMIZED_{fn}", False))}
    for key in STAMP_KEYS:
        default: Any = () if key == "arches" else {}
        out[key] = getattr(fam, f"KDA_{key.upper()}_{fn}", default)
    return out


def _load_impls(target: SwapTarget, arches: Iterable[str], problems: list[str]) -> dict[str, Any]:
    name = target.unpacks_into or target.function
    out: dict[str, Any] = {}
    for arch in arches:
        if arch not in ARCH_CAPABILITY:
            problems.append(f"unknown arch {arch!r} in KDA_ARCHES_{target.function}")
            continue
        modname = f"{target.family_module}._impls.{arch}.register"
        try:
            mod = importlib.import_module(modname)
        except Exception as e:  # noqa: BLE001 - an impl that fails to import must not break SGLang
            problems.append(f"{arch} impl failed to import ({modname}): {type(e).__name__}: {e}")
            continue
        exports = getattr(mod, "EXPORTS", None)
        impl = exports.get(name) if isinstance(exports, dict) else None
        if not callable(impl):
            problems.append(f"{arch} impl {modname} has no callable EXPORTS[{name!r}]")
            continue
        supports = getattr(impl, "supports", None)
        if supports is None:
            supports = (getattr(mod, "SUPPORTS", None) or {}).get(name)
        if supports is not None and not callable(supports):
            problems.append(f"{arch} impl {modname}: supports for {name!r} is not callable")
            continue
        out[arch] = (impl, supports)
    return out


# ---------------------------------------------------------------------------------------------- swapping

def _capture_baseline(target: SwapTarget) -> Callable[..., Any]:
    from kda_kernels.dispatch import is_kda_object

    mod = importlib.import_module(target.module)
    current = mod.__dict__.get(target.function, _MISSING)
    if current is _MISSING:
        raise AttributeError(f"{target.module} has no attribute {target.function!r}")
    if is_kda_object(current):  # left behind by an earlier install: its baseline is the true original
        return current.__kda_baseline__
    return current


def _modules() -> list[types.ModuleType]:
    return [m for m in list(sys.modules.values()) if isinstance(m, types.ModuleType)]


def _skip(m: types.ModuleType) -> bool:
    name = getattr(m, "__name__", "") or ""
    return name.startswith(_SKIP_PREFIXES) or getattr(m, "__kda_no_rebind__", False) is True


def _rebind(olds: list[Any], new: Any, restore_as: dict[int, Any] | None = None) -> list[Site]:
    """Replace, in every loaded module's globals, each value identical to one of ``olds`` with ``new``.
    ``restore_as`` maps id(old) to what uninstall() should put back instead of that old value."""
    ids = {id(o) for o in olds}
    restore_as = restore_as or {}
    sites: list[Site] = []
    for m in _modules():
        if _skip(m):
            continue
        try:
            d = vars(m)
            if ids.isdisjoint(map(id, list(d.values()))):
                continue
            for name, value in list(d.items()):
                if id(value) in ids and any(value is o for o in olds):
                    d[name] = new
                    sites.append(Site(m, name, restore_as.get(id(value), value)))
        except Exception:  # noqa: BLE001,S112 - an exotic module object: leave it alone
            continue
    return sites


def _swap(rec: Installed) -> None:
    from kda_kernels.dispatch import is_kda_object

    t = rec.target
    facade = importlib.import_module(FACADE)  # already imported with the defining module (its parent package)
    mod = sys.modules[t.module]
    olds = [rec.baseline]
    restore_as: dict[int, Any] = {}
    for holder in (mod, facade):
        v = holder.__dict__.get(t.function, _MISSING)
        if v is _MISSING or any(v is o for o in olds):
            continue
        if is_kda_object(v):
            # left behind by an install whose bookkeeping is gone: replace it too, restore the true original
            restore_as[id(v)] = rec.baseline
        olds.append(v)  # else e.g. a test's monkeypatch of the facade: restored as it was
    rec.sites = _rebind(olds, rec.public, restore_as)
    if facade.__dict__.get(t.function, _MISSING) is not rec.public:
        prev = facade.__dict__.get(t.function, _MISSING)
        facade.__dict__[t.function] = rec.public
        rec.sites.append(Site(facade, t.function, prev))
    if mod.__dict__.get(t.function) is not rec.public:
        rec.sites.append(Site(mod, t.function, mod.__dict__.get(t.function, _MISSING)))
        mod.__dict__[t.function] = rec.public


def _unswap(rec: Installed) -> dict[str, Any]:
    restored, left = 0, []
    for s in reversed(rec.sites):
        d = vars(s.module)
        if d.get(s.name, _MISSING) is rec.public:
            if s.previous is _MISSING:
                del d[s.name]
            else:
                d[s.name] = s.previous
            restored += 1
        else:
            left.append(f"{s.module.__name__}.{s.name}")
    # modules imported after install() picked the KDA object up through the facade: give them the baseline
    late = _rebind([rec.public], rec.baseline)
    return {"restored": restored + len(late), "late_importers": [f"{s.module.__name__}.{s.name}" for s in late],
            "changed_since_install": left}


def _register_spec(rec: Installed) -> str:
    try:
        from sglang.kernels.registry import registry
        from sglang.kernels.spec import CapabilityRequirement, KernelBackend, KernelSpec
    except Exception as e:  # noqa: BLE001
        return f"not registered: SGLang kernel registry unavailable ({type(e).__name__}: {e})"
    caps = frozenset(CapabilityRequirement.cuda(min_sm=ARCH_CAPABILITY[a], max_sm=ARCH_CAPABILITY[a])
                     for a in rec.arches)
    spec = KernelSpec(op=rec.target.registry_op, backend=KernelBackend.KDA, target=rec.target.kda,
                      capabilities=caps)
    try:
        registry.register(spec)
    except Exception as e:  # noqa: BLE001 - inventory only; the swap itself stands
        return f"not registered: {type(e).__name__}: {e}"
    return rec.target.registry_op


# ----------------------------------------------------------------------------------------------- install

def _selected(families: Iterable[str] | None, problems: dict[str, list[str]]) -> list[SwapTarget]:
    if families is None:
        return list(TARGETS)
    if isinstance(families, str):
        families = [families]
    wanted = list(families)
    unknown = [f for f in wanted if f not in FAMILIES]
    if unknown:
        problems.setdefault("*", []).append(f"unknown families {unknown}; known: {', '.join(FAMILIES)}")
    return [t for t in TARGETS if t.family in wanted]


def _purge_cached_modules(targets: list[SwapTarget]) -> None:
    fams = {f"kda_kernels.diffusion.{t.family}" for t in targets}
    for name in list(sys.modules):
        if any(name == f or name.startswith(f + ".") for f in fams):
            del sys.modules[name]


def _tensor_public(wrapper: SwapTarget, impls: dict[str, Any], forced: str | None) -> Callable[..., Any]:
    """The KDA object of the tensor-level function a wrapper unpacks into: the installed one if any, else one
    built from the wrapper's impls (``EXPORTS[unpacks_into]``), not swapped in anywhere."""
    from kda_kernels import dispatch

    inner = next(x for x in TARGETS if x.function == wrapper.unpacks_into)
    if inner.function in _STATE:
        return _STATE[inner.function].public
    return dispatch.build(inner, _capture_baseline(inner), impls, forced)


def _install_one(t: SwapTarget, forced: str | None, problems: list[str]) -> Installed | None:
    from kda_kernels import dispatch

    st = stamps(t)
    impls = _load_impls(t, st["arches"], problems)
    if not impls:
        if not problems:
            problems.append(f"promoted but no impl for arches {tuple(st['arches'])}")
        problems.append("SGLang's baseline kept")
        return None
    try:
        baseline = _capture_baseline(t)
    except Exception as e:  # noqa: BLE001
        problems.append(f"cannot import SGLang's baseline {t.sglang}: {type(e).__name__}: {e}; SGLang's baseline kept")
        return None
    tensor_public = None
    if t.kind == "wrapper":
        try:
            tensor_public = _tensor_public(t, impls, forced)
        except Exception as e:  # noqa: BLE001
            problems.append(f"cannot build {t.unpacks_into} for the wrapper: {type(e).__name__}: {e}")
            return None
    public = dispatch.build(t, baseline, impls, forced, tensor_public=tensor_public)
    rec = Installed(target=t, public=public, baseline=baseline, arches=tuple(sorted(impls)), forced=forced)
    _swap(rec)
    rec.registry = _register_spec(rec)
    return rec


def install(strict: bool = False, force: bool = False, families: Iterable[str] | None = None) -> dict[str, Any]:
    """Swap every promoted function (of ``families``, default all) into SGLang. Returns ``status()``."""
    try:
        with _lock:
            return _install(strict, force, families)
    except KdaInstallError:
        raise
    except Exception as e:  # noqa: BLE001 - never break `import sglang`
        if strict:
            raise KdaInstallError(f"kda_kernels.install() failed: {type(e).__name__}: {e}") from e
        warnings.warn(f"kda_kernels.install() failed, SGLang's kernels unchanged: {type(e).__name__}: {e}",
                      KdaKernelsWarning, stacklevel=2)
        return {}


def _install(strict: bool, force: bool, families: Iterable[str] | None) -> dict[str, Any]:
    if disabled():
        _LAST["disabled"] = True
        return status()
    _LAST["disabled"] = False
    problems: dict[str, list[str]] = {}
    targets = _selected(families, problems)
    try:
        forced = forced_arch()
    except ValueError as e:
        problems.setdefault("*", []).append(f"{e}; ignored")
        forced = None
    _LAST["forced"] = forced
    if force:
        _uninstall([t.function for t in targets if t.function in _STATE])
        _purge_cached_modules(targets)
    done: list[str] = []
    # tensor-level functions first, so a wrapper reuses their installed KDA object
    for t in sorted(targets, key=lambda x: x.kind == "wrapper"):
        if t.function in _STATE:
            # idempotent: already installed. (No re-scan: after install only deliberate code, e.g.
            # kda_kernels.baseline(), can hold the baseline, and it must keep it.)
            continue
        try:
            if not stamps(t)["promoted"]:
                _PROBLEMS.pop(t.function, None)
                continue
        except Exception as e:  # noqa: BLE001
            problems.setdefault(t.function, []).append(f"cannot read stamps: {type(e).__name__}: {e}")
            continue
        fn_problems: list[str] = []
        try:
            rec = _install_one(t, forced, fn_problems)
        except Exception as e:  # noqa: BLE001
            fn_problems.append(f"install failed: {type(e).__name__}: {e}; SGLang's baseline kept")
            rec = None
        if rec is not None:
            _STATE[t.function] = rec
            done.append(t.function)
            if rec.registry != t.registry_op:
                fn_problems.append(f"KernelSpec {rec.registry}")
        if fn_problems:
            problems[t.function] = fn_problems
    for fn in [t.function for t in targets]:
        if fn in problems:
            _PROBLEMS[fn] = problems[fn]
        elif fn in _STATE:
            _PROBLEMS.pop(fn, None)
    if "*" in problems:
        _PROBLEMS["*"] = problems["*"]
    if problems:
        msg = "; ".join(f"{fn}: {' / '.join(p)}" for fn, p in problems.items())
        if strict:
            _uninstall(done)
            raise KdaInstallError(f"kda_kernels.install(strict=True): {msg}")
        warnings.warn(f"kda_kernels: {msg}", KdaKernelsWarning, stacklevel=3)
    return status()


# --------------------------------------------------------------------------------------------- uninstall

def _uninstall(functions: Iterable[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    wanted = set(functions)
    # wrappers first: they hold the tensor-level KDA objects
    for fn in sorted(wanted & set(_STATE), key=lambda f: _STATE[f].target.kind != "wrapper"):
        out[fn] = _unswap(_STATE.pop(fn))
    return out


def uninstall(families: Iterable[str] | None = None) -> dict[str, Any]:
    """Restore exactly what install() replaced. Returns per function what was restored."""
    with _lock:
        if isinstance(families, str):
            families = [families]
        fams = set(families) if families is not None else set(FAMILIES)
        return _uninstall([fn for fn, rec in _STATE.items() if rec.target.family in fams])


# ------------------------------------------------------------------------------------------------ status

def status() -> dict[str, Any]:
    """Per function: promoted, arches with impls, stamps, installed, call sites rebound, problems."""
    out: dict[str, Any] = {}
    for t in TARGETS:
        try:
            st = stamps(t)
        except Exception as e:  # noqa: BLE001
            st = {"promoted": False, "error": f"{type(e).__name__}: {e}"}
        rec = _STATE.get(t.function)
        out[t.function] = {
            "family": t.family,
            "sglang": t.sglang,
            "kda": t.kda,
            "kind": t.kind,
            "promoted": st.get("promoted", False),
            "arches": list(rec.arches) if rec else [a for a in st.get("arches", ()) if _impl_dir_exists(t, a)],
            "stamps": {k: st.get(k) for k in STAMP_KEYS},
            "installed": rec is not None,
            "forced_arch": rec.forced if rec else None,
            "call_sites_rebound": len(rec.call_sites()) if rec else 0,
            "call_sites": rec.call_sites() if rec else [],
            "rebound": rec.rebound() if rec else [],
            "kernel_registry": rec.registry if rec else None,
            "problems": list(_PROBLEMS.get(t.function, ())),
        }
        builds = _build_state(t, out[t.function]["arches"])
        out[t.function]["builds"] = builds
        out[t.function]["problems"] += [
            f"{arch} CUDA extension {b.get('extension')} not built for this machine: SGLang's kernel serves these "
            f"calls (install() never compiles); run `python -m kda_kernels build`"
            for arch, b in builds.items() if not b.get("built")]
    if _LAST["disabled"]:
        for v in out.values():
            v["problems"].append(f"{DISABLE_ENV} set: install() did nothing")
    return out


def _build_state(t: SwapTarget, arches: Iterable[str]) -> dict[str, dict[str, Any]]:
    """Per arch, the ahead-of-time build of an impl's CUDA extension (kda_kernels.prebuilt), for impls already
    imported by install(); status() itself imports nothing."""
    out: dict[str, dict[str, Any]] = {}
    for arch in arches:
        mod = sys.modules.get(f"{t.family_module}._impls.{arch}.register")
        ext = mod.__dict__.get("EXTENSION") if mod is not None else None
        if ext is not None:
            out[arch] = ext.describe()
    return out


def _impl_dir_exists(t: SwapTarget, arch: str) -> bool:
    from pathlib import Path

    fam = Path(__file__).resolve().parent / "diffusion" / t.family / "_impls" / arch
    return (fam / "register.py").exists()


def kda_object(function: str) -> Callable[..., Any]:
    """The KDA object for ``function``: the installed one, else one built (not swapped in) from the stamps."""
    from kda_kernels import dispatch

    with _lock:
        if function in _STATE:
            return _STATE[function].public
        if function in _STANDALONE:
            return _STANDALONE[function]
        t = next((x for x in TARGETS if x.function == function), None)
        if t is None:
            raise AttributeError(function)
        st = stamps(t)
        if not st["promoted"]:
            raise AttributeError(f"{function} is not promoted (KDA_OPTIMIZED_{function} = False): "
                                 f"SGLang's {t.sglang} is the implementation")
        problems: list[str] = []
        impls = _load_impls(t, st["arches"], problems)
        if not impls:
            raise AttributeError(f"{function}: no usable impl ({'; '.join(problems)})")
        forced = forced_arch()
        inner = _tensor_public(t, impls, forced) if t.kind == "wrapper" else None
        obj = dispatch.build(t, _capture_baseline(t), impls, forced, tensor_public=inner)
        _STANDALONE[function] = obj
        return obj


def baseline(function: str) -> Callable[..., Any]:
    """SGLang's original for ``function`` (for impls that delegate part of their work to it)."""
    with _lock:
        if function in _STATE:
            return _STATE[function].baseline
    t = next((x for x in TARGETS if x.function == function), None)
    if t is None:
        raise KeyError(function)
    return _capture_baseline(t)


def installed() -> dict[str, Installed]:
    return dict(_STATE)
