"""What the harness needs to know about one SGLang function beyond task.toml."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

Args = dict[str, Any]


def returned(result: Any, args: Args) -> tuple[torch.Tensor, ...]:
    """Outputs of an out-of-place function: what it returned."""
    if isinstance(result, torch.Tensor):
        return (result,)
    if isinstance(result, (tuple, list)) and all(isinstance(t, torch.Tensor) for t in result):
        return tuple(result)
    raise TypeError(f"expected a tensor or a tuple of tensors, got {type(result).__name__}")


@dataclass(frozen=True)
class FunctionContract:
    name: str
    # fp64 oracle: args -> expected outputs (float64, same shapes as the function's outputs)
    oracle: Callable[[Args], tuple[torch.Tensor, ...]]
    # eager torch in the inputs' dtypes: the torch.compile peer (None: no peer for this function)
    torch_reference: Callable[..., Any] | None = None
    # arguments written in place; their post-call values are the outputs (in this order)
    mutates: tuple[str, ...] = ()
    output_names: tuple[str, ...] = ("out",)
    # turns spec-built args into what the function takes (e.g. nn.Modules); identity by default
    prepare: Callable[[Args], Args] | None = None
    # arguments that are output buffers the call writes and returns (norm_infer's ``out=``): neither read-only
    # inputs nor inputs an output may not alias
    out_args: tuple[str, ...] = ()

    def outputs(self, result: Any, args: Args) -> tuple[torch.Tensor, ...]:
        if self.mutates:
            return tuple(args[m] for m in self.mutates)
        return returned(result, args)

    def prepared(self, args: Args) -> Args:
        return self.prepare(args) if self.prepare else args
