"""Ideal FLOPs per call for compute-bound families, and the dense tensor-core peak they are set against.

A family whose rows are compute bound (attention) reports TFLOP/s beside TB/s: ``kda bench`` prints them under
its table (kda_lab.measure.run.format_compute) and ``kda report`` puts them in the task's section of
docs/leaderboard.md. Torch-free, like the byte model: the report reads rows from task.toml text.

The attention rule (family ``mha``, ``mha_forward(q, k, v, causal, softmax_scale, key_lens)``), counting only
the score entries the contract keeps, two GEMMs (QK^T, PV) of 2 FLOPs per multiply-add each:

- non-causal: ``4 * H * D * sum_b Sq * L_b`` with ``L_b = key_lens[b]`` on a key-padding row (the padded keys
  are masked, so they are not counted), else ``L_b = Sk``; for a dense row this is ``4*B*Sq*Sk*H*D``;
- causal (Sq == Sk): the kept lower triangle, ``4 * H * D * B * Sq*(Sq+1)/2``.

Softmax, scaling and the output write are left out (they are O(Sq*Sk*H), not O(Sq*Sk*H*D)).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from kda_lab.task.workloads import TensorSpec, Workload

# Dense (no sparsity) bf16/fp16 tensor-core peaks, TFLOP/s, by arch: NVIDIA's H100/H200 SXM data sheets list
# 1,979 TFLOP/s bf16 "with sparsity", half of it dense (the two share SMs and clocks; the H200 differs in
# memory only). An H100's rows are recorded as arch h100 (kda_lab.evidence), so it has its own entry.
DENSE_HALF_PEAK_TFLOPS: dict[str, float] = {"h200": 989.0, "h100": 989.0}


def _shape(arg: Any) -> tuple[int, ...]:
    """The shape of a row argument: a parsed TensorSpec, or the raw ``{shape = [...]}`` table of task.toml."""
    if isinstance(arg, TensorSpec):
        return tuple(arg.shape)
    if isinstance(arg, Mapping) and "shape" in arg:
        return tuple(int(n) for n in arg["shape"])
    raise ValueError(f"not a tensor argument: {arg!r}")


def attention_flops(q_shape: Sequence[int], k_shape: Sequence[int], causal: bool = False,
                    key_lens: Sequence[int] | None = None) -> float:
    """FLOPs of one ``mha_forward`` call on ``[B, Sq, H, D]`` queries, ``[B, Sk, H, D]`` keys (module doc)."""
    b, sq, h, d = (int(n) for n in q_shape)
    sk = int(k_shape[1])
    if causal:
        if key_lens is not None:
            raise ValueError("causal attention with key_lens is outside the mha contract")
        return 4.0 * h * d * b * sq * (sq + 1) / 2
    lens = [sk] * b if key_lens is None else [int(n) for n in key_lens]
    if len(lens) != b or any(not 0 < n <= sk for n in lens):
        raise ValueError(f"key_lens {list(lens)} must give 1..{sk} valid keys for each of the {b} batch "
                         "elements")
    return 4.0 * h * d * sq * sum(lens)


def mha_flops(args: Mapping[str, Any]) -> float:
    """:func:`attention_flops` of a row's arguments (parsed Workload.args or the raw task.toml table)."""
    key_lens = args.get("key_lens")
    if isinstance(key_lens, Mapping) and key_lens.get("none") is True:
        key_lens = None
    causal = args.get("causal", False)
    return attention_flops(_shape(args["q"]), _shape(args["k"]), bool(causal), key_lens)


# family -> FLOPs of a row's arguments; families not listed report bytes only
FLOP_MODELS: dict[str, Callable[[Mapping[str, Any]], float]] = {"mha": mha_flops}


def workload_flops(family: str, workload: Workload) -> float | None:
    """FLOPs per call of ``workload`` (None: the family has no FLOP model)."""
    model = FLOP_MODELS.get(family)
    return None if model is None else model(workload.args)


def tflops(flops: float | None, us: float | None) -> float | None:
    if not flops or not us or us <= 0:
        return None
    return flops / (us * 1e-6) / 1e12
