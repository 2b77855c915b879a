"""Correctness: an implementation against the lab's fp64 oracle, on seeded inputs, with poisoned outputs.

- Outputs are poisoned: inside a check every float ``torch.empty*`` allocation is NaN-filled, and on CUDA the
  caching allocator is pre-filled with NaN blocks of each input tensor's size (the lab's outputs are the size of
  an input), so an element the kernel never writes reads back as NaN. NaN/Inf never pass.
- Beyond the values (kda_lab.measure.guards): every output has SGLang's dtype, shape, strides and device on the
  row, and the tolerance is that of SGLang's dtype (never the candidate's); read-only inputs come back unchanged
  and are never returned; outputs do not change after the call returned, and a second call (another seed's
  inputs) neither changes them nor returns their memory again. The candidate runs before SGLang and the oracle,
  so their results for the row do not exist yet while it runs.
- In-place functions run on clone-for-clone copies; the oracle sees the pristine inputs.
- Failure reports give max abs/rel error, the mismatch count and the first bad index.
- ``exact`` functions (SGLang's roundings are the contract) must match the SGLang output bit for bit, on every
  row and seed (``torch.equal`` semantics: same dtype, shape and bits; NaN never passes).
- The candidate runs as if installed: while it runs, the public entry points (``task.toml`` ``entry``, e.g. the
  ``sglang.kernels.ops.diffusion`` facade) hold the candidate's EXPORTS, as they do once the overlay is
  installed, so a fallback that calls the facade instead of SGLang's defining module recurses here and fails.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

from kda_lab.families.base import FunctionContract
from kda_lab.measure.guards import (
    CallViolation,
    bitwise_copy,
    check_call,
    layout_problem,
    read_only,
    same_bits,
    shares_memory,
)
from kda_lab.measure.inputs import clone_args, make_inputs
from kda_lab.task import Task, Tolerance
from kda_lab.task.workloads import Workload

_EMPTY_FNS = {torch.empty, torch.empty_like, torch.empty_strided, torch.Tensor.new_empty}


class _PoisonEmpty(TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func in _EMPTY_FNS and isinstance(out, torch.Tensor) and out.is_floating_point() and out.numel():
            with torch.no_grad():
                out.fill_(float("nan"))
        return out


@contextmanager
def poisoned_outputs(device: torch.device, output_bytes: list[int]) -> Iterator[None]:
    if device.type == "cuda":
        # Freed NaN blocks of the outputs' sizes are what the caching allocator hands out next.
        blocks = [torch.full((max(n, 1),), 0xFF, dtype=torch.uint8, device=device) for n in output_bytes]
        del blocks
    with _PoisonEmpty():
        yield


_MISSING = object()


@contextmanager
def as_installed(task: Task, exports: Mapping[str, Callable[..., Any]]) -> Iterator[None]:
    """Inside: each function's public entry point (``module:name`` of task.toml ``entry``) is the candidate's
    export, as after ``kda_kernels.install()``; restored exactly (a lazily resolved facade name is removed again)."""
    saved: list[tuple[Any, str, Any]] = []
    try:
        for name, spec in task.functions.items():
            if name not in exports:
                continue
            module_name, _, attr = spec.entry.partition(":")
            module = importlib.import_module(module_name)
            saved.append((module, attr, module.__dict__.get(attr, _MISSING)))
            setattr(module, attr, exports[name])
        yield
    finally:
        for module, attr, old in reversed(saved):
            if old is _MISSING:
                module.__dict__.pop(attr, None)
            else:
                setattr(module, attr, old)


@dataclass
class Comparison:
    output: str
    ok: bool
    numel: int
    mismatches: int = 0
    nonfinite: int = 0
    max_abs: float = 0.0
    max_rel: float = 0.0
    first_bad: tuple[int, ...] | None = None
    reason: str = ""

    def describe(self) -> str:
        if self.ok:
            return f"{self.output}: ok (max abs {self.max_abs:.3g}, max rel {self.max_rel:.3g})"
        where = f" first at {list(self.first_bad)}" if self.first_bad is not None else ""
        return (f"{self.output}: FAIL {self.reason}: {self.mismatches}/{self.numel} mismatches, "
                f"{self.nonfinite} NaN/Inf (unwritten or overflow), max abs {self.max_abs:.3g}, "
                f"max rel {self.max_rel:.3g}{where}")


def compare(name: str, out: torch.Tensor, ref: torch.Tensor, tol: Tolerance) -> Comparison:
    if tuple(out.shape) != tuple(ref.shape):
        return Comparison(name, False, ref.numel(), reason=f"shape {list(out.shape)} != expected {list(ref.shape)}")
    o, r = out.detach().double(), ref.detach().double().to(out.device)
    nonfinite = ~torch.isfinite(o)
    err = (o - r).abs()
    bad = ~(err <= tol.atol + tol.rtol * r.abs()) | nonfinite  # NaN compares false: never passes
    finite_err = torch.where(nonfinite, torch.zeros_like(err), err)
    rel = finite_err / r.abs().clamp_min(tol.atol if tol.atol > 0 else 1e-30)
    n_bad = int(bad.sum())
    first = None
    if n_bad:
        idx = int(torch.nonzero(bad.flatten())[0])
        first = tuple(int(i) for i in torch.unravel_index(torch.tensor(idx), tuple(ref.shape)))
    return Comparison(
        output=name, ok=n_bad == 0, numel=ref.numel(), mismatches=n_bad, nonfinite=int(nonfinite.sum()),
        max_abs=float(finite_err.max()) if finite_err.numel() else 0.0,
        max_rel=float(rel.max()) if rel.numel() else 0.0, first_bad=first,
        reason="" if n_bad == 0 else ("outputs not fully written / NaN" if int(nonfinite.sum()) else "beyond tolerance"),
    )


def compare_exact(name: str, out: torch.Tensor, ref: torch.Tensor) -> Comparison:
    if tuple(out.shape) != tuple(ref.shape) or out.dtype != ref.dtype:
        return Comparison(name, False, ref.numel(), reason=f"{out.dtype}{list(out.shape)} != {ref.dtype}{list(ref.shape)}")
    same = (out == ref) | (torch.isnan(out) & torch.isnan(ref))
    cmp = compare(name, out, ref, Tolerance(0.0, 0.0))
    cmp.ok = bool(same.all()) and cmp.nonfinite == 0
    cmp.reason = "" if cmp.ok else "not bit-identical to SGLang"
    return cmp


@dataclass
class RowResult:
    row: str
    impl: str
    seed: int
    ok: bool
    comparisons: list[Comparison] = field(default_factory=list)
    error: str = ""

    def describe(self) -> str:
        head = f"{self.row} [{self.impl}, seed {self.seed}]: {'ok' if self.ok else 'FAIL'}"
        if self.error:
            return f"{head}: {self.error}"
        return head + "".join(f"\n    {c.describe()}" for c in self.comparisons if not c.ok or not self.ok)


PROBE_SEED = 104729  # the probe call's inputs: another seed's, so a result cached by shape shows


@dataclass
class Call:
    """One implementation's call on a row: its outputs as they were when it returned, the live tensors it
    returned (compared again at the end: deferred work or a reused buffer changes them), or why it failed."""

    outs: tuple[torch.Tensor, ...] = ()
    live: tuple[torch.Tensor, ...] = ()
    error: str = ""


def run_impl(fn: Callable[..., Any], contract: FunctionContract, args: dict[str, Any],
             expected_bytes: list[int], context: Any = None) -> tuple[torch.Tensor, ...]:
    """Call ``fn`` on private copies of ``args`` with poisoned outputs (inside ``context``, if given). Raises
    :class:`~kda_lab.measure.guards.CallViolation` when the call wrote a read-only input or returned one."""
    private = contract.prepared(clone_args(args))
    writable = (*contract.mutates, *contract.out_args)
    before = read_only(private, writable)
    device = next((v.device for v in args.values() if isinstance(v, torch.Tensor)), torch.device("cpu"))
    with torch.no_grad(), poisoned_outputs(device, expected_bytes), (context or nullcontext()):
        result = fn(**private)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    outs = contract.outputs(result, private)
    check_call(outs, private, before, writable)
    return outs


def _call(task: Task, workload: Workload, fn: Callable[..., Any], contract: FunctionContract,
          args: dict[str, Any], sizes: list[int], context: Any) -> Call:
    try:
        live = run_impl(fn, contract, args, sizes, context)
    except RecursionError:
        return Call(error=f"raised RecursionError: {workload.fn}'s fallback calls itself once installed; take "
                          f"SGLang's function from its defining module ({task.functions[workload.fn].sglang}, e.g. "
                          f"kda_kernels.lazy_baseline({workload.fn!r})), not the facade")
    except CallViolation as e:
        return Call(error=str(e))
    except (Exception, SystemExit) as e:  # noqa: BLE001 - raising fails the row, with the reason; exiting too
        return Call(error=f"raised {type(e).__name__}: {e}")
    return Call(outs=tuple(bitwise_copy(o) for o in live), live=live)


def _probe(task: Task, workload: Workload, fn: Callable[..., Any], contract: FunctionContract, first: Call,
           device: torch.device, seed: int, sizes: list[int], context: Any) -> str:
    """Call ``fn`` once more on another seed's inputs: its first outputs must not change, nor be returned again."""
    probe = _call(task, workload, fn, contract, make_inputs(workload, device, seed + PROBE_SEED), sizes, context)
    if probe.error:
        return f"a second call (another seed's inputs) failed: {probe.error}"
    writable = set(contract.out_args)
    if not writable and any(shares_memory(a, b) for a in probe.live for b in first.live):
        return "a second call returned the first call's output memory again (a reused output buffer)"
    return ""


def _changed_after_return(call: Call) -> str:
    changed = [i for i, (snap, live) in enumerate(zip(call.outs, call.live, strict=True)) if not same_bits(live, snap)]
    return (f"output(s) {changed} changed after the call returned (work deferred past the call, or an output buffer "
            "the next call reuses)") if changed else ""


def _tolerance(task: Task, workload: Workload, contract: FunctionContract, out: torch.Tensor,
               expect: torch.Tensor | None) -> Tolerance:
    """The tolerance of the dtype SGLang returns on this row. Without SGLang's output: an out-of-place output gets
    the stricter of its own dtype's and the row's first floating-point argument's (a lower-precision output never
    widens the tolerance); a buffer the caller passed (in place, ``out=``) keeps its dtype's."""
    def tol(dtype: str) -> Tolerance | None:
        return task.tolerances.get(dtype)

    if expect is not None:
        return tol(str(expect.dtype).removeprefix("torch.")) or Tolerance(0.0, 0.0)
    declared = workload.tensor_specs().get("out_like")
    if declared is not None:  # the row declares its output dtype (int8 scaled_mm's out_dtype): that dtype's
        return tol(declared.dtype) or Tolerance(0.0, 0.0)
    dtypes = [str(out.dtype).removeprefix("torch.")]
    if not contract.mutates and not contract.out_args:
        lead = next((s.dtype for s in workload.tensor_specs().values() if s.dtype in ("float16", "bfloat16", "float32",
                                                                               "float64")), None)
        dtypes += [lead] if lead else []
    found = [t for t in map(tol, dtypes) if t]
    if not found:
        return Tolerance(0.0, 0.0)
    return Tolerance(min(t.atol for t in found), min(t.rtol for t in found))


def check_row(task: Task, workload: Workload, contract: FunctionContract, impls: dict[str, Callable[..., Any]],
              seed: int, device: torch.device | str, baseline_impl: str = "baseline",
              installed: Mapping[str, Callable[..., Any]] | None = None,
              oracle_cache: dict[tuple[str, int, str], tuple[torch.Tensor, ...]] | None = None) -> list[RowResult]:
    """Check every impl on one row and seed against the oracle (and bitwise against SGLang when exact).

    Order: every impl but the baseline runs first, then the baseline, then the oracle, so no candidate can read
    SGLang's or the oracle's result for this row. Each output must have SGLang's dtype, shape, strides and device
    (:func:`~kda_lab.measure.guards.layout_problem`), the tolerance is that of SGLang's dtype, read-only inputs
    must come back unchanged and never be returned; every impl but the baseline is called a second time on another
    seed's inputs, and its first outputs must not have changed by the end of the row.

    ``installed``: the candidate's EXPORTS; every impl but the baseline then runs with the entry points holding
    them (:func:`as_installed`), so a fallback through the facade recurses and fails the row.

    ``oracle_cache``: the oracle's outputs by (row, seed, device), kept across calls on the same inputs (``kda
    bench`` checks each peer on a row separately: an fp64 attention oracle of a 75600-token row is computed
    once, not once per peer)."""
    device = torch.device(device)
    args = make_inputs(workload, device, seed)
    exact = task.functions[workload.fn].exact
    sizes = [max(int(s.numel), 1) * 4 for s in workload.tensor_specs().values()]
    calls: dict[str, Call] = {}
    order = [n for n in impls if n != baseline_impl] + [n for n in impls if n == baseline_impl]
    for impl_name in order:
        fn = impls[impl_name]
        context = as_installed(task, installed) if installed is not None and impl_name != baseline_impl else None
        call = _call(task, workload, fn, contract, args, sizes, context)
        if not call.error and impl_name != baseline_impl:
            context = as_installed(task, installed) if installed is not None else None
            call.error = _probe(task, workload, fn, contract, call, device, seed, sizes, context)
        calls[impl_name] = call
    key = (workload.name, seed, str(device))
    expected = oracle_cache.get(key) if oracle_cache is not None else None
    if expected is None:
        with torch.no_grad():
            expected = contract.oracle(contract.prepared(clone_args(args)))
        if oracle_cache is not None:
            oracle_cache[key] = expected
    base = calls.get(baseline_impl)
    baseline_out = base.outs if base is not None and not base.error and len(base.outs) == len(expected) else None
    results: list[RowResult] = []
    for impl_name in impls:
        call = calls[impl_name]
        res = RowResult(workload.name, impl_name, seed, ok=False)
        results.append(res)
        res.error = call.error or _changed_after_return(call)
        if res.error:
            continue
        outs = call.outs
        if len(outs) != len(expected):
            res.error = f"returned {len(outs)} outputs, expected {len(expected)}"
            continue
        names = contract.output_names if len(contract.output_names) == len(outs) else tuple(
            f"out{i}" for i in range(len(outs)))
        refs = baseline_out if baseline_out is not None and impl_name != baseline_impl else (None,) * len(outs)
        for name, out, ref, sg in zip(names, outs, expected, refs, strict=True):
            layout = layout_problem(out, sg) if sg is not None else ""
            if layout:
                res.comparisons.append(Comparison(name, False, ref.numel(), reason=layout))
                continue
            res.comparisons.append(compare(name, out, ref, _tolerance(task, workload, contract, out, sg)))
        if exact and impl_name != baseline_impl and baseline_out is not None:
            res.comparisons += [compare_exact(f"{n}(vs SGLang)", o, b)
                                for n, o, b in zip(names, outs, baseline_out, strict=True)]
        res.ok = all(c.ok for c in res.comparisons)
    return results
