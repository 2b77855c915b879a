"""Seeded input generation in production layouts. Never zeros: zeros hide unwritten outputs and run faster."""

from __future__ import annotations

import math
from typing import Any

import torch

from kda_lab.task.workloads import TensorSpec, Workload

TORCH_DTYPES: dict[str, torch.dtype] = {
    "float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32, "float64": torch.float64,
    "int32": torch.int32, "int64": torch.int64, "bool": torch.bool,
}


def _generator(device: torch.device, seed: int) -> torch.Generator:
    g = torch.Generator(device=device)
    g.manual_seed(seed)
    return g


def make_tensor(spec: TensorSpec, device: torch.device | str, seed: int) -> torch.Tensor:
    """A tensor with ``spec``'s shape/strides/offset whose storage is filled from a seeded distribution."""
    dev = torch.device("cpu") if spec.device == "cpu" else torch.device(device)
    dtype = TORCH_DTYPES[spec.dtype]
    g = _generator(dev, seed)
    n = max(spec.storage_numel, 1)
    if spec.dist == "randint":
        flat = torch.randint(int(spec.low), int(spec.high), (n,), generator=g, device=dev, dtype=torch.int64).to(dtype)
    elif spec.dist == "const":
        flat = torch.full((n,), spec.mean, device=dev, dtype=torch.float32).to(dtype)
    elif spec.dist == "uniform":
        flat = (torch.rand((n,), generator=g, device=dev, dtype=torch.float32) * (spec.high - spec.low) + spec.low).to(dtype)
    else:
        flat = torch.randn((n,), generator=g, device=dev, dtype=torch.float32)
        flat = flat.mul_(spec.std).add_(spec.mean).to(dtype)
    if spec.strides is None:
        return flat[spec.offset: spec.offset + spec.numel].view(spec.shape)
    return torch.as_strided(flat, spec.shape, spec.strides, spec.offset)


def make_inputs(workload: Workload, device: torch.device | str, seed: int) -> dict[str, Any]:
    """One argument set for ``workload``: tensors from specs (each arg its own seed stream), scalars as given."""
    out: dict[str, Any] = {}
    for i, (name, value) in enumerate(workload.args.items()):
        out[name] = make_tensor(value, device, seed * 1009 + i) if isinstance(value, TensorSpec) else value
    return out


def set_bytes(workload: Workload) -> int:
    """Bytes one argument set occupies (storage, not the byte model)."""
    return sum(
        spec.storage_numel * TORCH_DTYPES[spec.dtype].itemsize for spec in workload.tensor_specs().values()
    )


def rotation_count(workload: Workload, l2_bytes: int, *, factor: float = 3.0, max_sets: int = 1024,
                   max_total_bytes: int = 24 << 30) -> int:
    """How many input sets a timing loop rotates through so that they exceed ``factor`` x L2."""
    per_set = max(set_bytes(workload), 1)
    want = max(2, math.ceil(factor * l2_bytes / per_set))
    return int(max(2, min(want, max_sets, max(1, max_total_bytes // per_set))))


def clone_args(args: dict[str, Any]) -> dict[str, Any]:
    """Clone-for-clone copies of every tensor: the whole storage is copied and the view re-made, so strides,
    offsets and stride-0 broadcasts are preserved (in-place ops are compared on identical private inputs)."""
    out: dict[str, Any] = {}
    for k, v in args.items():
        if isinstance(v, torch.Tensor):
            n = v.untyped_storage().nbytes() // v.element_size()
            flat = torch.as_strided(v, (n,), (1,), 0).clone()
            out[k] = torch.as_strided(flat, v.size(), v.stride(), v.storage_offset())
        else:
            out[k] = v
    return out
