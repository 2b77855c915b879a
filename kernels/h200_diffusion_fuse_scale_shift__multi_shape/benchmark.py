"""This task's benchmark: the shared harness (`kda bench <this task> ...`); flags are forwarded."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from kda_lab.cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(["bench", Path(__file__).resolve().parent.name, *sys.argv[1:]]))
