"""The CPU path: SGLang's and a candidate's Triton kernels run in Triton's interpreter (``kda check --interpret``).

Chain: ``interpreter`` (platform forcing, assert stripping, routes, :func:`interpret_check`) <- ``shims/<family>``
(one module per family whose SGLang wrapper needs more than the generic recompile; each registers a route).
"""

from kda_lab.interpret.interpreter import (
    INTERPRETER_DTYPES,
    NOT_CHECKED_EXIT,
    SHIM_MODULES,
    ExtensionBlocked,
    InterpreterUnavailable,
    StripCudaAsserts,
    compiles_cuda_itself,
    cuda_sources,
    ensure_interpreter,
    extensions_blocked,
    force_cuda_platform,
    install_shims,
    interpret_check,
    interpretable,
    not_runnable_on_cpu,
    route,
    sglang_fallbacks_interpretable,
    wrapper_not_interpretable,
)

__all__ = [
    "INTERPRETER_DTYPES", "NOT_CHECKED_EXIT", "SHIM_MODULES", "ExtensionBlocked", "InterpreterUnavailable",
    "StripCudaAsserts", "compiles_cuda_itself", "cuda_sources", "ensure_interpreter", "extensions_blocked",
    "force_cuda_platform", "install_shims", "interpret_check",
    "interpretable", "not_runnable_on_cpu", "route", "sglang_fallbacks_interpretable",
    "wrapper_not_interpretable",
]
