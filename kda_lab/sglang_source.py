"""Reading SGLang's own source: function definitions found by module name, without importing the module
(some kernel modules cannot be imported on a CPU torch, and on a CPU host a module attribute may be a
``(*args, **kwargs)`` fallback that ``select_impl`` chose at import)."""

from __future__ import annotations

import ast
from importlib.util import find_spec
from pathlib import Path


def find_def(module: str, name: str) -> ast.FunctionDef:
    """The top-level ``def name`` in SGLang's module ``module`` (the first one: select_impl rebinds the name)."""
    spec = find_spec(module)
    if spec is None or spec.origin is None:
        raise LookupError(f"cannot find module {module}")
    for node in ast.parse(Path(spec.origin).read_text()).body:
        if isinstance(node, ast.FunctionDef) and node.name == name:
            return node
    raise LookupError(f"{module} defines no function {name}")


def parameters(module: str, name: str) -> list[str]:
    a = find_def(module, name).args
    return [x.arg for x in (*a.posonlyargs, *a.args, *a.kwonlyargs)]
