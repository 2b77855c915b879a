"""`kda new-family`: register a new kernel family in the lab, one command per extension path
(docs/workflow.md, "Adding to the lab").

- ``kda new-family NAME --sglang module:function [...]``: SGLang functions the overlay swaps. Writes the
  family module (``FUNCTIONS`` / ``BYTE_MODELS`` stubs; the test rows go in the family's first task.toml,
  ``kda_lab.families.rows``), the registry targets (``kda_kernels/registry.py`` ``TARGETS``, which
  ``kda_lab.families.FAMILY_FUNCTIONS`` reads), the ``kda::`` contract stubs (``kda_kernels/contracts.py``),
  the generated overlay family ``kda_kernels/diffusion/NAME/__init__.py`` and the family's test file
  ``tests/families/test_NAME.py`` (SGLang against the oracle, and a wrong implementation the checker must
  reject: ``tests/families/test_layout_of_family_tests.py`` requires one of every family).
- ``kda new-family NAME --fast-path module:Class``: code inside an SGLang model class (no function to swap).
  Writes the family module (with ``BASELINES``: the lab's verbatim copy of that code, to fill in), the
  ``MODEL_FAMILIES`` / ``FAMILY_FUNCTIONS`` entries (``kda_lab/families/__init__.py``), the ``FAST_PATHS``
  entry (``kda_kernels/registry.py``), the generated overlay family ``__init__`` and the test file.

What needs judgment is marked ``TODO(stamp)``; ``kda validate`` refuses a task of the family until the family
module has none left (:mod:`kda_lab.task.family_checks`). Then ``kda new-task <arch>_... --family NAME``.
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kda_lab.families import FAMILY_FUNCTIONS
from kda_lab.paths import repo_root
from kda_lab.sglang_source import find_def
from kda_lab.task.schema import TaskError
from kda_lab.task.validate import TODO

FACADE = "sglang.kernels.ops.diffusion"
NAME_RE = re.compile(r"[a-z][a-z0-9_]*")
# Anchors of the hand-kept tables the stamper appends to (a missing anchor is an error, never a silent skip).
TARGETS_END = "\n)\n\nBY_FUNCTION"
FAST_PATHS_END = "\n)\nFAST_PATH_FAMILIES"
CONTRACTS_END = "\n)}\n"
SIGNATURES_END = "\n\n# " + "-" * 101 + " fakes"
MODEL_FAMILIES_RE = re.compile(r"MODEL_FAMILIES: tuple\[str, \.\.\.\] = \(([^)]*)\)")
FAMILY_FUNCTIONS_END = "\n}\n\n\nclass FamilyNotImplemented"


class FamilyError(TaskError):
    pass


@dataclass
class Stamped:
    """What one ``kda new-family`` created and modified (repository-relative paths, in the order written)."""

    created: list[str] = field(default_factory=list)
    modified: list[str] = field(default_factory=list)


def _split(ref: str, what: str) -> tuple[str, str]:
    module, sep, name = ref.partition(":")
    if not sep or not module or not name.isidentifier():
        kind = "Class" if what == "--fast-path" else "function"
        raise FamilyError(f"{what} must be module:{kind}, got {ref!r}")
    return module, name


def _module_file(module: str) -> Path:
    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None:
        raise FamilyError(f"no module {module} in this environment (SGLang 0.5.23 installed?)")
    return Path(spec.origin)


def _find_class(module: str, name: str) -> ast.ClassDef:
    for node in ast.parse(_module_file(module).read_text()).body:
        if isinstance(node, ast.ClassDef) and node.name == name:
            return node
    raise FamilyError(f"{module} defines no class {name}")


def facade_function(module: str, fn: str) -> bool:
    """Whether SGLang's facade exports ``fn`` from ``module`` (then tasks call it through the facade)."""
    from importlib import import_module

    exports: dict[str, str] = import_module(FACADE)._EXPORTS  # noqa: SLF001 - the facade's own table
    owner = exports.get(fn)
    return owner is not None and (owner if owner.startswith("sglang.") else f"{FACADE}.{owner}") == module


def _signature_stub(module: str, fn: str) -> tuple[str, list[str]]:
    """SGLang's ``def`` line of ``fn`` as a body-less stub for kda_kernels/contracts.py, and its tensor
    arguments."""
    node = find_def(module, fn)
    stub = ast.FunctionDef(name=fn, args=node.args, body=[ast.Expr(ast.Constant(...))], decorator_list=[],
                           returns=node.returns, type_params=[])
    text = ast.unparse(ast.fix_missing_locations(stub))
    text = text.replace("torch.Tensor", "Tensor").replace(":\n    ...", ": ...")
    tensors = [a.arg for a in (*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs)
               if a.annotation is not None and "Tensor" in ast.unparse(a.annotation)]
    return text, tensors


def family_module_text(name: str, functions: dict[str, list[str]], baselines: dict[str, str],
                       origin: list[str], exact: bool) -> str:
    """The stamped ``kda_lab/families/NAME.py``: real structure, stubs marked TODO(stamp) where judgment
    goes."""
    q = '"'
    lines = [
        f'"""The {name} family, stamped by `kda new-family` from SGLang 0.5.23\'s',
        *(f"``{ref}``{',' if i + 1 < len(origin) else '.'}" for i, ref in enumerate(origin)),
        "",
        f"{TODO}: the contract of each function: shapes, dtypes, strides, in place or not, what SGLang",
        "computes (quote its code), what the oracle computes in fp64 and why the task.toml's tolerances are",
        "what they are.",
        '"""',
        "",
        "from __future__ import annotations",
        "",
        "import torch",
        "",
        "from kda_lab.families.base import Args, FunctionContract",
        "",
        "",
    ]
    for fn, tensors in functions.items():
        lines += [
            f"def {fn}_oracle(a: Args) -> tuple[torch.Tensor, ...]:",
            f'    """fp64 oracle of ``{fn}`` from {", ".join(tensors) or "its arguments"}."""',
            f'    raise NotImplementedError("{TODO}: the fp64 oracle of {fn} (no SGLang code)")',
            "",
            "",
        ]
    for ref in baselines.values():
        if ref.startswith(f"kda_lab.families.{name}:"):
            lines += [
                f"def {ref.partition(':')[2]}(*args: torch.Tensor) -> torch.Tensor:",
                '    """SGLang\'s code lifted verbatim into a function with the lab\'s signature, from',
                f'    ``{origin[0]}``."""',
                f'    raise NotImplementedError("{TODO}: copy SGLang\'s code here, verbatim")',
                "",
                "",
            ]
    lines.append("FUNCTIONS = {")
    lines += [f'    "{fn}": FunctionContract(name="{fn}", oracle={fn}_oracle),' for fn in functions]
    lines += ["}", "", "# Byte model per function: the arguments read once, then one argument of each",
              f"# output's shape (the outputs written once). {TODO}: check them against the code.",
              "BYTE_MODELS = {"]
    lines += [f'    "{fn}": (({", ".join(f"{q}{t}{q}" for t in ts)}{"," if len(ts) == 1 else ""}), '
              f'({f"{q}{ts[0]}{q}," if ts else ""})),' for fn, ts in functions.items()]
    lines += ["}", ""]
    if exact:
        lines += ["# SGLang's roundings are the contract: tasks get exact = true and zero tolerances.",
                  "EXACT = True", ""]
    if baselines:
        lines += ["# SGLang has no facade entry for these: tasks name them as task.toml's sglang and entry.",
                  "BASELINES = {", *[f'    "{fn}": "{ref}",' for fn, ref in baselines.items()], "}", ""]
    return "\n".join(lines)


def test_file_text(name: str) -> str:
    return f'''"""The {name} family: SGLang against the fp64 oracle on the tiny rows of the family's
tasks, and a wrong implementation the checker must reject ({TODO}: add hand-computed oracle cases and
the family's known wrong implementations)."""

from __future__ import annotations

import pytest

from kda_lab.families import contract
from kda_lab.measure.correctness import check_row
from kda_lab.task import all_task_dirs, load_task

FAMILY = "{name}"
TASKS = [t for t in map(load_task, all_task_dirs()) if t.family == FAMILY]
ROWS = [(t, w) for t in TASKS for w in t.workloads if "tiny" in w.tags]


def _sglang(task, fn: str):
    from kda_lab.interpret import install_shims, interpretable

    install_shims()
    module, _, name = task.functions[fn].sglang.partition(":")
    return interpretable(module, name)


def test_the_family_has_a_task_with_tiny_rows() -> None:
    assert ROWS, f"no task of {{FAMILY}} has rows tagged tiny (kda new-task <arch>_... --family {{FAMILY}})"


@pytest.mark.parametrize(("task", "row"), ROWS, ids=[f"{{t.slug}}-{{w.name}}" for t, w in ROWS])
def test_sglang_agrees_with_the_oracle(task, row) -> None:
    results = check_row(task, row.with_dtype("float32"), contract(FAMILY, row.fn),
                        {{"baseline": _sglang(task, row.fn)}}, seed=1, device="cpu")
    assert all(r.ok for r in results), "\\n".join(r.describe() for r in results)


@pytest.mark.parametrize(("task", "row"), ROWS, ids=[f"{{t.slug}}-{{w.name}}" for t, w in ROWS])
def test_the_checker_rejects_a_wrong_implementation(task, row) -> None:
    sglang, fc = _sglang(task, row.fn), contract(FAMILY, row.fn)

    def one_element_off(**kwargs):  # SGLang's answer with its first output element moved by 1.0
        result = sglang(**kwargs)
        first = fc.outputs(result, kwargs)[0]
        first[(0,) * first.dim()] += 1.0
        return result

    results = check_row(task, row.with_dtype("float32"), fc, {{"wrong": one_element_off}}, seed=1,
                        device="cpu")
    assert not all(r.ok for r in results), "an output one element off passed the checker"
'''


def _edit(root: Path, rel: str, anchor: str, insert: str, stamped: Stamped) -> None:
    """Insert ``insert`` before the first ``anchor`` in ``rel`` (refuses when the anchor is gone)."""
    path = root / rel
    text = path.read_text()
    if anchor not in text:
        raise FamilyError(f"{rel}: cannot find where to add the entry ({anchor.strip()!r}); add it by hand")
    path.write_text(text.replace(anchor, insert + anchor, 1))
    if rel not in stamped.modified:
        stamped.modified.append(rel)


def _create(root: Path, rel: str, text: str, stamped: Stamped) -> None:
    path = root / rel
    if path.exists():
        raise FamilyError(f"{rel} exists already")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    stamped.created.append(rel)


def _family_init(root: Path, name: str, stamped: Stamped) -> None:
    """The generated kda_kernels/diffusion/NAME/__init__.py (unpromoted), written by the exporter's own
    renderer in a fresh process: it reads the registry this command just edited."""
    import subprocess
    import sys

    code = ("from pathlib import Path; from kda_lab.export.overlay import write_family_init; "
            f"write_family_init(Path('.'), {name!r})")
    r = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True,
                       env={**__import__("os").environ, "PYTHONPATH": str(root)})
    if r.returncode != 0:
        raise FamilyError(f"generating kda_kernels/diffusion/{name}/__init__.py failed:\n{r.stderr[-2000:]}")
    stamped.created += [f"kda_kernels/diffusion/{name}/__init__.py",
                        f"kda_kernels/diffusion/{name}/_impls/__init__.py"]


def new_family(name: str, sglang: list[str] | None = None, fast_path: str | None = None,
               functions: list[str] | None = None, exact: bool = False, root: Path | None = None) -> Stamped:
    """Register family ``name`` for SGLang functions (``sglang``) or a model class's code (``fast_path``)."""
    root = root or repo_root()
    if not NAME_RE.fullmatch(name):
        raise FamilyError(f"a family name is lower_snake_case, got {name!r}")
    if name in FAMILY_FUNCTIONS or (root / "kda_lab" / "families" / f"{name}.py").exists():
        raise FamilyError(f"family {name!r} exists already")
    if bool(sglang) == bool(fast_path):
        raise FamilyError("give either --sglang module:function (repeatable) or --fast-path module:Class")
    taken = {fn for fns in FAMILY_FUNCTIONS.values() for fn in fns}
    stamped = Stamped()
    q = '"'
    if sglang:
        refs = [_split(ref, "--sglang") for ref in sglang]
        fns: dict[str, list[str]] = {}
        stubs, baselines = [], {}
        for module, fn in refs:
            if fn in taken:
                raise FamilyError(f"{fn} is already a function of family "
                                  f"{next(f for f, v in FAMILY_FUNCTIONS.items() if fn in v)!r}")
            try:
                stub, fns[fn] = _signature_stub(module, fn)
            except LookupError as e:
                raise FamilyError(str(e)) from e
            stubs.append(stub)
            if not facade_function(module, fn):
                baselines[fn] = f"{module}:{fn}"
        origin = [f"{m}:{f}" for m, f in refs]
        _create(root, f"kda_lab/families/{name}.py", family_module_text(name, fns, baselines, origin, exact),
                stamped)
        _edit(root, "kda_kernels/registry.py", TARGETS_END,
              "".join(f"\n    # {TODO}: {fn}'s kind (op, out, optional, wrapper; see the module docstring)"
                      f"\n    SwapTarget({q}{fn}{q}, {q}{name}{q},\n               {q}{module}:{fn}{q}),"
                      for module, fn in refs), stamped)
        _edit(root, "kda_kernels/contracts.py", SIGNATURES_END,
              "".join(f"\n\n# {TODO}: {stub.split('(')[0][4:]}'s signature as SGLang 0.5.23 defines it "
                      f"(tests/test_overlay.py compares)\n{stub}\n" for stub in stubs), stamped)
        _edit(root, "kda_kernels/contracts.py", CONTRACTS_END,
              "".join(f"\n    # {TODO}: {fn}'s fake returns what SGLang returns (shape, dtype, strides); "
                      "mutated args"
                      f"\n    _c({fn}, _fake_like0)," for _, fn in refs), stamped)
    else:
        assert fast_path is not None
        module, cls = _split(fast_path, "--fast-path")
        _find_class(module, cls)
        kernels = functions or [name]
        clash = sorted(set(kernels) & taken)
        if clash:
            raise FamilyError(f"{', '.join(clash)} already belong to another family")
        baselines = {fn: f"kda_lab.families.{name}:sglang_{fn}" for fn in kernels}
        origin = [f"{module}.{cls}"]
        _create(root, f"kda_lab/families/{name}.py",
                family_module_text(name, {fn: [] for fn in kernels}, baselines, origin, exact), stamped)
        init = root / "kda_lab" / "families" / "__init__.py"
        text = init.read_text()
        m = MODEL_FAMILIES_RE.search(text)
        if m is None:
            raise FamilyError("kda_lab/families/__init__.py: cannot find MODEL_FAMILIES; add the family by "
                              "hand")
        names = [x.strip() for x in m.group(1).split(",") if x.strip()]
        init.write_text(text.replace(m.group(0), m.group(0).replace(
            m.group(1), ", ".join([*names, f"{q}{name}{q}"]) + ("," if not names else ""))))
        stamped.modified.append("kda_lab/families/__init__.py")
        _edit(root, "kda_lab/families/__init__.py", FAMILY_FUNCTIONS_END,
              f"\n    {q}{name}{q}: {_tuple_text(kernels, q)},", stamped)
        fp_name = re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", cls).lower()
        _edit(root, "kda_kernels/registry.py", FAST_PATHS_END,
              f"\n    FastPath({q}{fp_name}{q}, {q}{name}{q}, {q}{module}{q},\n"
              f"             {_tuple_text(kernels, q)}),", stamped)
    _family_init(root, name, stamped)
    _create(root, f"tests/families/test_{name}.py", test_file_text(name), stamped)
    return stamped


def _tuple_text(items: list[str] | tuple[str, ...], q: str) -> str:
    """A tuple literal of quoted names, with the trailing comma only where one element needs it."""
    inner = ", ".join(f"{q}{x}{q}" for x in items)
    return f"({inner},)" if len(items) == 1 else f"({inner})"


def cmd_new_family(args: argparse.Namespace) -> int:
    stamped = new_family(args.name, sglang=args.sglang, fast_path=args.fast_path,
                         functions=args.functions.split(",") if args.functions else None, exact=args.exact)
    print(f"family {args.name}:")
    for rel in stamped.created:
        print(f"  created  {rel}")
    for rel in stamped.modified:
        print(f"  modified {rel}")
    print(f"next: resolve every {TODO} in kda_lab/families/{args.name}.py (oracle, byte models, test rows) "
          f"and in the files above, then `kda new-task <arch>_<name> --family {args.name}` "
          "(docs/workflow.md, \"Adding to the lab\"); commit all of these files before launching")
    return 0


def register(sub: Any) -> None:
    p = sub.add_parser("new-family",
                       help="register a new kernel family (SGLang functions or a model-class fast path)")
    p.add_argument("name", help="the family, lower_snake_case (e.g. residual_gate)")
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--sglang", action="append", metavar="MODULE:FUNCTION",
                   help="an SGLang 0.5.23 function the overlay swaps (repeat for several)")
    g.add_argument("--fast-path", metavar="MODULE:CLASS",
                   help="an SGLang model class whose code the family replaces (a module-level fast path)")
    p.add_argument("--functions",
                   help="with --fast-path: the lab's kernel functions, comma-separated (default: NAME)")
    p.add_argument("--exact", action="store_true",
                   help="SGLang's roundings are the contract: tasks get exact = true and zero tolerances")
    p.set_defaults(func=cmd_new_family)
