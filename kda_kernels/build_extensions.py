"""``kda_kernels.build()``: compile every promoted impl's CUDA extension ahead of time (never inside SGLang).

Run once per machine after installing or upgrading (``python -m kda_kernels build``); the exporter runs it at
promotion where torch has CUDA. ``install()`` never compiles: an impl whose extension is not built leaves its
calls to SGLang's kernel, and ``status()`` says so.
"""

from __future__ import annotations

import importlib
import time
from collections.abc import Iterable
from typing import Any

from kda_kernels.registry import FAST_PATHS, TARGETS


def impl_extensions(families: Iterable[str] | None = None,
                    arches: Iterable[str] | None = None) -> dict[tuple[str, str], Any]:
    """(family, arch) -> the impl's ``EXTENSION`` (kda_kernels.prebuilt.Extension), for promoted impls that have one:
    the swap targets' families and the module-level fast paths' (an impl promoted as a fast path, e.g. the
    HunyuanVideo VAE's replicate_pad3d, may carry a CUDA extension too)."""
    from kda_kernels import fast_paths
    from kda_kernels.overlay import stamps

    fams = {families} if isinstance(families, str) else (set(families) if families is not None else None)
    want = {arches} if isinstance(arches, str) else (set(arches) if arches is not None else None)
    out: dict[tuple[str, str], Any] = {}
    units = [(t, stamps) for t in TARGETS] + [(fp, fast_paths.stamps) for fp in FAST_PATHS]
    for t, stamps_of in units:
        if fams is not None and t.family not in fams:
            continue
        st = stamps_of(t)
        if not st["promoted"]:
            continue
        for arch in st["arches"]:
            if (want is not None and arch not in want) or (t.family, arch) in out:
                continue
            mod = importlib.import_module(f"{t.family_module}._impls.{arch}.register")
            ext = mod.__dict__.get("EXTENSION")
            if ext is not None:
                out[(t.family, arch)] = ext
    return out


def build(families: Iterable[str] | None = None, arches: Iterable[str] | None = None,
          verbose: bool = False) -> dict[str, dict[str, Any]]:
    """Build (or find current) each promoted extension. Returns ``{"family/arch": {...}}`` with ``ok``, ``path``,
    ``seconds`` and, on failure, ``error``; raises nothing, so a caller can report every impl."""
    results: dict[str, dict[str, Any]] = {}
    for (family, arch), ext in impl_extensions(families, arches).items():
        key = f"{family}/{arch}"
        was_built = ext.artifact().is_file()
        t0 = time.perf_counter()
        try:
            ext.build(verbose=verbose)
        except Exception as e:  # noqa: BLE001 - one impl's toolchain problem must not hide the others
            results[key] = {"ok": False, "extension": ext.name, "error": f"{type(e).__name__}: {e}".strip()[-2000:]}
            continue
        results[key] = {"ok": True, "extension": ext.name, "path": str(ext.artifact()),
                        "seconds": round(time.perf_counter() - t0, 2), "was_built": was_built}
    return results
