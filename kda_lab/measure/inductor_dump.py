"""What torch.compile generated for a peer: Inductor's output code and the configs its autotuner kept.

The lab's dev sweeps time torch.compile of a task's torch reference as the peer to beat; when it wins, its
generated kernel says how (block size, warps, eviction hints). ``dump_inductor`` recompiles with Inductor's
caches off so the code is generated rather than loaded, and writes it to a file headed by the kept configs (best
effort: those live in private Inductor attributes, and the header says "(none found)" when they move).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def dump_inductor(compiled: Any, args: dict[str, Any], path: Path) -> list[dict[str, Any]]:
    """Compile ``compiled`` afresh on ``args`` (dynamo reset, Inductor caches off so the code is generated, not
    loaded) and write the output code Inductor generated (its Triton kernels inline) to ``path``, headed by the
    configs each generated kernel's autotuner kept after the run (best effort: private Inductor attributes).
    Returns those configs."""
    import torch
    from torch._inductor import config as inductor_config
    from torch._inductor.codecache import PyCodeCache
    from torch._inductor.utils import run_and_get_code

    known = dict(inductor_config.get_config_copy())
    off = {k: v for k, v in (("force_disable_caches", True), ("fx_graph_cache", False)) if k in known}
    seen = {id(m) for m in PyCodeCache.modules}
    with inductor_config.patch(off):
        _, codes = run_and_get_code(compiled, **args)
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    kept: list[dict[str, Any]] = []
    for module in PyCodeCache.modules:
        if id(module) in seen:
            continue
        for attr, value in vars(module).items():
            launchers = getattr(value, "launchers", None)
            if not launchers:
                continue
            for launcher in launchers:
                cfg = getattr(launcher, "config", None)
                kept.append({"kernel": attr, "kwargs": dict(getattr(cfg, "kwargs", {}) or {}),
                             "num_warps": getattr(cfg, "num_warps", None),
                             "num_stages": getattr(cfg, "num_stages", None),
                             "n_regs": getattr(launcher, "n_regs", None),
                             "n_spills": getattr(launcher, "n_spills", None),
                             "candidates": len(getattr(value, "configs", []) or [])})
    header = "".join(f"# kept config: {json.dumps(k)}\n" for k in kept) or "# kept config: (none found)\n"
    path.write_text(f"# Inductor output code for the torch.compile peer (torch {torch.__version__})\n{header}\n"
                    + "\n\n# ---- next output code ----\n\n".join(codes))
    return kept
