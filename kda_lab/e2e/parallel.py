"""The worker layout of a multi-process `kda e2e` run (`--sp N`, `--tp N`, issue 42), resolved by SGLang.

SGLang 0.5.23's server turns ``--sp-degree`` / ``--tp-size`` into process groups in two steps: ``ServerArgs``
(``runtime/server_args/server_args.py``: ``_adjust_parallelism`` picks the sequence-parallel exchange, K/V
all-gather at ``sp_degree == 2`` when no Ulysses/ring degree is given, Ulysses over all SP ranks otherwise;
``_validate_parallelism`` refuses what does not divide), then each worker process calls
``maybe_init_distributed_environment_and_model_parallel`` with those degrees
(``runtime/managers/gpu_worker.py``: ``GPUWorker.init_device_and_model``). :func:`resolve` builds the same
``ServerArgs``; the workers (kda_lab.e2e.workers) make the same call through kda_lab.e2e.runtime.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


class LayoutError(ValueError):
    """A layout SGLang (or the row) cannot run: one line for the user, exit 2, nothing recorded."""


@dataclass(frozen=True)
class Layout:
    """Degrees asked for on the command line; ``world`` worker processes (one per GPU on CUDA)."""

    sp: int = 1
    tp: int = 1

    @property
    def world(self) -> int:
        return self.sp * self.tp

    @property
    def asked(self) -> str:
        return " ".join(f"--{k} {v}" for k, v in (("sp", self.sp), ("tp", self.tp)) if v > 1) or "one process"


def check(sp: int | None, tp: int | None) -> Layout | None:
    """The layout of ``--sp`` / ``--tp`` (None: neither given, one process); LayoutError for a degree < 1."""
    if sp is None and tp is None:
        return None
    for flag, n in (("--sp", sp), ("--tp", tp)):
        if n is not None and n < 1:
            raise LayoutError(f"{flag} must be a positive number of worker processes, got {n}")
    return Layout(sp=sp or 1, tp=tp or 1)


def resolve(layout: Layout, device: str, attention_backend: str | None = None) -> Any:
    """SGLang's ServerArgs for ``layout`` (its own degree resolution and validation); LayoutError with
    SGLang's message where it refuses."""
    from kda_lab.e2e.runtime import server_args

    try:
        args = server_args(device, attention_backend, layout)
    except (ValueError, AssertionError) as e:
        raise LayoutError(f"SGLang refuses {layout.asked}: {e}") from None
    if args.num_gpus != layout.world:  # on a CPU, ServerArgs._adjust_parallelism sets num_gpus = tp_size
        raise LayoutError(f"SGLang resolves {layout.asked} to num_gpus={args.num_gpus}, not the "
                          f"{layout.world} workers it asks for (on a CPU it counts NUMA nodes by tp_size): "
                          "use --sp or --tp")
    return args


def label(args: Any) -> str:
    """The ledger's ``parallel`` value: the degrees SGLang resolved, e.g. ``sp=2 kv_gather=2``,
    ``sp=4 ulysses=4``, ``tp=2``; "" for one process."""
    parts = []
    if args.sp_degree > 1:
        parts.append(f"sp={args.sp_degree}")
        if getattr(args, "kv_gather_degree", 1) > 1:
            parts.append(f"kv_gather={args.kv_gather_degree}")
        else:
            parts += [f"{k}={getattr(args, f'{k}_degree')}" for k in ("ulysses", "ring")
                      if getattr(args, f"{k}_degree") > 1]
    if args.tp_size > 1:
        parts.append(f"tp={args.tp_size}")
    return " ".join(parts)


def split_heads(args: Any) -> int:
    """How many ways SGLang splits a layer's attention heads across workers: Ulysses all-to-all
    (``layers/usp.py``: ``h_global % world_size == 0``) and TP (the head-sharded QKV projections). The K/V
    all-gather exchange keeps every head on every SP worker."""
    ulysses = 1 if getattr(args, "kv_gather_degree", 1) > 1 else args.ulysses_degree
    return ulysses * args.tp_size


def check_heads(args: Any, row: str, heads: int) -> None:
    """LayoutError when ``heads`` do not divide among the workers the way SGLang splits them."""
    n = split_heads(args)
    if heads % n:
        raise LayoutError(f"{row} has {heads} attention heads at this size; {label(args)} splits them {n} "
                          "ways (SGLang's Ulysses all-to-all, layers/usp.py, and TP's head-sharded "
                          "projections need heads divisible by it)")
