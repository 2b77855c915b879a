"""Capture every replicate pad of SGLang 0.5.23's HunyuanVideo VAE decode, on the meta device (no compute).

Builds SGLang's own ``AutoencoderKLHunyuanVideo`` with the shipped ``HunyuanVAEConfig`` through the builder
``kda e2e`` uses (``kda_lab.e2e.models._hunyuan_vae``), on ``meta``, and decodes the production latent
[1,16,9,60,106] (33x480x848) twice: SGLang's default tiled ``vae.decode(z)`` and the decoder on the whole latent
(untiled). A forward pre-hook on every ``HunyuanVideoCausalConv3d`` records the input shape, dtype and the
padding the module pads with (``time_causal_padding``; a 1x1x1 conv pads nothing and calls no F.pad), plus the
conv's weight shape; a TorchFunctionMode counts the ``F.pad`` calls that really ran and the script fails unless
both counts agree (every pad of the decode is one the hook saw).

Output (``--out``, default ``dev/captured_pads.jsonl`` beside this script): one line per (function, distinct
x shape/dtype/pad), in the capture format ``kda new-task --captures`` reads (``kernel``, ``model``, ``args``,
``kwargs``), with the call counts per decode and the convs that consume the padded tensor. Both task functions
get a line per shape (the plain pad and the channels-last variant pad the same tensors). Prints the table.

    .venv/bin/python kernels/h200_vae_hunyuan_causal_conv__multi_shape/dev/capture_pads.py
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[2]))  # the repository root, for kda_lab

from kda_lab.families.replicate_pad3d import model_bytes, padded_shape  # noqa: E402

LATENT = (1, 16, 9, 60, 106)
FUNCTIONS = ("replicate_pad3d", "replicate_pad3d_channels_last")
COPY_TBPS = 4.29  # the H200's measured copy ceiling (docs/h200-baselines.md)


class CountPads(TorchFunctionMode):
    def __init__(self) -> None:
        super().__init__()
        self.calls: Counter[tuple[Any, ...]] = Counter()

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is torch.nn.functional.pad:
            x, pad = args[0], tuple(args[1] if len(args) > 1 else kwargs["pad"])
            mode = args[2] if len(args) > 2 else kwargs.get("mode", "constant")
            self.calls[(tuple(x.shape), str(x.dtype), pad, mode)] += 1
        return func(*args, **kwargs)


def capture(tiled: bool) -> tuple[Counter[tuple[Any, ...]], dict[tuple[Any, ...], set[tuple[int, ...]]]]:
    from sglang.multimodal_gen.runtime.models.vaes import hunyuanvae

    from kda_lab.e2e import models

    built = models._hunyuan_vae("meta", False, LATENT, seed=19, tiled=tiled)
    pads: Counter[tuple[Any, ...]] = Counter()
    convs: dict[tuple[Any, ...], set[tuple[int, ...]]] = defaultdict(set)

    def pre_hook(module: Any, args: tuple[Any, ...]) -> None:
        x = args[0]
        padding = module.spatial_parallel_time_padding if module.spatial_parallel else module.time_causal_padding
        if any(padding):  # HunyuanVideoCausalConv3d.forward calls F.pad only then
            key = (tuple(x.shape), str(x.dtype).removeprefix("torch."), tuple(padding), module.pad_mode)
            pads[key] += 1
            convs[key].add(tuple(module.conv.weight.shape))

    hooks = [m.register_forward_pre_hook(pre_hook) for m in built.module.modules()
             if isinstance(m, hunyuanvae.HunyuanVideoCausalConv3d)]
    counter = CountPads()
    with torch.no_grad(), counter:
        out = built.forward()
    for h in hooks:
        h.remove()
    ran = Counter({(s, d.removeprefix("torch."), p, m): n for (s, d, p, m), n in counter.calls.items()})
    if ran != pads:
        raise SystemExit(f"F.pad calls that ran ({sum(ran.values())}) differ from the causal-conv pads the hooks "
                         f"saw ({sum(pads.values())}): {sorted((ran - pads).items())} / {sorted((pads - ran).items())}")
    if tuple(out.shape) != (1, 3, 33, 480, 848):
        raise SystemExit(f"unexpected decode output {list(out.shape)}")
    return pads, convs


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=str(HERE / "captured_pads.jsonl"))
    args = ap.parse_args()
    from kda_lab.e2e.runtime import init_sglang

    init_sglang("cpu")  # SGLang's server args and parallel groups (the VAE reads them); the model is on meta
    runs = {"tiled": capture(True), "untiled": capture(False)}
    keys = sorted({k for pads, _ in runs.values() for k in pads},
                  key=lambda k: (-k[0][1], k[0][2], k[0][3], k[0][4]))
    lines, table = [], []
    for key in keys:
        shape, dtype, pad, mode = key
        if mode != "replicate":
            raise SystemExit(f"a pad of mode {mode!r}: {key}")
        calls = {name: pads.get(key, 0) for name, (pads, _) in runs.items()}
        consumers = sorted({c for _, convs in runs.values() for c in convs.get(key, ())})
        itemsize = torch.empty((), dtype=getattr(torch, dtype)).element_size()
        nbytes = model_bytes(shape, pad, itemsize)
        out = list(padded_shape(shape, pad))
        for fn in FUNCTIONS:
            lines.append({"kernel": fn, "model": "hunyuanvideo", "args": [{"shape": list(shape), "dtype": dtype},
                                                                          list(pad)],
                          "kwargs": {"out_like": {"shape": out, "dtype": dtype}},
                          "calls": calls, "convs": [list(c) for c in consumers], "bytes": nbytes,
                          "site": "sglang/multimodal_gen/runtime/models/vaes/hunyuanvae.py "
                                  "HunyuanVideoCausalConv3d.forward F.pad(..., mode=self.pad_mode)",
                          "latent": list(LATENT)})
        table.append((shape, out, pad, dtype, calls, nbytes))
    Path(args.out).write_text("".join(json.dumps(line) + "\n" for line in lines))
    print(f"wrote {len(lines)} lines to {args.out}")
    print("| x [B,C,T,H,W] | padded | pad | dtype | tiled calls | untiled calls | MB per call | copy-bound us |")
    print("|---|---|---|---|---:|---:|---:|---:|")
    totals = {"tiled": 0, "untiled": 0}
    for shape, out, pad, dtype, calls, nbytes in table:
        for k in totals:
            totals[k] += calls[k] * nbytes
        print(f"| {'x'.join(map(str, shape))} | {'x'.join(map(str, out))} | {list(pad)} | {dtype} | {calls['tiled']} "
              f"| {calls['untiled']} | {nbytes / 1e6:.1f} | {nbytes / (COPY_TBPS * 1e12) * 1e6:.1f} |")
    for k, v in totals.items():
        n = sum(c[k] for *_, c, _ in table)
        print(f"{k}: {n} pad calls, {v / 1e9:.2f} GB moved, copy bound {v / (COPY_TBPS * 1e12) * 1e3:.1f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
