"""Bring ledgers back from the offline GPU box, one call's ``ledgers.tgz`` at a time, in call order.

The box receives a fresh copy of the working tree on every call, so each call's ledgers are the files of the
commit in ``.kda-git-commit`` plus the rows that call appended. Several calls of one session therefore come back
as several tarballs that each extend the same base. Per ledger file:

- the box copy must start with the file as it is at the base commit (otherwise it was not measured from this
  commit: refused);
- if the local file is still the base, the box copy replaces it byte for byte (chain values as the box wrote
  them);
- if an earlier tarball already extended it, the new rows are appended after those through the ledgers' own
  append functions: row contents unchanged, the hash chain extended from the local last row (a chain value is
  a position in the file, and the rows now sit after the earlier call's);
- a local file that is not an extension of the base is refused;
- rows the local file already holds (the same tarball unpacked twice, or after a later one) are skipped, and a
  row whose run id the local file already holds for other content is refused: unpacking is idempotent and never
  doubles a run.

``scripts/unpack_ledgers.sh`` runs this.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tarfile
from pathlib import Path

from kda_lab import ledger
from kda_lab.ledger import e2e

E2E_LEDGER = "e2e/rows.csv"  # versioned CSV ledger: kda_lab.ledger.e2e reads and appends it


class BoxLedgerError(RuntimeError):
    pass


def base_text(root: Path, commit: str, rel: str) -> str:
    r = subprocess.run(["git", "-C", str(root), "show", f"{commit}:{rel}"], capture_output=True, text=True)
    return r.stdout if r.returncode == 0 else ""


def _new_rows(kind: str, base: str, box: str, rel: str) -> list[dict]:
    """The rows ``box`` adds after ``base``, without their chain values (the append recomputes them)."""
    try:
        if kind == "benchmark":
            old, new = ledger.benchmark_rows_from_text(base, rel), ledger.benchmark_rows_from_text(box, rel)
        elif kind == "solutions":
            old, new = [], [json.loads(ln) for ln in box[len(base):].splitlines() if ln.strip()]
        else:  # the e2e ledger, over its newest schema (kda_lab.ledger.e2e)
            old, new = e2e.rows_from_text(base), e2e.rows_from_text(box)
    except ledger.LedgerError as e:
        raise BoxLedgerError(str(e)) from e
    return [{k: v for k, v in r.items() if k != "chain"} for r in new[len(old):]]


def _kind(rel: str) -> str:
    if rel == E2E_LEDGER:
        return "e2e"
    if rel.endswith(ledger.BENCHMARK_FILE):
        return "benchmark"
    if rel.endswith(ledger.SOLUTIONS_FILE):
        return "solutions"
    raise BoxLedgerError(f"{rel}: not a ledger")


def merge_file(root: Path, commit: str, rel: str, box: str) -> str:
    """Merge one box copy; returns what was done ("unchanged", "replaced", "appended N rows")."""
    base = base_text(root, commit, rel)
    if not box.startswith(base):
        raise BoxLedgerError(f"{rel}: the box's copy does not start with the file at {commit[:12]} "
                             "(measured from another commit? check .kda-git-commit)")
    if box == base:
        return "unchanged"
    path = root / rel
    local = path.read_text() if path.exists() else ""
    if local == base:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(box)
        return "replaced"
    if not local.startswith(base):
        raise BoxLedgerError(f"{rel}: changed locally in a way that is not an extension of {commit[:12]}")
    if box.startswith(local):  # the same tarball again, or one that already holds the local rows
        if box == local:
            return "unchanged"
        path.write_text(box)
        return "replaced"
    kind = _kind(rel)
    rows = _new_rows(kind, base, box, rel)
    held = _new_rows(kind, base, local, rel)
    fresh = [r for r in rows if _content(r) not in {_content(h) for h in held}]
    if not fresh:
        return "unchanged (every row is already here: unpacked before)"
    clash = sorted({_run_key(kind, r) for r in fresh} & {_run_key(kind, h) for h in held} - {None})
    if clash:
        raise BoxLedgerError(f"{rel}: run id(s) {[k[-1] for k in clash][:5]} are already here with other rows "
                             "(a run unpacked twice, or edited on the way): refused")
    if kind == "benchmark":
        ledger.append_benchmark_rows(path.parent, fresh)
    elif kind == "solutions":
        for r in fresh:
            ledger.append_solution(path.parent, **r)
    else:
        e2e.append(root, fresh)
    skipped = len(rows) - len(fresh)
    return f"appended {len(fresh)} rows" + (f" ({skipped} already here, skipped)" if skipped else "")


def _content(row: dict) -> str:
    return json.dumps({k: v for k, v in row.items() if k != "chain"}, sort_keys=True, default=str)


def _run_key(kind: str, row: dict) -> tuple[str, ...] | None:
    """What identifies one run's rows: (run_id, function, row) of a benchmark row, (run_id, row) of an e2e row,
    (event, run_id) of a check/interpret/bench solutions row; None for rows that are not a run's."""
    if kind == "solutions":
        run_id = (row.get("evidence") or {}).get("run_id")
        return (row.get("event"), run_id) if run_id and row.get("event") in ("check", "interpret", "bench") else None
    if kind == "benchmark":
        return (row.get("function"), row.get("row"), row.get("run_id")) if row.get("run_id") else None
    return (row.get("row"), row.get("run_id")) if row.get("run_id") else None


def unpack(root: Path, tgz: Path, commit: str) -> list[str]:
    done = []
    with tarfile.open(tgz) as tar:
        for member in tar.getmembers():
            if not member.isfile():
                continue
            rel = member.name.removeprefix("./")
            if not (rel.startswith("kernels/") or rel == E2E_LEDGER) or ".." in Path(rel).parts:
                raise BoxLedgerError(f"{rel}: not a ledger path")
            f = tar.extractfile(member)
            assert f is not None
            what = merge_file(root, commit, rel, f.read().decode())
            if what != "unchanged":
                done.append(f"{rel}: {what}")
    return done


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m kda_lab.ledger.box", description=__doc__.splitlines()[0])
    p.add_argument("tgz", nargs="+", type=Path, help="the calls' ledgers.tgz, in call order")
    p.add_argument("--commit", help="the commit the box measured from (default: .kda-git-commit)")
    p.add_argument("--root", type=Path, default=Path.cwd())
    a = p.parse_args(argv)
    commit = a.commit or (a.root / ".kda-git-commit").read_text().split()[0]
    try:
        for tgz in a.tgz:
            for line in unpack(a.root, tgz, commit):
                print(f"{tgz}: {line}")
    except BoxLedgerError as e:
        print(f"refusing: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
