"""One-process SGLang runtime for building its model classes outside a server: server args + distributed state.

SGLang's parallel layers (``ColumnParallelLinear``, ``USPAttention``, ...) read the global server args and the
tensor/sequence-parallel groups at construction and in forward. SGLang's own unit tests
(``multimodal_gen/test/unit/test_anima_cuda.py``) set ``server_args._global_server_args`` and call
``maybe_init_distributed_environment_and_model_parallel(tp_size=1, sp_size=1)`` with RANK/WORLD_SIZE=1 in the
environment; this module does the same (gloo on CPU, nccl on CUDA, picked by SGLang's platform), on a free port.
A worker of `kda e2e --sp N` / `--tp N` makes the call SGLang's own GPU worker makes, with the degrees SGLang's
ServerArgs resolved (:func:`init_sglang` with a layout; kda_lab.e2e.workers sets the rendezvous variables).
"""

from __future__ import annotations

import os
import socket
from typing import Any

_READY: dict[str, Any] = {}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


CPU_E2E_SITE = ".venv/e2e-site"  # scripts/setup_env.sh installs requirements/e2e-cpu.txt here


def cpu_e2e_site() -> str:
    """On a CPU torch, make SGLang's model modules importable; returns what was done ("" on a CUDA torch).

    Their import deps (transformers, diffusers, torchvision, ...) live outside site-packages in
    ``.venv/e2e-site`` (requirements/e2e-cpu.txt says why): this appends that folder to ``sys.path``. PyPI's
    torchvision wheels link CUDA torch, so on the CPU torch their compiled ops do not load and torchvision
    0.28's ``_meta_registrations`` then fails on ``register_fake("torchvision::nms")`` because the op was never
    defined: defining the two op schemas it registers fakes for lets its pure-Python parts (transforms, all
    SGLang uses) import. Calling those ops would still fail loudly. Must run before anything imports sglang.
    """
    import sys

    import torch

    from kda_lab.paths import PACKAGE_ROOT

    if torch.version.cuda is not None:
        return ""
    site = PACKAGE_ROOT / CPU_E2E_SITE
    if not (site / "transformers").is_dir() or not (site / "torchvision").is_dir():
        raise RuntimeError(f"SGLang's model modules need transformers, diffusers, torchvision, ...: run "
                           f"scripts/setup_env.sh (installs requirements/e2e-cpu.txt into {CPU_E2E_SITE})")
    if str(site) not in sys.path:
        sys.path.append(str(site))
    try:
        torch.ops.torchvision.nms  # noqa: B018 - defined when torchvision's compiled ops loaded
        return f"{CPU_E2E_SITE} on sys.path"
    except (AttributeError, RuntimeError):
        pass
    lib = torch.library.Library("torchvision", "FRAGMENT")
    for op in ("nms", "qnms"):
        lib.define(f"{op}(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
    _READY["torchvision_lib"] = lib  # the schemas live as long as the library object
    return f"{CPU_E2E_SITE} on sys.path, torchvision without compiled ops (CPU torch)"


class MissingModelDeps(RuntimeError):
    """An import dep of SGLang's model modules is missing: where each environment gets them."""

    def __init__(self, name: str | None) -> None:
        super().__init__(
            f"SGLang's model modules import {name!r}, which this Python lacks: on the GPU box carry .gpu-stage-c "
            "with the call (docs/e2e.md, 'On the GPU box'); on a CPU host run scripts/setup_env.sh "
            f"(requirements/e2e-cpu.txt into {CPU_E2E_SITE})")
        self.name = name


def server_args(device: str, attention_backend: str | None = None, layout: Any = None) -> Any:
    """SGLang's ServerArgs for the e2e rows on ``device``: one process, or the degrees of ``layout``
    (kda_lab.e2e.parallel.Layout), resolved and validated by SGLang as `sglang serve` does (ValueError where it
    refuses). Imports SGLang (``cpu_e2e_site`` first on a CPU torch)."""
    if not _cuda_torch():
        cpu_e2e_site()
    from sglang.multimodal_gen.configs.pipeline_configs.wan import WanT2V480PConfig
    from sglang.multimodal_gen.runtime.server_args import ServerArgs

    # CPU: SGLang's torch SDPA backend; GPU: SGLang's own choice for the device (what a user gets).
    backend = attention_backend or ("torch_sdpa" if device == "cpu" else None)
    extra: dict[str, Any] = {"attention_backend": backend} if backend else {}
    if layout is not None:  # what `sglang serve --num-gpus N --sp-degree S --tp-size T` sets
        extra.update(num_gpus=layout.world, sp_degree=layout.sp, tp_size=layout.tp)
    else:
        extra["num_gpus"] = 1
    # model_path is a label here: an explicit pipeline_config means nothing is resolved from a hub.
    return ServerArgs(model_path="kda-e2e/random-weights", pipeline_config=WanT2V480PConfig(), **extra)


def init_sglang(device: str, attention_backend: str | None = None, layout: Any = None,
                dist_timeout: int | None = None) -> dict[str, Any]:
    """Server args and parallel groups for this process on ``device`` (idempotent). Returns what was set.

    One process (``layout`` None): RANK/WORLD_SIZE=1 on a free port, ``tp_size=1, sp_size=1`` as SGLang's unit
    tests do. A worker of a multi-process run (``layout``: kda_lab.e2e.parallel.Layout): the caller has set
    MASTER_ADDR/MASTER_PORT/RANK/LOCAL_RANK/WORLD_SIZE as SGLang's GPUWorker does (kda_lab.e2e.workers), and the
    groups are made with the degrees SGLang's ServerArgs resolved, in GPUWorker.init_device_and_model's call."""
    if _READY.get("device"):
        if _READY["device"] != device:
            raise RuntimeError(f"SGLang runtime already initialised for {_READY['device']}, not {device}")
        return dict(_READY)
    if layout is None and "WORLD_SIZE" not in os.environ:
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_free_port()), RANK="0", LOCAL_RANK="0",
                          WORLD_SIZE="1")
    try:
        args = server_args(device, attention_backend, layout)
    except ModuleNotFoundError as e:  # SGLang's model modules import what its base package does not need
        raise MissingModelDeps(e.name) from e
    from sglang.multimodal_gen.runtime.distributed.parallel_state import (
        maybe_init_distributed_environment_and_model_parallel,
    )
    from sglang.multimodal_gen.runtime.server_args import server_args as sglang_server_args

    sglang_server_args._global_server_args = args
    if layout is None:
        maybe_init_distributed_environment_and_model_parallel(tp_size=1, sp_size=1)
    else:
        maybe_init_distributed_environment_and_model_parallel(
            tp_size=args.tp_size, cfg_degree=args.cfg_parallel_degree or 1, ulysses_degree=args.ulysses_degree,
            ring_degree=args.ring_degree, sp_size=args.sp_degree, dp_size=args.dp_size,
            dist_timeout=dist_timeout)
    backend = attention_backend or ("torch_sdpa" if device == "cpu" else None)
    # SGLang's worker sets the two process-global approximate-numerics switches from its server args
    # (gpu_worker.init_device_and_model): cuDNN TF32 on by default, so an fp32 VAE decode runs TF32 convs
    from sglang.multimodal_gen.runtime.utils.numerics_policy import apply_numerics_policy

    apply_numerics_policy(allow_cudnn_tf32=args.allow_cudnn_tf32,
                          allow_bf16_reduced_precision_reduction=args.allow_bf16_reduced_precision_reduction)
    _READY.update(device=device, attention_backend=backend or "sglang default", server_args=args,
                  cudnn_tf32=args.allow_cudnn_tf32,
                  bf16_reduced_precision_reduction=args.allow_bf16_reduced_precision_reduction)
    return dict(_READY)


def _cuda_torch() -> bool:
    import torch

    return torch.version.cuda is not None


def native_custom_ops(module: Any) -> int:
    """Route every SGLang ``CustomOp`` in ``module`` to its ``forward_native`` (CPU only: SGLang's
    ``forward_cpu`` paths call ``sgl_kernel`` CPU ops, which the CPU environment does not have). Returns how many."""
    from sglang.multimodal_gen.runtime.layers.custom_op import CustomOp

    n = 0
    for m in module.modules():
        if isinstance(m, CustomOp):
            m._forward_method = m.forward_native
            n += 1
    return n
