"""`--gpu INDEX|UUID` of `kda check`, `kda bench` and `kda e2e`: which GPU of a several-GPU host measures.

- ``INDEX`` is torch's CUDA device index (as ``cuda:INDEX``; ``CUDA_VISIBLE_DEVICES`` applies first);
  ``UUID`` is the GPU's UUID as ``nvidia-smi -L`` prints it (``GPU-8c2f...``, the ``GPU-`` prefix optional,
  a unique prefix of it enough).
- The GPU becomes this process's current CUDA device, so every measurement and ledger row is made on it.
- A GPU that another process is using is refused (its timings would not be the kernel's): NVML (``pynvml``,
  from ``nvidia-ml-py``) lists the compute processes on it. ``--allow-busy`` runs anyway; without ``pynvml``
  the check cannot be made, which is refused too, with the fix.
- Ledger rows record the GPU's UUID (``gpu_uuid``, :func:`kda_lab.measure.env.capture`).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Sequence
from typing import Any

from kda_lab.task.schema import TaskError

UUID_RE = re.compile(r"(?:GPU-)?([0-9a-fA-F-]{4,})")


class GpuSelectError(TaskError):
    """The requested GPU does not exist here, is busy, or its use cannot be checked."""


def normalize_uuid(value: str) -> str:
    """``GPU-<lowercase uuid>``, the form NVML and nvidia-smi use."""
    m = UUID_RE.fullmatch(value.strip())
    if m is None:
        raise GpuSelectError(f"--gpu takes a device index or a GPU UUID (GPU-xxxxxxxx-...), got {value!r}")
    return "GPU-" + m.group(1).lower()


def resolve(spec: str, uuids: Sequence[str]) -> int:
    """The device index that ``spec`` (an index, or a UUID or a unique prefix of one) names among ``uuids``
    (``GPU-...`` per torch device index)."""
    spec = spec.strip()
    if spec.isdigit():
        index = int(spec)
        if index >= len(uuids):
            raise GpuSelectError(f"--gpu {index}: this host has {len(uuids)} CUDA device(s) "
                                 f"(0..{len(uuids) - 1})")
        return index
    want = normalize_uuid(spec)
    hits = [i for i, u in enumerate(uuids) if u.lower().startswith(want.lower())]
    if len(hits) != 1:
        listed = ", ".join(f"{i}: {u}" for i, u in enumerate(uuids)) or "none"
        what = "matches no" if not hits else "matches more than one"
        raise GpuSelectError(f"--gpu {spec} {what} GPU here ({listed})")
    return hits[0]


def torch_uuids() -> list[str]:
    """``GPU-<uuid>`` of every CUDA device torch sees, by index."""
    import torch

    return [f"GPU-{torch.cuda.get_device_properties(i).uuid}" for i in range(torch.cuda.device_count())]


def nvml_busy_pids(uuid: str) -> list[int] | None:
    """Process ids of the compute processes NVML lists on that GPU, this one excluded; None without NVML."""
    try:
        import pynvml
    except ImportError:
        return None
    pynvml.nvmlInit()
    try:
        handle = pynvml.nvmlDeviceGetHandleByUUID(uuid.encode() if isinstance(uuid, str) else uuid)
        procs: list[Any] = list(pynvml.nvmlDeviceGetComputeRunningProcesses(handle))
    finally:
        pynvml.nvmlShutdown()
    return sorted({int(p.pid) for p in procs} - {os.getpid()})


def check_idle(uuid: str, allow_busy: bool,
               busy_pids: Callable[[str], list[int] | None] = nvml_busy_pids) -> None:
    """Refuse a GPU another process computes on (unless ``allow_busy``), or one whose use NVML cannot show."""
    if allow_busy:
        return
    pids = busy_pids(uuid)
    if pids is None:
        raise GpuSelectError(f"cannot tell whether {uuid} is in use: NVML is not importable (pip install "
                             "nvidia-ml-py, in requirements/gpu.txt); or pass --allow-busy to run without "
                             "the check")
    if pids:
        raise GpuSelectError(f"{uuid} is in use by process(es) {', '.join(map(str, pids))}: timings there "
                             "would include their work. Pick another GPU (--gpu), wait, or pass --allow-busy")


def select_gpu(spec: str, allow_busy: bool = False) -> Any:
    """Make the GPU ``spec`` names this process's current CUDA device (refusing a busy one) and return it as a
    ``torch.device``."""
    import torch

    if not torch.cuda.is_available():
        raise GpuSelectError(f"--gpu {spec}: no CUDA GPU in this process (torch {torch.__version__})")
    uuids = torch_uuids()
    index = resolve(spec, uuids)
    check_idle(uuids[index], allow_busy)
    torch.cuda.set_device(index)
    return torch.device("cuda", index)


def gpu_uuid(device: Any) -> str:
    """``GPU-<uuid>`` of a CUDA device ('' when torch cannot say)."""
    import torch

    try:
        return f"GPU-{torch.cuda.get_device_properties(torch.device(device)).uuid}"
    except Exception:  # noqa: BLE001 - an old torch or an odd device: the column stays empty
        return ""


def add_arguments(parser: Any) -> None:
    """The two flags, identical on check, bench and e2e."""
    parser.add_argument("--gpu", metavar="INDEX|UUID",
                        help="the GPU to run on: torch's device index or its UUID (nvidia-smi -L); refused "
                             "when another process uses it")
    parser.add_argument("--allow-busy", action="store_true",
                        help="with --gpu: run even when another process uses that GPU (or NVML cannot tell)")
