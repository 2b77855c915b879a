"""The ``kda export`` command line: ``kda export TASK | --list | --check | --revert SLUG | --regen-patch``."""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from pathlib import Path
from typing import Any

from kda_kernels.registry import SGLANG_VERSION
from kda_lab.export import Refusal
from kda_lab.export.check import check, list_tasks
from kda_lab.export.patch import regen_patch
from kda_lab.export.promote import export, revert
from kda_lab.paths import PACKAGE_ROOT

HELP = "promote a task into kda_kernels, gated on its ledgers (--list, --check, --revert, --regen-patch)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("slug", nargs="?", help="task to export (kernels/<slug>)")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--list", action="store_true", help="tasks, exported copies, evidence verdicts, stamps")
    g.add_argument("--revert", metavar="SLUG", help="remove the task's exported copy and log a revert")
    g.add_argument("--check", action="store_true", help="exit 1 if an exported copy is stale or edited")
    g.add_argument("--regen-patch", action="store_true", help="rebuild patches/sglang_kda_kernels.patch")
    p.add_argument("--sglang-init", type=Path, metavar="PATH",
                   help="--regen-patch: an SGLang checkout (or its python/sglang/__init__.py)")
    p.add_argument("--wheel", type=Path, metavar="PATH",
                   help=f"--regen-patch: the sglang-{SGLANG_VERSION} wheel (default: the installed release)")
    p.add_argument("--out", type=Path, metavar="PATH", help="--regen-patch: write here instead of patches/")
    p.add_argument("--status", default="benchmarked", choices=("benchmarked", "rejected", "superseded"),
                   help="--revert: the candidate's status in the revert row (default: benchmarked)")
    p.add_argument("--note", default="", help="free text for the promote/revert ledger row")
    p.add_argument("--root", type=Path, default=None,
                   help="lab root (default: this checkout; tests use copies)")


def parser() -> argparse.ArgumentParser:
    """``kda export``'s own parser (:func:`main` parses with it; ``kda`` adds the same arguments to its
    subcommand)."""
    p = argparse.ArgumentParser(prog="kda export")
    add_arguments(p)
    return p


def run(args: argparse.Namespace, command: str) -> int:
    """One ``kda export`` invocation; ``command``: its command line, recorded in a promote or revert row."""
    root = (args.root or Path(os.environ.get("KDA_ROOT") or PACKAGE_ROOT)).resolve()
    try:
        if args.list:
            return list_tasks(root)
        if args.check:
            return check(root)
        if args.revert:
            return revert(root, args.revert, status=args.status, note=args.note, command=command)
        if args.regen_patch:
            return regen_patch(root, args.sglang_init, args.wheel, args.out)
        if not args.slug:
            parser().error("give a task slug, or one of --list/--revert/--check/--regen-patch")
        return export(root, args.slug, note=args.note, command=command)
    except Refusal as e:
        print(f"kda export: refused: {e}", file=sys.stderr)
        return 1
    except ValueError as e:  # kda_lab.ledger.LedgerError: a ledger that does not parse
        print(f"kda export: refused: {e}", file=sys.stderr)
        return 1


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    return run(parser().parse_args(argv), shlex.join(["kda", "export", *argv]))


def cmd_export(args: argparse.Namespace) -> int:
    argv = sys.argv[1:]  # `kda export ...` from a shell; a call from Python records the default command
    return run(args, shlex.join(["kda", *argv]) if argv[:1] == ["export"] else "")


def register(sub: Any) -> None:
    p = sub.add_parser("export", help=HELP)
    add_arguments(p)
    p.set_defaults(func=cmd_export)
