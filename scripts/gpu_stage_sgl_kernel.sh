#!/usr/bin/env bash
# Stage SGLang's sgl_kernel (the official sglang-kernel wheel pinned, with its hash, in requirements/sgl-kernel.txt)
# for the offline GPU box, whose uploads are capped at 64 MiB, in two parts, each a tar.xz split into equal chunks,
# one ignored folder per chunk (a chunk, the part's manifest.json with the sha256 of every chunk and of the whole
# archive, chunks.py, and setup.sh from scripts/gpu_stage/setup-d.sh):
#   .gpu-stage-d1/         core: the Python package, the sm_90 build of common_ops (what `import sgl_kernel`
#                          loads on an H200) and spatial_ops
#   .gpu-stage-d2/ .. dN/  fa3 (unless KDA_SGL_KERNEL_FA3=0): flash_ops, the FlashAttention-3 extension that
#                          SGLang's default diffusion attention calls on an H200; installs over core
# On the box each folder's setup.sh (scripts/gpu_box.sh runs it when carried) stashes its chunk; the call that
# completes a part checks it and installs it into ~/kda-site. The flow: docs/gpu-box.md.
#
#   scripts/gpu_stage_sgl_kernel.sh    # from any directory; the wheel is downloaded once into the cache
#
# Environment:
#   KDA_STAGE_WHEELS=DIR     take the wheel from DIR, no package index (offline staging)
#   KDA_STAGE_CACHE=DIR      downloads and the repack (default ~/.cache/kda-gpu-stage)
#   KDA_STAGE_PYTHON=3.12    the box's Python version, for the wheel tags
#   KDA_STAGE_CHUNK_MB=56    the most MiB one folder may hold (the upload also carries the working tree)
#   KDA_SGL_KERNEL_FA3=1     0: leave out flash_ops (about 1.1 GB unpacked), then a single chunk suffices
#   PYTHON=python3           the Python whose pip downloads
set -euo pipefail
if [ "${1:-}" = "-h" ] || [ "${1:-}" = "--help" ]; then
  sed -n '2,21p' "$0" | sed 's/^# \{0,1\}//'
  exit 0
fi
if [ "$#" -gt 0 ]; then
  echo "usage: scripts/gpu_stage_sgl_kernel.sh [--help]  (settings come from the environment, see --help)" >&2
  exit 2
fi

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/.." && pwd)
# shellcheck source=scripts/gpu_stage/lib.sh
. "$here/gpu_stage/lib.sh"
cache=${KDA_STAGE_CACHE:-$HOME/.cache/kda-gpu-stage}
chunk_mb=${KDA_STAGE_CHUNK_MB:-56}
python=${PYTHON:-python3}
req=$root/requirements/sgl-kernel.txt
case ${KDA_SGL_KERNEL_FA3:-1} in
  1) fa3=1 ;;
  0) fa3=0 ;;
  *) echo "KDA_SGL_KERNEL_FA3 must be 0 or 1, not ${KDA_SGL_KERNEL_FA3}" >&2; exit 2 ;;
esac
if ! [[ $chunk_mb =~ ^[0-9]+$ ]] || [ "$chunk_mb" -lt 1 ] || [ "$chunk_mb" -gt 60 ]; then
  echo "KDA_STAGE_CHUNK_MB=$chunk_mb: give whole MiB from 1 to 60 (each box upload is 64 MiB with the working tree)" >&2
  exit 2
fi
line=$(sed -n 's/^\(sglang-kernel==[^ ;#]*\) .*--hash=sha256:[0-9a-f]\{64\}.*/\1/p' "$req" | head -n 1)
if [ -z "$line" ]; then
  echo "no 'sglang-kernel==VERSION --hash=sha256:...' line in ${req#"$root"/}" >&2
  exit 2
fi
version=${line#sglang-kernel==}

stage_download
download+=(--no-deps)

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
wheels=$cache/sgl-kernel-$version
mkdir -p "$wheels"
# The requirement line carries the wheel's sha256: pip refuses a download (or a cached file) that differs.
"${download[@]}" -d "$wheels" -r "$req"
shopt -s nullglob
found=("$wheels"/sglang_kernel-"$version"-*.whl)
shopt -u nullglob
if [ "${#found[@]}" -ne 1 ]; then
  echo "expected one sglang_kernel-$version wheel in $wheels, found ${#found[@]}" >&2
  exit 1
fi

# What an sm_90 GPU loads, in two parts: core (the Python package, the sm90 common_ops that `import sgl_kernel`
# loads on an H200, spatial_ops) and fa3 (flash_ops, FlashAttention-3, 1.1 GB unpacked), an add-on over core.
# Every other shared object (the sm100 common_ops, FlashMLA, InfLLM-v2) and the vendored triton_kernels stay out.
keep=(--keep-so 'core=sgl_kernel/sm90/common_ops.*' --keep-so 'core=sgl_kernel/spatial_ops.*')
if [ "$fa3" = 1 ]; then
  keep+=(--keep-so 'fa3=sgl_kernel/flash_ops.*')
fi
"$python" "$here/gpu_stage/wheel_chunks.py" pack --wheel "${found[0]}" --out "$work/out" --cache "$cache" \
  --chunk-mb "$chunk_mb" --version "$version" "${keep[@]}" > "$work/folders.txt"
for folder in "$work"/out/d*; do
  cp "$here/gpu_stage/setup-d.sh" "$folder/setup.sh"
  bytes=$(du -sb "$folder" | cut -f1)
  if [ "$bytes" -gt $((chunk_mb * 1024 * 1024)) ]; then
    echo "refusing: $(basename "$folder") would be $bytes bytes, over KDA_STAGE_CHUNK_MB=$chunk_mb; nothing was changed" >&2
    exit 1
  fi
done

# Replace every folder of an earlier stage (their count may differ), then keep them out of git.
for old in "$root"/.gpu-stage-d[0-9]*; do
  [ -d "$old" ] && rm -rf "$old"
done
count=0
for folder in "$work"/out/d*; do
  mv "$folder" "$root/.gpu-stage-$(basename "$folder")"
  count=$((count + 1))
done
folders=()
for ((k = 1; k <= count; k++)); do folders+=(".gpu-stage-d$k"); done
exclude_from_git "$root" "${folders[@]}"
du -sh "$root"/.gpu-stage-d[0-9]*
echo "staged sglang-kernel $version in $count folder(s) ($(cut -d' ' -f2 "$work/folders.txt" | uniq -c | xargs)):" \
     "carry .gpu-stage-d1 .. .gpu-stage-d$count, after .gpu-stage-a on the same warm box (docs/gpu-box.md)"
