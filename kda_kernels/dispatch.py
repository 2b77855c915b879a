"""Arch dispatch and the ``kda::`` custom-op layer.

Per promoted function the overlay builds three things (``build``):

- a *runner* ``run(*args, **kwargs)``: picks the impl by the device of the first CUDA tensor, memoized per
  device index ((9, 0) -> ``h200`` impl, (10, 0) -> ``b200`` impl, anything else -> the captured SGLang
  baseline), applies the impl's optional ``supports(*args, **kwargs) -> bool`` contract check per call and
  falls back to the baseline for inputs outside it. ``KDA_FORCE_ARCH`` (read at install) overrides the device:
  ``h200``/``b200`` use that impl for every input (CPU tensors included), ``baseline`` always uses SGLang's.
- a ``torch.library.custom_op("kda::<name>")`` with the SGLang signature, the right ``mutates_args`` and a fake
  impl, registered once per process for all devices; its body calls the current runner. torch.compile and
  CUDA-graph capture see an opaque op with exact shapes.
- the *public* callable bound at SGLang's call sites. Like SGLang's own ``register_custom_op`` wrappers
  (``sglang.srt.utils.custom_op._call_directly_in_eager``), plain eager calls under ``no_grad`` with plain
  tensors call the runner directly; compiling, tracing, dispatch/function modes, the profiler, autograd and
  tensor subclasses go through the registered op. Both sides of a benchmark therefore have the same layers.

Everything is precomputed at install; a call costs a few attribute checks, one dict lookup and the impl's own
``supports``.
"""

from __future__ import annotations

import importlib
import threading
import types
from collections.abc import Callable
from typing import Any

import torch

from kda_kernels import tiers
from kda_kernels._env import FORCE_ENV, forced_arch  # noqa: F401  (re-exported)
from kda_kernels.contracts import CONTRACTS, Contract, group_norm_silu_eligible
from kda_kernels.registry import BY_FUNCTION, CAPABILITY_ARCH, SwapTarget

Entry = tuple[Callable[..., Any] | None, Callable[..., bool] | None]
_NO_IMPL: Entry = (None, None)

_is_compiling = torch.compiler.is_compiling
_dispatch_modes = torch._C._len_torch_dispatch_stack
_function_modes = torch._C._is_torch_function_mode_enabled
_profiling = torch._C._autograd._profiler_enabled
_grad_enabled = torch.is_grad_enabled
_Tensor = torch.Tensor
# Argument types that never need the dispatcher (anything else that is a Tensor is a subclass).
_PLAIN = frozenset({torch.Tensor, torch.nn.Parameter, int, float, bool, str, type(None)})

_lock = threading.RLock()
_ARCH_BY_INDEX: dict[int, str | None] = {}  # CUDA device index -> "h200"/"b200"/None, queried once per device
_OPS: dict[str, Any] = {}  # "kda::name" -> OpOverload, registered once per process
_SLOTS: dict[str, Callable[..., Any]] = {}  # "kda::name" -> the runner the op body calls now
# The families whose impl (not SGLang's baseline) served a call while a trace is open (``trace_impl_calls``):
# `kda e2e` judges a model's overlay-on output by the tolerances of the kernels that actually ran in it, not of
# every promoted family. None (the serving default) costs one global test per call.
class Trace(set):
    """The families whose impls ran (the set), and per swap target or fast path how many calls its KDA code
    served and how many went to SGLang (``calls[name] = {"kda": n, "sglang": m}``)."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: dict[str, dict[str, int]] = {}

    def note(self, family: str, name: str, kda: bool) -> None:
        if kda:
            self.add(family)
        c = self.calls.get(name)
        if c is None:
            c = self.calls[name] = {"kda": 0, "sglang": 0}
        c["kda" if kda else "sglang"] += 1

    def merge(self, other: Trace) -> None:
        self |= other
        for name, c in other.calls.items():
            mine = self.calls.setdefault(name, {"kda": 0, "sglang": 0})
            mine["kda"] += c["kda"]
            mine["sglang"] += c["sglang"]


_TRACE: Trace | None = None


class trace_impl_calls:
    """``with trace_impl_calls() as families:`` collects the families whose impls ran inside the block and the
    per-function call counts (``families.calls``; every dispatched call; under KDA_FORCE_ARCH an exact-tier impl
    without ``supports`` is called bare and is not seen)."""

    def __enter__(self) -> Trace:
        global _TRACE
        self._outer = _TRACE
        _TRACE = Trace()
        return _TRACE

    def __exit__(self, *exc: object) -> None:
        global _TRACE
        if self._outer is not None and _TRACE is not None:
            self._outer.merge(_TRACE)
        _TRACE = self._outer


def note_impl_call(family: str, name: str | None = None, kda: bool = True) -> None:
    """Record that ``family``'s own code (``kda``) or SGLang's serves a call of ``name`` (for code outside the
    runners: the fast paths)."""
    if _TRACE is not None:
        _TRACE.note(family, name or family, kda)


class KdaDispatchError(RuntimeError):
    pass


def device_arch(index: int) -> str | None:
    """Arch name of CUDA device ``index`` (memoized; capability queried once per device)."""
    try:
        return _ARCH_BY_INDEX[index]
    except KeyError:
        pass
    with _lock:
        if index not in _ARCH_BY_INDEX:
            _ARCH_BY_INDEX[index] = CAPABILITY_ARCH.get(tuple(torch.cuda.get_device_capability(index)))
        return _ARCH_BY_INDEX[index]


def _cuda_index(args: tuple[Any, ...], kwargs: dict[str, Any]) -> int:
    """Device index of the first CUDA tensor among the arguments, or -1 (slow path, rarely taken)."""
    for a in (*args, *kwargs.values()):
        if isinstance(a, _Tensor) and a.is_cuda:
            return a.get_device()
    return -1


# -------------------------------------------------------------------------------------------------- runner

def make_runner(contract: Contract, baseline: Callable[..., Any], impls: dict[str, Entry],
                forced: str | None, optional: bool = False, family: str = "",
                tier: str = "lossless") -> Callable[..., Any]:
    """The per-call arch dispatch for one function (see module docstring). An impl of ``tier`` "lossless" serves
    only while the running request's quality allows it (``kda_kernels.tiers``); SGLang's baseline otherwise."""
    if optional:
        impls = {arch: (_none_falls_back(impl, baseline), sup) for arch, (impl, sup) in impls.items()}
    gated = tier != "exact"
    allowed = tiers.allows_lossless
    fn = contract.function

    if forced is not None:
        impl, supports = impls.get(forced, _NO_IMPL) if forced != "baseline" else _NO_IMPL
        if impl is None:
            return baseline
        if supports is None and not gated:
            return impl  # the impl itself, no wrapper (and so not traced: a forced arch is a lab/test mode)

        def run_forced(*args: Any, **kwargs: Any) -> Any:
            if (not gated or allowed()) and (supports is None or supports(*args, **kwargs)):
                if _TRACE is not None:
                    _TRACE.note(family, fn, True)
                return impl(*args, **kwargs)
            if _TRACE is not None:
                _TRACE.note(family, fn, False)
            return baseline(*args, **kwargs)

        return run_forced

    first = contract.first_tensor
    memo: dict[int, Entry] = {}
    memo_get = memo.get

    def resolve(index: int) -> Entry:
        entry = impls.get(device_arch(index), _NO_IMPL)  # type: ignore[arg-type]
        memo[index] = entry
        return entry

    def run(*args: Any, **kwargs: Any) -> Any:
        t = args[0] if args else kwargs[first]
        if t.is_cuda:
            index = t.get_device()
        else:
            index = _cuda_index(args, kwargs)
            if index < 0:
                return baseline(*args, **kwargs)
        entry = memo_get(index)
        if entry is None:
            entry = resolve(index)
        impl, supports = entry
        if impl is None or (gated and not allowed()) or (supports is not None and not supports(*args, **kwargs)):
            if _TRACE is not None:
                _TRACE.note(family, fn, False)
            return baseline(*args, **kwargs)
        if _TRACE is not None:
            _TRACE.note(family, fn, True)
        return impl(*args, **kwargs)

    run.kda_memo = memo  # type: ignore[attr-defined]
    return run


def _canonicalized(run: Callable[..., Any], canonical: Callable[..., Any]) -> Callable[..., Any]:
    """Inputs SGLang accepts but computes wrong (see ``contracts``) rewritten before any path sees them."""

    def call(*args: Any, **kwargs: Any) -> Any:
        rewritten = canonical(args, kwargs)
        out = run(*rewritten[0], **rewritten[1])
        if len(rewritten) == 3 and rewritten[2] is not None:
            rewritten[2]()  # in-place results computed on copies, back into the caller's tensors
        return out

    call.kda_memo = run.__dict__.get("kda_memo")  # type: ignore[attr-defined]
    return call


def _none_falls_back(impl: Callable[..., Any], baseline: Callable[..., Any]) -> Callable[..., Any]:
    """Optional kind: an impl returning None hands the call to SGLang's baseline (which may return None too)."""

    def call(*args: Any, **kwargs: Any) -> Any:
        out = impl(*args, **kwargs)
        return baseline(*args, **kwargs) if out is None else out

    return call


# ----------------------------------------------------------------------------------------------- custom ops

def _register_op(qualname: str, signature: Any, mutates: tuple[str, ...], fake: Callable[..., Any] | None,
                 body: Callable[..., Any]) -> Any:
    with _lock:
        if qualname in _OPS:
            return _OPS[qualname]
        body.__signature__ = signature  # type: ignore[attr-defined]
        body.__name__ = qualname.split("::")[1]
        opdef = torch.library.custom_op(qualname, body, mutates_args=mutates)
        if fake is not None:
            opdef.register_fake(fake)
        overload = getattr(getattr(torch.ops, qualname.split("::")[0]), qualname.split("::")[1]).default
        _OPS[qualname] = overload
        return overload


def ensure_op(contract: Contract) -> Any:
    """``kda::<name>`` for a tensor-level function (registered once; its body calls the current runner)."""
    qualname = f"kda::{contract.function}"
    slots = _SLOTS

    if contract.accepts is not None:  # optional kind: the op is only entered when SGLang returns a tensor

        def body(*args: Any, **kwargs: Any) -> Any:
            out = slots[qualname](*args, **kwargs)
            if out is None:
                raise KdaDispatchError(
                    f"{qualname}: both the KDA impl and SGLang's baseline returned None for inputs that "
                    f"kda_kernels.contracts.accepts_{contract.function} accepted (contract mirror out of date?)")
            return out
    else:

        def body(*args: Any, **kwargs: Any) -> Any:
            return slots[qualname](*args, **kwargs)

    return _register_op(qualname, contract.op_signature, contract.mutates_args, contract.fake, body)


def ensure_out_op(contract: Contract) -> Any:
    """``kda::<name>_out``: the mutating ``out=`` variant of an out-kind function."""
    qualname = f"kda::{contract.function}_out"
    inner = f"kda::{contract.function}"
    slots = _SLOTS
    names = tuple(contract.out_signature.parameters)  # type: ignore[union-attr]

    def body(*args: Any, **kwargs: Any) -> None:
        bound = dict(zip(names, args, strict=False))
        bound.update(kwargs)
        out = bound.pop("out")
        res = slots[inner](*(bound[n] for n in names if n in bound), out=out)
        if res is not None and res is not out:
            out.copy_(res)
        return None

    def fake(*args: Any, **kwargs: Any) -> None:
        return None

    return _register_op(qualname, contract.out_signature, ("out",), fake, body)


# -------------------------------------------------------------------------------------------- public objects

def _fast_ok(args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    if _is_compiling() or _dispatch_modes() or _function_modes() or _profiling() or _grad_enabled():
        return False
    for a in args:
        if a.__class__ not in _PLAIN and isinstance(a, _Tensor):
            return False
    if kwargs:
        for a in kwargs.values():
            if a.__class__ not in _PLAIN and isinstance(a, _Tensor):
                return False
    return True


def _public_op(op: Any, run: Callable[..., Any]) -> Callable[..., Any]:
    def public(*args: Any, **kwargs: Any) -> Any:
        if _is_compiling() or _dispatch_modes() or _function_modes() or _profiling() or _grad_enabled():
            return op(*args, **kwargs)
        for a in args:
            if a.__class__ not in _PLAIN and isinstance(a, _Tensor):
                return op(*args, **kwargs)
        if kwargs:
            for a in kwargs.values():
                if a.__class__ not in _PLAIN and isinstance(a, _Tensor):
                    return op(*args, **kwargs)
        return run(*args, **kwargs)

    return public


def _public_optional(op: Any, run: Callable[..., Any], baseline: Callable[..., Any],
                     accepts: Callable[..., bool]) -> Callable[..., Any]:
    def public(*args: Any, **kwargs: Any) -> Any:
        if _fast_ok(args, kwargs):
            return run(*args, **kwargs)  # None when neither the impl nor SGLang takes the inputs, as in SGLang
        if not accepts(*args, **kwargs):
            return baseline(*args, **kwargs)
        return op(*args, **kwargs)

    return public


def _public_out(op: Any, out_op: Any, run: Callable[..., Any]) -> Callable[..., Any]:
    def public(x: Any, weight: Any, bias: Any, eps: float, is_rms_norm: bool = False, out: Any = None) -> Any:
        if _fast_ok((x, weight, bias, out), {}):
            return run(x, weight, bias, eps, is_rms_norm, out=out) if out is not None else \
                run(x, weight, bias, eps, is_rms_norm)
        if out is None:
            return op(x, weight, bias, eps, is_rms_norm)
        out_op(x, weight, bias, eps, is_rms_norm, out)
        return out

    return public


def _public_wrapper(tensor_public: Callable[..., Any], baseline: Callable[..., Any], tensor_module: Any,
                    tensor_name: str, non_cuda_supports: Callable[..., bool] | None) -> Callable[..., Any]:
    """SGLang's ``apply_group_norm_silu``: its eligibility test, then the tensor-level function looked up at call
    time on its defining module, as SGLang's in-function import does (SGLang's tests spy on that attribute).
    While installed that attribute is the KDA object; where it is still SGLang's own (the tensor-level function
    not installed), the KDA object is called instead. CPU tensors take SGLang's eager path unless a forced
    arch's impl declares (``supports``) that it takes them: KDA_FORCE_ARCH never routes an input the impl
    cannot run."""
    tensor_baseline = tensor_public.__dict__.get("__kda_baseline__")

    def public(x: Any, norm: Any, activation: Any) -> Any:
        if x.is_cuda:
            fused = group_norm_silu_eligible(x, norm, activation)
        else:
            fused = (non_cuda_supports is not None and group_norm_silu_eligible(x, norm, activation, True)
                     and non_cuda_supports(x, norm.weight, norm.bias, norm.num_groups, norm.eps))
        if fused:
            fn = getattr(tensor_module, tensor_name)
            if fn is tensor_baseline:
                fn = tensor_public
            return fn(x, norm.weight, norm.bias, num_groups=norm.num_groups, eps=norm.eps)
        return baseline(x, norm, activation)

    return public


def _decorate(public: Callable[..., Any], target: SwapTarget, contract: Contract, baseline: Callable[..., Any],
              run: Callable[..., Any] | None, op: Any, arches: tuple[str, ...], forced: str | None) -> None:
    public.__name__ = public.__qualname__ = target.function
    public.__module__ = target.family_module
    public.__signature__ = contract.signature  # type: ignore[attr-defined]
    public.__doc__ = (f"KDA overlay for SGLang {target.sglang} (arches with impls: {', '.join(arches) or 'none'}"
                      f"{'; forced ' + forced if forced else ''}); falls back to SGLang's baseline.")
    public.__kda_kernel__ = True  # type: ignore[attr-defined]
    public.__kda_function__ = target.function  # type: ignore[attr-defined]
    public.__kda_baseline__ = baseline  # type: ignore[attr-defined]
    public.__kda_arches__ = arches  # type: ignore[attr-defined]
    public.kda_op = op  # type: ignore[attr-defined]
    public.kda_run = run  # type: ignore[attr-defined]
    if run is not None:
        public.__wrapped__ = run  # type: ignore[attr-defined]  # SGLang convention: the raw callable


def is_kda_object(obj: Any) -> bool:
    # no getattr (nor isinstance, which may read __class__) on arbitrary objects: some (torch.backends.cuda's)
    # initialize CUDA in __getattr__
    return type(obj) is types.FunctionType and obj.__dict__.get("__kda_kernel__") is True


def build(target: SwapTarget, baseline: Callable[..., Any], impls: dict[str, Entry], forced: str | None,
          tensor_public: Callable[..., Any] | None = None) -> Callable[..., Any]:
    """The public KDA object for ``target`` (ops registered on first use; the runner slot updated)."""
    contract = CONTRACTS[target.function]
    arches = tuple(sorted(impls))
    if target.kind == "wrapper":
        if tensor_public is None or target.unpacks_into is None:
            raise KdaDispatchError(f"{target.function} unpacks into {target.unpacks_into}, whose KDA object is missing")
        inner = BY_FUNCTION[target.unpacks_into]
        forced_entry = impls.get(forced, _NO_IMPL) if forced not in (None, "baseline") else _NO_IMPL
        public = _public_wrapper(tensor_public, baseline, importlib.import_module(inner.module), inner.function,
                                 forced_entry[1] if forced_entry[0] is not None else None)
        _decorate(public, target, contract, baseline, None, getattr(tensor_public, "kda_op", None), arches, forced)
        return public
    run = make_runner(contract, baseline, impls, forced, optional=target.kind == "optional", family=target.family,
                      tier=target.tier)
    if contract.canonical is not None:
        run = _canonicalized(run, contract.canonical)
    op = ensure_op(contract)
    with _lock:
        _SLOTS[f"kda::{target.function}"] = run
    if target.kind == "out":
        public = _public_out(op, ensure_out_op(contract), run)
    elif target.kind == "optional":
        public = _public_optional(op, run, baseline, contract.accepts)  # type: ignore[arg-type]
    else:
        public = _public_op(op, run)
    _decorate(public, target, contract, baseline, run, op, arches, forced)
    return public


def registered_ops() -> dict[str, Any]:
    return dict(_OPS)
