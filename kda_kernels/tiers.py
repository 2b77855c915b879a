"""Request quality tiers: which KDA kernels may serve the SGLang request running now.

SGLang 0.5.23 requests carry ``quality`` (``configs/sample/sampling_params.py``: ``exact`` < ``lossless`` <
``high``, default ``lossless``). ``exact`` promises the reference path bit for bit; ``lossless`` allows
fast paths that keep the reference math and every operand's and accumulator's precision but move roundings;
``high`` may lower precision. Each swap target and fast path carries the lowest tier that may run it
(``kda_kernels.registry``: ``exact`` where its task's contract checks it bit for bit against SGLang on
every row, else ``lossless``: fp32 statistics and accumulation, SGLang's operand dtypes, roundings moved).

The tier of the running request reaches the overlay only through SGLang's own mechanisms, hooked here when
their modules are imported (never inside ``import sglang``):

- **DiT steps**: the denoising stage mounts the request-gated fusions its tier allows
  (``pipelines_core/stages/denoising.py: toggle_quality_fusions`` over ``_QUALITY_FUSION_HANDLERS``).
  ``KDA_FUSION`` is appended to that table at tier ``lossless``: its ``mount`` opens the DiT scope, its
  ``unmount`` closes it. Like SGLang's own sites it starts unmounted (the stage starts at ``exact`` and
  only toggles when a request's tier differs).
- **VAE decodes**: the decoding stage runs a decode inside ``models/vaes/fast_path_gate.py:
  use_vae_fast_path(vae, quality_allows(quality, "lossless"))``. The gate table it reads is replaced by one
  whose gates also push the decode's answer for the duration of the ``with`` block (SGLang's own gates are
  kept and still set). LTX-2's decoding stage (``LTX2AVDecodingStage``) opens no gate: its decode runs at
  the DiT scope's tier, which the same request's denoising stage set.
- **Direct callers** (user code and the lab calling modules outside a pipeline): ``with
quality("lossless"):``.

Nothing here imports torch or SGLang at import time.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from kda_kernels import on_import

QUALITY_LEVELS: tuple[str, ...] = ("exact", "lossless", "high")  # SGLang 0.5.23's order, strictest first
DENOISING = "sglang.multimodal_gen.runtime.pipelines_core.stages.denoising"
VAE_GATE = "sglang.multimodal_gen.runtime.models.vaes.fast_path_gate"

_lock = threading.RLock()
# Quality levels in force, innermost last: the DiT scope (the mounted tier), each open VAE decode, each
# quality()
# block. The first entry is the DiT scope; it starts at "exact" as SGLang's fusion sites start unmounted.
_stack: list[str] = ["exact"]
_counts: dict[str, int] = {"mount": 0, "unmount": 0, "decode": 0}


def normalize(level: str) -> str:
    """A quality level as SGLang spells it (``extra-high`` is its old name for ``lossless``)."""
    canon = {"extra-high": "lossless"}.get(level, level)
    if canon not in QUALITY_LEVELS:
        raise ValueError(f"quality must be one of {list(QUALITY_LEVELS)}, got {level!r}")
    return canon


def current() -> str:
    """The quality level of the work running now."""
    return _stack[-1]


def allows(tier: str) -> bool:
    """Whether the running work may use a kernel of ``tier`` (SGLang's ``quality_allows``)."""
    return QUALITY_LEVELS.index(_stack[-1]) >= QUALITY_LEVELS.index(tier)


def allows_lossless() -> bool:
    """``allows("lossless")`` at the cost of one comparison: read on every dispatched call."""
    return _stack[-1] != "exact"


@contextmanager
def quality(level: str) -> Iterator[str]:
    """Run the block at ``level``: for code that calls SGLang modules outside a pipeline (inside one, the
    stages set the tier from the request)."""
    level = normalize(level)
    with _lock:
        _stack.append(level)
    try:
        yield level
    finally:
        with _lock:
            _stack.pop()


def _set_dit(level: str) -> None:
    with _lock:
        _stack[0] = level


def state() -> dict[str, Any]:
    """For status(): the level now, the DiT scope's, the hooks in place and how often SGLang drove them."""
    return {
        "current": _stack[-1],
        "dit": _stack[0],
        "open_scopes": len(_stack) - 1,
        "hooks": {name: name in _HOOKED for name in (DENOISING, VAE_GATE)},
        "calls": dict(_counts),
    }


# ------------------------------------------------------------------------------------------------ DiT scope


class _KdaFusion:
    """An entry of SGLang's ``_QUALITY_FUSION_HANDLERS``: the lossless-tier KDA kernels of a transformer.
    ``toggle_quality_fusions`` calls ``mount`` when the request's tier allows ``lossless``, else
    ``unmount``.
    """

    name = "kda_kernels"
    marker_attr = "_kda_kernels_site"
    enabled_attr = "_kda_kernels_enabled"

    def mount(self, root: Any) -> bool:
        _counts["mount"] += 1
        _set_dit("lossless")
        return True

    def unmount(self, root: Any) -> None:
        _counts["unmount"] += 1
        _set_dit("exact")

    def is_enabled(self, root: Any) -> bool:
        return _stack[0] != "exact"

    def iter_sites(self, root: Any) -> Iterator[Any]:
        return iter(())


KDA_FUSION = _KdaFusion()
_ENTRY = ("lossless", KDA_FUSION)


def _hook_denoising(mod: Any) -> Callable[[], None]:
    d = mod.__dict__
    handlers = d["_QUALITY_FUSION_HANDLERS"]
    if not any(f is KDA_FUSION for _, f in handlers):
        d["_QUALITY_FUSION_HANDLERS"] = (*handlers, _ENTRY)

    def undo() -> None:
        d["_QUALITY_FUSION_HANDLERS"] = tuple(
            e for e in d["_QUALITY_FUSION_HANDLERS"] if e[1] is not KDA_FUSION
        )
        _set_dit("exact")

    return undo


# ------------------------------------------------------------------------------------------------ VAE scope


class _ScopedGate:
    """What ``use_vae_fast_path`` gets for one decode: SGLang's gate for the VAE (or none), whose two writes,
    ``enabled = <tier allows lossless>`` on entry and ``enabled = previous`` on exit, also open and close
    the decode's scope here."""

    __slots__ = ("_inner", "_writes")

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self._writes = 0

    @property
    def enabled(self) -> bool:
        return bool(self._inner.enabled) if self._inner is not None else False

    @enabled.setter
    def enabled(self, value: bool) -> None:
        if self._inner is not None:
            self._inner.enabled = value
        self._writes += 1
        with _lock:
            if self._writes == 1:
                _counts["decode"] += 1
                _stack.append("lossless" if value else "exact")
            elif self._writes == 2 and len(_stack) > 1:
                _stack.pop()


def _gate_table(base: type) -> type:
    class KdaGateTable(base):  # type: ignore[misc, valid-type]
        """SGLang's ``_VAE_FAST_PATH_GATES`` (a WeakKeyDictionary of its gates) whose lookups scope the tier.
        """

        def get(self, key: Any, default: Any = None) -> Any:
            return _ScopedGate(super().get(key, default))

    return KdaGateTable


def _hook_vae_gate(mod: Any) -> Callable[[], None]:
    d = mod.__dict__
    original = d["_VAE_FAST_PATH_GATES"]
    if type(original).__name__ == "KdaGateTable":
        return lambda: None
    table = _gate_table(type(original))()
    table.update(original)
    d["_VAE_FAST_PATH_GATES"] = table

    def undo() -> None:
        if d.get("_VAE_FAST_PATH_GATES") is table:
            back = type(original)()
            back.update(table)
            d["_VAE_FAST_PATH_GATES"] = back

    return undo


# ------------------------------------------------------------------------------------------------ hooks

_HOOKS: dict[str, Callable[[Any], Callable[[], None]]] = {
    DENOISING: _hook_denoising,
    VAE_GATE: _hook_vae_gate,
}
_HOOKED: dict[str, Callable[[], None]] = {}  # module name -> undo
_PENDING: set[str] = set()
_KEY = "quality tier hooks"
PROBLEMS: list[str] = []


def _apply(name: str) -> None:
    try:
        _HOOKED[name] = _HOOKS[name](sys.modules[name])
    except Exception as e:  # noqa: BLE001 - the overlay never breaks SGLang; status() says what is missing
        PROBLEMS.append(f"cannot hook {name}: {type(e).__name__}: {e} (lossless kernels stay off there)")


def hook() -> None:
    """Hook SGLang's tier mechanisms now where their modules are loaded, else when they are."""
    with _lock:
        for name in _HOOKS:
            if name in _HOOKED or name in _PENDING:
                continue
            _PENDING.add(name)
            on_import.when_imported(name, _KEY, lambda _module, name=name: _hook_pending(name))


def _hook_pending(name: str) -> None:
    with _lock:
        if name in _PENDING:
            _PENDING.discard(name)
            _apply(name)


def unhook() -> None:
    with _lock:
        _PENDING.clear()
        on_import.cancel(_KEY)
        for name in list(_HOOKED):
            _HOOKED.pop(name)()
