#!/usr/bin/env bash
# The lab's test command (README): set up .venv, then lint and run every CPU test.
# GPU tests (marker `gpu`) are deselected here and run on the GPU box: `pytest -m gpu`.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
scripts/setup_env.sh
.venv/bin/ruff check .
mapfile -t shell_scripts < <(git ls-files '*.sh' .ci/run)
.venv/bin/shellcheck "${shell_scripts[@]}"
.venv/bin/python -m pytest -m "not gpu" "$@"
