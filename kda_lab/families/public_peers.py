"""The pinned public peers (issue 22) and the helpers their adapters share.

Each family module's ``PEERS`` builds :class:`~kda_lab.families.peers.Peer` objects from the pins below. The
pins equal ``requirements/gpu.txt`` and ``requirements/peers-cpu.txt`` (tests/test_peers.py keeps them in step).
"""

from __future__ import annotations

from importlib import import_module
from types import ModuleType
from typing import Any

import torch

QUACK = ("quack", "quack-kernels", "0.6.5")
LIGER = ("liger", "liger-kernel", "0.8.5")
FLASHINFER = ("flashinfer", "flashinfer-python", "0.7.2")

Args = dict[str, Any]


def part(module: ModuleType | Any, name: str) -> Any:
    """Submodule ``name`` of a peer package (``liger_kernel.ops`` -> ``liger_kernel.ops.rms_norm``).

    A real package is asked for the submodule itself (Liger's ``ops`` package rebinds its attributes to
    other backends; the submodule is always the default Triton implementation). A test's stand-in package
    (no ``__path__``) carries its parts as attributes."""
    if hasattr(module, "__path__"):
        return import_module(f"{module.__name__}.{name}")
    return getattr(module, name)


def not_tensor_or(args: Args, name: str, dtypes: tuple[torch.dtype, ...]) -> str | None:
    """Why tensor ``args[name]`` does not fit (missing or another dtype), or None when it does."""
    t = args.get(name)
    if not isinstance(t, torch.Tensor):
        return f"{name} is {type(t).__name__}, the peer needs a tensor"
    if t.dtype not in dtypes:
        return f"{name} is {str(t.dtype).removeprefix('torch.')}; the peer takes " + \
            "/".join(str(d).removeprefix("torch.") for d in dtypes)
    return None


FLOATS = (torch.float16, torch.bfloat16, torch.float32)
HALF = (torch.float16, torch.bfloat16)
