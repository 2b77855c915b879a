"""README's "On a machine with an H200 or B200": every command of its code block names something real.

The pip lines name an extra pyproject declares and requirement files that exist (tests/test_gpu_stage.py checks
what is in them); each `kda` line parses with the real CLI and names a real task of the architecture the
section says. On a CPU host the check and bench lines stop with the CLI's own message (exit 2, no traceback);
on a GPU (marker `gpu`) they run, without writing to the ledgers.
"""

from __future__ import annotations

import re
import shlex
import tomllib
from importlib import metadata

import pytest

from kda_lab import ARCH_CAPABILITY
from kda_lab.cli import build_parser, main
from kda_lab.task import load_task
from tests.conftest import REPO

SECTION = "## On a machine with an H200 or B200"


def gpu_section() -> str:
    text = (REPO / "README.md").read_text()
    assert SECTION in text
    return text.split(SECTION, 1)[1].split("\n## ", 1)[0]


def commands() -> list[list[str]]:
    """The section's code block (4-space indented lines), comments dropped, as argv lists."""
    lines = [ln[4:] for ln in gpu_section().splitlines() if ln.startswith("    ")]
    out = [shlex.split(ln, comments=True) for ln in lines]
    assert out
    return out


def test_pip_lines_name_a_declared_extra_and_real_requirement_files() -> None:
    pips = [c for c in commands() if c[:2] == ["pip", "install"]]
    assert [c[2:] for c in pips] == [["-e", ".[gpu]"], ["--no-deps", "-r", "requirements/sglang.txt"]]
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert "gpu" in extras
    # the --no-deps line installs the SGLang this environment was built and tested with
    pin = (REPO / "requirements/sglang.txt").read_text().split("==")[1].strip()
    assert pin == metadata.version("sglang")
    # the pinned alternative the section names
    alternative = re.findall(r"`(pip install [^`]+)`", gpu_section())
    assert alternative == ["pip install -r requirements/gpu.txt", "pip install --no-deps -e ."]
    assert (REPO / "requirements/gpu.txt").is_file()


def test_kda_lines_parse_and_name_a_real_task_of_the_gpus_arch() -> None:
    kdas = [c for c in commands() if c[0] == "kda"]
    assert [c[1] for c in kdas] == ["doctor", "check", "bench", "bench"]
    parser = build_parser()
    for argv in kdas:
        args = parser.parse_args(argv[1:])
        if hasattr(args, "task"):
            assert load_task(args.task).arch == "h200"
    assert parser.parse_args(kdas[2][1:]).aa and not parser.parse_args(kdas[3][1:]).aa
    assert set(ARCH_CAPABILITY) == {"h200", "b200"}  # the two GPUs the section names


def _kda_lines() -> list[list[str]]:
    return [c[1:] for c in commands() if c[0] == "kda"]


def test_on_a_cpu_host_check_and_bench_say_what_to_do(capsys: pytest.CaptureFixture[str]) -> None:
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("a GPU is present: test_readme_gpu_commands_run_on_the_gpu covers it")
    for argv in _kda_lines():
        if argv[0] == "doctor":
            assert main(argv) == 0
            assert "GPU" in capsys.readouterr().out
            continue
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert "needs a CUDA GPU (h200)" in err and "--interpret" in err


@pytest.mark.gpu
def test_readme_gpu_commands_run_on_the_gpu(capsys: pytest.CaptureFixture[str]) -> None:
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    cc = torch.cuda.get_device_capability()
    arch = {v: k for k, v in ARCH_CAPABILITY.items()}.get(cc)
    if arch is None:
        pytest.skip(f"compute capability {cc} is neither an H200 nor a B200")
    for argv in _kda_lines():
        if argv[0] == "doctor":
            assert main(argv) == 0
            assert arch in capsys.readouterr().out  # the GPU line names the arch its rows count for
            continue
        task = argv[1].replace("h200_", f"{arch}_", 1)
        rows = [w.name for w in load_task(task).workloads if w.kind == "production"][:2]
        extra = ["--no-record", "--rows", *rows] + (["--trials", "3", "--no-compile"] if argv[0] == "bench" else [])
        assert main([argv[0], task, *argv[2:], *extra]) == 0
