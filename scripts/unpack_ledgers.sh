#!/usr/bin/env bash
# Unpack ledgers brought back from the GPU box (scripts/gpu_box.sh) over the working tree. Refuses when a
# local ledger is not a prefix of the box's copy (the ledgers are append-only on both sides).
set -euo pipefail
tgz=${1:?usage: scripts/unpack_ledgers.sh PATH/ledgers.tgz}
root=$(git rev-parse --show-toplevel)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
tar xzf "$tgz" -C "$tmp"
while IFS= read -r f; do
  rel=${f#"$tmp"/}
  if [ -f "$root/$rel" ] && ! cmp -s <(head -c "$(stat -c %s "$root/$rel")" "$f") "$root/$rel"; then
    echo "refusing: $rel changed locally since the box run (not a prefix of the box's copy)" >&2
    exit 1
  fi
done < <(find "$tmp" -type f)
cp -r "$tmp"/kernels/. "$root/kernels/"
if [ -d "$tmp/e2e" ]; then
  mkdir -p "$root/e2e"
  cp -r "$tmp"/e2e/. "$root/e2e/"
fi
echo "unpacked ledgers into $root/kernels (and e2e/ when the box ran kda e2e); review with git diff --stat, then commit"
