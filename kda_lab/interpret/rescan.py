"""Triton 3.6's interpreter without its rescans of ``triton.language`` inside a launch.

A launch (``GridExecutor.__call__``) runs the interpreter's ``_patch_lang``: it wraps every Triton builtin of
the ``triton.language`` modules the kernel's globals name (an ``inspect.getmembers`` of ``tl``, ``tl.tensor``,
``tl.math`` and ``tl.core.tensor_descriptor_base``: ``dir``, a sort and a ``getattr`` of every member) and
restores them when the launch ends. Every call of a ``@triton.jit`` device function inside the kernel
(``InterpretedFunction.__call__``) runs ``_patch_lang`` again, for every program of the grid. When the
launch already wraps the modules that function's globals name, that inner call finds no builtin left to wrap,
re-sets the same interpreter attributes and is never restored (the launch's own restore puts the originals
back). Triton's own library functions (``tl.sum``, ``tl.cdiv``, ...) are such device functions, and their
globals name ``tl.core``: the first call wraps it for good (upstream never restores it), and every later call
rescans it for nothing. It took about 30 % of the CPU suite's interpreter time (cProfile of
norm_scale_shift's candidate tests: 461k scans, 81 of 260 s).

:func:`install` wraps ``_patch_lang``: a call made while a launch's scope is open, for a function whose
``triton.language`` modules that launch (or an earlier device-function call in it) already wrapped, returns
an empty scope instead of rescanning. Every
other call (each launch, and a device function naming a module the launch did not wrap) is upstream's own,
leaks included. ``tests/test_interpreter_rescan.py`` runs a kernel with nested device functions both ways:
the same output, the same state of every builtin after the launch, and no scan inside it.
"""

from __future__ import annotations

import inspect
import os
from typing import Any

_OPEN: list[frozenset[int]] = []  # the triton.language modules (ids) the running launch wrapped


def langs_of(fn: Any) -> frozenset[int]:
    """The ``triton.language`` modules that upstream's ``_patch_lang(fn)`` wraps: those of ``tl`` and
    ``tl.core`` that ``fn``'s globals name."""
    import triton.language as tl

    wanted = (tl, tl.core)
    return frozenset(id(v) for v in fn.__globals__.values()
                     if inspect.ismodule(v) and any(v is w for w in wanted))


def _scoped(upstream: Any) -> Any:
    def _patch_lang(fn: Any) -> Any:
        from triton.runtime import interpreter

        langs = langs_of(fn)
        if _OPEN:  # a device function called inside a launch (launches do not nest)
            if langs <= _OPEN[-1]:
                return interpreter._LangPatchScope()  # the launch wrapped all of it: nothing to redo
            scope = upstream(fn)  # upstream's call, never restored, as upstream leaves it: those modules
            _OPEN[-1] = _OPEN[-1] | langs  # stay wrapped for the rest of the launch (and after it)
            return scope
        scope = upstream(fn)
        _OPEN.append(langs)
        restore = scope.restore

        def restore_and_close() -> None:
            try:
                restore()
            finally:
                _OPEN.clear()  # launches do not nest

        scope.restore = restore_and_close
        return scope

    _patch_lang.upstream = upstream  # type: ignore[attr-defined]
    return _patch_lang


def install() -> bool:
    """Use the scoped ``_patch_lang`` in Triton's interpreter; a no-op (False) unless ``TRITON_INTERPRET=1``
    and the interpreter has what this wraps."""
    if os.environ.get("TRITON_INTERPRET") != "1":
        return False
    from triton.runtime import interpreter

    current = getattr(interpreter, "_patch_lang", None)
    if current is None or not hasattr(interpreter, "_LangPatchScope"):
        return False
    if getattr(current, "upstream", None) is None:
        interpreter._patch_lang = _scoped(current)
    return True
