#!/usr/bin/env bash
# GPU box, first run, from the uploaded .gpu-stage-a (scripts/gpu_stage.sh made it): SGLang's sources and the
# staged import deps go into ~/kda-site, ~/kda-env.sh puts them (and later the CuTe DSL) on PYTHONPATH, and the
# CuTe DSL wheels and runtime part 1 wait in ~/kda-stash for the second run (.gpu-stage-b/setup.sh).
set -euo pipefail
stage=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
site=$HOME/kda-site
stash=$HOME/kda-stash
rm -rf "$site" "$stash"
mkdir -p "$site" "$stash"
tar -xJf "$stage/sglang.tar.xz" -C "$site"
shopt -s nullglob
deps=("$stage"/deps/*.whl)
shopt -u nullglob
if [ "${#deps[@]}" -gt 0 ]; then
  # The wheels were resolved when staging; --target leaves the image's own packages alone.
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$site" "${deps[@]}"
fi
cp "$stage"/cute/*.whl "$stage/cu13.part1" "$stage/cu13.sha256" "$stash/"
cat > "$HOME/kda-env.sh" <<'ENV'
export PYTHONPATH="$HOME/kda-site${PYTHONPATH:+:$PYTHONPATH}"
# pip --target installs do not run the CuTe DSL's .pth file: put its package folder on the path by hand.
if [ -d "$HOME/kda-cute/nvidia_cutlass_dsl" ]; then
  export PYTHONPATH="$HOME/kda-cute:$HOME/kda-cute/nvidia_cutlass_dsl/dsl_packages:$PYTHONPATH"
fi
export PYTHONUNBUFFERED=1
ENV
# shellcheck source=/dev/null
source "$HOME/kda-env.sh"
# The facade's lazy export pulls in every import-time dependency: a missing wheel fails here, not in a run.
python3 -c "import sglang, sglang.kernels.ops.diffusion as d; d.fuse_scale_shift_kernel; \
print('SGLang', sglang.__version__, 'ready in ~/kda-site (CuTe DSL: run .gpu-stage-b/setup.sh next)')"
