"""`kda export`: promotion into the ``kda_kernels`` overlay, gated on the task's ledgers, the last stage of
the data flow.

    kda export <task-slug>       copy kernels/<slug>/src/ to kda_kernels/diffusion/<family>/_impls/<arch>/ and
                                 regenerate the family's stamps, if the ledgers hold the evidence (below)
    kda export --list            tasks, their source hash, exported copy, evidence verdict; overlay stamps
    kda export --revert <slug>   remove the task's exported copy, regenerate the stamps, log a revert
    kda export --check           exported copies match their tasks' current sources (exit 1 if stale)
    kda export --regen-patch [--sglang-init PATH | --wheel PATH]
                                 rebuild patches/sglang_kda_kernels.patch against a checkout's (or the pinned
                                 sglang 0.5.23 release's) python/sglang/__init__.py

Evidence gate (at the exact ``kda_lab.task.source_hash`` of src/, on the task's arch). First the ledgers
validate (``kda_lab.ledger.validate_ledgers``, the code ``kda validate`` runs: schema, hash chain, cut lines,
supersedes, append-only against the git history); then, counting only rows measured on a GPU whose name
identifies the task's arch (``kda_lab.evidence``: an H100 is not an H200):

- solutions.jsonl: a ``check`` row with status ``correct`` that ran every production row with the task's seed
  count (``kda_lab.evidence.check_coverage_gap``: a --rows subset or a zero-seed check is recorded, never
  evidence), and no ``check`` of that hash that failed, on any GPU, before or after it (a failing check blocks
  its hash for good);
- both the check row and every row of the bench run name a ``git_commit`` in HEAD's history that holds src/ at
  that source hash (``kda_lab.task.commits``: a made-up commit, or one measured on uncommitted sources, never
  counts);
- benchmark.csv: the latest ``bench`` run (one run_id, not superseded) of that hash that covers every
  production row of task.toml with a finite speedup (a partial run neither promotes nor replaces a whole-table
  run), with an equal-weight geomean >= 1.0 and no row below 0.97x.

A function is promoted when the candidate exports its own code for it (an EXPORTS entry that is
``lazy_baseline(name)`` forwards to SGLang: its rows time SGLang against itself) and its rows' geomean is
>= 1.0; others stay on SGLang's code (partial promotion). Stamps and the export manifest come from the
ledger rows only, so re-exporting the same inputs rewrites byte-identical files, and ``--check`` recomputes
every stamp from the rows the manifest names. docs/export.md says what an export writes.

Modules, one job each: ``task`` (the task as the overlay sees it: kda_lab.task's Task checked against the
swap targets of kda_kernels.registry) -> ``gate`` (the evidence) -> ``overlay`` (the exported copy's
manifest and the generated family ``__init__.py``) -> ``promote`` (export and revert) and ``check``
(``--check``, ``--list``); ``patch`` (``--regen-patch``); ``command`` (the ``kda export`` command line).
"""

from __future__ import annotations


class Refusal(Exception):
    """The exporter will not do what was asked (message says why); exit status 1."""
