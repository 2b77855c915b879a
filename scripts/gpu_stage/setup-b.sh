#!/usr/bin/env bash
# GPU box, second run, from the uploaded .gpu-stage-b, on the box the first run set up: joins the two parts of
# the CuTe DSL CUDA 13 runtime, checks them against the staged sha256 and installs the CuTe DSL in ~/kda-cute
# (~/kda-env.sh puts it on PYTHONPATH).
set -euo pipefail
stage=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
stash=$HOME/kda-stash
cute=$HOME/kda-cute
if [ ! -f "$stash/cu13.part1" ] || [ ! -f "$HOME/kda-env.sh" ]; then
  echo "this box has no first run (.gpu-stage-a/setup.sh): it was recycled since; run the first part again" >&2
  exit 3
fi
cat "$stash/cu13.part1" "$stage/cu13.part2" > "$stash/cu13.tar.xz"
if [ "$(sha256sum < "$stash/cu13.tar.xz" | cut -d' ' -f1)" != "$(cat "$stash/cu13.sha256")" ]; then
  echo "the joined CuTe DSL runtime does not match its sha256: .gpu-stage-a and .gpu-stage-b come from" \
       "different scripts/gpu_stage.sh runs; carry both from one run" >&2
  exit 4
fi
rm -rf "$cute"
mkdir -p "$cute"
# The wheels share a top-level folder and `pip --target` replaces whole folders: install them in one command.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$cute" "$stash"/*.whl
tar -xJf "$stash/cu13.tar.xz" -C "$cute"
# shellcheck source=/dev/null
source "$HOME/kda-env.sh"
python3 -c "import cutlass.cute; print('CuTe DSL ready in ~/kda-cute')"
