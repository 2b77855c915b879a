#!/usr/bin/env bash
# Run lab commands on the offline GPU box (the `device` tool): install the staged SGLang once per box, then
# run each argument as one `kda` command, and pack every task's ledgers into $OUT/ledgers.tgz.
#
#   KDA_GIT_COMMIT=<sha> [KDA_CMD_TIMEOUT=<s>] bash scripts/gpu_box.sh "doctor" "check <task>" "bench <task> --aa"
#
# The box receives a copy of the working tree without .git, so the commit comes in KDA_GIT_COMMIT.
# Back here: scripts/unpack_ledgers.sh <files_at>/ledgers.tgz, then commit the ledgers.
set -euo pipefail
if [ "$#" -eq 0 ] || [ "$1" = "-h" ] || [ "$1" = "--help" ]; then
  sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'
  exit 0
fi
: "${OUT:?OUT is unset: this script runs on the GPU box through the device tool}"
: "${KDA_GIT_COMMIT:?set KDA_GIT_COMMIT to the commit being measured (git rev-parse HEAD)}"
export KDA_GIT_DIRTY="${KDA_GIT_DIRTY:-0}" PYTHONUNBUFFERED=1
# shellcheck disable=SC1090
if ! { [ -f ~/kda-env.sh ] && source ~/kda-env.sh && python3 -c "import sglang" 2>/dev/null; }; then
  [ -f .gpu-stage-a/setup.sh ] || { echo "no staged SGLang: run scripts/gpu_stage.sh on your machine, then carry .gpu-stage-a (docs/gpu-box.md)" >&2; exit 3; }
  bash .gpu-stage-a/setup.sh
  # shellcheck disable=SC1090
  source ~/kda-env.sh
fi
if [ -f .gpu-stage-b/setup.sh ] && ! python3 -c "import cutlass.cute" 2>/dev/null; then
  bash .gpu-stage-b/setup.sh
  # shellcheck disable=SC1090
  source ~/kda-env.sh
fi
if [ -f .gpu-stage-c/setup.sh ] && ! python3 -c "import transformers, diffusers" 2>/dev/null; then
  bash .gpu-stage-c/setup.sh  # kda e2e: the import deps of SGLang's model modules
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
status=0
for cmd in "$@"; do
  echo "== kda $cmd" | tee -a "$OUT/log.txt"
  # KDA_CMD_TIMEOUT (seconds) bounds each command, so one slow task cannot take the whole call with it.
  # shellcheck disable=SC2086  # each argument is one kda command line, split on purpose
  timeout "${KDA_CMD_TIMEOUT:-0}" python3 -m kda_lab $cmd 2>&1 | tee -a "$OUT/log.txt" || status=1
  # Pack after every command: a call cut off at its limit still brings back what finished.
  tar czf "$OUT/ledgers.tgz" kernels/*/benchmark.csv kernels/*/solutions.jsonl
done
exit "$status"
