"""kda_kernels: the runtime overlay that ships promoted KDA Lab kernels into SGLang 0.5.23.

    import kda_kernels
    kda_kernels.install()    # swap every promoted function into SGLang now (the SGLang patch defers it)
    kda_kernels.status()     # per function: promoted, arches, stamps, installed, call sites rebound, problems
    kda_kernels.uninstall()  # restore SGLang's originals exactly
    with kda_kernels.quality("lossless"): ...  # outside an SGLang pipeline: the request tier to serve at
    python -m kda_kernels build   # once per machine: compile promoted CUDA extensions (install() never compiles)

Environment: ``KDA_FORCE_ARCH=h200|b200|baseline`` overrides device dispatch (read at install);
``KDA_KERNELS_DISABLE=1`` makes install() a no-op.

Depends on torch only (never on pandas or kda_lab). ``import kda_kernels`` imports neither torch nor sglang;
install() imports them only when something is promoted. See docs/overlay.md.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager
from types import ModuleType
from typing import Any

from kda_kernels.registry import FAMILIES, TARGETS, SwapTarget

__all__ = ["FAMILIES", "TARGETS", "SwapTarget", "baseline", "build", "install", "kda_object", "lazy_baseline",
           "quality", "status", "uninstall"]
__version__ = "0.1.0"


def install(strict: bool = False, force: bool = False, families: Iterable[str] | None = None,
            extra_modules: Iterable[str | ModuleType] | None = None, defer: bool = False) -> dict[str, Any]:
    """Swap promoted kernels into SGLang (idempotent; never raises unless ``strict``). Rebinds SGLang's own
    modules (``sglang.*``); other modules (user code, ``__main__``) only when named in ``extra_modules`` (a name
    covers its submodules). ``force`` re-installs (re-reading stamps, impls and ``KDA_FORCE_ARCH``) without
    losing SGLang's originals. Problems go to ``status()[fn]["problems"]`` and a ``KdaKernelsWarning`` (the
    ``kda_kernels`` logger where a filter makes warnings errors). ``defer``: swap each function whose SGLang
    module is not imported yet right after SGLang imports it, so install() itself imports nothing of SGLang's
    (the SGLang patch calls ``install(defer=True)`` inside ``import sglang``)."""
    from kda_kernels import overlay

    return overlay.install(strict=strict, force=force, families=families, extra_modules=extra_modules,
                           defer=defer)


def uninstall(families: Iterable[str] | None = None) -> dict[str, Any]:
    """Restore exactly what install() replaced (identity checks)."""
    from kda_kernels import overlay

    return overlay.uninstall(families=families)


def status() -> dict[str, Any]:
    """Per SGLang function: promoted, arches with impls, stamps, installed, call sites rebound, problems."""
    from kda_kernels import overlay

    return overlay.status()


def quality(level: str) -> AbstractContextManager[str]:
    """Serve the block at SGLang request quality ``level`` (``exact``, ``lossless``, ``high``): for code that
    calls SGLang's modules outside a pipeline. Inside one, SGLang's denoising and decoding stages set the tier
    from each request; until a request mounts ``lossless``, only ``exact``-tier kernels serve (``kda_kernels.tiers``).
    """
    from kda_kernels import tiers

    return tiers.quality(level)


def build(families: Iterable[str] | None = None, arches: Iterable[str] | None = None,
          verbose: bool = False) -> dict[str, dict[str, Any]]:
    """Compile every promoted impl's CUDA extension ahead of time into the build cache (``python -m kda_kernels
    build``). install() never compiles; a build in a running process takes effect at its next call."""
    from kda_kernels.build_extensions import build as _build

    return _build(families=families, arches=arches, verbose=verbose)


def kda_object(function: str) -> Callable[..., Any]:
    """The KDA object for a promoted function (what install() binds at SGLang's call sites)."""
    from kda_kernels import overlay

    return overlay.kda_object(function)


def baseline(function: str) -> Callable[..., Any]:
    """SGLang's original implementation of ``function`` (never the KDA object)."""
    from kda_kernels import overlay

    return overlay.baseline(function)


def lazy_baseline(function: str) -> Callable[..., Any]:
    """A callable forwarding to SGLang's original ``function``, resolved on its first call, never at import:
    some SGLang kernel modules cannot be imported on a CPU host (norm_triton) or without CuTe DSL, and a task's
    ``register.py`` must import anywhere. Candidates use it for their fallback path (never the KDA object)."""
    if not any(t.function == function for t in TARGETS):
        raise KeyError(f"{function!r} is not an SGLang function the overlay knows")
    target: list[Callable[..., Any]] = []

    def call(*args: Any, **kwargs: Any) -> Any:
        if not target:
            target.append(baseline(function))
        return target[0](*args, **kwargs)

    call.__name__ = call.__qualname__ = function
    call.__doc__ = f"SGLang 0.5.23's {function}, resolved on first call (kda_kernels.lazy_baseline)."
    call.kda_sglang_function = function  # type: ignore[attr-defined]  # the exporter promotes none of these
    return call
