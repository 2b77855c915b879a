#!/bin/sh
# Assemble candidate c006's src/ files (source hash 918bfa6173332746 over c004's src/ plus these) into DEST,
# default the task's src/: dev/c006's register.py and binding, dev/pad_cuda's two headers as they are, and
# src/pad_stage.cu = dev/c006/pad_stage.cu.head + dev/pad_cuda/pad_stage.cu from its first `#include <cstdint>`.
# DEST must already hold c004's other src/ files (fast_path.py, gn_silu_cl.py, pad_kernels.py). See README.md.
set -eu
TASK=$(cd "$(dirname "$0")/../.." && pwd)
DEST=${1:-$TASK/src}
C=$TASK/dev/c006
P=$TASK/dev/pad_cuda
cp "$C/register.py" "$C/pad_stage_binding.cpp" "$P/pad_stage_core.cuh" "$P/pad_vec_core.cuh" "$DEST/"
{ cat "$C/pad_stage.cu.head"; sed -n '/^#include <cstdint>/,$p' "$P/pad_stage.cu"; } > "$DEST/pad_stage.cu"
