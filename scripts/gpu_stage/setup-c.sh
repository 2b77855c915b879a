#!/usr/bin/env bash
# GPU box, for `kda e2e`, from the uploaded .gpu-stage-c, on a box the first run set up (.gpu-stage-a/setup.sh):
# adds the import deps of SGLang's model modules (transformers, diffusers, ...) to ~/kda-site, then checks that
# every staged distribution is importable by metadata.
set -euo pipefail
stage=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
site=$HOME/kda-site
if [ ! -d "$site" ] || [ ! -f "$HOME/kda-env.sh" ]; then
  echo "this box has no first run (.gpu-stage-a/setup.sh): it was recycled since; run the first part again" >&2
  exit 3
fi
shopt -s nullglob
deps=("$stage"/deps/*.whl)
shopt -u nullglob
if [ "${#deps[@]}" -gt 0 ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$site" "${deps[@]}"
fi
# shellcheck source=/dev/null
source "$HOME/kda-env.sh"
names=()
for wheel in "${deps[@]}"; do
  names+=("$(basename "$wheel" | cut -d- -f1)")
done
python3 - "${names[@]}" <<'PY'
import sys
from importlib import metadata

missing = [n for n in sys.argv[1:] if not any(True for _ in metadata.distributions(name=n, path=sys.path))]
if missing:
    sys.exit(f"staged but not found on the path: {missing}")
print(f"kda e2e deps ready in ~/kda-site ({len(sys.argv) - 1} wheels)")
PY
