"""install() / uninstall() / status(): swap promoted KDA kernels into a running SGLang process and back.

A swap of function ``fn`` (defining module ``M``, facade ``F = sglang.kernels.ops.diffusion``):

1. captures the baseline: ``M.fn`` (or, if that is already a KDA object, the baseline it carries: the true
   original is never replaced by a replacement, whatever ``force`` does);
2. rebinds, by identity, every global of every loaded module that holds the baseline (or the value ``F``
   cached for ``fn``): ``M.fn`` itself, ``F``'s cache, and module-level ``from ... import fn`` call sites;
3. sets ``F.fn`` (the facade cache) even when ``F`` had not resolved ``fn`` yet, so later imports and
   in-function ``from sglang.kernels.ops.diffusion import fn`` get the KDA object without touching ``M``;
4. registers ``KernelSpec(op="diffusion.<fn>", backend=KernelBackend.KDA, target="kda_kernels.diffusion.<family>:<fn>")``.

Step 2 rebinds SGLang's own modules (``sglang`` and ``sglang.*``) only; any other module (user code,
``__main__``) only when the caller names it: ``install(extra_modules=["__main__", "myapp"])`` (a name covers the
module and its submodules). A user's saved reference to SGLang's function is never replaced behind their back.

Module state is read only through the module's ``__dict__`` (never ``getattr`` on a module object): a module
with a PEP 562 ``__getattr__`` (transformers' lazy alias modules, SGLang's own facade) must not run its import
hooks inside install(), uninstall() or status(); any error from one module is skipped and never stops the
rebinding of the others.

``uninstall()`` puts back exactly the recorded previous values where the KDA object is still in place
(identity checks), also at modules imported after the install that picked the KDA object up, and restores
SGLang's kernel registry entry for the op as it was.
Problems are recorded in ``status()[fn]["problems"]`` and reported once through a ``KdaKernelsWarning`` that is
guarded against error filters (``python -W error``: the warning goes to the ``kda_kernels`` logger instead);
the baseline stays. ``strict=True`` raises instead and rolls back what that call installed. Nothing ever raises
out of a non-strict ``install()``.
"""

from __future__ import annotations

import importlib
import logging
import sys
import threading
import types
import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from kda_kernels import fast_paths, on_import, tiers
from kda_kernels._env import DISABLE_ENV, disabled, forced_arch
from kda_kernels.registry import (
    ARCH_CAPABILITY,
    BY_FUNCTION,
    FACADE,
    FAMILIES,
    FAST_PATH_FAMILIES,
    TARGETS,
    SwapTarget,
)

STAMP_KEYS = ("task", "commit", "date", "speedup", "arches")
# Modules whose globals are never rebound: our own (impls may hold the baseline on purpose) and the lab's
# task candidates loaded by the harness.
_SKIP_PREFIXES = ("kda_kernels", "_kda_candidate_")
_MISSING = object()
_lock = threading.RLock()
# Modules install() rebinds by default: SGLang's own. Anything else only when named in extra_modules.
_DEFAULT_SCOPE = ("sglang",)
log = logging.getLogger("kda_kernels")
_module_dict = types.ModuleType.__dict__["__dict__"].__get__  # a module's namespace, no attribute hooks run


def module_dict(m: types.ModuleType) -> dict[str, Any]:
    """``m.__dict__`` without attribute lookup on ``m`` (no ``__getattr__``/``__getattribute__`` of m runs)."""
    return _module_dict(m, type(m))


def report(message: str, stacklevel: int = 2) -> None:
    """A ``KdaKernelsWarning`` that cannot raise: where a warnings filter turns it into an error (``-W error``,
    pytest ``filterwarnings=error``), the message goes to the ``kda_kernels`` logger instead."""
    try:
        warnings.warn(message, KdaKernelsWarning, stacklevel=stacklevel + 1)
    except Exception:  # noqa: BLE001 - an "error" filter: never let a report break the caller (import sglang)
        log.warning("%s", message)


class KdaKernelsWarning(RuntimeWarning):
    """install() kept SGLang's baseline for a function (details in the message and in status())."""


class KdaInstallError(RuntimeError):
    """Raised by install(strict=True) when any promoted function could not be swapped in."""


@dataclass
class Site:
    module: types.ModuleType
    modname: str  # the sys.modules key it was found under (never read from the module object)
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
    registry_before: Any = None  # SGLang's spec list for the op before install (_MISSING: op absent)
    scope: tuple[str, ...] = ("sglang",)  # the modules install() may rebind (uninstall() restores there too)

    def call_sites(self) -> list[str]:
        """Rebound globals outside the defining module and the facade (module-level import call sites)."""
        own = {self.target.module, FACADE}
        return [f"{s.modname}.{s.name}" for s in self.sites if s.modname not in own]

    def rebound(self) -> list[str]:
        return [f"{s.modname}.{s.name}" for s in self.sites]


_STATE: dict[str, Installed] = {}
_PROBLEMS: dict[str, list[str]] = {}
# Functions whose SGLang module does not import in this environment (a package it needs is missing, e.g. CuTe DSL
# or cuda-python on a CPU host): nothing to swap, SGLang's own call fails there the same way. An environment fact
# shown by status(), not an install problem.
_UNAVAILABLE: dict[str, str] = {}
# install(defer=True): function -> (scope, forced arch), swapped in when SGLang imports its module
_DEFERRED: dict[str, tuple[tuple[str, ...], str | None]] = {}
_STANDALONE: dict[str, Callable[..., Any]] = {}  # KDA objects built for attribute access, not installed
_LAST: dict[str, Any] = {"forced": None, "disabled": False}


# ------------------------------------------------------------------------------------------------ stamps

def family_module(family: str) -> types.ModuleType:
    return importlib.import_module(f"kda_kernels.diffusion.{family}")


def stamps(target: SwapTarget) -> dict[str, Any]:
    fam = module_dict(family_module(target.family))
    fn = target.function
    out = {"promoted": bool(fam.get(f"KDA_OPTIMIZED_{fn}", False))}
    for key in STAMP_KEYS:
        default: Any = () if key == "arches" else {}
        out[key] = fam.get(f"KDA_{key.upper()}_{fn}", default)
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
        exports = module_dict(mod).get("EXPORTS")
        impl = exports.get(name) if isinstance(exports, dict) else None
        if not callable(impl):
            problems.append(f"{arch} impl {modname} has no callable EXPORTS[{name!r}]")
            continue
        supports = getattr(impl, "supports", None)
        if supports is None:
            supports = (module_dict(mod).get("SUPPORTS") or {}).get(name)
        if supports is not None and not callable(supports):
            problems.append(f"{arch} impl {modname}: supports for {name!r} is not callable")
            continue
        out[arch] = (impl, supports)
    return out


# ---------------------------------------------------------------------------------------------- swapping

def _capture_baseline(target: SwapTarget) -> Callable[..., Any]:
    from kda_kernels.dispatch import is_kda_object

    mod = importlib.import_module(target.module)
    current = module_dict(mod).get(target.function, _MISSING)
    if current is _MISSING:
        raise AttributeError(f"{target.module} has no attribute {target.function!r}")
    if is_kda_object(current):  # left behind by an earlier install: its baseline is the true original
        return current.__kda_baseline__
    return current


Scope = tuple[str, ...]  # module names: each covers the module itself and its submodules


def scope_of(extra_modules: Iterable[str | types.ModuleType] | None) -> Scope:
    """SGLang's own modules plus the caller-named ones (names, or module objects looked up in sys.modules)."""
    if extra_modules is None:
        return _DEFAULT_SCOPE
    if isinstance(extra_modules, (str, types.ModuleType)):
        extra_modules = [extra_modules]
    names = list(_DEFAULT_SCOPE)
    for m in extra_modules:
        if isinstance(m, str):
            names.append(m)
        else:  # a module object: the name it is loaded under (no attribute read on it)
            names.extend(k for k, v in list(sys.modules.items()) if v is m)
    return tuple(dict.fromkeys(names))


def _in_scope(name: str, scope: Scope | None) -> bool:
    return scope is None or any(name == s or name.startswith(s + ".") for s in scope)


def _modules(scope: Scope | None) -> list[tuple[str, types.ModuleType]]:
    """(name, module) for loaded modules in ``scope`` (None: all). ``type()`` only: isinstance() could read
    ``__class__`` through a foreign object's hooks."""
    return [(k, m) for k, m in list(sys.modules.items())
            if isinstance(k, str) and issubclass(type(m), types.ModuleType) and _in_scope(k, scope)]


def _skip(name: str, d: dict[str, Any]) -> bool:
    return name.startswith(_SKIP_PREFIXES) or d.get("__kda_no_rebind__", False) is True


def _rebind(olds: list[Any], new: Any, restore_as: dict[int, Any] | None = None,
            scope: Scope | None = _DEFAULT_SCOPE) -> list[Site]:
    """Replace, in the globals of every loaded module in ``scope`` (None: every module), each value identical
    to one of ``olds`` with ``new``. ``restore_as`` maps id(old) to what uninstall() should put back instead."""
    ids = {id(o) for o in olds}
    restore_as = restore_as or {}
    sites: list[Site] = []
    for modname, m in _modules(scope):
        try:
            d = module_dict(m)
            if _skip(modname, d) or ids.isdisjoint(map(id, list(d.values()))):
                continue
            for name, value in list(d.items()):
                if id(value) in ids and any(value is o for o in olds):
                    d[name] = new
                    sites.append(Site(m, modname, name, restore_as.get(id(value), value)))
        except Exception:  # noqa: BLE001,S112 - an exotic module object: leave it alone, rebind the others
            continue
    return sites


def _olds(rec: Installed) -> tuple[list[Any], dict[int, Any]]:
    """The values install() replaces: the baseline, plus what the defining module and the facade hold."""
    from kda_kernels.dispatch import is_kda_object

    t = rec.target
    olds = [rec.baseline]
    restore_as: dict[int, Any] = {}
    for holder in (t.module, FACADE):
        v = module_dict(sys.modules[holder]).get(t.function, _MISSING)
        if v is _MISSING or v is rec.public or any(v is o for o in olds):
            continue
        if is_kda_object(v):
            # left behind by an install whose bookkeeping is gone: replace it too, restore the true original
            restore_as[id(v)] = rec.baseline
        olds.append(v)  # else e.g. a test's monkeypatch of the facade: restored as it was
    return olds, restore_as


def _swap(rec: Installed, scope: Scope) -> None:
    t = rec.target
    rec.scope = scope
    facade = importlib.import_module(FACADE)  # already imported with the defining module (its parent package)
    mod = sys.modules[t.module]
    olds, restore_as = _olds(rec)
    rec.sites = _rebind(olds, rec.public, restore_as, scope)
    fd, md = module_dict(facade), module_dict(mod)
    if fd.get(t.function, _MISSING) is not rec.public:
        prev = fd.get(t.function, _MISSING)
        fd[t.function] = rec.public
        rec.sites.append(Site(facade, FACADE, t.function, prev))
    if md.get(t.function) is not rec.public:
        rec.sites.append(Site(mod, t.module, t.function, md.get(t.function, _MISSING)))
        md[t.function] = rec.public


def _extend(rec: Installed, scope: Scope) -> None:
    """An installed function, install() called again naming more modules: rebind those too."""
    olds, restore_as = _olds(rec)
    extra = tuple(s for s in scope if s not in rec.scope)
    if extra:
        rec.scope = (*rec.scope, *extra)
        rec.sites.extend(_rebind(olds, rec.public, restore_as, extra))


def reloaded(rec: Installed) -> Any:
    """SGLang's function as the defining module holds it now, when that is neither the KDA object nor the
    baseline install() captured: the module was executed again (``importlib.reload``) or rebound since. Else
    None."""
    from kda_kernels.dispatch import is_kda_object

    mod = sys.modules.get(rec.target.module)
    current = module_dict(mod).get(rec.target.function, _MISSING) if mod is not None else _MISSING
    if current is _MISSING or current is rec.public or current is rec.baseline or is_kda_object(current):
        return None
    return current


def _unswap(rec: Installed) -> dict[str, Any]:
    restored, left = 0, []
    # after a reload of the defining module, the facade and the call sites get the module's new function, so
    # that every holder agrees again (the captured baseline is a stale copy of the same code)
    fresh = reloaded(rec)
    for s in reversed(rec.sites):
        try:
            d = module_dict(s.module)
            if d.get(s.name, _MISSING) is rec.public:
                if s.previous is _MISSING:
                    del d[s.name]
                elif fresh is not None and s.previous is rec.baseline:
                    d[s.name] = fresh
                else:
                    d[s.name] = s.previous
                restored += 1
            else:
                left.append(f"{s.modname}.{s.name}")
        except Exception:  # noqa: BLE001 - one odd module must not stop the restore of the others
            left.append(f"{s.modname}.{s.name}")
    # modules in install()'s scope that picked the KDA object up through the facade after install(): give them
    # the baseline (a module outside the scope keeps what it took, as install() left its references alone)
    late = _rebind([rec.public], fresh if fresh is not None else rec.baseline, scope=rec.scope)
    _restore_spec(rec)
    return {"restored": restored + len(late), "late_importers": [f"{s.modname}.{s.name}" for s in late],
            "changed_since_install": left}


def _sglang_kernels() -> tuple[Any, Any, Any] | None:
    """(registry instance, spec module dict, selector module dict) of SGLang's kernel registry, or None."""
    try:
        reg = module_dict(importlib.import_module("sglang.kernels.registry"))["registry"]
        spec = module_dict(importlib.import_module("sglang.kernels.spec"))
        sel = module_dict(importlib.import_module("sglang.kernels.selector"))
    except Exception:  # noqa: BLE001
        return None
    return reg, spec, sel


def _clear_selector_cache(sel: dict[str, Any]) -> None:
    # get_kernel() caches resolved callables per process: drop them so selection follows the registry again
    resolve = sel.get("_resolve")
    if resolve is not None and hasattr(resolve, "cache_clear"):
        resolve.cache_clear()


def _register_spec(rec: Installed) -> tuple[str, bool]:
    """Make SGLang's selector pick the KDA backend for ``diffusion.<fn>`` where the KDA object runs an impl.

    SGLang's ``select_kernel`` returns the only spec of an op, else the one spec usable on this platform, and
    raises when none or several are. So, on the platform SGLang's selector detected:

    - KDA runs here (the device's arch has an impl, or ``KDA_FORCE_ARCH`` names one): the op's list becomes the
      KDA spec plus SGLang's specs that are not usable here; SGLang's usable ones are superseded while installed
      (the KDA object falls back to them per input). A forced arch registers the spec unrestricted.
    - KDA does not run here and SGLang registers the op: the list is left as it is (SGLang's selection unchanged).
    - SGLang does not register the op: the KDA spec is its only spec.

    uninstall() puts the op's original list back (``_restore_spec``). Returns (text for status, is_problem)."""
    sk = _sglang_kernels()
    if sk is None:
        return "not registered: SGLang kernel registry unavailable", True
    reg, spec_mod, sel = sk
    _clear_selector_cache(sel)  # get_kernel() may have cached SGLang's object for a spec now resolving to KDA's
    try:
        caps_t, backend_t, spec_t = spec_mod["CapabilityRequirement"], spec_mod["KernelBackend"], spec_mod["KernelSpec"]
        platform = sel["_platform"]()
        op = rec.target.registry_op
        by_op = reg._by_op
        before = by_op[op] if op in by_op else _MISSING
        sglang_specs = [] if before is _MISSING else list(before)
        forced_here = rec.forced in rec.arches
        caps = frozenset() if forced_here else frozenset(
            caps_t.cuda(min_sm=ARCH_CAPABILITY[a], max_sm=ARCH_CAPABILITY[a]) for a in rec.arches)
        kda = spec_t(op=op, backend=backend_t.KDA, target=rec.target.kda, capabilities=caps)
        if forced_here or kda.is_available(platform):
            new = [kda, *(s for s in sglang_specs if not s.is_available(platform))]
        elif not sglang_specs:
            new = [kda]
        else:
            return (f"not registered on this platform ({platform.device.value}, sm "
                    f"{platform.cuda_arch_major}.{platform.cuda_arch_minor}): SGLang's "
                    f"{[s.backend.value for s in sglang_specs]} stay selected; KDA arches {list(rec.arches)}"), False
        by_op[op] = new
        rec.registry_before = before
        _clear_selector_cache(sel)
    except Exception as e:  # noqa: BLE001 - inventory only; the swap itself stands
        return f"not registered: {type(e).__name__}: {e}", True
    return op, False


def _restore_spec(rec: Installed) -> None:
    """SGLang's registry entry for the op as it was before install (specs SGLang added meanwhile kept)."""
    sk = _sglang_kernels()
    if sk is None:
        return
    reg, _, sel = sk
    _clear_selector_cache(sel)
    if rec.registry_before is None:
        return
    op = rec.target.registry_op
    by_op = reg._by_op
    current = by_op.get(op, [])
    before = rec.registry_before
    kept = [] if before is _MISSING else before
    added = [s for s in current if s.target != rec.target.kda and all(s is not k for k in kept)]
    if before is _MISSING and not added:
        by_op.pop(op, None)
    else:
        if before is _MISSING:
            by_op[op] = added
        else:
            before.extend(added)
            by_op[op] = before
    rec.registry_before = None
    _clear_selector_cache(sel)


# ----------------------------------------------------------------------------------------------- install

def _selected(families: Iterable[str] | None, problems: dict[str, list[str]]) -> list[SwapTarget]:
    if families is None:
        return list(TARGETS)
    if isinstance(families, str):
        families = [families]
    wanted = list(families)
    unknown = [f for f in wanted if f not in FAMILIES and f not in FAST_PATH_FAMILIES]
    if unknown:
        problems.setdefault("*", []).append(f"unknown families {unknown}; known: "
                                            f"{', '.join([*FAMILIES, *FAST_PATH_FAMILIES])}")
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
    try:  # its own import may swap it in first (install(defer=True)): then the wrapper calls that object
        importlib.import_module(inner.module)
    except Exception:  # noqa: BLE001,S110 - _capture_baseline below reports it
        pass
    if inner.function in _STATE:
        return _STATE[inner.function].public
    return dispatch.build(inner, _capture_baseline(inner), impls, forced)


def _install_one(t: SwapTarget, forced: str | None, problems: list[str], scope: Scope) -> Installed | None:
    from kda_kernels import dispatch

    st = stamps(t)
    impls = _load_impls(t, st["arches"], problems)
    if not impls:
        if not problems:
            problems.append(f"promoted but no impl for arches {tuple(st['arches'])}")
        problems.append("SGLang's baseline kept")
        return None
    try:
        importlib.import_module(t.module)
    except Exception as e:  # noqa: BLE001
        if isinstance(e, ModuleNotFoundError) and (not e.name or e.name.split(".")[0] in ("sglang", "kda_kernels")):
            # SGLang's own module path is missing: another SGLang layout, a lab problem to report
            problems.append(f"cannot import SGLang's baseline {t.sglang}: {type(e).__name__}: {e}; "
                            f"SGLang's baseline kept")
        else:
            # The module exists but does not import on this host: a missing third-party dependency, or a module
            # that asks the device at import (SGLang's norm_triton reads the GPU's properties; on a CPU host it
            # raises AttributeError). SGLang's own call fails the same way: nothing to swap, nothing to warn.
            _UNAVAILABLE[t.function] = (f"SGLang's {t.sglang} does not import here ({type(e).__name__}: {e}): "
                                        f"nothing to swap, SGLang's own call fails the same way")
        return None
    try:
        baseline = _capture_baseline(t)
    except Exception as e:  # noqa: BLE001
        problems.append(f"cannot import SGLang's baseline {t.sglang}: {type(e).__name__}: {e}; SGLang's baseline kept")
        return None
    _UNAVAILABLE.pop(t.function, None)
    tensor_public = None
    if t.kind == "wrapper":
        try:
            tensor_public = _tensor_public(t, impls, forced)
        except Exception as e:  # noqa: BLE001
            problems.append(f"cannot build {t.unpacks_into} for the wrapper: {type(e).__name__}: {e}")
            return None
    public = dispatch.build(t, baseline, impls, forced, tensor_public=tensor_public)
    rec = Installed(target=t, public=public, baseline=baseline, arches=tuple(sorted(impls)), forced=forced)
    _swap(rec, scope)
    rec.registry, bad = _register_spec(rec)
    if bad:
        problems.append(f"KernelSpec {rec.registry}")
    return rec


def install(strict: bool = False, force: bool = False, families: Iterable[str] | None = None,
            extra_modules: Iterable[str | types.ModuleType] | None = None, defer: bool = False) -> dict[str, Any]:
    """Swap every promoted function (of ``families``, default all) into SGLang. Returns ``status()``.
    ``extra_modules``: modules outside SGLang whose globals holding SGLang's function are rebound too.
    ``defer``: a function whose SGLang module is not imported yet is swapped right after SGLang imports it
    (``kda_kernels.on_import``), so install() imports nothing of SGLang's (what the SGLang patch asks)."""
    try:
        with _lock:
            return _install(strict, force, families, extra_modules, defer)
    except KdaInstallError:
        raise
    except Exception as e:  # noqa: BLE001 - never break `import sglang`
        if strict:
            raise KdaInstallError(f"kda_kernels.install() failed: {type(e).__name__}: {e}") from e
        msg = f"install() failed, SGLang's kernels unchanged: {type(e).__name__}: {e}"
        _PROBLEMS["*"] = [msg]
        report(f"kda_kernels.{msg}")
    try:
        return status()
    except Exception:  # noqa: BLE001
        return {}


def _install(strict: bool, force: bool, families: Iterable[str] | None,
             extra_modules: Iterable[str | types.ModuleType] | None, defer: bool = False) -> dict[str, Any]:
    _PROBLEMS.pop("*", None)
    if isinstance(families, str):
        families = [families]
    if disabled():
        _LAST["disabled"] = True
        return status()
    _LAST["disabled"] = False
    problems: dict[str, list[str]] = {}
    scope = scope_of(extra_modules)
    targets = _selected(families, problems)
    try:
        forced = forced_arch()
    except ValueError as e:
        problems.setdefault("*", []).append(f"{e}; ignored")
        forced = None
    _LAST["forced"] = forced
    if force:
        _cancel_deferred([t.function for t in targets])
        _uninstall([t.function for t in targets if t.function in _STATE])
        _purge_cached_modules(targets)
        fast_paths.uninstall(families)
    done: list[str] = []
    # tensor-level functions first, so a wrapper reuses their installed KDA object
    for t in sorted(targets, key=lambda x: x.kind == "wrapper"):
        if t.function in _DEFERRED:
            _DEFERRED[t.function] = (tuple(dict.fromkeys((*_DEFERRED[t.function][0], *scope))), forced)
            continue
        if t.function in _STATE and reloaded(_STATE[t.function]) is not None:
            _uninstall([t.function])  # its module was reloaded: every holder back to the new function, then swap
        if t.function in _STATE:
            # idempotent: already installed. (No re-scan of SGLang: after install only deliberate code, e.g.
            # kda_kernels.baseline(), can hold the baseline, and it must keep it.) Modules the caller names now
            # are rebound.
            _extend(_STATE[t.function], scope)
            continue
        try:
            if not stamps(t)["promoted"]:
                _PROBLEMS.pop(t.function, None)
                continue
        except Exception as e:  # noqa: BLE001
            problems.setdefault(t.function, []).append(f"cannot read stamps: {type(e).__name__}: {e}")
            continue
        if defer and _defer(t, scope, forced):
            _PROBLEMS.pop(t.function, None)
            continue
        fn_problems: list[str] = []
        try:
            rec = _install_one(t, forced, fn_problems, scope)
        except Exception as e:  # noqa: BLE001
            fn_problems.append(f"install failed: {type(e).__name__}: {e}; SGLang's baseline kept")
            rec = None
        if rec is not None:
            _STATE[t.function] = rec
            done.append(t.function)
        if fn_problems:
            problems[t.function] = fn_problems
    fast_paths.install(families, forced)
    if _STATE or _DEFERRED or fast_paths.installed() or fast_paths.pending():
        tiers.hook()  # the request's quality reaches the lossless impls through SGLang's stages
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
        report(f"kda_kernels: {msg}", stacklevel=3)
    return status()


def _defer_key(t: SwapTarget) -> str:
    return f"swap {t.function}"


def _defer(t: SwapTarget, scope: Scope, forced: str | None) -> bool:
    """Wait for SGLang to import ``t``'s module (a wrapper: also the module of the function it unpacks into,
    whose KDA object it calls). Returns False when every module is loaded already: install now."""
    modules = [t.module]
    if t.kind == "wrapper":
        modules.append(next(x for x in TARGETS if x.function == t.unpacks_into).module)
    if all(m in sys.modules for m in modules):
        return False
    _DEFERRED[t.function] = (scope, forced)
    on_import.when_imported(t.module, _defer_key(t), lambda _module, t=t: _install_deferred(t))
    return True


def _install_deferred(t: SwapTarget) -> None:
    """Right after SGLang imported ``t``'s module: the swap install(defer=True) left waiting. Problems are
    reported as install() reports them (a warning, status()); never raises into SGLang's import."""
    with _lock:
        if t.function not in _DEFERRED:
            return
        scope, forced = _DEFERRED.pop(t.function)
        problems: list[str] = []
        try:
            rec = _install_one(t, forced, problems, scope)
        except Exception as e:  # noqa: BLE001
            problems.append(f"install failed: {type(e).__name__}: {e}; SGLang's baseline kept")
            rec = None
        if rec is not None:
            _STATE[t.function] = rec
        if problems:
            _PROBLEMS[t.function] = problems
            report(f"kda_kernels: {t.function}: {' / '.join(problems)}", stacklevel=2)
        else:
            _PROBLEMS.pop(t.function, None)


def _cancel_deferred(functions: Iterable[str]) -> None:
    for fn in functions:
        if _DEFERRED.pop(fn, None) is not None:
            on_import.cancel(_defer_key(BY_FUNCTION[fn]))


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
        fams = set(families) if families is not None else set(FAMILIES) | set(FAST_PATH_FAMILIES)
        _cancel_deferred([fn for fn in list(_DEFERRED) if BY_FUNCTION[fn].family in fams])
        out = {**_uninstall([fn for fn, rec in _STATE.items() if rec.target.family in fams]),
               **fast_paths.uninstall(fams)}
        if not _STATE and not _DEFERRED and not fast_paths.installed() and not fast_paths.pending():
            tiers.unhook()
        return out


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
        stale = []
        if rec is not None and reloaded(rec) is not None:
            stale = [f"{t.module}.{t.function} is SGLang's again since install (the module was reloaded or "
                     f"rebound): calls through it run SGLang's kernel; install() swaps again"]
        out[t.function] = {
            "family": t.family,
            "sglang": t.sglang,
            "kda": t.kda,
            "kind": t.kind,
            "tier": t.tier,
            "promoted": st.get("promoted", False),
            "arches": list(rec.arches) if rec else [a for a in st.get("arches", ()) if _impl_dir_exists(t, a)],
            "stamps": {k: st.get(k) for k in STAMP_KEYS},
            "installed": rec is not None and not stale,
            "forced_arch": rec.forced if rec else None,
            "call_sites_rebound": len(rec.call_sites()) if rec else 0,
            "call_sites": rec.call_sites() if rec else [],
            "rebound": rec.rebound() if rec else [],
            "kernel_registry": rec.registry if rec else None,
            "problems": [*stale, *_PROBLEMS.get(t.function, ()), *(f"install: {p}" for p in _PROBLEMS.get("*", ())),
                         *(tiers.PROBLEMS if rec is not None and t.tier != "exact" else ())],
            "unavailable": _UNAVAILABLE.get(t.function) if rec is None else None,
            # install(defer=True): swapped in when SGLang imports this module
            "pending_import": t.module if t.function in _DEFERRED else None,
        }
        builds = _build_state(t, out[t.function]["arches"])
        out[t.function]["builds"] = builds
        out[t.function]["problems"] += [b["message"] for arch, b in builds.items()
                                        if "message" in b and _serves_arch(arch)]
    out.update(fast_paths.status())
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
            if not out[arch].get("built"):
                out[arch]["message"] = (
                    f"{arch} CUDA extension {ext.name} is not built on this machine: {arch} calls "
                    f"{_without_build(ext)} (install() never compiles) until `python -m kda_kernels build`")
    return out


def _without_build(ext: Any) -> str:
    """Where an impl's calls go while its extension is not built: an extension with device code (a .cu source)
    holds the impl's kernels, so SGLang's kernel serves; a host-only one (C++ sources only, e.g. norm_scale_shift's
    launch path for its Triton kernel) is a faster way to the same kernels, which the impl's Python path reaches
    without it."""
    if any(str(s).endswith(".cu") for s in ext.sources):
        return "go to SGLang's kernel"
    return "take the impl's Python host path to its own kernels"


def _serves_arch(arch: str) -> bool:
    """Whether this process already runs CUDA on a device of ``arch``: only then is a missing build a problem
    (on a CPU host or another GPU it is just the build state). Never initializes CUDA: status() runs inside
    ``import sglang``, before SGLang forks its workers."""
    torch = sys.modules.get("torch")
    try:
        if torch is None or not torch.cuda.is_initialized():
            return False
        return any(torch.cuda.get_device_capability(i) == ARCH_CAPABILITY[arch]
                   for i in range(torch.cuda.device_count()))
    except Exception:  # noqa: BLE001 - status() never raises
        return False


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
