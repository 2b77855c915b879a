"""This task's benchmark: the shared harness (`kda bench <this task> ...`); flags are forwarded."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from kda_lab.cli import task_main  # noqa: E402

task_main(__file__, "bench")
