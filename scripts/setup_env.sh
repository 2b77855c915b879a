#!/usr/bin/env bash
# Create or refresh the pinned CPU environment in .venv (idempotent; re-installs only when a pin changes).
#   torch 2.13.0 CPU, triton 3.6.0, numpy<2.4, SGLang 0.5.23 --no-deps + exactly its import deps, the lab.
# The installs go through uv (pinned below, itself installed by pip into .venv/.uv, outside site-packages) where
# uv installs, and through pip otherwise (or with KDA_NO_UV=1): the same pins and flags, the same environment
# (`pip freeze --all` alike). A fresh .venv on 2 busy cores: 74-76 s with uv (its cache warm or empty) against
# 116-120 s with pip. torch alone always goes through pip: pip's own configuration may point it at a local CPU wheel
# (find-links) that uv does not read, where uv would fetch a CUDA build of several GB.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
python=${PYTHON:-python3.11}
command -v "$python" >/dev/null || python=python3
"$python" -c 'import sys; sys.exit(sys.version_info < (3, 11))' || { echo "Python >= 3.11 required" >&2; exit 1; }
uv_version=0.13.8
stamp=.venv/.kda-env-stamp
want=$(cat requirements/cpu.txt requirements/e2e-cpu.txt requirements/sglang.txt requirements/peers-cpu.txt pyproject.toml | sha256sum | cut -d' ' -f1)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  exit 0
fi
[ -x .venv/bin/python ] || "$python" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
# torch through pip, whichever installer does the rest (see above), --no-deps: its dependencies are pinned in
# requirements/cpu.txt, which then finds torch in place.
.venv/bin/python -m pip install -q --no-deps "$(grep -E '^torch==' requirements/cpu.txt)"
uv=.venv/.uv/bin/uv
if [ "${KDA_NO_UV:-0}" != 1 ] && { [ -x "$uv" ] && [ "$("$uv" --version)" = "uv $uv_version" ] ||
    .venv/bin/python -m pip install -q --upgrade --target .venv/.uv "uv==$uv_version"; }; then
  # --compile-bytecode: pip writes the .pyc files at install time too (tests start many interpreters at once)
  install() { "$uv" pip install -q --python .venv/bin/python --compile-bytecode "$@"; }
  install_source_only() { "$uv" pip install -q --python .venv/bin/python "$@"; }
else
  [ "${KDA_NO_UV:-0}" = 1 ] || echo "setup_env.sh: uv $uv_version did not install; installing with pip" >&2
  install() { .venv/bin/python -m pip install -q "$@"; }
  install_source_only() { .venv/bin/python -m pip install -q --no-compile "$@"; }
fi
install -r requirements/cpu.txt
# sglang pins torch 2.14.1 and dozens of serving packages: its import deps are in requirements/cpu.txt.
install --no-deps -r requirements/sglang.txt
install --no-deps -e .
# The peers' own source (quack-kernels, liger-kernel, flashinfer-python), read by tests/test_peers.py. No .pyc
# files: QuACK and FlashInfer are read with `ast`, never imported (they need CUDA), and Liger's few imported modules
# are small; compiling the three (FlashInfer alone is 3,375 modules) cost about 17 s of CPU per fresh .venv.
install_source_only --no-deps -r requirements/peers-cpu.txt
# kda e2e only: SGLang model-module deps outside site-packages (requirements/e2e-cpu.txt says why).
install --no-deps --upgrade --target .venv/e2e-site -r requirements/e2e-cpu.txt
echo "$want" > "$stamp"
echo "environment ready: .venv ($(.venv/bin/python -c 'import torch, triton, sglang; print("torch", torch.__version__, "triton", triton.__version__, "sglang", sglang.__version__)'))"
