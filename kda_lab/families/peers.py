"""Public peers: the kernel libraries a user already knows, called with an SGLang function's arguments.

A family module may define ``PEERS: dict[str, tuple[Peer, ...]]`` beside ``FUNCTIONS``, keyed by the SGLang
function name. ``kda bench`` (:mod:`kda_lab.measure.run`) then, per row and per peer:

1. asks :attr:`Peer.applies` whether the peer supports this row (dtype, layout, head_dim, weight dtype); a
   ``str`` answer is the reason it does not, and the row records the peer as ``n/a``;
2. loads it (:meth:`Peer.load`): the pinned distribution must be installed at exactly the pinned version
   (``requirements/gpu.txt``), otherwise the peer is ``unavailable`` with the reason (a peer whose ``absent``
   says why it cannot run at all, e.g. no wheel for the box, is ``unavailable`` with that reason);
3. checks it against the family's fp64 oracle under the task's tolerances (never bitwise against SGLang: it
   is another kernel); a peer outside tolerance is ``wrong`` on that row, with its max error, and not timed;
4. times it in the same interleaved CUDA-graph replay, over the same rotated input sets, as baseline and
   candidate.

The adapter (:attr:`Peer.adapt`) receives the imported peer module and SGLang's keyword arguments and returns
what SGLang's function returns (or mutates what SGLang mutates). :attr:`Peer.mapping` writes down how
SGLang's semantics map onto the peer's API; the CPU tests check each mapping against the oracle with the
peer's API (signature from the pinned wheel) computed in torch.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from importlib import import_module, metadata
from types import ModuleType
from typing import Any

import torch

Args = dict[str, Any]
# The pinned peers: (name, distribution, version), equal to requirements/gpu.txt and requirements/peers-cpu.txt
# (tests/test_peers.py keeps them in step). Each family module's PEERS builds Peer(*PIN, module=..., ...).
QUACK = ("quack", "quack-kernels", "0.6.5")
LIGER = ("liger", "liger-kernel", "0.8.5")
FLASHINFER = ("flashinfer", "flashinfer-python", "0.7.2")
# sgl_kernel's FlashAttention-3, pinned in requirements/sgl-kernel.txt (the box stages it: docs/gpu-box.md)
SGL_KERNEL = ("sgl_fa3", "sglang-kernel", "0.4.5")
FLOATS = (torch.float16, torch.bfloat16, torch.float32)
HALF = (torch.float16, torch.bfloat16)

class PeerUnavailable(RuntimeError):
    """The pinned peer is not installed (or not at its pinned version), or does not import on this machine."""


def _always(args: Args) -> str | None:
    return None


@dataclass(frozen=True)
class Peer:
    name: str  # short label in tables and ledgers: "quack", "liger", "flashinfer"
    package: str  # distribution name on the package index, e.g. "quack-kernels"
    version: str  # the pinned version (requirements/gpu.txt); any other installed version is refused
    module: str  # the module the adapter calls into
    adapt: Callable[[ModuleType, Args], Any]
    applies: Callable[[Args], str | None] = _always
    mapping: str = ""  # SGLang's semantics -> the peer's call, in words
    absent: str = ""  # why the peer cannot run anywhere the lab measures: load() reports this, tries nothing

    @property
    def label(self) -> str:
        return f"{self.name} {self.version}"

    def load(self, importer: Callable[[str], ModuleType] = import_module) -> Callable[..., Any]:
        """The peer as a callable with SGLang's signature; raises :class:`PeerUnavailable` with the reason."""
        if self.absent:
            raise PeerUnavailable(self.absent)
        try:
            installed = metadata.version(self.package)
        except metadata.PackageNotFoundError:
            raise PeerUnavailable(f"{self.package} is not installed (pinned {self.version} in requirements/gpu.txt)") from None
        if installed != self.version:
            raise PeerUnavailable(f"{self.package} {installed} is installed; the lab pins {self.version}")
        try:
            module = importer(self.module)
        except Exception as e:  # noqa: BLE001 - any import failure makes the peer unavailable, with the reason
            raise PeerUnavailable(f"import {self.module} failed: {type(e).__name__}: {e}") from e
        return bound(self, module)


def bound(peer: Peer, module: ModuleType) -> Callable[..., Any]:
    """``peer.adapt`` over an already imported ``module``, callable with SGLang's keyword arguments."""

    def call(**args: Any) -> Any:
        return peer.adapt(module, args)

    call.__name__ = f"{peer.name}_{peer.module.replace('.', '_')}"
    return call


def peers_of(family_module: ModuleType, fn: str) -> tuple[Peer, ...]:
    return tuple(getattr(family_module, "PEERS", {}).get(fn, ()))


def part(module: ModuleType | Any, name: str) -> Any:
    """Submodule ``name`` of a peer package (``liger_kernel.ops`` -> ``liger_kernel.ops.rms_norm``).

    A real package is asked for the submodule itself (Liger's ``ops`` package rebinds its attributes to
    other backends; the submodule is always the default Triton implementation). A test's stand-in package
    (no ``__path__``) carries its parts as attributes."""
    if hasattr(module, "__path__"):
        return import_module(f"{module.__name__}.{name}")
    return getattr(module, name)
