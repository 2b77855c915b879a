"""Run SGLang's real Triton kernels on a CPU host, in Triton's interpreter (``TRITON_INTERPRET=1``).

Shims, each as small as it can be:
- the platform key is forced to "cuda" before a kernel module is imported, so ``select_impl`` keeps the
  Triton implementation instead of the CPU fallback;
- ``is_cuda`` asserts in the Python wrapper are removed from a recompiled copy of that one function (the
  Triton kernels themselves are untouched);
- a CPU torch lacks ``torch.cpu.get_device_properties``, which ``norm_triton`` reads at import: stubbed.
Triton 3.6's interpreter mishandles bf16 arithmetic, so interpreter runs use fp32/fp16 only.

:func:`interpret_check` (``kda check TASK --interpret``) runs the candidate this way, against the oracle and,
for ``exact`` functions, bit for bit against SGLang's kernel in the interpreter.
"""

from __future__ import annotations

import ast
import importlib
import os
import sys
import textwrap
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from kda_lab.families import contract
from kda_lab.sglang_source import find_def

INTERPRETER_DTYPES = ("float32", "float16")
# Family shims for wrappers the generic recompile cannot run on CPU (each idempotent, each touching only the
# SGLang kernels it names): rotary autotune/bf16 rounding, group-norm custom-op wrappers, one-pass RMS.
SHIM_MODULES = ("kda_lab.interpret.shims.rotary_embedding", "kda_lab.interpret.shims.group_norm_silu", "kda_lab.interpret.shims.norm_infer")


def install_shims() -> None:
    """Install every family's shims; call after the interpreter is switched on (some are no-ops otherwise)."""
    from kda_lab.interpret import rescan

    rescan.install()
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


# Why a row or dtype is not run on CPU (printed with the rows it applies to).
WHY_NOT_TINY = "not tagged 'tiny' (too large for the interpreter, or a dtype/kernel it cannot run; see task.toml)"
WHY_NOT_BF16 = ("Triton 3.6's interpreter mishandles bf16 arithmetic (it truncates fp32 -> bf16 casts); "
                "bf16 is checked on the GPU")
CUDA_SUFFIXES = (".cu", ".cuh", ".cpp", ".cc")
CUDA_MARKERS = ("cpp_extension", "load_inline")


def compiles_cuda_itself(src_dir: Path) -> list[str]:
    """Python files of a candidate that compile native code themselves (``cpp_extension``, ``load_inline``): such
    a candidate cannot be imported and run on CPU. One whose native sources are built through
    ``kda_kernels.prebuilt`` (built on its first CUDA call) still runs its Triton paths here."""
    return [p.relative_to(src_dir).as_posix() for p in sorted(src_dir.rglob("*.py"))
            if "__pycache__" not in p.parts and any(m in p.read_text(errors="replace") for m in CUDA_MARKERS)]


class ExtensionBlocked(RuntimeError):
    """A candidate asked for its CUDA extension under the CPU interpreter."""


@contextmanager
def extensions_blocked() -> Iterator[list[str]]:
    """While open, loading or building any ``kda_kernels.prebuilt.Extension`` raises ``ExtensionBlocked`` (no
    compile on a CPU host, no host path that is not the one a GPU takes); yields the names asked for."""
    from kda_kernels import prebuilt

    asked: list[str] = []
    load, build = prebuilt.Extension.load, prebuilt.Extension.build

    def blocked(self: Any, *args: Any, **kwargs: Any) -> Any:
        asked.append(self.name)
        raise ExtensionBlocked(f"{self.name}: a CUDA extension does not run under the CPU interpreter")

    prebuilt.Extension.load = blocked  # type: ignore[method-assign]
    prebuilt.Extension.build = blocked  # type: ignore[method-assign]
    try:
        yield asked
    finally:
        prebuilt.Extension.load, prebuilt.Extension.build = load, build  # type: ignore[method-assign]


def wrapper_not_interpretable(fn: str, native: list[str]) -> str | None:
    """A candidate with native sources whose function is a wrapper of modules (``apply_group_norm_silu``): its
    device gate sends CPU tensors to torch's modules, while the interpreter's copy of SGLang's wrapper has that
    gate removed, so the two would not run the same path (outputs differ in layout, not in code under test)."""
    from kda_kernels.registry import BY_FUNCTION

    target = BY_FUNCTION.get(fn)
    if not native or target is None or target.kind != "wrapper":
        return None
    return (f"{fn} is a wrapper whose device gate sends CPU tensors to torch's modules; a candidate with CUDA "
            f"sources (src/{native[0]}) runs its kernels for it on the GPU")


def not_runnable_on_cpu(error: str, native: list[str]) -> str | None:
    """Why a candidate with native sources (``native``: src/ files) did not run a row on CPU, when its call
    raised there: its CPU path reached a CUDA-only kernel (its own, or SGLang's JIT one). A wrong answer, or a
    fallback that recurses, is never excused. None: the row counts as run."""
    if not native or not error.startswith("raised ") or error.startswith("raised RecursionError"):
        return None
    return f"its CPU path {error}; a candidate with CUDA sources (src/{native[0]}) is checked on the GPU"


def cuda_sources(src_dir: Path) -> list[str]:
    """Files that make a candidate a CUDA candidate (native sources, or a Python file that compiles them)."""
    found = []
    for p in sorted(src_dir.rglob("*")):
        if "__pycache__" in p.parts or not p.is_file():
            continue
        if p.suffix in CUDA_SUFFIXES or (p.suffix == ".py" and any(m in p.read_text(errors="replace")
                                                                   for m in CUDA_MARKERS)):
            found.append(p.relative_to(src_dir).as_posix())
    return found


@contextmanager
def sglang_fallbacks_interpretable(task: Any, names: list[str]) -> Iterator[Counter[str]]:
    """Inside: each function's defining module (task.toml ``sglang``) holds SGLang's wrapper made runnable on CPU,
    counting calls, so a candidate that falls back to SGLang (kda_kernels.lazy_baseline) runs SGLang's kernel in
    the interpreter and the check can tell that the row was SGLang's, not the candidate's own code. ``names``: the
    functions that have rows to run (SGLang modules that cannot run on CPU, e.g. CuTe DSL ones, are left alone)."""
    calls: Counter[str] = Counter()
    saved: list[tuple[Any, str, Any]] = []

    def counting(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            calls[name] += 1
            return fn(*args, **kwargs)

        return call

    try:
        for name in names:
            module_name, _, fn_name = task.functions[name].sglang.partition(":")
            module = importlib.import_module(module_name)
            saved.append((module, fn_name, getattr(module, fn_name)))
            setattr(module, fn_name, counting(name, interpretable(module_name, fn_name)))
        yield calls
    finally:
        for module, fn_name, old in reversed(saved):
            setattr(module, fn_name, old)


@dataclass
class CpuVerdict:
    passed: int = 0
    failed: int = 0
    not_run: int = 0  # rows where the candidate's own code could not run on CPU (CUDA, or fell back to SGLang)
    lines: list[str] = field(default_factory=list)

    @property
    def word(self) -> str:
        if self.failed:
            return "FAILED"
        return "PASSED" if self.passed else "NOT CHECKED"

    @property
    def exit_code(self) -> int:
        return {"PASSED": 0, "FAILED": 1, "NOT CHECKED": NOT_CHECKED_EXIT}[self.word]


NOT_CHECKED_EXIT = 3  # nothing failed, but no row ran the candidate's own code on CPU: not a pass


def _wrapped(names: list[str], width: int = 100) -> list[str]:
    return textwrap.wrap(", ".join(names), width, initial_indent="      ", subsequent_indent="      ")


def check_tiny_row(task: Any, cand: Any, w: Any, dtype: str, seeds: int, cuda: list[str],
                   fallback_calls: Counter[str], verdict: CpuVerdict, show: Callable[[str], None],
                   native: list[str] | None = None) -> None:
    """One tiny row in one dtype, every seed: the candidate's verdict line(s), added to ``verdict``."""
    from kda_lab.measure.correctness import check_row

    label = f"{w.name} [{dtype}]"
    if cuda:
        verdict.not_run += 1
        show(f"{label}: NOT RUN: a CUDA candidate cannot run on CPU (src/{cuda[0]}); "
             f"check it on the GPU: kda check {task.slug}")
        return
    exact = task.functions[w.fn].exact
    native = native or []
    why = wrapper_not_interpretable(w.fn, native)
    if cand.is_baseline and "no_cpu_baseline" in w.tags:
        why = "the candidate is SGLang's kernel, which does not run on CPU for this row"
    if why:
        verdict.not_run += 1
        show(f"{label}: NOT RUN: {why}; check it on the GPU: kda check {task.slug}")
        return
    module_name, _, fn_name = task.functions[w.fn].sglang.partition(":")
    sglang_impl = interpretable(module_name, fn_name)
    for s in range(seeds):
        fallback_calls.clear()
        with extensions_blocked() as asked:
            results = check_row(task, w.with_dtype(dtype), contract(task.family, w.fn),
                                {"baseline": sglang_impl, "candidate": cand.exports[w.fn]}, s, "cpu",
                                installed=cand.exports)
        res = next(r for r in results if r.impl == "candidate")
        base = next(r for r in results if r.impl == "baseline")
        head = f"{label} seed {s}"
        why = not_runnable_on_cpu(res.error, native)
        if asked or why:
            verdict.not_run += 1
            show(f"{head}: NOT RUN: " + (f"the candidate asked for its CUDA extension {asked[0]} on CPU" if asked
                                         else why) + f"; check it on the GPU: kda check {task.slug}")
        elif not res.ok:
            verdict.failed += 1
            show(res.describe().replace(f"{res.row} [candidate, seed {s}]", head, 1))
        elif fallback_calls[w.fn] and not cand.is_baseline:
            verdict.not_run += 1
            show(f"{head}: NOT RUN: the candidate handed this row to SGLang (its own kernel did not run on CPU)")
        else:
            verdict.passed += 1
            show(f"{head}: ok{' (bit-identical to SGLang)' if exact else ''}")
        if not base.ok:
            show(f"    (SGLang's own kernel is off the oracle here: {base.describe()})")


def interpret_check(task: Any, dtypes: list[str], seeds: int = 1, show: Callable[[str], None] = print,
                    record: bool = True, rows: list[str] | None = None) -> int:
    """``kda check --interpret``: the candidate (src/register.py EXPORTS) against the fp64 oracle on the rows
    tagged 'tiny', in the Triton interpreter (fp32/fp16), and bit for bit against SGLang's kernel (run in the
    interpreter too) for functions declared ``exact``. A CPU verdict, recorded as such: never GPU evidence.

    ``rows``: only these rows (each must exist; those not tagged 'tiny' are listed as not run on CPU).
    Exit status: 0 passed, 1 failed, 3 not checked (no row ran the candidate's own code on CPU)."""
    from kda_lab.measure.run import candidate_identity
    from kda_lab.task import TaskError

    unknown = [d for d in dtypes if d not in ("float32", "float16", "bfloat16")]
    if unknown:
        raise TaskError(f"--dtypes: unknown {unknown}; the interpreter runs {', '.join(INTERPRETER_DTYPES)}")
    chosen = {w.name for w in task.rows(rows)} if rows else {w.name for w in task.workloads}  # TaskError: unknown
    ensure_interpreter()
    install_shims()
    run_dtypes = [d for d in dtypes if d in INTERPRETER_DTYPES]
    cand = candidate_identity(task, register=record)
    tiny = [w for w in task.workloads if "tiny" in w.tags and w.name in chosen]
    cuda = [] if cand.is_baseline else compiles_cuda_itself(task.src_dir)
    native = [] if cand.is_baseline else cuda_sources(task.src_dir)
    verdict = CpuVerdict()
    show(f"{task.slug}: candidate {cand.id} ({cand.source_hash}{', SGLang baseline' if cand.is_baseline else ''}) "
         f"in the Triton interpreter on CPU, {len(tiny)} tiny rows x {'/'.join(run_dtypes) or 'no dtype'} x "
         f"{seeds} seed(s)")
    # One context for the whole run: a lazily resolved fallback caches what it found on its first call.
    names = sorted({w.fn for w in tiny}) if run_dtypes and not cuda else []
    with sglang_fallbacks_interpretable(task, names) as fallback_calls:
        for w in tiny:
            for dtype in run_dtypes:
                check_tiny_row(task, cand, w, dtype, seeds, cuda, fallback_calls, verdict, show, native)
    skipped = [w.name for w in task.workloads if "tiny" not in w.tags and w.name in chosen]
    if skipped:
        show(f"  not run on CPU, {len(skipped)} rows: {WHY_NOT_TINY}:")
        for line in _wrapped(skipped):
            show(line)
    show(f"  bfloat16: not run on CPU: {WHY_NOT_BF16}")
    exact = [n for n, f in task.functions.items() if f.exact]
    if exact:
        show(f"  exact (bit for bit with SGLang): {', '.join(exact)}")
    show(f"{task.slug}: CPU interpreter verdict {verdict.word} for candidate {cand.id}: {verdict.passed} ok, "
         f"{verdict.failed} failed, {verdict.not_run} not run (a CPU verdict: GPU evidence needs "
         f"`kda check {task.slug}` on an {task.arch.upper()})")
    if record:
        record_cpu_verdict(task, cand, verdict, dtypes=run_dtypes, seeds=seeds, rows=len(tiny))
    return verdict.exit_code


CPU_DEVICE = "cpu-interpreter"


def record_cpu_verdict(task: Any, cand: Any, verdict: CpuVerdict, dtypes: list[str], seeds: int, rows: int) -> None:
    """Append the CPU verdict to solutions.jsonl as an ``interpret`` event on device ``cpu-interpreter``: the
    exporter's gate reads only ``check`` events from a GPU, so this row can never count as evidence."""
    from kda_lab import ledger
    from kda_lab.measure.env import capture
    from kda_lab.measure.run import new_run_id
    from kda_lab.paths import repo_root

    env = capture(repo_root(), None)
    ledger.append_solution(
        task.path, id=cand.id, parent=None, status=cand.status, event="interpret", source_hash=cand.source_hash,
        arch=task.arch, gpu=CPU_DEVICE,
        evidence={"run_id": new_run_id(), "passed": verdict.passed, "failed": verdict.failed,
                  "not_run": verdict.not_run, "device": CPU_DEVICE, "verdict": verdict.word},
        git_commit=env["git_commit"], command=env["command"],
        note=f"CPU interpreter verdict {verdict.word} (not GPU evidence); {rows} tiny rows; dtypes "
             f"{','.join(dtypes)}; seeds {seeds}")
