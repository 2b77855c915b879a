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


# ------------------------------------------------------------------------------- a task impl's extension
# The block four promoted register.py files each carry (hash the sources, name the extension by it, build
# on first use only in the lab), once: a candidate's next revision imports these instead of copying them.
# The promoted copies keep their own block (their source hashes are evidence); prebuilt.py is not a hashed
# helper (kda_lab.task.schema.HASHED_HELPERS), so this code is not part of any source hash.

GENCODE: dict[str, str] = {"h200": "-gencode=arch=compute_90a,code=sm_90a",
                           "b200": "-gencode=arch=compute_100a,code=sm_100a"}


def source_digest(directory: str | Path, names: tuple[str, ...], *, with_names: bool = True,
                  length: int = 12) -> str:
    """sha256 over the files ``names`` in ``directory`` (each name too, unless ``with_names`` is False), the
    first ``length`` hex digits: a changed source or header names a new extension."""
    import hashlib

    h = hashlib.sha256()
    for name in names:
        data = (Path(directory) / name).read_bytes()
        h.update(name.encode() + b"\0" + data if with_names else data)
    return h.hexdigest()[:length]


def builds_on_first_use(module_name: str) -> bool:
    """A task folder's register.py (the lab) may compile on its first CUDA call; the exported copy, imported
    as ``kda_kernels.diffusion.<family>._impls.<arch>.register``, is serving code and must never start a
    compiler."""
    return not module_name.startswith("kda_kernels.")


def impl_extension(module_file: str, prefix: str, arch: str, sources: tuple[str, ...],
                   headers: tuple[str, ...] = (), *, std: str = "c++20", host_only: bool = False,
                   with_names: bool = True) -> Extension:
    """The :class:`Extension` of an impl whose sources sit next to ``module_file`` (its ``__file__``), named
    ``kda_<arch>_<prefix>_<digest of sources + headers>``; ``host_only``: a C++ binding that uses c10::cuda
    but has no device code (no nvcc flags)."""
    if arch not in GENCODE:
        raise ValueError(f"unknown arch {arch!r}; known: {sorted(GENCODE)}")
    here = os.path.dirname(os.path.abspath(module_file))
    cflags = ("-O3", f"-std={std}")
    digest = source_digest(here, (*sources, *headers), with_names=with_names)
    return Extension(name=f"kda_{arch}_{prefix}_{digest}", arch=arch,
                     sources=tuple(os.path.join(here, s) for s in sources), include_paths=(here,),
                     cflags=cflags, cuda_cflags=() if host_only else (*cflags, GENCODE[arch]),
                     with_cuda=True if host_only else None)


class ExtensionSlot:
    """An impl's extension module, loaded at most once per process: ``slot.get()`` is the module, or None
    where it is not built and this copy may not build it; ``slot.tried`` says whether a load was attempted."""

    def __init__(self, extension: Extension, module_name: str) -> None:
        self.extension = extension
        self.build = builds_on_first_use(module_name)
        self.module: ModuleType | None = None
        self.tried = False

    def get(self, verbose: bool = False) -> ModuleType | None:
        if self.module is None:
            self.tried = True
            self.module = self.extension.module or self.extension.load(build=self.build, verbose=verbose)
        return self.module
