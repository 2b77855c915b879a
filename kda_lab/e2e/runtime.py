"""One-process SGLang runtime for building its model classes outside a server: server args + distributed state.

SGLang's parallel layers (``ColumnParallelLinear``, ``USPAttention``, ...) read the global server args and the
tensor/sequence-parallel groups at construction and in forward. SGLang's own unit tests
(``multimodal_gen/test/unit/test_anima_cuda.py``) set ``server_args._global_server_args`` and call
``maybe_init_distributed_environment_and_model_parallel(tp_size=1, sp_size=1)`` with RANK/WORLD_SIZE=1 in the
environment; this module does the same (gloo on CPU, nccl on CUDA, picked by SGLang's platform), on a free port.
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


def torchvision_without_compiled_ops() -> bool:
    """Make ``import torchvision`` work when its compiled ops cannot load; True when that was needed.

    ``import sglang`` (through transformers' image utils) and SGLang's VLM configs import torchvision. PyPI's
    torchvision wheels link CUDA torch; with the CPU torch of the lab's CPU environment their ``_C`` does not
    load, and torchvision 0.28's ``_meta_registrations`` then fails on ``register_fake("torchvision::nms")``
    because the op was never defined. Defining the two op schemas it registers fakes for lets the pure-Python
    parts (transforms, the only thing SGLang uses from it) import; calling those ops would still fail loudly.
    On a GPU machine with a matching torchvision this does nothing.
    """
    import importlib.util

    import torch

    if importlib.util.find_spec("torchvision") is None:
        return False
    if torch.version.cuda is not None:
        return False
    try:
        torch.ops.torchvision.nms  # noqa: B018 - defined when torchvision's compiled ops loaded
        return False
    except (AttributeError, RuntimeError):
        pass
    lib = torch.library.Library("torchvision", "FRAGMENT")  # noqa: TID251 - kept alive below
    for op in ("nms", "qnms"):
        lib.define(f"{op}(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
    _READY["torchvision_lib"] = lib
    return True


def init_sglang(device: str, attention_backend: str | None = None) -> dict[str, Any]:
    """Server args and parallel groups for one process on ``device`` (idempotent). Returns what was set."""
    if _READY.get("device"):
        if _READY["device"] != device:
            raise RuntimeError(f"SGLang runtime already initialised for {_READY['device']}, not {device}")
        return dict(_READY)
    torchvision_without_compiled_ops()
    if "WORLD_SIZE" not in os.environ:
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_free_port()), RANK="0", LOCAL_RANK="0",
                          WORLD_SIZE="1")
    from sglang.multimodal_gen.configs.pipeline_configs.wan import WanT2V480PConfig
    from sglang.multimodal_gen.runtime.distributed.parallel_state import (
        maybe_init_distributed_environment_and_model_parallel,
    )
    from sglang.multimodal_gen.runtime.server_args import ServerArgs, server_args

    # CPU: SGLang's torch SDPA backend; GPU: SGLang's own choice for the device (what a user gets).
    backend = attention_backend or ("torch_sdpa" if device == "cpu" else None)
    extra = {"attention_backend": backend} if backend else {}
    # model_path is a label here: an explicit pipeline_config means nothing is resolved from a hub.
    args = ServerArgs(model_path="kda-e2e/random-weights", num_gpus=1, pipeline_config=WanT2V480PConfig(), **extra)
    server_args._global_server_args = args
    maybe_init_distributed_environment_and_model_parallel(tp_size=1, sp_size=1)
    _READY.update(device=device, attention_backend=backend or "sglang default")
    return dict(_READY)


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
