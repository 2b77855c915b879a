"""Interpreter shims for the group_norm_silu family, on top of kda_lab/interpret/interpreter.py.

SGLang 0.5.23's group-norm Python wrappers refuse a CPU tensor before any Triton kernel runs:
- ``norm/group_norm_silu_triton.py``: ``triton_group_norm_silu`` calls ``_triton_group_norm_silu_cuda``, a
  ``register_custom_op`` op with a CUDA implementation only (a CPU tensor has no kernel to dispatch to); inside
  it ``_can_use_triton_group_norm_silu`` requires ``x.is_cuda``/``weight.is_cuda``/``bias.is_cuda`` (else the
  eager torch fallback runs, not the kernels), and the launch sits in ``with torch.cuda.device(x.device)``;
- ``norm/group_norm_silu.py``: ``apply_group_norm_silu`` requires ``x.is_cuda`` and imports
  ``triton_group_norm_silu`` inside the function.

:func:`interpretable_group_norm` recompiles exactly those wrappers from SGLang's source into a private
namespace (SGLang's modules are not modified), rewritten so that ``<tensor>.is_cuda`` reads ``True``,
``torch.cuda.device(...)`` becomes ``contextlib.nullcontext()``, the custom-op decorator is dropped (the raw
function is called), and ``apply_group_norm_silu``'s in-function import resolves to the recompiled
``triton_group_norm_silu``. Every other condition of the wrappers (grad disabled, dtypes, C % G, weight/bias
shapes, the one-pass / chunked split at group size 2^18) and every ``@triton.jit`` kernel is SGLang's, untouched.

:func:`install` routes :func:`kda_lab.interpret.interpreter.interpretable` to these shims for the two group-norm
functions (everything else is passed through unchanged). Idempotent; needs no GPU and no
``TRITON_INTERPRET`` at install time (the interpreter is switched on when a shimmed wrapper is built).
The group-norm task folders' tests call it before the shared tests run.
"""

from __future__ import annotations

import ast
import contextlib
import importlib
from collections.abc import Callable
from typing import Any

TRITON_MODULE = "sglang.kernels.ops.diffusion.norm.group_norm_silu_triton"
APPLY_MODULE = "sglang.kernels.ops.diffusion.norm.group_norm_silu"
# the wrapper functions recompiled per module, callees first
_WRAPPERS = {
    TRITON_MODULE: ("_can_use_triton_group_norm_silu", "_triton_group_norm_silu_cuda", "triton_group_norm_silu"),
    APPLY_MODULE: ("apply_group_norm_silu",),
}
SHIMMED = {(TRITON_MODULE, "triton_group_norm_silu"), (APPLY_MODULE, "apply_group_norm_silu")}
_NULLCONTEXT = "_kda_nullcontext"


class _CpuAsCuda(ast.NodeTransformer):
    """``t.is_cuda`` -> ``True``; ``torch.cuda.device(d)`` -> ``nullcontext()``; drop the Triton-module import."""

    def visit_Attribute(self, node: ast.Attribute) -> Any:
        self.generic_visit(node)
        if node.attr == "is_cuda" and isinstance(node.ctx, ast.Load):
            return ast.copy_location(ast.Constant(True), node)
        return node

    def visit_Call(self, node: ast.Call) -> Any:
        self.generic_visit(node)
        if ast.unparse(node.func) == "torch.cuda.device":
            return ast.copy_location(ast.Call(func=ast.Name(_NULLCONTEXT, ast.Load()), args=[], keywords=[]), node)
        return node

    def visit_ImportFrom(self, node: ast.ImportFrom) -> Any:
        # apply_group_norm_silu's `from ...group_norm_silu_triton import triton_group_norm_silu`: the name then
        # resolves to the recompiled wrapper placed in the namespace.
        if node.module == TRITON_MODULE and [a.name for a in node.names] == ["triton_group_norm_silu"]:
            return ast.copy_location(ast.Pass(), node)
        return node


def _recompile(module_name: str, extra: dict[str, Any]) -> dict[str, Any]:
    from kda_lab.interpret.interpreter import ensure_interpreter, force_cuda_platform
    from kda_lab.sglang_source import find_def

    ensure_interpreter()
    force_cuda_platform()
    module = importlib.import_module(module_name)
    namespace = dict(vars(module))
    namespace[_NULLCONTEXT] = contextlib.nullcontext
    namespace.update(extra)
    for fn_name in _WRAPPERS[module_name]:
        node = _CpuAsCuda().visit(find_def(module.__name__, fn_name))
        node.decorator_list = []
        code = compile(ast.Module(body=[ast.fix_missing_locations(node)], type_ignores=[]),
                       f"<interpretable {module_name}.{fn_name} (group-norm shim)>", "exec")
        exec(code, namespace)  # noqa: S102 - recompiling SGLang's own wrapper source, device checks neutralized
    return namespace


def interpretable_group_norm(module_name: str, fn_name: str) -> Callable[..., Any]:
    """SGLang's ``triton_group_norm_silu`` / ``apply_group_norm_silu`` runnable on CPU tensors in the interpreter."""
    if (module_name, fn_name) not in SHIMMED:
        raise LookupError(f"no group-norm shim for {module_name}:{fn_name}; shimmed: {sorted(SHIMMED)}")
    triton_ns = _recompile(TRITON_MODULE, {})
    if module_name == TRITON_MODULE:
        return triton_ns["triton_group_norm_silu"]
    apply_ns = _recompile(APPLY_MODULE, {"triton_group_norm_silu": triton_ns["triton_group_norm_silu"]})
    return apply_ns["apply_group_norm_silu"]


def install() -> bool:
    """Route ``kda_lab.interpret.interpreter.interpretable`` to the group-norm shim; returns whether it changed anything."""
    from kda_lab.interpret import interpreter as interp

    return interp.route(SHIMMED, interpretable_group_norm)
