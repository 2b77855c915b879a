"""`kda e2e`: SGLang 0.5.23's own diffusion model code timed with the KDA overlay uninstalled vs installed.

Modules: :mod:`runtime` (single-process SGLang distributed state and server args), :mod:`models` (the e2e rows:
which SGLang class, which config, which production row it is sized from), :mod:`measure` (interleaved timing,
output agreement, profiler shares), :mod:`command` (the CLI), :mod:`report` (the section `kda report` adds);
`--sp N` / `--tp N` (issue 42): :mod:`multi` (the run, judged against one process), :mod:`parallel` (the worker
layout SGLang resolves), :mod:`workers` (processes started as SGLang starts its workers), :mod:`sharded` (rows
split as SGLang splits them), :mod:`shards` (HunyuanVideo's per-worker shapes at SP 2/4/8). The
ledger (``e2e/rows.csv``, append-only, hash-chained; the frozen pre-tier ``e2e/benchmark.csv``) lives with the
other ledgers, in :mod:`kda_lab.ledger.e2e`. See docs/e2e.md.
"""
