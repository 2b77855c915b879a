#!/usr/bin/env bash
# Stage FlashInfer (flashinfer-python, the public peer pinned in kda_lab/families/peers.py and requirements/gpu.txt)
# for the offline GPU box, whose uploads are capped at 64 MiB. The 65 MB wheel (mostly the CUDA sources its JIT
# compiles) is repacked whole as tar.xz (about 17 MB) and split into equal chunks, one ignored folder per chunk:
#   .gpu-stage-e1/ (.. eN/)  a chunk, manifest.json (the sha256 of every chunk and of the whole archive), chunks.py
#                            (scripts/gpu_stage/wheel_chunks.py) and setup.sh (scripts/gpu_stage/setup-e.sh);
#                            .gpu-stage-e1 also holds deps/, the wheels of scripts/gpu_stage/flashinfer-deps.txt
#                            (FlashInfer's runtime deps that neither the box image nor .gpu-stage-a has); each
#                            folder flashinfer_env.py (finds the CUDA headers and libraries its JIT needs on the box)
# On the box each folder's setup.sh (scripts/gpu_box.sh runs it when carried) stashes its chunk; the call that
# completes the archive checks it, installs FlashInfer into ~/kda-site, writes ~/kda-flashinfer-env.sh (its JIT
# cache in ~/kda-flashinfer-jit) and builds FlashInfer's CUDA norm module there with nvcc. The flow: docs/gpu-box.md.
#
#   scripts/gpu_stage_flashinfer.sh    # from any directory; the wheel is downloaded and repacked once into the cache
#
# Environment:
#   KDA_STAGE_WHEELS=DIR     take the wheels from DIR, no package index (offline staging)
#   KDA_STAGE_CACHE=DIR      downloads and the repack (default ~/.cache/kda-gpu-stage)
#   KDA_STAGE_PYTHON=3.12    the box's Python version, for the wheel tags
#   KDA_STAGE_CHUNK_MB=48    the most MiB one folder may hold (the upload also carries the working tree)
#   PYTHON=python3           the Python whose pip downloads
set -euo pipefail
if [ "${1:-}" = "-h" ] || [ "${1:-}" = "--help" ]; then
  sed -n '2,21p' "$0" | sed 's/^# \{0,1\}//'
  exit 0
fi
if [ "$#" -gt 0 ]; then
  echo "usage: scripts/gpu_stage_flashinfer.sh [--help]  (settings come from the environment, see --help)" >&2
  exit 2
fi

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/.." && pwd)
# shellcheck source=scripts/gpu_stage/lib.sh
. "$here/gpu_stage/lib.sh"
cache=${KDA_STAGE_CACHE:-$HOME/.cache/kda-gpu-stage}
chunk_mb=${KDA_STAGE_CHUNK_MB:-48}
python=${PYTHON:-python3}
gpu_txt=$root/requirements/gpu.txt
if ! [[ $chunk_mb =~ ^[0-9]+$ ]] || [ "$chunk_mb" -lt 1 ] || [ "$chunk_mb" -gt 60 ]; then
  echo "KDA_STAGE_CHUNK_MB=$chunk_mb: give whole MiB from 1 to 60 (each box upload is 64 MiB with the working tree)" >&2
  exit 2
fi
version=$(sed -n 's/^flashinfer-python==\([^ ;#]*\).*/\1/p' "$gpu_txt" | head -n 1)
if [ -z "$version" ]; then
  echo "no flashinfer-python==VERSION line in ${gpu_txt#"$root"/}" >&2
  exit 2
fi

stage_download
download+=(--no-deps)

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
wheels=$cache/flashinfer-$version
mkdir -p "$wheels"
"${download[@]}" -d "$wheels" "flashinfer-python==$version"
shopt -s nullglob
found=("$wheels"/flashinfer_python-"$version"-*.whl)
shopt -u nullglob
if [ "${#found[@]}" -ne 1 ]; then
  echo "expected one flashinfer_python-$version wheel in $wheels, found ${#found[@]}" >&2
  exit 1
fi

# Its runtime deps that the box lacks, --no-deps: the list says why each of the wheel's Requires-Dist is or is not
# there. They go in .gpu-stage-e1 beside its chunk, so every chunk is made smaller by their size.
mkdir -p "$work/deps"
"${download[@]}" -d "$work/deps" -r "$here/gpu_stage/flashinfer-deps.txt" -c "$gpu_txt"
deps_bytes=$(du -sb "$work/deps" | cut -f1)
# The chunker keeps 0.25 MiB of each folder for its manifest and scripts: leave at least as much again for a chunk.
if [ "$deps_bytes" -gt $((chunk_mb * 1024 * 1024 - 512 * 1024)) ]; then
  echo "refusing: the deps ($deps_bytes bytes) leave no room for a chunk in .gpu-stage-e1 under" \
       "KDA_STAGE_CHUNK_MB=$chunk_mb; nothing was changed" >&2
  exit 1
fi
chunk_room=$("$python" -c "import sys; print(int(sys.argv[1]) - int(sys.argv[2]) / 2**20)" "$chunk_mb" "$deps_bytes")
# The whole wheel, one part: FlashInfer's JIT compiles from the CUDA sources and headers it carries (data/), and
# which of its modules a peer imports is FlashInfer's business; xz takes it from 65 MB to about 17 MB.
"$python" "$here/gpu_stage/wheel_chunks.py" pack --wheel "${found[0]}" --out "$work/out" --cache "$cache" \
  --chunk-mb "$chunk_room" --version "$version" --package flashinfer --distribution flashinfer-python \
  --name flashinfer --letter e > "$work/folders.txt"
mv "$work/deps" "$work/out/e1/deps"
for folder in "$work"/out/e*; do
  cp "$here/gpu_stage/setup-e.sh" "$folder/setup.sh"
  cp "$here/gpu_stage/flashinfer_env.py" "$folder/"
  bytes=$(du -sb "$folder" | cut -f1)
  if [ "$bytes" -gt $((chunk_mb * 1024 * 1024)) ]; then
    echo "refusing: $(basename "$folder") would be $bytes bytes, over KDA_STAGE_CHUNK_MB=$chunk_mb; nothing was changed" >&2
    exit 1
  fi
done

# Replace every folder of an earlier stage (their count may differ), then keep them out of git.
for old in "$root"/.gpu-stage-e[0-9]*; do
  [ -d "$old" ] && rm -rf "$old"
done
count=0
for folder in "$work"/out/e*; do
  mv "$folder" "$root/.gpu-stage-$(basename "$folder")"
  count=$((count + 1))
done
folders=()
for ((k = 1; k <= count; k++)); do folders+=(".gpu-stage-e$k"); done
exclude_from_git "$root" "${folders[@]}"
du -sh "$root"/.gpu-stage-e[0-9]*
echo "staged flashinfer-python $version in $count folder(s): carry ${folders[*]}, one call each, after" \
     ".gpu-stage-a (and .gpu-stage-b, for its CuTe DSL norms) on the same warm box (docs/gpu-box.md)"
