"""Task folders: loading and validating ``task.toml`` and the folder contract (README: Layout)."""

from __future__ import annotations

import hashlib
import importlib.util
import sys
import tomllib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from kda_lab import ARCH_CAPABILITY, SGLANG_PIN
from kda_lab.families import FAMILY_FUNCTIONS
from kda_lab.paths import kernels_dir
from kda_lab.task.byte_model import ByteModel
from kda_lab.task.twins import ROWS_FROM, TwinError, with_home_rows
from kda_lab.task.types import type_problems
from kda_lab.task.workloads import DTYPES, Workload, parse_workload

REQUIRED_FILES = (
    "prompt.md", "interface.md", "task.toml", "benchmark.py", "benchmark.csv", "solutions.jsonl",
    "src/register.py", "tests/test_correctness.py",
)
TOP_KEYS = {"slug", "arch", "family", "title", "sglang_version", "functions", "tolerances", "workloads", "notes",
            "seeds", ROWS_FROM}
FUNCTION_KEYS = {"name", "sglang", "entry", "reads", "writes", "exact", "note"}


class TaskError(ValueError):
    """A task.toml or task folder that breaks the contract."""


@dataclass(frozen=True)
class Tolerance:
    atol: float
    rtol: float


@dataclass(frozen=True)
class FunctionSpec:
    name: str
    sglang: str  # defining "module:function" in SGLang 0.5.23
    entry: str  # the public entry point the harness calls (the facade)
    byte_model: ByteModel
    exact: bool = False  # candidate must match SGLang bit for bit (SGLang's roundings are the contract)
    note: str = ""


@dataclass(frozen=True)
class Task:
    slug: str
    arch: str
    family: str
    title: str
    path: Path
    functions: dict[str, FunctionSpec]
    tolerances: dict[str, Tolerance]
    workloads: tuple[Workload, ...]
    notes: str = ""
    seeds: int = 2  # seeds per row a check needs to count as evidence (task.toml ``seeds``)
    rows_from: str = ""  # a twin's home: the task whose rows and tolerances it takes (kda_lab.task.twins)
    raw: dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def capability(self) -> tuple[int, int]:
        return ARCH_CAPABILITY[self.arch]

    @property
    def src_dir(self) -> Path:
        return self.path / "src"

    def rows(self, names: list[str] | None = None, kinds: tuple[str, ...] = ("production", "test")) -> list[Workload]:
        if names:
            known = {w.name for w in self.workloads}
            missing = [n for n in names if n not in known]
            if missing:
                raise TaskError(f"{self.slug}: unknown rows {missing}; see `kda tasks --rows {self.slug}`")
            return [w for w in self.workloads if w.name in names]
        return [w for w in self.workloads if w.kind in kinds]

    def tolerance(self, dtype: str) -> Tolerance:
        if dtype not in self.tolerances:
            raise TaskError(f"{self.slug}: no tolerance declared for {dtype}")
        return self.tolerances[dtype]


def _require(cond: bool, msg: str) -> None:
    if not cond:
        raise TaskError(msg)


def parse_task(raw: dict[str, Any], path: Path) -> Task:
    """The Task of the task.toml ``raw`` read from the folder ``path``; a twin (``rows_from``) gets its home's
    rows and tolerances here (kda_lab.task.twins), so every stage sees the rows put together the same way."""
    where = f"{path / 'task.toml'}"
    wrong = type_problems(raw, where)
    _require(not wrong, "\n    ".join(wrong))
    unknown = set(raw) - TOP_KEYS
    _require(not unknown, f"{where}: unknown keys {sorted(unknown)}")
    try:
        raw = with_home_rows(raw, path)
    except TwinError as e:
        raise TaskError(str(e)) from None
    for key in ("slug", "arch", "family", "functions", "tolerances", "workloads"):
        _require(key in raw, f"{where}: missing {key!r}")
    slug, arch, family = raw["slug"], raw["arch"], raw["family"]
    _require(slug == path.name, f"{where}: slug {slug!r} differs from the folder name {path.name!r}")
    _require(arch in ARCH_CAPABILITY, f"{where}: arch {arch!r} not in {sorted(ARCH_CAPABILITY)}")
    _require(slug.startswith(f"{arch}_"), f"{where}: slug must start with the arch prefix {arch}_")
    _require(raw.get("sglang_version", SGLANG_PIN) == SGLANG_PIN,
             f"{where}: sglang_version must be the lab pin {SGLANG_PIN}")
    allowed = FAMILY_FUNCTIONS.get(family)
    functions: dict[str, FunctionSpec] = {}
    for f in raw["functions"]:
        bad = set(f) - FUNCTION_KEYS
        _require(not bad, f"{where}: function {f.get('name')!r}: unknown keys {sorted(bad)}")
        for key in ("name", "sglang", "entry", "reads", "writes"):
            _require(key in f, f"{where}: function {f.get('name')!r}: missing {key!r}")
        _require(":" in f["sglang"] and ":" in f["entry"], f"{where}: {f['name']}: sglang/entry must be 'module:function'")
        if allowed is not None:
            _require(f["name"] in allowed, f"{where}: {f['name']!r} is not a {family} function {allowed}")
        functions[f["name"]] = FunctionSpec(
            name=f["name"], sglang=f["sglang"], entry=f["entry"],
            byte_model=ByteModel(tuple(f["reads"]), tuple(f["writes"])), exact=bool(f.get("exact", False)),
            note=f.get("note", ""),
        )
    _require(bool(functions), f"{where}: no functions")
    tolerances: dict[str, Tolerance] = {}
    for dtype, tol in raw["tolerances"].items():
        _require(dtype in DTYPES, f"{where}: tolerance for unknown dtype {dtype!r}")
        _require({"atol", "rtol"} <= set(tol), f"{where}: tolerance {dtype} needs atol and rtol")
        tolerances[dtype] = Tolerance(float(tol["atol"]), float(tol["rtol"]))
    workloads: list[Workload] = []
    for w in raw["workloads"]:
        try:
            wl = parse_workload(w)
        except (ValueError, TypeError, AttributeError, KeyError) as e:
            raise TaskError(f"{where}: workload {w.get('name')!r}: {type(e).__name__}: {e}") from None
        _require(wl.fn in functions, f"{where}: row {wl.name!r} names undeclared function {wl.fn!r}")
        if wl.kind == "production":
            _require(bool(wl.model and wl.preset and wl.source),
                     f"{where}: production row {wl.name!r} needs model, preset and source (provenance)")
        for name in functions[wl.fn].byte_model.reads + functions[wl.fn].byte_model.writes:
            _require(name in wl.args, f"{where}: row {wl.name!r}: byte model names {name!r}, which the row lacks")
        for spec in wl.tensor_specs().values():
            if spec.dtype in ("float16", "bfloat16", "float32"):
                _require(spec.dtype in tolerances, f"{where}: row {wl.name!r} uses {spec.dtype} without a tolerance")
        workloads.append(wl)
    names = [w.name for w in workloads]
    dup = {n for n in names if names.count(n) > 1}
    _require(not dup, f"{where}: duplicate row names {sorted(dup)}")
    _require(any(w.kind == "production" for w in workloads), f"{where}: no production rows")
    return Task(slug=slug, arch=arch, family=family, title=raw.get("title", slug), path=path, functions=functions,
                tolerances=tolerances, workloads=tuple(workloads), notes=raw.get("notes", ""), seeds=raw.get("seeds", 2),
                rows_from=raw.get(ROWS_FROM, ""), raw=raw)


def resolve_task_dir(name: str | Path) -> Path:
    p = Path(name)
    if (p / "task.toml").exists():
        return p.resolve()
    cand = kernels_dir() / str(name)
    if (cand / "task.toml").exists():
        return cand
    known = ", ".join(sorted(d.name for d in all_task_dirs())) or "none"
    raise TaskError(f"no task {str(name)!r} (looked in {kernels_dir()}); known tasks: {known}")


def read_task_toml(task_dir: Path, where: str | None = None) -> dict[str, Any]:
    """``task_dir``'s task.toml as parsed TOML, its values not checked yet (:func:`parse_task` checks them); a file
    that is not UTF-8 TOML is a TaskError naming it as ``where`` (default: its path)."""
    path = Path(task_dir) / "task.toml"
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise TaskError(f"{where or path}: not valid TOML: {e}") from None


def load_task(name: str | Path) -> Task:
    path = resolve_task_dir(name)
    return parse_task(read_task_toml(path), path)


def all_task_dirs() -> list[Path]:
    root = kernels_dir()
    return sorted(p.parent for p in root.glob("*/task.toml")) if root.exists() else []


# Runtime helpers of kda_kernels that a candidate's host path runs (kept launches, runs_here): a candidate that
# imports one is measured with it, so the helper's bytes are part of that candidate's source hash and a changed
# helper needs new evidence (the exporter's gate and `kda export --check` see it). A helper that imports another
# (launch_direct runs launch_cache's KeptLaunch) brings it into the hash too (HELPER_IMPORTS).
HASHED_HELPERS = ("launch_cache", "launch_direct")
HELPER_IMPORTS = {"launch_direct": ("launch_cache",)}


def _helper_path(name: str) -> Path | None:
    spec = importlib.util.find_spec("kda_kernels")  # locates the package without importing it (no torch here)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations))) / f"{name}.py"


def _installed_helper(name: str) -> bytes:
    path = _helper_path(name)
    return path.read_bytes() if path is not None and path.is_file() else b"<missing>"


def hashed_helpers(py_texts: list[bytes], helper: Callable[[str], bytes] = _installed_helper
                   ) -> list[tuple[str, bytes]]:
    """(``kda_kernels/<helper>.py``, its bytes) for each HASHED_HELPERS module that one of these sources imports:
    the part of a source hash that lives outside src/ (the exporter copies src/ only, the helper ships in
    kda_kernels). ``helper``: a helper's bytes by name (default: the installed kda_kernels'; a commit's when a
    hash is recomputed from git, kda_lab.task.commits)."""
    used = {name for name in HASHED_HELPERS if any(f"kda_kernels.{name}".encode() in t for t in py_texts)}
    used |= {dep for name in tuple(used) for dep in HELPER_IMPORTS.get(name, ())}
    return [(f"kda_kernels/{name}.py", helper(name)) for name in HASHED_HELPERS if name in used]


def hash_contents(files: dict[str, bytes], helper: Callable[[str], bytes] = _installed_helper) -> str:
    """The source hash of ``files`` (relative path -> bytes): sha256 of each path and its bytes in path order,
    plus each kda_kernels helper of HASHED_HELPERS that one of the .py files imports."""
    h = hashlib.sha256()
    texts = []
    for rel in sorted(files, key=Path):  # Path order, as source hashes always were
        data = files[rel]
        h.update(rel.encode() + b"\0" + data + b"\0")
        if rel.endswith(".py"):
            texts.append(data)
    for name, data in hashed_helpers(texts, helper):
        h.update(name.encode() + b"\0" + data + b"\0")
    return h.hexdigest()[:16]


def hash_files(base: Path, rels: list[str]) -> str:
    """The source hash over an explicit list of files under ``base`` (relative paths): :func:`hash_contents` of
    their bytes. The exporter hashes the list of files it copies with this, so a copy list that differs from the
    hash's shows."""
    return hash_contents({rel: (base / rel).read_bytes() for rel in rels})


def hashed_source(rel: Path) -> bool:
    """Whether a file (path relative to src/) is part of the source hash: caches and build outputs are not."""
    return not ("__pycache__" in rel.parts or rel.suffix in (".pyc", ".so", ".o") or "build" in rel.parts)


def source_hash(src_dir: Path) -> str:
    """The candidate's source hash: ``hash_files`` over src/, caches and build outputs excluded."""
    rels = [p.relative_to(src_dir).as_posix() for p in src_dir.rglob("*")
            if not p.is_dir() and hashed_source(p.relative_to(src_dir))]
    return hash_files(src_dir, rels)


def load_candidate(task: Task) -> ModuleType:
    """Import ``src/register.py`` under a private module name (importing must not need a GPU).

    A guarded call: whatever the import raises, ``SystemExit`` and ``KeyboardInterrupt`` included, becomes a
    TaskError naming it, so a candidate can neither end the checker (``sys.exit(0)`` in register.py made `kda
    validate` stop half way with exit 0) nor print a traceback at the user."""
    path = task.src_dir / "register.py"
    name = f"_kda_candidate_{task.slug}"
    spec = importlib.util.spec_from_file_location(name, path, submodule_search_locations=[str(task.src_dir)])
    if spec is None or spec.loader is None:
        raise TaskError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    sys.path.insert(0, str(task.src_dir))
    try:
        spec.loader.exec_module(module)
    except BaseException as e:  # noqa: BLE001 - the candidate is untrusted code: nothing it raises may escape
        sys.modules.pop(name, None)
        if isinstance(e, GeneratorExit):
            raise
        raise TaskError(f"{path}: importing the candidate raised {type(e).__name__}: {e}"
                        + (" (a candidate may not exit the checker)" if isinstance(e, SystemExit) else "")) from None
    finally:
        if str(task.src_dir) in sys.path:
            sys.path.remove(str(task.src_dir))
    exports = getattr(module, "EXPORTS", None)
    if not isinstance(exports, dict):
        raise TaskError(f"{path}: must define EXPORTS = {{sglang_function_name: callable}}")
    missing = set(task.functions) - set(exports)
    extra = set(exports) - set(task.functions)
    if missing or extra:
        raise TaskError(f"{path}: EXPORTS keys must equal the task's functions (missing {sorted(missing)}, "
                        f"unexpected {sorted(extra)})")
    bad = sorted(k for k, v in exports.items() if not callable(v))
    if bad:
        raise TaskError(f"{path}: EXPORTS values must be callables (not for {bad})")
    return module
