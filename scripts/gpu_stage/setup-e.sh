#!/usr/bin/env bash
# GPU box, from an uploaded .gpu-stage-eK (scripts/gpu_stage_flashinfer.sh made it), on a box the first run set up
# (.gpu-stage-a/setup.sh): installs the staged deps (in .gpu-stage-e1) into ~/kda-site, checks this folder's chunk of
# the FlashInfer archive against manifest.json and keeps it in ~/kda-flashinfer-stash. The call that brings the last
# missing chunk joins them, checks the archive's sha256, installs FlashInfer into ~/kda-site, writes
# ~/kda-flashinfer-env.sh (JIT cache, CUDA headers and libraries: flashinfer_env.py; ~/kda-env.sh sources it),
# imports FlashInfer and builds its CUDA norm module with nvcc (cached for the box's later calls). Until then it
# prints one line naming the folders still to carry, and exits 0.
set -euo pipefail
stage=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
site=$HOME/kda-site
if [ ! -d "$site" ] || [ ! -f "$HOME/kda-env.sh" ]; then
  echo "flashinfer: this box has no first run (.gpu-stage-a/setup.sh): it was recycled since; run the first part" \
       "again, then carry the .gpu-stage-e folders" >&2
  exit 3
fi
shopt -s nullglob
deps=("$stage"/deps/*.whl)
shopt -u nullglob
if [ "${#deps[@]}" -gt 0 ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$site" "${deps[@]}"
fi
status=0
python3 "$stage/chunks.py" collect --stage "$stage" --stash "$HOME/kda-flashinfer-stash" --site "$site" || status=$?
case $status in
  0) ;;
  10) exit 0 ;;  # chunks still missing: collect printed which
  *) exit "$status" ;;
esac
# shellcheck source=/dev/null
source "$HOME/kda-env.sh"
env_file=$HOME/kda-flashinfer-env.sh
python3 "$stage/flashinfer_env.py" --site "$site" --jit "$HOME/kda-flashinfer-jit" --out "$env_file"
# shellcheck disable=SC2016  # written literally into ~/kda-env.sh, expanded when that is sourced
line='if [ -f "$HOME/kda-flashinfer-env.sh" ]; then . "$HOME/kda-flashinfer-env.sh"; fi'
grep -qxF "$line" "$HOME/kda-env.sh" || echo "$line" >> "$HOME/kda-env.sh"
# shellcheck source=/dev/null
source "$HOME/kda-env.sh"
python3 -c "import flashinfer, flashinfer.norm as n; print('flashinfer', flashinfer.__version__, 'imports from', \
flashinfer.__file__, '; rmsnorm/layernorm:', 'CUDA JIT' if n._USE_CUDA_NORM else 'CuTe DSL')"
# The fused DiT LayerNorms (and rmsnorm/layernorm without the CuTe DSL) are the CUDA norm module: build it now, so a
# toolchain problem shows here with the compiler's message and `kda bench` finds it built. A failure leaves
# FlashInfer installed: those peers then read n/a with the error, the CuTe DSL norms still run.
if python3 -c "import time; t = time.time(); from flashinfer.norm import get_norm_module; get_norm_module(); \
print(f'flashinfer CUDA norm module: built and loaded in {time.time() - t:.0f} s')" > "$HOME/kda-flashinfer-jit.log" 2>&1
then
  tail -n 1 "$HOME/kda-flashinfer-jit.log"
else
  echo "flashinfer CUDA norm module: FAILED to build (its fused DiT peers will read n/a); the end of" \
       "$HOME/kda-flashinfer-jit.log:" >&2
  tail -n 25 "$HOME/kda-flashinfer-jit.log" >&2
fi
