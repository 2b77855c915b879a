"""Workload rows of a task: production rows (with model/preset provenance) and test rows.

A row names one SGLang function and its arguments. Tensor arguments are specs (shape, dtype, optional
strides/offset for production layouts such as chunked views and stride-0 broadcasts, and a value
distribution); everything else is a plain scalar. ``{ none = true }`` stands for ``None``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

DTYPES = ("float16", "bfloat16", "float32", "float64", "int32", "int64", "bool")
# Bytes per element, so byte models need no torch (a test checks them against torch's itemsize).
DTYPE_BYTES = {"float16": 2, "bfloat16": 2, "float32": 4, "float64": 8, "int32": 4, "int64": 8, "bool": 1}
DISTS = ("normal", "uniform", "randint", "const")
ROW_KINDS = ("production", "test")


@dataclass(frozen=True)
class TensorSpec:
    shape: tuple[int, ...]
    dtype: str
    strides: tuple[int, ...] | None = None  # None: contiguous
    offset: int = 0  # storage offset, for views into a larger buffer
    dist: str = "normal"
    mean: float = 0.0
    std: float = 1.0
    low: float = 0.0  # uniform / randint bounds (randint: [low, high))
    high: float = 1.0
    device: str = "target"  # "target" (the run's device) or "cpu"

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def storage_numel(self) -> int:
        """Elements the backing storage needs (views and broadcasts need fewer or more than numel)."""
        if self.numel == 0:
            return 0
        if self.strides is None:
            return self.offset + self.numel
        return self.offset + 1 + sum((n - 1) * s for n, s in zip(self.shape, self.strides, strict=True))

    @property
    def unique_numel(self) -> int:
        """Distinct elements read: stride-0 (broadcast) dimensions count once."""
        if self.strides is None:
            return self.numel
        return math.prod(n for n, s in zip(self.shape, self.strides, strict=True) if s != 0)

    def with_dtype(self, dtype: str) -> TensorSpec:
        return TensorSpec(**{**self.__dict__, "dtype": dtype})

    def describe(self) -> str:
        s = f"{self.dtype}{list(self.shape)}"
        if self.strides is not None:
            s += f"@{list(self.strides)}"
        return s


NONE = object()  # marker kept out of the public API: a ``{none = true}`` argument


@dataclass(frozen=True)
class Workload:
    name: str
    fn: str
    kind: str
    args: dict[str, Any]
    model: str = ""
    preset: str = ""
    source: str = ""  # "captured:<file>:<line>", "derived:<how>", or "test:<why>"
    tags: tuple[str, ...] = ()
    bench: bool = True  # False: correctness only (e.g. host-synchronizing inputs cannot be graph-captured)
    note: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def derived(self) -> bool:
        return self.source.startswith("derived")

    def tensor_specs(self) -> dict[str, TensorSpec]:
        return {k: v for k, v in self.args.items() if isinstance(v, TensorSpec)}

    def primary(self) -> TensorSpec:
        specs = self.tensor_specs()
        return max(specs.values(), key=lambda s: s.numel)

    def shape_signature(self) -> str:
        return " ".join(f"{k}={v.describe()}" for k, v in self.tensor_specs().items())

    def with_dtype(self, dtype: str) -> Workload:
        """The same row with every floating-point tensor in ``dtype`` (CPU interpreter runs: fp32/fp16)."""
        args = {
            k: v.with_dtype(dtype) if isinstance(v, TensorSpec) and v.dtype in ("float16", "bfloat16", "float32") else v
            for k, v in self.args.items()
        }
        return Workload(**{**self.__dict__, "args": args, "name": f"{self.name}[{dtype}]"})


def parse_arg(name: str, value: Any) -> Any:
    if isinstance(value, dict):
        if value.get("none") is True:
            return None
        if "shape" not in value or "dtype" not in value:
            raise ValueError(f"argument {name!r}: a tensor spec needs 'shape' and 'dtype' (or use {{none = true}})")
        unknown = set(value) - {f for f in TensorSpec.__dataclass_fields__}
        if unknown:
            raise ValueError(f"argument {name!r}: unknown tensor-spec keys {sorted(unknown)}")
        spec = dict(value)
        spec["shape"] = tuple(int(n) for n in spec["shape"])
        if spec.get("strides") is not None:
            spec["strides"] = tuple(int(s) for s in spec["strides"])
            if len(spec["strides"]) != len(spec["shape"]):
                raise ValueError(f"argument {name!r}: strides and shape differ in length")
        if spec["dtype"] not in DTYPES:
            raise ValueError(f"argument {name!r}: dtype {spec['dtype']!r} not in {DTYPES}")
        if spec.get("dist", "normal") not in DISTS:
            raise ValueError(f"argument {name!r}: dist {spec['dist']!r} not in {DISTS}")
        if any(n < 0 for n in spec["shape"]):
            raise ValueError(f"argument {name!r}: negative size in shape {spec['shape']}")
        return TensorSpec(**spec)
    return value


def parse_workload(raw: dict[str, Any]) -> Workload:
    known = {"name", "fn", "kind", "args", "model", "preset", "source", "tags", "bench", "note"}
    unknown = set(raw) - known
    if unknown:
        raise ValueError(f"workload {raw.get('name')!r}: unknown keys {sorted(unknown)}")
    for key in ("name", "fn", "kind", "args"):
        if key not in raw:
            raise ValueError(f"workload {raw.get('name')!r}: missing {key!r}")
    if raw["kind"] not in ROW_KINDS:
        raise ValueError(f"workload {raw['name']!r}: kind {raw['kind']!r} not in {ROW_KINDS}")
    args = {k: parse_arg(k, v) for k, v in raw["args"].items()}
    return Workload(
        name=raw["name"], fn=raw["fn"], kind=raw["kind"], args=args,
        model=raw.get("model", ""), preset=raw.get("preset", ""), source=raw.get("source", ""),
        tags=tuple(raw.get("tags", ())), bench=bool(raw.get("bench", True)), note=raw.get("note", ""),
    )
