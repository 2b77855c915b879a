#!/usr/bin/env bash
# Fetch the pinned upstream references of external/manifest.toml, read-only, into external/src/<name>/.
#
#   scripts/fetch_external.sh [--sparse] [--force] [NAME...]   fetch all entries, or the named ones
#   scripts/fetch_external.sh --list                           entries, pins, licenses, what is fetched
#   scripts/fetch_external.sh --help
#
# Each entry is a shallow fetch (depth 1) of its pinned commit (or tag), checked out detached, verified
# (HEAD = the pinned commit; tag and commit agree when both are given), then made read-only (chmod -R a-w).
# A fetched entry whose pin is unchanged is left alone (idempotent); --force fetches again. --sparse checks
# out only the files the manifest lists (partial clone, blobs on demand). Listed files missing at the pin
# are reported as warnings. external/src/ is git-ignored: nothing fetched is ever committed.
#
# Environment: KDA_EXTERNAL_MANIFEST (default external/manifest.toml), KDA_EXTERNAL_DIR (default
# external/src), PYTHON (a Python >= 3.11 for tomllib; default python3).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/.." && pwd)
manifest=${KDA_EXTERNAL_MANIFEST:-$root/external/manifest.toml}
dest_root=${KDA_EXTERNAL_DIR:-$root/external/src}
python=${PYTHON:-python3}

usage() { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; }
die() { echo "fetch_external: $*" >&2; exit 1; }

list=0 sparse=0 force=0
names=()
while [ "$#" -gt 0 ]; do
  case "$1" in
    -h|--help) usage; exit 0 ;;
    --list) list=1 ;;
    --sparse) sparse=1 ;;
    --force) force=1 ;;
    -*) die "unknown option $1 (see --help)" ;;
    *) names+=("$1") ;;
  esac
  shift
done

[ -f "$manifest" ] || die "no manifest at $manifest"
command -v git >/dev/null || die "git is required"

# The manifest as tab-separated lines: "S name url commit tag license families" and "F name path".
entries=$("$python" - "$manifest" <<'PY'
import sys
try:
    import tomllib
except ImportError:
    sys.exit("fetch_external: needs Python >= 3.11 (tomllib); set PYTHON=")
with open(sys.argv[1], "rb") as f:
    data = tomllib.load(f)
for s in data.get("source", []):
    fields = [s.get("name", ""), s.get("url", ""), s.get("commit", ""), s.get("tag", ""), s.get("license", ""),
              ",".join(s.get("families", []))]
    if any("\t" in x or "\n" in x for x in fields):
        sys.exit(f"fetch_external: tab or newline in entry {s.get('name')!r}")
    print("S\t" + "\t".join(x if x else "-" for x in fields))
    paths = sorted({p for ps in s.get("files", {}).values() for p in ps})
    for p in paths:
        print(f"F\t{s['name']}\t{p}")
PY
)

declare -A url commit tag license families files
order=()
while IFS=$'\t' read -r kind a b c d e f; do
  case "$kind" in
    S) order+=("$a"); url[$a]=$b; commit[$a]=${c#-}; tag[$a]=${d#-}; license[$a]=$e; families[$a]=$f ;;
    F) files[$a]+="$b"$'\n' ;;
  esac
done <<<"$entries"
[ "${#order[@]}" -gt 0 ] || die "no [[source]] entries in $manifest"

pin_line() { printf 'url=%s commit=%s tag=%s sparse=%s' "${url[$1]}" "${commit[$1]}" "${tag[$1]}" "$2"; }

if [ "$list" = 1 ]; then
  printf '%-14s %-14s %-14s %-22s %s\n' name pin license fetched families
  for n in "${order[@]}"; do
    pin=${commit[$n]:0:12}
    [ -n "$pin" ] || pin=${tag[$n]}
    state="no"
    if [ -f "$dest_root/$n/.kda-pin" ]; then
      state="yes ($(sed -n 's/^resolved=//p' "$dest_root/$n/.kda-pin" | cut -c1-12))"
    fi
    printf '%-14s %-14s %-14s %-22s %s\n' "$n" "$pin" "${license[$n]}" "$state" "${families[$n]}"
  done
  exit 0
fi

if [ "${#names[@]}" -eq 0 ]; then
  names=("${order[@]}")
fi
for n in "${names[@]}"; do
  [ -n "${url[$n]+x}" ] || die "no entry named '$n' in $manifest (known: ${order[*]})"
done

mkdir -p "$dest_root"
if git -C "$dest_root" rev-parse --is-inside-work-tree >/dev/null 2>&1 \
    && ! git -C "$dest_root" check-ignore -q "$dest_root/.probe"; then
  die "$dest_root is inside a git checkout but not ignored: fetched sources must never be committed"
fi

tmp=""
cleanup() {
  if [ -n "$tmp" ] && [ -d "$tmp" ]; then chmod -R u+w "$tmp" && rm -rf "$tmp"; fi
}
trap cleanup EXIT

fetch_one() {
  local n=$1 dest=$dest_root/$1 want ref resolved tagged missing=0
  want=$(pin_line "$n" "$sparse")
  if [ "$force" = 0 ] && [ -f "$dest/.kda-pin" ] && [ "$(head -n 1 "$dest/.kda-pin")" = "$want" ]; then
    echo "$n: up to date ($(sed -n 's/^resolved=//p' "$dest/.kda-pin"))"
    return 0
  fi
  [ -n "${commit[$n]}${tag[$n]}" ] || die "$n: needs a commit or a tag"
  if [ -n "${commit[$n]}" ] && ! [[ ${commit[$n]} =~ ^[0-9a-f]{40}$ ]]; then
    die "$n: commit must be 40 lowercase hex digits, got '${commit[$n]}'"
  fi
  tmp=$dest_root/.tmp-$n.$$
  git init -q "$tmp"
  git -C "$tmp" remote add origin "${url[$n]}"
  local filter=()
  if [ "$sparse" = 1 ]; then
    git -C "$tmp" config core.sparseCheckout true
    printf '%s' "${files[$n]:-}" | sed 's|^|/|' >"$tmp/.git/info/sparse-checkout"
    filter=(--filter=blob:none)
  fi
  if [ -n "${commit[$n]}" ]; then ref=${commit[$n]}; else ref=refs/tags/${tag[$n]}; fi
  echo "$n: fetching ${url[$n]} at $ref"
  git -C "$tmp" -c protocol.version=2 fetch -q --depth 1 "${filter[@]}" origin "$ref" \
    || die "$n: git fetch of $ref from ${url[$n]} failed"
  git -C "$tmp" -c advice.detachedHead=false checkout -q --detach FETCH_HEAD
  resolved=$(git -C "$tmp" rev-parse HEAD)
  if [ -n "${commit[$n]}" ] && [ "$resolved" != "${commit[$n]}" ]; then
    die "$n: checked out $resolved, expected ${commit[$n]}"
  fi
  if [ -n "${commit[$n]}" ] && [ -n "${tag[$n]}" ]; then
    # an annotated tag lists the tag object and the peeled commit ("^{}"); a lightweight tag only the commit
    tagged=$(git -C "$tmp" ls-remote origin "refs/tags/${tag[$n]}" "refs/tags/${tag[$n]}^{}" \
      | awk -F '\t' '$2 ~ /\^\{\}$/ { peeled = $1 } { plain = $1 } END { print (peeled != "" ? peeled : plain) }')
    [ "$tagged" = "${commit[$n]}" ] || die "$n: tag ${tag[$n]} is ${tagged:-missing}, not ${commit[$n]}"
  fi
  while IFS= read -r p; do
    [ -n "$p" ] || continue
    if [ ! -e "$tmp/$p" ]; then
      echo "$n: warning: listed file missing at $resolved: $p" >&2
      missing=$((missing + 1))
    fi
  done <<<"${files[$n]:-}"
  { echo "$want"; echo "resolved=$resolved"; echo "license=${license[$n]}"; echo "families=${families[$n]}";
    echo "missing_files=$missing"; } >"$tmp/.kda-pin"
  if [ -e "$dest" ]; then chmod -R u+w "$dest" && rm -rf "$dest"; fi
  mv "$tmp" "$dest"
  tmp=""
  chmod -R a-w "$dest"
  echo "$n: $resolved -> $dest (read-only)"
}

for n in "${names[@]}"; do
  fetch_one "$n"
done
