"""`kda export` is the exporter script as a kda command: the same options (the script's own parser), the same
output and exit status, refusals included."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from kda_lab.cli import build_parser
from kda_lab.export import exporter, to_argv

REPO = Path(__file__).resolve().parents[1]


def run(*argv: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "KDA_ROOT"}
    return subprocess.run([sys.executable, *argv], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=900)


@pytest.mark.parametrize("argv", [["--list"], ["--check"], ["no_such_task__x"]])
def test_kda_export_and_the_script_are_one_program(argv: list[str]) -> None:
    ours = run("-m", "kda_lab", "export", *argv)
    script = run("scripts/export_kda_kernels/export.py", *argv)
    assert (ours.returncode, ours.stdout) == (script.returncode, script.stdout), ours.stderr + script.stderr
    if argv == ["no_such_task__x"]:
        assert ours.returncode == 1 and "refused" in ours.stderr


@pytest.mark.parametrize("argv", [
    ["h200_x__y", "--note", "n"], ["--revert", "h200_x__y", "--status", "rejected"],
    ["--regen-patch", "--out", "/tmp/p.patch"], ["--list"],
])
def test_the_forwarded_command_line_parses_to_the_same_options(argv: list[str]) -> None:
    script = exporter()
    ns = build_parser().parse_args(["export", *argv])
    forwarded = to_argv(script.parser(), ns)
    assert vars(script.parser().parse_args(forwarded)) == vars(script.parser().parse_args(argv))
    assert "--note" not in to_argv(script.parser(), build_parser().parse_args(["export", "--list"]))
