"""Run a callback right after a module is first executed, without importing the module now.

``install()`` runs inside ``import sglang`` (patches/sglang_kda_kernels.patch), where it must cost a few ms
and must not import SGLang's diffusion runtime (seconds, a thousand modules, Triton, and kernel modules that
ask the GPU at import: norm_triton would initialise CUDA before SGLang forks its workers). So the overlay
swaps, hooks and patches each SGLang module at the moment SGLang itself imports it: a ``sys.meta_path``
finder wraps that module's ``exec_module`` and calls the waiting callbacks once the module body has run,
before the importer (``from M import fn``) reads anything from it.

A callback that raises is logged to the ``kda_kernels`` logger and never breaks the import. A module whose
body raises keeps its callbacks waiting (the next import attempt runs them). Nothing here imports torch or
SGLang.
"""

from __future__ import annotations

import importlib.machinery
import logging
import sys
import threading
from collections.abc import Callable
from types import ModuleType
from typing import Any

Callback = Callable[[ModuleType], None]

_lock = threading.RLock()
_WAITING: dict[str, dict[str, Callback]] = {}  # module name -> {key: callback}, in registration order
log = logging.getLogger("kda_kernels")


class _AfterExec:
    """The ``sys.meta_path`` finder: locates a waited-for module as the path finder would and wraps its
    loader's ``exec_module``; every other name goes on to the next finder."""

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        if name not in _WAITING:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        exec_module = spec.loader.exec_module

        def exec_then_call(module: ModuleType) -> None:
            exec_module(module)
            with _lock:
                callbacks = _WAITING.pop(name, {})
                if not _WAITING and _FINDER in sys.meta_path:
                    sys.meta_path.remove(_FINDER)
            for key, callback in callbacks.items():
                try:
                    callback(module)
                except Exception:  # noqa: BLE001 - the overlay never breaks SGLang's import
                    log.exception("kda_kernels: %s after importing %s failed", key, name)

        spec.loader.exec_module = exec_then_call  # type: ignore[method-assign]
        return spec


_FINDER = _AfterExec()


def when_imported(name: str, key: str, callback: Callback) -> bool:
    """Call ``callback(module)`` now if ``name`` is loaded (returns True), else right after its first
    execution (returns False). One callback per ``key`` and module: registering a key again replaces it."""
    with _lock:
        module = sys.modules.get(name)
        if module is None:
            _WAITING.setdefault(name, {})[key] = callback
            if _FINDER not in sys.meta_path:
                sys.meta_path.insert(0, _FINDER)
            return False
    callback(module)
    return True


def cancel(key: str) -> bool:
    """Drop the waiting callback ``key`` (on whichever module). Returns whether one was waiting."""
    with _lock:
        found = False
        for name in list(_WAITING):
            if _WAITING[name].pop(key, None) is not None:
                found = True
            if not _WAITING[name]:
                del _WAITING[name]
        if not _WAITING and _FINDER in sys.meta_path:
            sys.meta_path.remove(_FINDER)
        return found


def waiting(key: str) -> str | None:
    """The module the callback ``key`` waits for, or None."""
    with _lock:
        return next((name for name, keys in _WAITING.items() if key in keys), None)
