"""KDA Lab: the shared harness (tasks, workloads, inputs, oracles, correctness, timing, ledgers, CLI).

Data flows one way: task.toml -> workloads -> inputs -> run -> ledger -> report/export.
The runtime overlay that ships into SGLang lives in the separate package ``kda_kernels``.
"""

__version__ = "0.1.0"
SGLANG_PIN = "0.5.23"
ARCH_CAPABILITY = {"h200": (9, 0), "b200": (10, 0)}
