#!/usr/bin/env bash
# The lab's test command (README): set up .venv, then lint and run every CPU test.
# GPU tests (marker `gpu`) are deselected here and run on the GPU box: `pytest -m gpu`.
# The CPU tests run in parallel (pytest-xdist, one worker per core; KDA_TEST_WORKERS overrides, 0 runs them in
# this process). --dist loadgroup keeps each xdist_group on one worker: conftest.py puts every test module with a
# module-scoped fixture (a fresh clone, a built lab) in one group, and runs the tests marked `slow` first.
# The 20 slowest tests are listed at the end of every run.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
scripts/setup_env.sh
.venv/bin/ruff check .
mapfile -t shell_scripts < <(git ls-files '*.sh' .ci/run)
.venv/bin/shellcheck "${shell_scripts[@]}"
.venv/bin/python -m pytest -m "not gpu" -n "${KDA_TEST_WORKERS:-auto}" --dist loadgroup --durations=20 "$@"
