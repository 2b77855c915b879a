"""Module-level fast paths replace methods of SGLang's model classes (class attributes, so every instance,
made before or after, takes them) and put the originals back: the bookkeeping every fast path needs, in one
place. The promoted HunyuanVideo fast path still carries its own copy (its exported source is hashed); its
next revision imports this."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable
from typing import Any


class ClassPatches:
    """``Class.attr`` names of one module, replaced together by :meth:`apply`, restored by :meth:`restore`."""

    def __init__(self, module: str, names: Iterable[str]) -> None:
        self.module = module
        self.names = tuple(names)
        self._originals: dict[str, Any] = {}

    @property
    def applied(self) -> bool:
        return bool(self._originals)

    def patched(self) -> list[str]:
        return [f"{self.module}.{name}" for name in self._originals]

    def originals(self) -> dict[str, Any]:
        """Each name's attribute as the class holds it now (SGLang's, before :meth:`apply`)."""
        mod = importlib.import_module(self.module)
        return {name: _owner(mod, name)[0].__dict__[_owner(mod, name)[1]] for name in self.names}

    def apply(self, replacements: Callable[[Any, dict[str, Any]], dict[str, Any]]) -> list[str]:
        """``replacements(module, originals)`` gives the new attribute per name; a second call is a no-op."""
        if self._originals:
            return self.patched()
        mod = importlib.import_module(self.module)
        originals = self.originals()
        new = replacements(mod, originals)
        for name in self.names:
            owner, attr = _owner(mod, name)
            self._originals[name] = originals[name]
            setattr(owner, attr, new[name])
        return self.patched()

    def restore(self) -> list[str]:
        if not self._originals:
            return []
        mod = importlib.import_module(self.module)
        restored = self.patched()
        for name, original in self._originals.items():
            owner, attr = _owner(mod, name)
            setattr(owner, attr, original)
        self._originals.clear()
        return restored


def _owner(mod: Any, name: str) -> tuple[Any, str]:
    cls, _, attr = name.rpartition(".")
    return getattr(mod, cls), attr
