"""Run SGLang's real Triton kernels on a CPU host, in Triton's interpreter (``TRITON_INTERPRET=1``).

Shims, each as small as it can be:
- the platform key is forced to "cuda" before a kernel module is imported, so ``select_impl`` keeps the
  Triton implementation instead of the CPU fallback;
- ``is_cuda`` asserts in the Python wrapper are removed from a recompiled copy of that one function (the
  Triton kernels themselves are untouched);
- a CPU torch lacks ``torch.cpu.get_device_properties``, which ``norm_triton`` reads at import: stubbed.
Triton 3.6's interpreter mishandles bf16 arithmetic, so interpreter runs use fp32/fp16 only.
"""

from __future__ import annotations

import ast
import importlib
import os
import sys
from collections.abc import Callable
from typing import Any

import torch

from kda_lab.families import contract
from kda_lab.sglang_source import find_def

INTERPRETER_DTYPES = ("float32", "float16")
# Family shims for wrappers the generic recompile cannot run on CPU (each idempotent, each touching only the
# SGLang kernels it names): rotary autotune/bf16 rounding, group-norm custom-op wrappers, one-pass RMS.
SHIM_MODULES = ("kda_lab.interpret_shims_rope", "kda_lab.interpret_shims_gn", "kda_lab.interpret_shims_norm")


def install_shims() -> None:
    """Install every family's shims; call after the interpreter is switched on (some are no-ops otherwise)."""
    for name in SHIM_MODULES:
        importlib.import_module(name).install()


class InterpreterUnavailable(RuntimeError):
    pass


def ensure_interpreter() -> None:
    if os.environ.get("TRITON_INTERPRET") != "1":
        if "triton" in sys.modules:
            raise InterpreterUnavailable("set TRITON_INTERPRET=1 before triton is imported (e.g. in the environment)")
        os.environ["TRITON_INTERPRET"] = "1"


def force_cuda_platform() -> None:
    from sglang.kernels.ops.diffusion.common import platform

    platform.platform_key = lambda: "cuda"
    if not hasattr(torch.cpu, "get_device_properties"):
        torch.cpu.get_device_properties = lambda *a, **k: type("Props", (), {"multi_processor_count": 4})()


class StripCudaAsserts(ast.NodeTransformer):
    def visit_Assert(self, node: ast.Assert) -> Any:
        text = ast.unparse(node.test)
        return None if ("is_cuda" in text or "is_xpu" in text) else node


# (module, function) -> builder, for wrappers the generic recompile cannot run on CPU. Family shim modules
# register their builders here (route()); everything else takes the generic path.
ROUTES: dict[tuple[str, str], Callable[[str, str], Callable[..., Any]]] = {}


def route(keys: set[tuple[str, str]], builder: Callable[[str, str], Callable[..., Any]]) -> bool:
    """Send ``interpretable(module, fn)`` for ``keys`` to ``builder``; returns whether that changed anything."""
    changed = any(ROUTES.get(k) is not builder for k in keys)
    ROUTES.update(dict.fromkeys(keys, builder))
    return changed


def interpretable(module_name: str, fn_name: str) -> Callable[..., Any]:
    """SGLang's Triton wrapper ``module:fn``, runnable on CPU tensors in the interpreter."""
    builder = ROUTES.get((module_name, fn_name))
    return builder(module_name, fn_name) if builder is not None else recompiled(module_name, fn_name)


def recompiled(module_name: str, fn_name: str) -> Callable[..., Any]:
    """The generic path: the wrapper's source recompiled without its CUDA-device asserts."""
    ensure_interpreter()
    force_cuda_platform()
    module = importlib.import_module(module_name)
    node = StripCudaAsserts().visit(find_def(module_name, fn_name))
    node.decorator_list = []
    code = compile(ast.Module(body=[ast.fix_missing_locations(node)], type_ignores=[]),
                   f"<interpretable {module_name}.{fn_name}>", "exec")
    namespace = dict(vars(module))
    exec(code, namespace)  # noqa: S102 - recompiling SGLang's own wrapper source, asserts removed
    return namespace[fn_name]


def interpret_check(task: Any, dtypes: list[str], seeds: int = 1, show: Callable[[str], None] = print) -> int:
    """``kda check --interpret``: SGLang's Triton baseline against the oracle on rows tagged 'tiny'."""
    from kda_lab.correctness import check_row

    ensure_interpreter()
    install_shims()
    bad_dtypes = [d for d in dtypes if d not in INTERPRETER_DTYPES]
    if bad_dtypes:
        raise InterpreterUnavailable(f"interpreter runs support {INTERPRETER_DTYPES}; not {bad_dtypes}")
    rows = [w for w in task.workloads if "tiny" in w.tags]
    if not rows:
        show(f"{task.slug}: no rows tagged 'tiny'; nothing the interpreter can run")
        return 1
    failures = 0
    for w in rows:
        module_name, _, fn_name = task.functions[w.fn].sglang.partition(":")
        impl = interpretable(module_name, fn_name)
        for dtype in dtypes:
            wd = w.with_dtype(dtype)
            results = [res for s in range(seeds)
                       for res in check_row(task, wd, contract(task.family, w.fn), {"baseline": impl}, s, "cpu")]
            for res in results:
                show(res.describe())
                failures += not res.ok
    show(f"{task.slug}: interpreter check {'PASSED' if not failures else f'FAILED ({failures})'}")
    return 1 if failures else 0
