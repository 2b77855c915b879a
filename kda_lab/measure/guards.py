"""What a call may not do besides getting its numbers wrong (kda_lab.measure.correctness runs these).

- write a read-only input (anything but the contract's ``mutates`` and ``out_args``), compared bit for bit
  against a copy taken before the call;
- return a read-only input, or a view of one, as an output;
- return outputs whose dtype, shape, strides or device differ from SGLang's on the same row;
- change an output after the call returned (deferred work, or an output buffer reused by the next call).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import torch


class CallViolation(Exception):
    """A call broke the function's contract beyond its values (the message says how)."""


def named_tensors(args: Mapping[str, Any], skip: Iterable[str] = ()) -> Iterator[tuple[str, torch.Tensor]]:
    """Every tensor an argument set holds: tensor arguments, and the parameters/buffers of module arguments.
    """
    skipped = set(skip)
    for name, value in args.items():
        if name in skipped:
            continue
        if isinstance(value, torch.Tensor):
            yield name, value
        elif isinstance(value, torch.nn.Module):
            for sub, t in value.state_dict(keep_vars=True).items():
                if isinstance(t, torch.Tensor):
                    yield f"{name}.{sub}", t


def bitwise_copy(t: torch.Tensor) -> torch.Tensor:
    return t.detach().clone()


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Equal dtype, shape and bits (NaN equals NaN of the same payload: compared as raw bytes)."""
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    if a.numel() == 0:
        return True
    fa = a.detach().contiguous().reshape(-1).view(torch.uint8)
    fb = b.detach().to(a.device).contiguous().reshape(-1).view(torch.uint8)
    return bool(torch.equal(fa, fb))


def read_only(args: Mapping[str, Any], writable: Iterable[str]) -> dict[str, torch.Tensor]:
    """Copies of every read-only tensor of ``args`` (taken before the call)."""
    return {name: bitwise_copy(t) for name, t in named_tensors(args, writable)}


def written_inputs(args: Mapping[str, Any], before: Mapping[str, torch.Tensor]) -> list[str]:
    live = dict(named_tensors(args))
    return [name for name, old in before.items() if name in live and not same_bits(live[name], old)]


def _storage(t: torch.Tensor) -> tuple[torch.device, int, int]:
    s = t.untyped_storage()
    return t.device, s.data_ptr(), s.nbytes()


def shares_memory(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.numel() == 0 or b.numel() == 0:
        return False
    (da, pa, na), (db, pb, nb) = _storage(a), _storage(b)
    return da == db and pa < pb + nb and pb < pa + na


def aliased_inputs(
    outs: Iterable[torch.Tensor], args: Mapping[str, Any], writable: Iterable[str]
) -> list[str]:
    """Read-only inputs (by name) whose memory an output shares."""
    outs = list(outs)
    return [name for name, t in named_tensors(args, writable) if any(shares_memory(o, t) for o in outs)]


def check_call(
    outs: tuple[torch.Tensor, ...],
    args: Mapping[str, Any],
    before: Mapping[str, torch.Tensor],
    writable: Iterable[str],
) -> None:
    """Raise CallViolation when the call wrote a read-only input or returned one (or a view of one)."""
    writable = tuple(writable)
    wrote = written_inputs(args, before)
    if wrote:
        raise CallViolation(
            f"wrote its read-only input(s) {wrote} (only {list(writable) or 'no argument'} may be written)"
        )
    aliased = aliased_inputs(outs, args, writable)
    if aliased:
        raise CallViolation(
            f"returned its input(s) {aliased} (or a view of them) as an output; outputs must be new memory"
        )


def _strides(t: torch.Tensor) -> tuple[int, ...]:
    return tuple(s if n > 1 else 0 for s, n in zip(t.stride(), t.shape, strict=True))


def layout_problem(out: torch.Tensor, expect: torch.Tensor) -> str:
    """How ``out`` differs from SGLang's output ``expect`` in dtype, shape, strides or device ('' if it does
    not). Strides of size-1 dimensions are not compared (they address nothing)."""
    if out.dtype != expect.dtype:
        got, want = str(out.dtype).removeprefix("torch."), str(expect.dtype).removeprefix("torch.")
        return f"dtype {got} != SGLang's {want}"
    if tuple(out.shape) != tuple(expect.shape):
        return f"shape {list(out.shape)} != SGLang's {list(expect.shape)}"
    if out.device != expect.device:
        return f"device {out.device} != SGLang's {expect.device}"
    if out.layout != expect.layout:
        return f"layout {out.layout} != SGLang's {expect.layout}"
    if out.numel() and _strides(out) != _strides(expect):
        return f"strides {list(out.stride())} != SGLang's {list(expect.stride())}"
    return ""
