"""`kda new-task`: generate a task folder from the template in kda_lab/templates/task (then edit it).

What the stamper can know, it fills: arch facts, the family's functions with their SGLang 0.5.23 defining
modules (read from the facade's export table), byte models the family module declares, the thin scaffolds,
empty ledgers with the fixed header, the launcher, and production rows converted from a capture file
(positional arguments named through the SGLang function's signature). What needs judgment is marked
``TODO(stamp)``; `kda validate` rejects a folder until every marker is resolved.

A second arch of an existing task (``b200_<name>`` where ``h200_<name>`` of the same family exists, or the
other way round) is stamped as its twin: ``rows_from = "<home>"`` and no rows or tolerances of its own
(:mod:`kda_lab.task.twins`), except the captured calls that none of the home's rows makes.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import tomllib
from importlib import import_module
from pathlib import Path
from string import Template
from typing import Any

from kda_lab import ARCH_CAPABILITY, ledger
from kda_lab.families import FAMILY_FUNCTIONS
from kda_lab.families.rows import family_test_blocks
from kda_lab.launch.launchers import write_launcher
from kda_lab.paths import kernels_dir, repo_root
from kda_lab.sglang_source import parameters
from kda_lab.task.family_checks import family_source
from kda_lab.task.schema import TaskError
from kda_lab.task.twins import ROWS_FROM, twin_home
from kda_lab.task.validate import TODO
from kda_lab.task.workloads import TensorSpec, parse_workload

TEMPLATE_DIR = Path(__file__).parent / "templates" / "task"
ARCH_FACTS = {
    "h200": {
        "gpu": "H200",
        "gpu_facts": "H200 (compute capability 9.0, 132 SMs, 60 MB L2, measured copy ceiling ≈ 4.29 TB/s)",
        "build_rule": "CUDA builds with `-gencode=arch=compute_90a,code=sm_90a` (TMA, clusters, wgmma available)",
        "gpu_method": "Timings count only from the H200 box (docs/gpu-box.md: stage SGLang, run `scripts/gpu_box.sh`,\n"
                      "bring the ledgers back through `$OUT`, commit them).",
    },
    "b200": {
        "gpu": "B200",
        "gpu_facts": "B200 (compute capability 10.0, 148 SMs; read L2 size and SM count off the device)",
        "build_rule": "CUDA builds with `-gencode=arch=compute_100a,code=sm_100a`",
        "gpu_method": "Timings need a B200 machine: this task validates and compile-checks on CPU, and its benchmark\n"
                      "rows must come from a B200 (`kda bench` refuses any other GPU).",
    },
}
CAPTURES_DIR_ENV = "KDA_CAPTURES_DIR"


class StampError(TaskError):
    pass


def off_facade_baseline(fn: str) -> str | None:
    """'module:function' of the baseline a family declares for a function SGLang has no facade entry for (the
    family module's ``BASELINES``, e.g. code inside an SGLang model class); None for facade functions."""
    for family, fns in FAMILY_FUNCTIONS.items():
        if fn in fns:
            try:
                return getattr(import_module(f"kda_lab.families.{family}"), "BASELINES", {}).get(fn)
            except ModuleNotFoundError:
                return None
    return None


def sglang_definition(fn: str) -> str:
    """'module:function' where SGLang 0.5.23 defines ``fn`` (from the facade's lazy export table), or the family's
    declared baseline for a function outside the facade (:func:`off_facade_baseline`)."""
    declared = off_facade_baseline(fn)
    if declared:
        return declared
    facade = import_module("sglang.kernels.ops.diffusion")
    exports: dict[str, str] = facade._EXPORTS  # noqa: SLF001 - the facade's own table is the source of truth
    if fn not in exports:
        raise StampError(f"SGLang 0.5.23's facade does not export {fn!r}")
    module = exports[fn]
    return f"{module if module.startswith('sglang.') else f'sglang.kernels.ops.diffusion.{module}'}:{fn}"


def sglang_parameters(fn: str) -> list[str]:
    """Parameter names of SGLang's own definition of ``fn``, read from its source (sglang_source)."""
    module, _, name = sglang_definition(fn).partition(":")
    try:
        return parameters(module, name)
    except LookupError as e:
        raise StampError(str(e)) from e


TOLERANCES = """# |out - oracle| <= atol + rtol*|oracle| elementwise against the fp64 oracle; say why each value is what it is.
[tolerances]
bfloat16 = { atol = 6.25e-2, rtol = 1.6e-2 }
float16 = { atol = 8e-3, rtol = 2e-3 }
float32 = { atol = 1e-4, rtol = 1e-4 }"""
EXACT_TOLERANCES = """# Every function is exact (the family's EXACT): the candidate must equal SGLang bit for bit, so the tolerances
# against the fp64 oracle are zero where the output is a copy of its inputs; a function whose output is SGLang's
# rounding of the exact value needs the tolerance of that rounding (say why).
[tolerances]
bfloat16 = { atol = 0.0, rtol = 0.0 }
float16 = { atol = 0.0, rtol = 0.0 }
float32 = { atol = 0.0, rtol = 0.0 }"""
NORM_RULE = "No `--use_fast_math`; fp32 accumulation; centered (two-pass) or merged variance, never `E[x²]−μ²`."
EXACT_RULE = ("No `--use_fast_math`; the output is bit-identical to SGLang's (task.toml `exact = true`): the same "
              "operations,\n  in the same order and precision, as SGLang's code.")
PLAIN_RULE = "No `--use_fast_math`; fp32 accumulation (or exact integer/copy arithmetic where that is the op)."


def family_tolerances(family: str, arch: str) -> str | None:
    """The [tolerances] table of an existing task of the family (the same arch first), as that task derived
    it, with a line citing it; None when the family has no task yet."""
    tasks = sorted(kernels_dir().glob("*/task.toml"), key=lambda p: not p.parent.name.startswith(arch))
    for toml in tasks:
        text = toml.read_text()
        if not re.search(rf'^family = "{re.escape(family)}"$', text, flags=re.M):
            continue
        m = re.search(r"^\[tolerances\]\n(?:(?!\[).*\n)*", text, flags=re.M)
        if m:
            table = m.group(0).rstrip() + "\n"
            return (f"# As kernels/{toml.parent.name}/task.toml derives them (the same family);\n"
                    f"# say why, if this task's differ.\n{table}")
    return None


def family_exact(family: str) -> bool:
    """Whether the family declares SGLang's roundings its contract (its module's ``EXACT``)."""
    try:
        return bool(getattr(import_module(f"kda_lab.families.{family}"), "EXACT", False))
    except ModuleNotFoundError:
        return False


def family_normalizes(family: str) -> bool:
    """Whether the family's oracle computes a variance (a norm family: its module's code does)."""
    source = family_source(family)
    return source is not None and re.search(_VARIANCE, source.read_text()) is not None


# A variance in an oracle's code: named, torch's .var(), a mean of squares, or a reciprocal square root.
_VARIANCE = r"variance|\.var\(|\.square\(\)\.mean\(|\.pow\(2\)\.mean\(|rsqrt"


def numerics_rule(family: str) -> str:
    """The prompt's numerics rule: bit-exactness for an exact family, the variance rule for a family whose oracle
    normalizes, plain fp32 accumulation otherwise."""
    if family_exact(family):
        return EXACT_RULE
    return NORM_RULE if family_normalizes(family) else PLAIN_RULE


def baseline_line(fns: tuple[str, ...]) -> str:
    """The prompt's baseline sentence: through the facade, or the family's declared code for the others."""
    declared = {fn: off_facade_baseline(fn) for fn in fns}
    if not any(declared.values()):
        return ("SGLang 0.5.23 through the facade `sglang.kernels.ops.diffusion.<function>`, called exactly as\n"
                "  the candidate is called.")
    listed = ", ".join(f"`{fn}`: `{declared[fn] or f'sglang.kernels.ops.diffusion:{fn}'}`" for fn in fns)
    return (f"SGLang 0.5.23's code as task.toml's `entry` names it ({listed}), called exactly as the\n"
            "  candidate is called.")


def heading(gpu: str, title: str) -> str:
    """The prompt's first line: the GPU once, whether or not the title names it."""
    return title if gpu.lower() in title.lower() else f"{gpu} {title}"


def _functions_toml(family: str) -> str:
    out = []
    exact = family_exact(family)
    try:
        fam = import_module(f"kda_lab.families.{family}")
        byte_models = getattr(fam, "BYTE_MODELS", {})
    except ModuleNotFoundError:
        byte_models = {}
    for fn in FAMILY_FUNCTIONS[family]:
        reads, writes = byte_models.get(fn, (None, None))
        out.append("[[functions]]")
        out.append(f'name = "{fn}"')
        out.append(f'sglang = "{sglang_definition(fn)}"')
        out.append(f'entry = "{off_facade_baseline(fn) or f"sglang.kernels.ops.diffusion:{fn}"}"')
        out.append(f"reads = {json.dumps(list(reads))}" if reads else f'reads = []  # {TODO}: inputs read')
        out.append(f"writes = {json.dumps(list(writes))}" if writes else f'writes = []  # {TODO}: outputs, by shape')
        if exact:
            out.append("exact = true")
        out.append("")
    return "\n".join(out)


def _export_line(fn: str) -> str:
    """The stamped register.py's EXPORTS entry: SGLang's function (lazy_baseline), or the family's declared
    baseline for a function outside the facade."""
    declared = off_facade_baseline(fn)
    if not declared:
        return f'    "{fn}": lazy_baseline("{fn}"),\n'
    module, _, name = declared.partition(":")
    return f'    "{fn}": import_module("{module}").{name},\n'


def _spec_toml(value: dict[str, Any]) -> str:
    dtype = str(value["dtype"]).removeprefix("torch.")
    parts = [f"shape = {list(value['shape'])}", f'dtype = "{dtype}"']
    strides = value.get("strides")
    if strides is not None and list(strides) != contiguous_strides(list(value["shape"])):
        parts.append(f"strides = {list(strides)}")  # a captured view keeps its layout
    if dtype in ("int32", "int64"):
        parts += ['dist = "randint"', "low = 0", "high = 2"]
        return "{ " + ", ".join(parts) + " }  # " + TODO + ": the valid index range"
    return "{ " + ", ".join(parts) + " }"


def contiguous_strides(shape: list[int]) -> list[int]:
    out, step = [], 1
    for n in reversed(shape):
        out.append(step)
        step *= max(int(n), 1)
    return out[::-1]


def _value_toml(value: Any) -> str:
    if isinstance(value, dict) and "shape" in value:
        return _spec_toml(value)
    if value is None:
        return "{ none = true }"
    if isinstance(value, list) and all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        return str(value)  # an int tuple such as F.pad's pad
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(float(value)) if isinstance(value, float) else str(value)
    return f'"{value}"  # {TODO}: not a tensor spec; convert'


def capture_source(path: Path, task_dir: Path | None = None) -> str:
    """How a row names its capture file: relative to the task folder (``dev/<file>``) when it lies inside it, else
    relative to the repository, else its name."""
    path = path.resolve()
    for base in ((task_dir,) if task_dir else ()) + (repo_root(),):
        try:
            return path.relative_to(base.resolve()).as_posix()
        except ValueError:
            continue
    return path.name


def rows_from_captures(path: Path, family: str, task_dir: Path | None = None) -> list[str]:
    """task.toml [[workloads]] blocks for every captured call of this family's functions."""
    blocks = []
    where = capture_source(path, task_dir)
    names: set[str] = set()
    for lineno, line in enumerate(path.read_text().splitlines(), start=1):
        cap = json.loads(line)
        fn = cap["kernel"].split(".")[-1]
        if fn not in FAMILY_FUNCTIONS[family]:
            blocks.append(f"# {TODO}: {path.name}:{lineno} captured {cap['kernel']} (renamed since): map it by hand")
            continue
        params = sglang_parameters(fn)
        args = dict(zip(params, cap.get("args", []), strict=False))
        args.update(cap.get("kwargs", {}))
        tensors = [v for v in args.values() if isinstance(v, dict) and "shape" in v]
        lead = "x".join(str(n) for n in tensors[0]["shape"]) if tensors else "scalar"
        base = re.sub(r"[^a-z0-9]+", "_", f"{cap['model']}_{fn}_{lead}".lower()).strip("_")
        row, k = base, 2
        while row in names:
            row, k = f"{base}_{k}", k + 1
        names.add(row)
        blocks.append("\n".join([
            "[[workloads]]", f'name = "{row}"', f'fn = "{fn}"', 'kind = "production"',
            f'model = "{cap["model"]}"  # {TODO}: the model\'s display name', f'preset = "{cap["model"]}"',
            f'source = "captured:{where}:{lineno}"', "[workloads.args]",
            *(f"{k} = {_value_toml(v)}" for k, v in args.items()), "",
        ]))
    return blocks


NOTES = """Production rows: every $arch capture in captured_shapes/ for this family (model and
preset per row; source = file:line), plus rows derived from SGLang's presets where captures are missing
(source = "derived: ..."). Test rows add tails, tiny and odd sizes, strided views, and int32/int64
positions where they apply."""
TWIN_NOTES = """Rows and tolerances: the home task's (rows_from), each written once, there; after them the
production rows only this GPU runs (its captured calls that none of the home's rows makes)."""


def _call(row: dict[str, Any]) -> tuple[Any, ...]:
    """What a row calls, layout included but not its values' distribution: the function, then per argument
    its tensor's shape, dtype, strides (None when contiguous: a size-1 dimension's stride does not count) and
    offset, or its value."""
    w = parse_workload(row)
    args = []
    for name, v in sorted(w.args.items()):
        if isinstance(v, TensorSpec):
            dense = v.strides is None or all(
                s == c for n, s, c in zip(v.shape, v.strides, contiguous_strides(list(v.shape)), strict=True)
                if n != 1)
            v = (v.shape, v.dtype, None if dense else v.strides, v.offset)
        args.append((name, v))
    return w.fn, tuple(args)


def _twin_blocks(blocks: list[str], home: str) -> list[str]:
    """A twin's own rows among the captured ``blocks``: those whose call no row of the home makes (those
    calls are the home's rows already), with a comment naming the capture lines left out."""
    home_calls = {_call(w) for w in tomllib.loads((kernels_dir() / home / "task.toml").read_text()).get(
        "workloads", [])}
    own, dropped = [], []
    for b in blocks:
        rows = tomllib.loads(b).get("workloads") if b.startswith("[[workloads]]") else None
        if rows and _call(rows[0]) in home_calls:
            dropped.append(rows[0]["source"].rpartition(":")[2])
        else:
            own.append(b)
    head = ["# This GPU's own production rows: calls that none of the home's rows makes."]
    if dropped:
        head.append(f"# Capture line{'s' if len(dropped) > 1 else ''} {', '.join(dropped)}: calls the home's rows "
                    "make already (left out).")
    return ["\n".join(head), *own]


TWIN_ROWS = """Where the rows are written: this task's task.toml takes its rows and tolerances from its twin
task on the other lab GPU (`rows_from`, kda_lab/task/twins.py: each row is written once) and adds the
production rows that only this GPU runs; `kda tasks --rows` lists the production rows.

"""
TEST_ROWS_TODO = f"{TODO}: describe the test rows (tails, odd sizes, strided views, positions)."


def _production_table(blocks: list[str], twin: bool = False) -> str:
    """The prompt's production rows: a table of the stamped rows (a TODO row without any); a twin's prompt
    says where its rows are written, then tabulates its own rows, if any."""
    rows = ["| row | model (preset) | source |", "|---|---|---|"]
    for b in blocks:
        m = dict(re.findall(r'^(name|preset|source) = "([^"]*)"', b, flags=re.M))
        if m:
            rows.append(f"| {m['name']} | {m['preset']} | {m['source']} |")
    if twin:
        return TWIN_ROWS + ("\n".join(rows) + "\n\n" if len(rows) > 2 else "") + TEST_ROWS_TODO
    if len(rows) == 2:
        rows.append(f"| {TODO}: production rows | | |")
    return "\n".join(rows) + "\n\n" + TEST_ROWS_TODO


def new_task(slug: str, family: str, title: str = "", captures: Path | None = None, force: bool = False) -> Path:
    arch = slug.split("_", 1)[0]
    if arch not in ARCH_CAPABILITY:
        raise StampError(f"slug must start with an arch prefix ({', '.join(ARCH_CAPABILITY)}): {slug!r}")
    if family not in FAMILY_FUNCTIONS:
        raise StampError(f"unknown family {family!r}; known: {', '.join(FAMILY_FUNCTIONS)}")
    dest = kernels_dir() / slug
    if dest.exists() and not force:
        raise StampError(f"{dest} exists (use --force to overwrite the scaffolds; ledgers are never touched)")
    home = twin_home(slug, family, kernels_dir())  # a second arch of an existing task: its twin
    if home:
        blocks = _twin_blocks(rows_from_captures(captures, family, dest) if captures else [], home)
        production_table = _production_table(blocks[1:], twin=True)
    else:
        blocks = (rows_from_captures(captures, family, dest) if captures
                  else [f"# {TODO}: production rows (captures or derived)"])
        production_table = _production_table(blocks)
        test_rows = family_test_blocks(family)  # the family's home task holds them (kda_lab.families.rows)
        blocks.append(test_rows if test_rows else
                      f"# {TODO}: test rows (tails, odd sizes, strided views; tag the small ones 'tiny': kda check "
                      f"--interpret runs those on CPU). This is the family's first task: later tasks of the family "
                      f"copy these rows from it")
    facts = ARCH_FACTS[arch]
    fns = FAMILY_FUNCTIONS[family]
    values = {
        "slug": slug, "arch": arch, "family": family, "title": title or f"{family} kernels",
        "heading": heading(facts["gpu"], title or f"{family} kernels"),
        "baseline_line": baseline_line(FAMILY_FUNCTIONS[family]),
        "numerics_rule": numerics_rule(family),
        "rows_from": (f"# Rows and tolerances: kernels/{home}/task.toml\n# (rows_from, kda_lab/task/twins.py).\n"
                      f'{ROWS_FROM} = "{home}"\n') if home else "",
        "notes": TWIN_NOTES if home else Template(NOTES).substitute(arch=arch),
        "tolerances": "" if home else (family_tolerances(family, arch)
                                       or (EXACT_TOLERANCES if family_exact(family) else TOLERANCES)),
        "functions": _functions_toml(family), "workloads": "\n".join(blocks),
        "function_table": "\n".join(f"| `{fn}` | `{sglang_definition(fn)}` | "
                                    f"`{off_facade_baseline(fn) or f'sglang.kernels.ops.diffusion.{fn}'}` |"
                                    for fn in fns),
        "function_names": ", ".join(f"`{fn}`" for fn in fns),
        "production_table": production_table,
        "exports": "".join(_export_line(fn) for fn in fns),
        "imports": "\n".join(sorted({"from importlib import import_module" if off_facade_baseline(fn) else
                                      "from kda_kernels import lazy_baseline" for fn in fns})),
        **facts,
    }
    for src in TEMPLATE_DIR.rglob("*"):
        if src.is_dir() or "__pycache__" in src.parts:
            continue
        rel = src.relative_to(TEMPLATE_DIR)
        out = dest / (str(rel)[: -len(".tmpl")] if src.suffix == ".tmpl" else rel)
        out.parent.mkdir(parents=True, exist_ok=True)
        if src.suffix == ".tmpl":
            out.write_text(Template(src.read_text()).substitute(values))
        else:
            shutil.copyfile(src, out)
    if not (dest / ledger.BENCHMARK_FILE).exists():
        (dest / ledger.BENCHMARK_FILE).write_text(",".join(ledger.BENCHMARK_COLUMNS) + "\n")
    (dest / ledger.SOLUTIONS_FILE).touch()
    for sub in ("docs", "profile", "ncu"):
        (dest / sub).mkdir(exist_ok=True)
        (dest / sub / ".gitkeep").touch()
    write_launcher(repo_root(), slug)
    return dest


def cmd_new_task(args: argparse.Namespace) -> int:
    captures = Path(args.captures) if args.captures else None
    if captures and not captures.exists():
        raise StampError(f"no capture file {captures}")
    dest = new_task(args.slug, args.family, args.title or "", captures, args.force)
    print(f"stamped {dest}")
    print(f"next: edit prompt.md / task.toml (resolve every {TODO}), then `kda validate {args.slug}`; commit the "
          "folder and its launcher (a new family: `kda new-family` first, docs/workflow.md \"Adding to the lab\")")
    return 0


def register(sub: Any) -> None:
    p = sub.add_parser("new-task", help="generate a task folder from the template (then edit it)")
    p.add_argument("slug", help="<arch>_<name>, e.g. h200_diffusion_norm_infer__multi_shape")
    p.add_argument("--family", required=True, choices=sorted(FAMILY_FUNCTIONS))
    p.add_argument("--title", help="one line for prompt.md and task.toml")
    p.add_argument("--captures", help="a captured-shapes .jsonl to turn into production rows (never committed)")
    p.add_argument("--force", action="store_true", help="overwrite an existing folder's scaffolds")
    p.set_defaults(func=cmd_new_task)
