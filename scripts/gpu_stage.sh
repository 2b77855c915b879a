#!/usr/bin/env bash
# Stage SGLang, the import deps the GPU box image lacks and the CuTe DSL for the offline GPU box, whose runs
# each upload at most 64 MiB (working tree included). Writes three ignored folders in the repository root:
#   .gpu-stage-a/  SGLang's Python sources (tar.xz), the wheels of scripts/gpu_stage/box-deps.txt with their
#                  dependencies and of peer-deps-nodeps.txt without (the public peers QuACK and Liger), the
#                  small CuTe DSL wheels, part 1 of the CuTe DSL CUDA 13 runtime
#   .gpu-stage-b/  part 2 of that runtime (repacked as tar.xz, split so the two folders weigh about the same)
#   .gpu-stage-c/  for `kda e2e`: the wheels of scripts/gpu_stage/e2e-deps.txt with their dependencies and of
#                  e2e-deps-nodeps.txt without (they require torch), less what .gpu-stage-a/deps holds
# each with its setup.sh (scripts/gpu_stage/setup-a.sh, setup-b.sh, setup-c.sh), which scripts/gpu_box.sh runs on the box.
# Versions: requirements/sglang.txt and requirements/gpu.txt. The whole flow: docs/gpu-box.md.
#
#   scripts/gpu_stage.sh               # from any directory; downloads once into the cache
#
# Environment:
#   KDA_STAGE_WHEELS=DIR   take every wheel from DIR, no package index (offline staging)
#   KDA_STAGE_CACHE=DIR    downloads and repacks (default ~/.cache/kda-gpu-stage)
#   KDA_STAGE_PYTHON=3.12  the box's Python version, for the wheel tags
#   KDA_STAGE_LIMIT_MB=48  refuse when a staged folder is larger (the upload also carries the working tree)
#   PYTHON=python3         the Python whose pip downloads
set -euo pipefail
if [ "${1:-}" = "-h" ] || [ "${1:-}" = "--help" ]; then
  sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//'
  exit 0
fi
if [ "$#" -gt 0 ]; then
  echo "usage: scripts/gpu_stage.sh [--help]  (settings come from the environment, see --help)" >&2
  exit 2
fi

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/.." && pwd)
# shellcheck source=scripts/gpu_stage/lib.sh
. "$here/gpu_stage/lib.sh"
cache=${KDA_STAGE_CACHE:-$HOME/.cache/kda-gpu-stage}
limit_mb=${KDA_STAGE_LIMIT_MB:-48}
python=${PYTHON:-python3}
# Dependencies of box-deps.txt that the box image already has: dropped after the download to save upload space.
image_has=(anyio idna numpy psutil pygments typing_extensions pillow requests tqdm packaging filelock fsspec
           urllib3 certifi charset_normalizer)
cute_names=(nvidia-cutlass-dsl nvidia-cutlass-dsl-libs-base nvidia-cutlass-dsl-libs-core nvidia-cutlass-dsl-libs-cu13)

# pinned FILE NAME: the VERSION of the NAME==VERSION line in FILE
pinned() {
  local version
  version=$(sed -n "s/^$2==\([^ ;#]*\).*/\1/p" "$1" | head -n 1)
  if [ -z "$version" ]; then
    echo "no $2==VERSION line in ${1#"$root"/}" >&2
    exit 2
  fi
  echo "$version"
}
sglang_version=$(pinned "$root/requirements/sglang.txt" sglang)
cute_version=$(pinned "$root/requirements/gpu.txt" nvidia-cutlass-dsl)
cute_reqs=()
for name in "${cute_names[@]}"; do
  cute_reqs+=("$name==$(pinned "$root/requirements/gpu.txt" "$name")")
done

stage_download

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$cache"

# SGLang's Python package only (the wheel also carries Rust extension sources and test suites), as tar.xz.
sglang_tar=$cache/sglang-$sglang_version.tar.xz
if [ ! -f "$sglang_tar" ]; then
  "${download[@]}" --no-deps -d "$work/sglang-wheel" "sglang==$sglang_version"
  unzip -q "$work"/sglang-wheel/sglang-"$sglang_version"-*.whl 'sglang/*' -d "$work/sglang-src" \
    -x 'sglang/srt/rust_extensions/*' 'sglang/multimodal_gen/test/*' 'sglang/test/*'
  tar -C "$work/sglang-src" -cf - sglang | xz -T0 -6 > "$sglang_tar.partial"
  mv "$sglang_tar.partial" "$sglang_tar"
fi

# The CuTe DSL wheels; its CUDA 13 runtime wheel (92 MB zipped) shrinks to about 66 MB as tar.xz.
cute_dir=$cache/cute-$cute_version
"${download[@]}" --no-deps -d "$cute_dir" "${cute_reqs[@]}"
cu13_tar=$cache/cu13-$cute_version.tar.xz
if [ ! -f "$cu13_tar" ]; then
  unzip -q "$cute_dir"/nvidia_cutlass_dsl_libs_cu13-"$cute_version"-*.whl -d "$work/cu13"
  tar -C "$work/cu13" -cf - . | xz -T0 -6 > "$cu13_tar.partial"
  mv "$cu13_tar.partial" "$cu13_tar"
fi

# Build both folders aside, so a failure leaves the previous stage as it was.
a=$work/a
b=$work/b
c=$work/c
mkdir -p "$a/deps" "$a/cute" "$b" "$c/deps"
cp "$sglang_tar" "$a/sglang.tar.xz"
"${download[@]}" -d "$a/deps" -r "$here/gpu_stage/box-deps.txt" -c "$root/requirements/gpu.txt"
"${download[@]}" -d "$c/deps" -r "$here/gpu_stage/e2e-deps.txt" -c "$root/requirements/gpu.txt"
"${download[@]}" --no-deps -d "$c/deps" -r "$here/gpu_stage/e2e-deps-nodeps.txt" -c "$root/requirements/gpu.txt"
"${download[@]}" --no-deps -d "$a/deps" -r "$here/gpu_stage/peer-deps-nodeps.txt" -c "$root/requirements/gpu.txt"
for name in "${image_has[@]}"; do
  rm -f "$a/deps/$name"-*.whl "$c/deps/$name"-*.whl
done
for wheel in "$a"/deps/*.whl; do
  rm -f "$c/deps/$(basename "$wheel")"
done
for wheel in "$cute_dir"/*-"$cute_version"-*.whl; do
  case $(basename "$wheel") in
    nvidia_cutlass_dsl_libs_cu13-*) ;;
    *) cp "$wheel" "$a/cute/" ;;
  esac
done
cp "$here/gpu_stage/setup-a.sh" "$a/setup.sh"
cp "$here/gpu_stage/setup-b.sh" "$b/setup.sh"
cp "$here/gpu_stage/setup-c.sh" "$c/setup.sh"
# Both uploads also carry the working tree: split the runtime so that the two folders weigh about the same.
a_bytes=$(du -sb "$a" | cut -f1)
cu13_bytes=$(stat -c %s "$cu13_tar")
half=$(((a_bytes + cu13_bytes) / 2))
part1=$((half > a_bytes ? half - a_bytes : 0))
head -c "$part1" "$cu13_tar" > "$a/cu13.part1"
tail -c +"$((part1 + 1))" "$cu13_tar" > "$b/cu13.part2"
sha256sum < "$cu13_tar" | cut -d' ' -f1 > "$a/cu13.sha256"

for folder in "$a" "$b" "$c"; do
  bytes=$(du -sb "$folder" | cut -f1)
  if [ "$bytes" -gt $((limit_mb * 1024 * 1024)) ]; then
    echo "refusing: .gpu-stage-$(basename "$folder") would be $((bytes / 1024 / 1024)) MiB, over" \
         "KDA_STAGE_LIMIT_MB=$limit_mb (each box upload is 64 MiB with the working tree); nothing was changed" >&2
    exit 1
  fi
done
rm -rf "$root/.gpu-stage-a" "$root/.gpu-stage-b" "$root/.gpu-stage-c"
mv "$a" "$root/.gpu-stage-a"
mv "$b" "$root/.gpu-stage-b"
mv "$c" "$root/.gpu-stage-c"

exclude_from_git "$root" .gpu-stage-a .gpu-stage-b .gpu-stage-c
du -sh "$root/.gpu-stage-a" "$root/.gpu-stage-b" "$root/.gpu-stage-c"
echo "staged SGLang $sglang_version and CuTe DSL $cute_version: carry .gpu-stage-a on a box's first run," \
     "then .gpu-stage-b; .gpu-stage-c for kda e2e (docs/gpu-box.md, docs/e2e.md)"
