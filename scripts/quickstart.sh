#!/usr/bin/env bash
# The lab's main job on a fresh clone (README): set up .venv, list every task with its status and best
# measured speedup, validate the task folders and ledgers, and check the default task. On a CPU host the
# check runs SGLang's Triton kernels in the Triton interpreter; on a GPU of the task's arch it is the full
# check, recorded in the ledger.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
task=${1:-h200_diffusion_fuse_scale_shift__multi_shape}
scripts/setup_env.sh
.venv/bin/kda tasks
.venv/bin/kda validate
if .venv/bin/python -c 'import sys, torch; sys.exit(not torch.cuda.is_available())'; then
  .venv/bin/kda check "$task"
else
  .venv/bin/kda check "$task" --interpret --no-record   # a CPU verdict; not recorded on a fresh clone
fi
