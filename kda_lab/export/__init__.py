"""`kda export`: promotion into ``kda_kernels`` as a `kda` command, the last stage of the data flow.

The exporter's logic still lives in ``scripts/export_kda_kernels/export.py`` (its evidence gate is being
reworked there); this command takes that script's own argument parser and runs its ``main``, so
``kda export TASK | --list | --check | --revert SLUG | --regen-patch`` and ``python
scripts/export_kda_kernels/export.py ...`` are one program with one set of options.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from functools import cache
from types import ModuleType
from typing import Any

from kda_lab.paths import repo_root

SCRIPT = "kda_lab/export/gate.py"


@cache
def exporter() -> ModuleType:
    """The exporter script of this checkout, loaded as a module."""
    path = repo_root() / SCRIPT
    spec = importlib.util.spec_from_file_location("kda_export_script", path)
    if spec is None or spec.loader is None or not path.is_file():
        raise FileNotFoundError(f"no exporter at {path} (a checkout of the lab has it)")
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("kda_export_script", module)
    spec.loader.exec_module(module)
    return module


def to_argv(parser: argparse.ArgumentParser, args: argparse.Namespace) -> list[str]:
    """The command line of ``parser`` that gives ``args`` (options left at their default are omitted)."""
    argv: list[str] = []
    for action in parser._actions:  # noqa: SLF001 - argparse keeps its actions here
        if isinstance(action, argparse._HelpAction):  # noqa: SLF001
            continue
        value = getattr(args, action.dest, action.default)
        if value == action.default or value is None:
            continue
        if not action.option_strings:
            argv.append(str(value))
        elif isinstance(action, argparse._StoreTrueAction):  # noqa: SLF001
            argv.append(action.option_strings[-1])
        else:
            argv += [action.option_strings[-1], str(value)]
    return argv


def cmd_export(args: argparse.Namespace) -> int:
    script = exporter()
    return int(script.main(to_argv(script.parser(), args)))


def register(sub: Any) -> None:
    try:
        parents = [exporter().parser()]
    except FileNotFoundError:
        parents = []
    p = sub.add_parser("export", parents=parents, add_help=not parents, conflict_handler="resolve",
                       help="promote a task into kda_kernels, gated on its ledgers (--list, --check, "
                            "--revert, --regen-patch)")
    p.set_defaults(func=cmd_export)
