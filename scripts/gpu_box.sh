#!/usr/bin/env bash
# Run lab commands on the offline GPU box (the `device` tool): install the staged SGLang once per box, then
# run each argument as one `kda` command, and pack every task's ledgers into $OUT/ledgers.tgz.
#
#   [KDA_CMD_TIMEOUT=<s>] bash scripts/gpu_box.sh "doctor" "check <task>" "bench <task> --aa"
#
# The box receives a copy of the working tree without .git: the commit is taken here, where the repository is,
# into the ignored file .kda-git-commit (`git rev-parse HEAD > .kda-git-commit`, carried with .gpu-stage-a),
# or given literally as KDA_GIT_COMMIT=<sha>. Back here: scripts/unpack_ledgers.sh <files_at>/ledgers.tgz (every
# call's tarball, in call order).
set -euo pipefail
if [ "$#" -eq 0 ] || [ "$1" = "-h" ] || [ "$1" = "--help" ]; then
  sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'
  exit 0
fi
: "${OUT:?OUT is unset: this script runs on the GPU box through the device tool}"
if [ -z "${KDA_GIT_COMMIT:-}" ] && [ -s .kda-git-commit ]; then
  KDA_GIT_COMMIT=$(head -n 1 .kda-git-commit)
fi
if ! [[ ${KDA_GIT_COMMIT:-} =~ ^[0-9a-f]{7,40}$ ]]; then
  echo "no commit to record: on your machine, in the repository, run \`git rev-parse HEAD > .kda-git-commit\`" \
       "and carry .kda-git-commit with .gpu-stage-a (or pass KDA_GIT_COMMIT=<sha> literally); the box has no .git," \
       "so \$(git rev-parse HEAD) evaluated here is empty (docs/gpu-box.md)" >&2
  exit 2
fi
export KDA_GIT_COMMIT
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
# sgl_kernel, staged in chunks by scripts/gpu_stage_sgl_kernel.sh: each carried folder stashes its chunk, and the one
# that completes a part installs it (or says which folders are still to carry).
for setup in .gpu-stage-d[0-9]*/setup.sh; do
  if [ -f "$setup" ]; then bash "$setup"; fi
done
# FlashInfer, staged likewise by scripts/gpu_stage_flashinfer.sh; its setup adds its JIT settings to ~/kda-env.sh.
for setup in .gpu-stage-e[0-9]*/setup.sh; do
  if [ -f "$setup" ]; then bash "$setup"; fi
done
# shellcheck disable=SC1090
source ~/kda-env.sh
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
status=0
for cmd in "$@"; do
  echo "== kda $cmd" | tee -a "$OUT/log.txt"
  # KDA_CMD_TIMEOUT (seconds) bounds each command, so one slow task cannot take the whole call with it.
  # shellcheck disable=SC2086  # each argument is one kda command line, split on purpose
  timeout "${KDA_CMD_TIMEOUT:-0}" python3 -m kda_lab $cmd 2>&1 | tee -a "$OUT/log.txt" || status=1
  # Pack after every command: a call cut off at its limit still brings back what finished.
  ledgers=(kernels/*/benchmark.csv kernels/*/solutions.jsonl)
  if [ -f e2e/rows.csv ]; then ledgers+=(e2e/rows.csv); fi
  tar czf "$OUT/ledgers.tgz" "${ledgers[@]}"
done
exit "$status"
