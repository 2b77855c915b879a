#!/usr/bin/env bash
# Create or refresh the pinned CPU environment in .venv (idempotent; re-installs only when a pin changes).
#   torch 2.13.0 CPU, triton 3.6.0, numpy<2.4, SGLang 0.5.23 --no-deps + exactly its import deps, the lab.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
python=${PYTHON:-python3.11}
command -v "$python" >/dev/null || python=python3
"$python" -c 'import sys; sys.exit(sys.version_info < (3, 11))' || { echo "Python >= 3.11 required" >&2; exit 1; }
stamp=.venv/.kda-env-stamp
want=$(cat requirements/cpu.txt requirements/e2e-cpu.txt requirements/sglang.txt requirements/peers-cpu.txt pyproject.toml | sha256sum | cut -d' ' -f1)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  exit 0
fi
[ -x .venv/bin/python ] || "$python" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -r requirements/cpu.txt
# sglang pins torch 2.14.1 and dozens of serving packages: its import deps are in requirements/cpu.txt.
.venv/bin/python -m pip install -q --no-deps -r requirements/sglang.txt
.venv/bin/python -m pip install -q --no-deps -e .
# The peers' own source (quack-kernels, liger-kernel, flashinfer-python), read by tests/test_peers.py.
.venv/bin/python -m pip install -q --no-deps -r requirements/peers-cpu.txt
# kda e2e only: SGLang model-module deps outside site-packages (requirements/e2e-cpu.txt says why).
.venv/bin/python -m pip install -q --no-deps --upgrade --target .venv/e2e-site -r requirements/e2e-cpu.txt
echo "$want" > "$stamp"
echo "environment ready: .venv ($(.venv/bin/python -c 'import torch, triton, sglang; print("torch", torch.__version__, "triton", triton.__version__, "sglang", sglang.__version__)'))"
