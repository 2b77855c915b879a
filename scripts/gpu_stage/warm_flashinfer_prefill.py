#!/usr/bin/env python3
"""GPU box: build FlashInfer's prefill JIT modules before the `kda bench` call that times its attention peer.

FlashInfer 0.7.2 ships no compiled attention: its first ``single_prefill_with_kv_cache`` call per (dtype,
head dim, backend) compiles a module with nvcc and ninja into ``$FLASHINFER_WORKSPACE_BASE``
(~/kda-flashinfer-jit, which .gpu-stage-e1's setup writes into ~/kda-env.sh), minutes on the box. Run here, in
a staging call whose upload is a chunk folder and whose time is otherwise idle, the build is cached for the
rest of the warm box, and the mha family's FlashInfer peer (kda_lab/families/mha.py:flashinfer_prefill, called
here exactly as `kda bench` calls it) finds it built. A build cut off by its call's limit resumes from ninja's
finished objects next time.

    source ~/kda-env.sh && PYTHONPATH=$PWD python3 scripts/gpu_stage/warm_flashinfer_prefill.py 128 64

Prints one line per head dim: built and run in N s, or FAILED with the error's last line (exit 1).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence

# The rows' heads per head dim (kernels/h200_mha_diffusion__multi_shape/task.toml): the module does not depend
# on the head count, but a real one keeps the call the rows' own.
HEADS = {128: 24, 64: 32}


def warm(head_dim: int, tokens: int = 256) -> float:
    """One non-causal bf16 call of the FlashInfer peer's adapter at ``head_dim`` (builds its module): s."""
    import torch
    from flashinfer import prefill

    from kda_lab.families.mha import flashinfer_prefill

    shape = (1, tokens, HEADS.get(head_dim, 8), head_dim)
    q, k, v = (torch.randn(shape, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    t0 = time.time()
    out = flashinfer_prefill(prefill, {"q": q, "k": k, "v": v, "causal": False, "softmax_scale": None,
                                       "key_lens": [tokens - 7]})
    torch.cuda.synchronize()
    if tuple(out.shape) != shape or not bool(torch.isfinite(out).all()):
        raise RuntimeError(f"FlashInfer's prefill returned {list(out.shape)} / non-finite values at head_dim "
                           f"{head_dim}")
    return time.time() - t0


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("head_dims", nargs="+", type=int, help="head dims to build (the rows': 128 64)")
    args = ap.parse_args(argv)
    status = 0
    for d in args.head_dims:
        try:
            print(f"flashinfer prefill head_dim {d}: built and run in {warm(d):.0f} s", flush=True)
        except Exception as e:  # noqa: BLE001 - report and go on: the peer then reads n/a with the error in bench
            print(f"flashinfer prefill head_dim {d}: FAILED: {type(e).__name__}: {str(e).splitlines()[-1:]}",
                  flush=True)
            status = 1
    return status


if __name__ == "__main__":
    sys.exit(main())
