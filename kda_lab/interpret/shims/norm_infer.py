"""Interpreter shims for the norm_infer family, on top of kda_lab/interpret/interpreter.py.

``kda_lab.interpret.interpreter.interpretable`` recompiles an SGLang wrapper without its CUDA asserts and runs it under
``TRITON_INTERPRET=1``. ``norm_infer`` needs nothing more. ``triton_one_pass_rms_norm``
(``norm/rmsnorm_onepass_triton.py``) does not get to its kernel on CPU tensors:

- its body calls ``_triton_one_pass_rms_norm_cuda``, a ``register_custom_op`` op with a CUDA implementation
  only, so a CPU tensor has no kernel to dispatch to;
- that function launches inside ``with torch.get_device_module().device(x.device)``, and on a CPU-only host
  ``torch.get_device_module()`` is ``torch.cpu``, which has no ``device`` context manager.

:func:`interpretable_one_pass` recompiles both wrappers from SGLang's source into a private namespace (SGLang's
modules and torch are not modified): the custom-op decorator is dropped (the raw function is called) and the
device guard becomes ``contextlib.nullcontext()``. The ``@triton.jit`` kernel and everything else is SGLang's.

:func:`install` routes :func:`kda_lab.interpret.interpreter.interpretable` to this shim for ``triton_one_pass_rms_norm``
(everything else passes through to whatever ``interpretable`` was before, so it composes with the other
families' shims). Idempotent; needs no GPU. The norm_infer task folders' tests call it before the shared tests
run; ``kda check --interpret`` needs the same call (see the report to the lead).
"""

from __future__ import annotations

import ast
import contextlib
import importlib
from collections.abc import Callable
from typing import Any

from kda_lab.interpret.interpreter import StripCudaAsserts

ONE_PASS_MODULE = "sglang.kernels.ops.diffusion.norm.rmsnorm_onepass_triton"
ONE_PASS_CUDA_OP = "_triton_one_pass_rms_norm_cuda"
ONE_PASS = "triton_one_pass_rms_norm"
_WRAPPERS = (ONE_PASS_CUDA_OP, ONE_PASS)  # callee first
SHIMMED = {(ONE_PASS_MODULE, ONE_PASS)}
_NULLCONTEXT = "_kda_nullcontext"


class _NoDeviceGuard(StripCudaAsserts):
    """``torch.get_device_module().device(d)`` -> ``nullcontext()``; CUDA-device asserts removed."""

    def visit_Call(self, node: ast.Call) -> Any:
        self.generic_visit(node)
        if ast.unparse(node.func) == "torch.get_device_module().device":
            return ast.copy_location(ast.Call(func=ast.Name(_NULLCONTEXT, ast.Load()), args=[], keywords=[]), node)
        return node


def interpretable_one_pass(module_name: str = ONE_PASS_MODULE, fn_name: str = ONE_PASS) -> Callable[..., Any]:
    """SGLang's ``triton_one_pass_rms_norm`` runnable on CPU tensors in the Triton interpreter."""
    if (module_name, fn_name) not in SHIMMED:
        raise LookupError(f"no norm shim for {module_name}:{fn_name}; shimmed: {sorted(SHIMMED)}")
    from kda_lab.interpret.interpreter import ensure_interpreter, force_cuda_platform
    from kda_lab.sglang_source import find_def

    ensure_interpreter()
    force_cuda_platform()
    module = importlib.import_module(module_name)
    namespace = dict(vars(module))
    namespace[_NULLCONTEXT] = contextlib.nullcontext
    for name in _WRAPPERS:
        node = _NoDeviceGuard().visit(find_def(module.__name__, name))
        node.decorator_list = []
        code = compile(ast.Module(body=[ast.fix_missing_locations(node)], type_ignores=[]),
                       f"<interpretable {module_name}.{name} (norm shim)>", "exec")
        exec(code, namespace)  # noqa: S102 - recompiling SGLang's own wrapper source, device guard neutralized
    return namespace[fn_name]


def install() -> bool:
    """Route ``kda_lab.interpret.interpreter.interpretable`` to the one-pass shim; returns whether it changed anything."""
    from kda_lab.interpret import interpreter as interp

    return interp.route(SHIMMED, interpretable_one_pass)
