"""Install, remove and report the module-level fast paths (``kda_kernels.registry.FAST_PATHS``).

A fast path has no SGLang function to swap: its promoted impl (``kda_kernels/diffusion/<family>/_impls/<arch>/
register.py``, ``FAST_PATHS[name]``) patches SGLang's model classes and restores them. One impl is installed per
fast path, since class attributes are process-wide: the forced arch (``KDA_FORCE_ARCH``) when set, else the arch
of the current CUDA device, else (no CUDA device, or one of an arch without an impl) the first promoted arch. The
patched forwards check each call's device (``serves``) and run SGLang's own on a device of another arch. A forced
arch without an impl patches nothing, and ``status()`` says why.
A fast path whose SGLang module is not imported yet waits for it (``kda_kernels.on_import``), so ``import sglang`` does not
import the diffusion runtime. Called by ``kda_kernels.overlay`` under its lock; never raises into ``import sglang``.
``status()[name]["fallbacks"]``: why calls ran SGLang's own forwards since install, by reason: the impl's own
``fallbacks()``, else, for a registry entry with ``entry`` (an export whose hashed source predates them), the
entries this module saw the impl decline (its device test not passed) with the reason ``declines`` names.
"""

from __future__ import annotations

import importlib
import threading
from collections import Counter
from collections.abc import Iterable
from typing import Any

from kda_kernels import on_import
from kda_kernels.registry import ARCH_CAPABILITY, FAST_PATHS, FastPath

STAMP_KEYS = ("task", "commit", "date", "speedup", "arches")
_STATE: dict[str, tuple[str, Any, str | None]] = {}  # fast path name -> (arch, installed impl, forced arch)
_PROBLEMS: dict[str, list[str]] = {}
# Impls without fallbacks() of their own (FastPath.entry): entries declined since install, by reason
_DECLINED: dict[str, Counter[str]] = {}
DEVICE_DECLINE = "device not served (CPU without the Triton interpreter, another arch, or the request's tier)"
OTHER_DECLINE = "outside the contract (dtype, empty input, autograd recording or torch.compile)"


class _Tests(threading.local):
    """Per thread and fast path: device tests run and passed (the gated ``_device_ok``)."""

    def __init__(self) -> None:
        self.ran: Counter[str] = Counter()
        self.passed: Counter[str] = Counter()


_tests = _Tests()


def stamps(fp: FastPath) -> dict[str, Any]:
    try:
        fam = importlib.import_module(fp.family_module).__dict__
    except ModuleNotFoundError as e:
        if e.name != fp.family_module:
            raise
        return {"promoted": False, **{k: () if k == "arches" else {} for k in STAMP_KEYS}}  # never exported
    out: dict[str, Any] = {"promoted": bool(fam.get(f"KDA_OPTIMIZED_{fp.name}", False))}
    for key in STAMP_KEYS:
        out[key] = fam.get(f"KDA_{key.upper()}_{fp.name}", () if key == "arches" else {})
    return out


def _current_arch() -> str | None:
    import torch

    if not torch.cuda.is_available():
        return None
    from kda_kernels.dispatch import device_arch

    return device_arch(torch.cuda.current_device())


def _serves(arch: str, forced: str | None, fp: FastPath):
    from kda_kernels import dispatch, tiers

    def serves(device: Any) -> bool:
        if forced is not None:
            ok = forced == arch
        else:
            ok = device.type == "cuda" and dispatch.device_arch(device.index if device.index is not None else 0) == arch
        ok = ok and tiers.allows(fp.tier)  # an exact request's decode stays SGLang's, bit for bit
        # kda e2e: whether this fast path's code runs in the model (trace_impl_calls)
        dispatch.note_impl_call(fp.family, fp.name, ok)
        return ok

    return serves


def _gate_device_test(impl: Any, fp: FastPath) -> None:
    """Put the tier test in front of an impl's own device test (``_device_ok(x, serves)``), which takes CPU tensors
    in Triton's interpreter without asking ``serves``: an exact request stays SGLang's on every device. Impls
    exported before tiers existed keep their source (and its hash) unchanged."""
    import sys as _sys

    from kda_kernels import tiers

    mod = _sys.modules.get(type(impl).__module__)
    test = getattr(mod, "_device_ok", None) if mod is not None else None
    if test is None or getattr(test, "kda_tier_gated", False):
        return

    def device_ok(x: Any, serves: Any) -> bool:
        ok = tiers.allows(fp.tier) and test(x, serves)
        _tests.ran[fp.name] += 1
        _tests.passed[fp.name] += int(ok)
        return ok

    device_ok.kda_tier_gated = True  # type: ignore[attr-defined]
    mod.__dict__["_device_ok"] = device_ok


_PENDING: dict[str, tuple[tuple[str, ...], str | None]] = {}  # name -> (promoted arches, forced arch)

def install(families: Iterable[str] | None, forced: str | None) -> list[str]:
    """Install every promoted fast path of ``families`` (default all): now when its SGLang module is imported,
    else when it is (``kda_kernels.on_import``). Returns the names patched now."""
    done = []
    wanted = set(families) if families is not None else None
    for fp in FAST_PATHS:
        if (wanted is not None and fp.family not in wanted) or fp.name in _STATE or fp.name in _PENDING:
            continue
        _PROBLEMS.pop(fp.name, None)
        try:
            st = stamps(fp)
        except Exception as e:  # noqa: BLE001 - a fast path that fails must not break SGLang
            _PROBLEMS[fp.name] = [f"cannot read stamps: {type(e).__name__}: {e}"]
            continue
        if not st["promoted"] or forced == "baseline":
            continue
        _PENDING[fp.name] = (tuple(st["arches"]), forced)
        if on_import.when_imported(fp.sglang, _key(fp), lambda _module, fp=fp: _activate_pending(fp)):
            if fp.name in _STATE:
                done.append(fp.name)
    return done


def _key(fp: FastPath) -> str:
    return f"fast path {fp.name}"


def _activate_pending(fp: FastPath) -> None:
    if fp.name in _PENDING:
        _activate(fp)


def _activate(fp: FastPath) -> bool:
    """Import the impl of the chosen arch and patch; problems go to status(). Never raises."""
    arches, forced = _PENDING.pop(fp.name)
    problems: list[str] = []
    try:
        arch = forced if forced is not None else _current_arch()
        if forced is None and arch not in arches:
            # no CUDA device, or one without an impl: patch anyway, so a device of a promoted arch used later in
            # the process gets it; serves() hands every other device to SGLang's forwards call by call
            arch = arches[0] if arches else None
        if arch not in arches:
            problems.append(f"no {arch} impl (promoted for {', '.join(arches)}): SGLang's modules unchanged")
        else:
            mod = importlib.import_module(f"{fp.family_module}._impls.{arch}.register")
            impl = (getattr(mod, "FAST_PATHS", None) or {}).get(fp.name)
            if impl is None or not callable(getattr(impl, "install", None)):
                problems.append(f"{arch} impl has no FAST_PATHS[{fp.name!r}] with install()/uninstall()")
            else:
                _gate_device_test(impl, fp)
                impl.install(_serves(arch, forced, fp))
                _STATE[fp.name] = (arch, impl, forced)
                if fp.entry and not callable(getattr(impl, "fallbacks", None)):
                    _observe_entry(fp)
    except Exception as e:  # noqa: BLE001 - a fast path that fails must not break SGLang
        problems.append(f"install failed: {type(e).__name__}: {e}; SGLang's modules unchanged")
    if problems:
        _PROBLEMS[fp.name] = problems
    return not problems


def _observe_entry(fp: FastPath) -> None:
    """Count the calls the impl's patched ``fp.entry`` handed to SGLang's own forward: an entry whose gated
    device test never passed during the call was declined; why: the device test failed, else the first of
    ``fp.declines`` that holds on the module, else the rest of the contract. The impl's uninstall() puts SGLang's
    attribute back (it saved it before this wrapper), which drops the wrapper."""
    import functools

    cls_name, _, attr = fp.entry.rpartition(".")
    owner = getattr(importlib.import_module(fp.sglang), cls_name)
    patched = owner.__dict__[attr]
    declined = _DECLINED[fp.name] = Counter()

    @functools.wraps(patched)
    def entry(module: Any, *args: Any, **kwargs: Any) -> Any:
        ran, passed = _tests.ran[fp.name], _tests.passed[fp.name]
        out = patched(module, *args, **kwargs)
        if _tests.passed[fp.name] == passed:
            if _tests.ran[fp.name] != ran:
                declined[DEVICE_DECLINE] += 1
            else:
                declined[next((why for name, why in fp.declines if getattr(module, name, False)),
                              OTHER_DECLINE)] += 1
        return out

    entry.kda_observed_entry = patched  # type: ignore[attr-defined]
    setattr(owner, attr, entry)


def uninstall(families: Iterable[str] | None = None) -> dict[str, list[str]]:
    """Restore SGLang's classes for the fast paths of ``families`` (default all): {name: attributes restored}."""
    wanted = set(families) if families is not None else None
    out = {}
    for fp in FAST_PATHS:
        if wanted is None or fp.family in wanted:
            _PENDING.pop(fp.name, None)
            on_import.cancel(_key(fp))
        if fp.name in _STATE and (wanted is None or fp.family in wanted):
            _, impl, _ = _STATE.pop(fp.name)
            _DECLINED.pop(fp.name, None)
            out[fp.name] = impl.uninstall()
    return out


def status() -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for fp in FAST_PATHS:
        try:
            st = stamps(fp)
        except Exception as e:  # noqa: BLE001
            st = {"promoted": False, "error": f"{type(e).__name__}: {e}"}
        arch, impl, forced = _STATE.get(fp.name, (None, None, None))
        patched = impl.patched() if impl is not None else []
        out[fp.name] = {
            "family": fp.family, "sglang": fp.sglang, "kda": fp.kda, "kind": "fast_path", "tier": fp.tier,
            "promoted": st.get("promoted", False),
            "arches": [a for a in st.get("arches", ()) if a in ARCH_CAPABILITY],
            "stamps": {k: st.get(k) for k in STAMP_KEYS},
            "installed": impl is not None, "forced_arch": forced, "installed_arch": arch,
            "pending_import": fp.name in _PENDING,  # patched when SGLang imports fp.sglang
            "call_sites_rebound": 0, "call_sites": [], "rebound": patched, "kernel_registry": None,
            "problems": list(_PROBLEMS.get(fp.name, ())), "unavailable": None, "builds": {},
            # what the impl serves and, since install, why calls ran SGLang's own forwards (impls that say)
            "contract": getattr(impl, "contract", None),
            "fallbacks": (impl.fallbacks() if callable(getattr(impl, "fallbacks", None))
                          else dict(_DECLINED[fp.name]) if impl is not None and fp.name in _DECLINED else None),
        }
    return out


def pending() -> list[str]:
    """Fast paths waiting for SGLang to import their module."""
    return list(_PENDING)


def installed() -> dict[str, str]:
    """{fast path name: arch} of what is patched now."""
    return {name: arch for name, (arch, _, _) in _STATE.items()}
