#!/usr/bin/env bash
# Shared by the staging scripts (gpu_stage.sh, gpu_stage_sgl_kernel.sh); sourced, never run.

# stage_download: sets the array `download`, a pip download for the box (CPython KDA_STAGE_PYTHON, manylinux
# x86_64 wheels only); with KDA_STAGE_WHEELS=DIR it takes wheels from DIR and never asks a package index.
stage_download() {
  download=("${python:-python3}" -m pip download -q --only-binary=:all: --implementation cp
            --python-version "${KDA_STAGE_PYTHON:-3.12}"
            --platform manylinux_2_34_x86_64 --platform manylinux_2_28_x86_64 --platform manylinux_2_26_x86_64
            --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64
            --platform manylinux_2_12_x86_64 --platform manylinux1_x86_64)
  if [ -n "${KDA_STAGE_WHEELS:-}" ]; then
    if [ ! -d "$KDA_STAGE_WHEELS" ]; then
      echo "KDA_STAGE_WHEELS=$KDA_STAGE_WHEELS is not a directory" >&2
      exit 2
    fi
    download+=(--no-index --find-links "$(cd "$KDA_STAGE_WHEELS" && pwd)")
  fi
}

# exclude_from_git ROOT FOLDER...: keep staged folders out of git even in a checkout whose .gitignore lacks them
# (info/exclude is per clone); outside a git checkout it does nothing.
exclude_from_git() {
  local root=$1 exclude folder
  shift
  git -C "$root" rev-parse --git-dir > /dev/null 2>&1 || return 0
  exclude=$(git -C "$root" rev-parse --git-path info/exclude)
  case $exclude in /*) ;; *) exclude=$root/$exclude ;; esac
  mkdir -p "$(dirname "$exclude")"
  for folder in "$@"; do
    git -C "$root" check-ignore -q "$folder/" || echo "/$folder/" >> "$exclude"
  done
}
