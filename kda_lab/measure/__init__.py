"""What runs on the GPU: inputs, correctness, timing and the run that writes ledger rows (``kda check/bench``).

Chain: ``inputs`` (tensors from workload specs) -> ``correctness`` (oracle comparison per row) and
``timing`` (CUDA-graph replay, interleaved order, the ``yardstick`` copy) -> ``run`` (one check or bench of a
task, rows appended through :mod:`kda_lab.ledger` with ``env`` on every row; ``notify`` and ``progress`` on
the side). These modules import torch; import them by path, nothing is re-exported here.
"""
