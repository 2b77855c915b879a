"""Ahead-of-time builds of promoted CUDA extensions, cached per source hash, toolchain and arch.

A serving process must never compile: ``torch.utils.cpp_extension.load`` on a first call runs nvcc for a minute
inside an SGLang request, possibly during CUDA-graph capture. An impl describes its extension with an
:class:`Extension` (``EXTENSION`` in its ``register.py``); ``kda_kernels.build()`` / ``python -m kda_kernels build``
compiles it once into the cache, and the impl's call path only *loads* what is there. The lab (a task folder's
``src/``) may still build on first use: it is not a serving process.

Cache: ``$KDA_KERNELS_CACHE`` (default ``~/.cache/kda_kernels``) / ``<toolchain>`` / ``<name>``, where the name
carries the sources' hash and the toolchain tag carries Python, torch (with its CUDA) and the target arch, so a
changed source, a new torch or another GPU never loads a stale binary.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import sysconfig
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

CACHE_ENV = "KDA_KERNELS_CACHE"
INFO_FILE = "KDA_BUILD.json"


def cache_root() -> Path:
    raw = os.environ.get(CACHE_ENV, "").strip()
    return Path(raw).expanduser() if raw else Path.home() / ".cache" / "kda_kernels"


def toolchain_tag(arch: str) -> str:
    import torch

    return f"py{sys.version_info.major}{sys.version_info.minor}-torch{torch.__version__}-{arch}".replace("+", "_")


class ExtensionNotBuilt(RuntimeError):
    """The extension has no prebuilt binary for this toolchain and building on first use is not allowed here."""


@dataclass
class Extension:
    """One CUDA extension of an impl: how to build it, where its binary lives, and the loaded module."""

    name: str  # unique per source content (carries the sources' hash)
    arch: str  # "h200" | "b200": the arch its cuda flags target
    sources: tuple[str, ...]
    include_paths: tuple[str, ...] = ()
    cflags: tuple[str, ...] = ()
    cuda_cflags: tuple[str, ...] = ()
    # None: torch decides from the sources (CUDA when one is a .cu). True for a host-only binding that uses
    # c10::cuda (current device and stream): CUDA include paths and the CUDA runtime / c10_cuda libraries.
    with_cuda: bool | None = None
    module: ModuleType | None = field(default=None, repr=False)
    _missing: bool = field(default=False, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def build_dir(self) -> Path:
        return cache_root() / toolchain_tag(self.arch) / self.name

    def artifact(self) -> Path:
        suffix = sysconfig.get_config_var("SHLIB_SUFFIX") or ".so"
        return self.build_dir() / f"{self.name}{suffix}"

    def is_built(self) -> bool:
        return self.module is not None or self.artifact().is_file()

    def describe(self) -> dict[str, Any]:
        """Build state for ``status()``: never imports torch's builder, never compiles."""
        try:
            path = self.artifact()
        except Exception as e:  # noqa: BLE001 - torch missing or broken: report, do not raise
            return {"extension": self.name, "built": False, "error": f"{type(e).__name__}: {e}"}
        info: dict[str, Any] = {"extension": self.name, "built": self.is_built(), "path": str(path)}
        meta = path.parent / INFO_FILE
        if meta.is_file():
            try:
                info["build"] = json.loads(meta.read_text())
            except ValueError:
                info["build"] = "unreadable"
        return info

    def load(self, build: bool = False, verbose: bool = False) -> ModuleType | None:
        """The extension module: loaded from the cache, else built when ``build``, else None (not built)."""
        if self.module is not None:
            return self.module
        if self._missing and not build:
            return None  # checked once already: the call path costs one attribute test, not a stat per call
        with self._lock:
            if self.module is None:
                if self.artifact().is_file():
                    self.module = _import_binary(self.name, self.artifact())
                elif build:
                    self._build_locked(verbose)
                else:
                    self._missing = True
        return self.module

    def require(self) -> ModuleType:
        module = self.load(build=False)
        if module is None:
            raise ExtensionNotBuilt(f"{self.name} is not built for this toolchain ({self.artifact()}): run "
                                    f"`python -m kda_kernels build`")
        return module

    def build(self, verbose: bool = False) -> ModuleType:
        """Compile into the cache (a no-op for the compiler when the binary is current) and load it."""
        with self._lock:
            self._build_locked(verbose)
        assert self.module is not None
        return self.module

    def _build_locked(self, verbose: bool) -> None:
        from torch.utils.cpp_extension import load

        out = self.build_dir()
        out.mkdir(parents=True, exist_ok=True)
        t0 = time.perf_counter()
        self.module = load(name=self.name, sources=list(self.sources), extra_cflags=list(self.cflags),
                           extra_cuda_cflags=list(self.cuda_cflags), extra_include_paths=list(self.include_paths),
                           with_cuda=self.with_cuda,
                           build_directory=str(out), verbose=verbose)
        self._missing = False
        import torch

        (out / INFO_FILE).write_text(json.dumps({
            "name": self.name, "arch": self.arch, "torch": torch.__version__, "cuda": torch.version.cuda,
            "python": sys.version.split()[0], "seconds": round(time.perf_counter() - t0, 2),
            "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }, indent=2) + "\n")


def _import_binary(name: str, path: Path) -> ModuleType:
    if name in sys.modules:  # loaded earlier in this process (an extension cannot be loaded twice)
        return sys.modules[name]
    import torch  # noqa: F401 - the extension links against libtorch: load it first

    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load the prebuilt extension {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    sys.modules[name] = module
    return module
