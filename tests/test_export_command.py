"""`kda export` is kda_lab.export's command: `kda export` and its own parser take the same options, `kda
export` gives the same output and exit status as :func:`kda_lab.export.command.main`, refusals included, and
`--list` / `--check` never import torch."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from kda_lab.cli import build_parser
from kda_lab.export.command import parser

REPO = Path(__file__).resolve().parents[1]


def run(*argv: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "KDA_ROOT"}
    return subprocess.run([sys.executable, *argv], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=900)


@pytest.mark.parametrize("argv", [["--list"], ["--check"], ["no_such_task__x"]])
def test_kda_export_and_the_command_module_are_one_program(argv: list[str]) -> None:
    ours = run("-m", "kda_lab", "export", *argv)
    main = "import sys; from kda_lab.export.command import main; sys.exit(main(sys.argv[1:]))"
    direct = run("-c", main, *argv)
    assert (ours.returncode, ours.stdout, ours.stderr) == (direct.returncode, direct.stdout, direct.stderr)
    if argv == ["no_such_task__x"]:
        assert ours.returncode == 1 and "kda export: refused: no task 'no_such_task__x'" in ours.stderr


@pytest.mark.parametrize("argv", [
    ["h200_x__y", "--note", "n"], ["--revert", "h200_x__y", "--status", "rejected"],
    ["--regen-patch", "--out", "/tmp/p.patch"], ["--list"], ["--regen-patch", "--wheel", "w.whl"],
    ["--check", "--root", "/tmp/lab"],
])
def test_kda_export_parses_to_the_same_options(argv: list[str]) -> None:
    ns = vars(build_parser().parse_args(["export", *argv]))
    del ns["func"], ns["command"]
    assert ns == vars(parser().parse_args(argv))


@pytest.mark.parametrize("flag", ["--list", "--check"])
def test_list_and_check_import_no_torch(flag: str) -> None:
    code = ("import contextlib, io, sys; from kda_lab import cli\n"
            f"with contextlib.redirect_stdout(io.StringIO()): rc = cli.main(['export', {flag!r}])\n"
            "print(rc, sorted(m for m in ('torch', 'triton', 'sglang') if m in sys.modules))")
    r = run("-c", code)
    assert r.returncode == 0 and r.stdout.split("\n")[-2] == "0 []", r.stdout + r.stderr
