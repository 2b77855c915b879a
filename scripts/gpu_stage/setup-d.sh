#!/usr/bin/env bash
# GPU box, from an uploaded .gpu-stage-dK (scripts/gpu_stage_sgl_kernel.sh made it), on a box the first run set up
# (.gpu-stage-a/setup.sh): checks this folder's chunk of the sgl_kernel archive against manifest.json and keeps it
# in ~/kda-sgl-kernel-stash (outside ~/kda-stash, which the first run clears). The call that brings the last
# missing chunk joins them, checks the archive's sha256, installs sgl_kernel into ~/kda-site and imports it on the
# GPU. Until then it prints one line naming the folders still to carry, and exits 0.
set -euo pipefail
stage=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
site=$HOME/kda-site
if [ ! -d "$site" ] || [ ! -f "$HOME/kda-env.sh" ]; then
  echo "sgl-kernel: this box has no first run (.gpu-stage-a/setup.sh): it was recycled since; run the first part" \
       "again, then carry the .gpu-stage-d folders" >&2
  exit 3
fi
status=0
python3 "$stage/chunks.py" collect --stage "$stage" --stash "$HOME/kda-sgl-kernel-stash" --site "$site" || status=$?
case $status in
  0) ;;
  10) exit 0 ;;  # chunks still missing: collect printed which
  *) exit "$status" ;;
esac
# shellcheck source=/dev/null
source "$HOME/kda-env.sh"
# sgl_kernel picks its common_ops build by the GPU's compute capability: the sm90 one on an H200.
python3 -c "import sgl_kernel; print('sgl_kernel', sgl_kernel.__version__, 'imports with', sgl_kernel.common_ops.__file__)"
