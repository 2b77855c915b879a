#!/usr/bin/env python3
"""Time ``kda_kernels.install()`` in a process that has transformers and diffusers imported (issue #24).

Each run is a fresh interpreter: import torch, SGLang's diffusion facade and call-site modules, then (when
installed) transformers and diffusers and their lazy attribute modules, then time one ``kda_kernels.install()``
and record which modules it imported and what it installed. Prints one JSON object.

    python scripts/overlay_install_timing.py                 # the kda_kernels on sys.path / PYTHONPATH
    python scripts/overlay_install_timing.py --runs 5 --kda-root /path/to/other/checkout

``--kda-root`` puts another checkout's kda_kernels first (e.g. a worktree of the previous commit, to compare).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

CHILD = r"""
import json, sys, time, importlib
import torch
import sglang.kernels.ops.diffusion  # noqa: F401
for name in ("sglang.multimodal_gen.runtime.layers.elementwise", "sglang.multimodal_gen.runtime.layers.layernorm",
             "sglang.multimodal_gen.runtime.models.vaes.hunyuanvae"):
    try:
        importlib.import_module(name)
    except Exception:
        pass
third = {}
for name in ("transformers", "diffusers"):
    try:
        m = importlib.import_module(name)
        third[name] = m.__version__
    except Exception as e:
        third[name] = None
if third.get("transformers"):
    import transformers
    for attr in ("AutoImageProcessor", "AutoModel", "CLIPTextModel", "T5EncoderModel"):  # resolves lazy aliases
        try:
            getattr(transformers, attr)
        except Exception:
            pass
if third.get("diffusers"):
    import diffusers
    for attr in ("AutoencoderKL", "FlowMatchEulerDiscreteScheduler"):
        try:
            getattr(diffusers, attr)
        except Exception:
            pass
import kda_kernels
before = set(sys.modules)
t0 = time.perf_counter()
try:
    st = kda_kernels.install()
    error = None
except Exception as e:
    st, error = {}, f"{type(e).__name__}: {e}"
dt = time.perf_counter() - t0
new = sorted(set(sys.modules) - before)
print("RESULT " + json.dumps({
    "install_s": dt, "modules_loaded": len(before), "third_party": third, "error": error,
    "kda_kernels": kda_kernels.__file__,
    "installed": sorted(k for k, v in st.items() if v.get("installed")),
    "problems": {k: v["problems"] for k, v in st.items() if v.get("problems")},
    "imported_by_install": [m for m in new if not m.startswith(("kda_kernels", "torch", "triton", "sglang"))][:40],
    "n_imported_by_install": len(new)}))
"""


def run_once(kda_root: Path | None, python: str) -> dict:
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    paths = [str(kda_root)] if kda_root else []
    paths.append(str(REPO))
    env["PYTHONPATH"] = os.pathsep.join(paths + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    # cwd: `python -c` puts it first on sys.path, so it must be the checkout being timed
    p = subprocess.run([python, "-c", CHILD], capture_output=True, text=True, env=env, timeout=900,
                       cwd=str(kda_root or REPO))
    for line in p.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])
    raise SystemExit(f"child failed ({p.returncode}):\n{p.stderr[-4000:]}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--kda-root", type=Path, default=None, help="a checkout whose kda_kernels is timed instead")
    ap.add_argument("--python", default=sys.executable, help="interpreter of the environment to time in")
    args = ap.parse_args(argv)
    runs = [run_once(args.kda_root, args.python) for _ in range(max(1, args.runs))]
    out = {k: v for k, v in runs[-1].items() if k != "install_s"}
    out["install_s_runs"] = [round(r["install_s"], 4) for r in runs]
    out["install_s_median"] = round(statistics.median(r["install_s"] for r in runs), 4)
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
