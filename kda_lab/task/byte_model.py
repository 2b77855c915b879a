"""Ideal bytes per call: each input read once, each output written once.

Declared per function in task.toml: ``reads`` names the tensor arguments read; ``writes`` names, for each
output, the argument it is shaped like (``"x"`` = one tensor like x). Broadcast (stride-0) dimensions are
read once. TB/s = bytes / device time; ``sol`` = same-size copy time / kernel time.
"""

from __future__ import annotations

from dataclasses import dataclass

from kda_lab.task.workloads import DTYPE_BYTES, TensorSpec, Workload


@dataclass(frozen=True)
class ByteModel:
    reads: tuple[str, ...]
    writes: tuple[str, ...]

    def read_bytes(self, workload: Workload) -> int:
        total = 0
        for name in self.reads:
            spec = workload.args.get(name)
            if isinstance(spec, TensorSpec):
                total += spec.unique_numel * DTYPE_BYTES[spec.dtype]
        return total

    def write_bytes(self, workload: Workload) -> int:
        total = 0
        for like in self.writes:
            spec = workload.args.get(like)
            if not isinstance(spec, TensorSpec):
                raise ValueError(f"byte model of {workload.fn}: write 'like {like}' names no tensor argument")
            total += spec.numel * DTYPE_BYTES[spec.dtype]
        return total

    def bytes(self, workload: Workload) -> int:
        return self.read_bytes(workload) + self.write_bytes(workload)


def tbps(nbytes: float, us: float | None) -> float | None:
    if not us or us <= 0:
        return None
    return nbytes / (us * 1e-6) / 1e12
