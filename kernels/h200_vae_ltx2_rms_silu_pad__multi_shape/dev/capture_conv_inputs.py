"""Capture the input of every causal conv of SGLang 0.5.23's LTX-2 VAE decode, on the meta device (no compute).

Builds SGLang's ``AutoencoderKLLTX2Video`` with SGLang's own ``LTXVideoVAEConfig`` defaults (the LTX-2 checkpoint
values ``kda e2e`` uses, ``kda_lab.e2e.vae_rows.LTX2_VAE``) through the ``ltx2_vae_decode`` row builder, on
``meta``, and decodes the production latent [1,128,16,16,24] (512x768, 121 frames) the way
``LTX2AVDecodingStage._decode_video`` does: ``vae.enable_tiling()`` (the pipeline's ``vae_tiling``), then
``vae.decode(z)`` (SGLang's spatial tiles of 16x16
latents at stride 14: tiles 16x16, 16x10, 2x16, 2x10; ``use_framewise_decoding`` stays False, so no temporal
tiles). A forward pre-hook on every ``LTX2VideoCausalConv3d`` records the module's name, the input shape and
the conv's pads; a conv whose input comes from norm -> SiLU (a resnet's ``conv1``/``conv2``, the decoder's
``conv_out``) is a row of ``ltx2_rms_silu_pad``, the others (the decoder's ``conv_in``, the upsamplers'
``conv``) rows of ``ltx2_pad_cast``.

Dtypes are not read off the meta run (on a CPU host SGLang's platform has no autocast to CUDA and no
channels_last_3d weights): on CUDA every conv returns bf16 under autocast and a residual add of two bf16
tensors is bf16, so every conv input is bf16 except ``conv_in``'s, the fp32 latent (scale/shift of the fp32
denoised latent). Layout: conv outputs are channels_last_3d (channels-last input and weight); an upsampler's
pixel shuffle (reshape/permute/flatten) returns NCDHW, so the first resnet after each upsampler reads NCDHW.

Output (``--out``, default ``dev/captured_conv_inputs.jsonl`` beside this script): one line per (function,
distinct x shape/dtype/pad/layout) in the capture format, with the call count per decode and the modules.

    .venv/bin/python kernels/h200_vae_ltx2_rms_silu_pad__multi_shape/dev/capture_conv_inputs.py
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[2]))  # the repository root, for kda_lab

LATENT = (1, 128, 16, 16, 24)
HBM_TBPS = 4.8  # the H200's HBM3e peak (the byte model's bound; the measured copy ceiling is lower)


def _layout(name: str, after_upsampler: set[str]) -> str:
    if name.endswith("decoder.conv_in"):
        return "latent_tile"  # a tile of tiled_decode: a W/H slice of the NCDHW latent, strided
    return "ncdhw" if name in after_upsampler else "channels_last_3d"


def capture() -> tuple[Counter[tuple[Any, ...]], dict[tuple[Any, ...], set[str]],
                       dict[tuple[Any, ...], set[tuple[int, ...]]]]:
    from sglang.multimodal_gen.runtime.models.vaes import ltx_2_vae

    from kda_lab.e2e.vae_rows import VAE_BY_NAME

    built = VAE_BY_NAME["ltx2_vae_decode"].build("meta", False, None)
    calls: Counter[tuple[Any, ...]] = Counter()
    where: dict[tuple[Any, ...], set[str]] = defaultdict(set)
    weights: dict[tuple[Any, ...], set[tuple[int, ...]]] = defaultdict(set)
    names = {m: n for n, m in built.module.named_modules()}
    # the resnets that read an upsampler's NCDHW output: the first resnet after each upsampler
    after_up = set()
    for n, m in built.module.named_modules():
        if isinstance(m, ltx_2_vae.LTX2VideoUpBlock3d) and m.upsamplers is not None and len(m.resnets):
            after_up.add(f"{n}.resnets.0.conv1")

    def pre_hook(module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        x = args[0]
        name = names[module]
        causal = kwargs.get("causal", True)
        kt = module.kernel_size[0]
        tf, tb = (kt - 1, 0) if causal else ((kt - 1) // 2, (kt - 1) // 2)
        _, hp, wp = module.conv.padding
        pad = (wp, wp, hp, hp, tf, tb)
        normed = name.endswith((".conv1", ".conv2")) or name.endswith("decoder.conv_out")
        fn = "ltx2_rms_silu_pad" if normed else "ltx2_pad_cast"
        dtype = "float32" if name.endswith("decoder.conv_in") else "bfloat16"
        key = (fn, tuple(x.shape), dtype, pad, _layout(name, after_up), module.conv.padding_mode)
        calls[key] += 1
        where[key].add(name.removeprefix("decoder."))
        weights[key].add(tuple(module.conv.weight.shape))

    hooks = [m.register_forward_pre_hook(pre_hook, with_kwargs=True) for m in built.module.modules()
             if isinstance(m, ltx_2_vae.LTX2VideoCausalConv3d)]
    # the stage's _decode_video (its latent copy cannot run on meta): the pipeline's tiling, then vae.decode
    if not built.config["vae_tiling"]:
        raise SystemExit("LTX2PipelineConfig.vae_tiling is off: the tiles below would be wrong")
    built.module.enable_tiling()
    with torch.no_grad():
        out = built.module.decode(torch.empty(LATENT, device="meta", dtype=torch.bfloat16)).sample
    for h in hooks:
        h.remove()
    if tuple(out.shape) != (1, 3, 121, 512, 768):
        raise SystemExit(f"unexpected decode output {list(out.shape)}")
    return calls, where, weights


def toml_rows(lines: list[dict[str, Any]]) -> str:
    """task.toml [[workloads]] for the captured lines (source = captured:dev/<file>:<line>)."""
    out = []
    for i, line in enumerate(lines, 1):
        spec, pad = line["args"]
        short = {"ltx2_rms_silu_pad": "rms_silu_pad", "ltx2_pad_cast": "pad_cast"}[line["kernel"]]
        name = f"ltx2_{short}_{'x'.join(map(str, spec['shape']))}_{line['layout']}"
        if spec["dtype"] != "bfloat16":
            name += "_f32"
        strides = f", strides = {spec['strides']}" if "strides" in spec else ""
        ol = line["kwargs"]["out_like"]
        weights = ", ".join("x".join(map(str, w)) for w in line["conv_weights"])
        out.append(f"""[[workloads]]
name = "{name}"
fn = "{line['kernel']}"
kind = "production"
model = "LTX-2"
preset = "ltx2"
source = "captured:dev/captured_conv_inputs.jsonl:{i}"
note = "{line['calls']} calls per tiled decode ({', '.join(line['modules'][:3])}{', ...' if len(line['modules']) > 3 else ''}); x {line['layout']}; feeds conv3d weight {weights}; {line['bytes'] / 1e6:.1f} MB moved per call"
[workloads.args]
x = {{ shape = {spec['shape']}, dtype = "{spec['dtype']}"{strides} }}
pad = {pad}
out_like = {{ shape = {ol['shape']}, dtype = "bfloat16" }}
""")
    return "\n".join(out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=str(HERE / "captured_conv_inputs.jsonl"))
    ap.add_argument("--toml", help="also write the task.toml production rows for the captured lines here")
    args = ap.parse_args()
    from kda_lab.e2e.runtime import init_sglang

    init_sglang("cpu")  # SGLang's server args and parallel groups (the VAE reads them); the model is on meta
    calls, where, weights = capture()
    keys = sorted(calls, key=lambda k: (k[0], -k[1][1], k[1][2], k[1][3], k[1][4], k[4]))
    lines = []
    total = 0
    print("| function | x [B,C,T,H,W] | dtype | layout | pad | calls | MB per call | bound us (4.8 TB/s) |")
    print("|---|---|---|---|---|---:|---:|---:|")
    for key in keys:
        fn, shape, dtype, pad, layout, mode = key
        if mode != "reflect":
            raise SystemExit(f"a conv with padding mode {mode!r}: {key}")
        wl, wr, ht, hb, tf, tb = pad
        b, c, t, h, w = shape
        out = [b, c, t + tf + tb, h + ht + hb, w + wl + wr]
        nbytes = b * c * t * h * w * (4 if dtype == "float32" else 2) + 2 * out[0] * out[1] * out[2] * out[3] * out[4]
        total += calls[key] * nbytes
        strides = None
        if layout == "channels_last_3d":
            strides = [c * t * h * w, 1, h * w * c, w * c, c]
        elif layout == "latent_tile":
            lb, lc, lt, lh, lw = LATENT
            strides = [lc * lt * lh * lw, lt * lh * lw, lh * lw, lw, 1]
        spec: dict[str, Any] = {"shape": list(shape), "dtype": dtype}
        if strides is not None:
            spec["strides"] = strides
        lines.append({"kernel": fn, "model": "ltx2", "args": [spec, list(pad)],
                      "kwargs": {"out_like": {"shape": out, "dtype": "bfloat16"}},
                      "calls": calls[key], "modules": sorted(where[key]), "conv_weights": sorted(list(w) for w in weights[key]),
                      "layout": layout, "bytes": nbytes, "latent": list(LATENT),
                      "site": "sglang/multimodal_gen/runtime/models/vaes/ltx_2_vae.py LTX2VideoCausalConv3d.forward"})
        print(f"| {fn} | {'x'.join(map(str, shape))} | {dtype} | {layout} | {list(pad)} | {calls[key]} | "
              f"{nbytes / 1e6:.1f} | {nbytes / (HBM_TBPS * 1e12) * 1e6:.1f} |")
    Path(args.out).write_text("".join(json.dumps(line) + "\n" for line in lines))
    if args.toml:
        Path(args.toml).write_text(toml_rows(lines))
    n = sum(calls.values())
    print(f"wrote {len(lines)} lines to {args.out}; {n} conv inputs per decode, {total / 1e9:.2f} GB moved, "
          f"{total / (HBM_TBPS * 1e12) * 1e3:.2f} ms at {HBM_TBPS} TB/s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
