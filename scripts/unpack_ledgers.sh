#!/usr/bin/env bash
# Unpack ledgers brought back from the GPU box (scripts/gpu_box.sh) into the working tree, one call's
# ledgers.tgz after another, in call order. Each box call starts from the commit in .kda-git-commit, so each
# tarball is that commit's ledgers plus the rows of its call: kda_lab/ledger/box.py appends each
# call's new rows and refuses a copy that did not start from that commit (the ledgers are append-only).
#
#   scripts/unpack_ledgers.sh [--commit SHA] CALL1/ledgers.tgz [CALL2/ledgers.tgz ...]
set -euo pipefail
if [ "$#" -eq 0 ] || [ "$1" = "-h" ] || [ "$1" = "--help" ]; then
  sed -n '2,7p' "$0" | sed 's/^# \{0,1\}//'
  exit 2
fi
root=$(git rev-parse --show-toplevel)  # the checkout whose ledgers receive the rows
lab=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)  # the lab code that merges them
python=python3
if [ -x "$lab/.venv/bin/python" ]; then python="$lab/.venv/bin/python"; fi
args=()
for a in "$@"; do
  case $a in
    --commit) args+=("$a") ;;
    -*) args+=("$a") ;;
    *) if [ -f "$a" ]; then args+=("$(cd "$(dirname "$a")" && pwd)/$(basename "$a")"); else args+=("$a"); fi ;;
  esac
done
cd "$root"
PYTHONPATH="$lab${PYTHONPATH:+:$PYTHONPATH}" "$python" -m kda_lab.ledger.box --root "$root" "${args[@]}"
echo "review with git diff --stat, then commit"
