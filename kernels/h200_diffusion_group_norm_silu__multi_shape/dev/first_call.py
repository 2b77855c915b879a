"""First-call latency on the H200: c003's build-on-first-call against kda_kernels' ahead-of-time build.

Each scenario is a fresh interpreter that times (wall clock, synchronized) the first and the second call of
SGLang's triton_group_norm_silu after kda_kernels.install(), on a shape the h200 impl serves:

- ``jit_cold``: what c003 did inside a serving process: torch.utils.cpp_extension.load on the first call, into
  an empty torch extensions folder (nvcc runs inside the call);
- ``jit_warm``: the same with torch's folder already built (load() still runs ninja's up-to-date check);
- ``aot_build``: ``python -m kda_kernels build`` into an empty kda_kernels cache (once per machine, not a request);
- ``aot_loaded``: install() + first call with that cache: the impl loads the binary, nothing compiles;
- ``aot_missing``: install() + first call with an empty cache: the call goes to SGLang's Triton kernel (Triton's
  own JIT compiles it on first use; that is SGLang's cost, the overlay adds none).

    python kernels/h200_diffusion_group_norm_silu__multi_shape/dev/first_call.py   # prints a table; JSON to $OUT
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
SHAPE = (1, 512, 3, 48, 40)  # a HunyuanVideo VAE production row the h200 impl serves

CALL = f'''
import json, os, sys, time, warnings, torch
t_proc = time.perf_counter()
import kda_kernels
from sglang.kernels.ops.diffusion.norm import group_norm_silu_triton as site
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    kda_kernels.install()
torch.manual_seed(0)
x = torch.randn({SHAPE}, device="cuda", dtype=torch.bfloat16)
w = torch.randn({SHAPE[1]}, device="cuda", dtype=torch.bfloat16)
b = torch.randn({SHAPE[1]}, device="cuda", dtype=torch.bfloat16)
torch.cuda.synchronize()
times = []
with torch.no_grad():
    for _ in range(2):
        t0 = time.perf_counter()
        y = site.triton_group_norm_silu(x, w, b, 32, 1e-6)
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
from kda_kernels.diffusion.group_norm_silu._impls.h200 import register as impl
ref = torch.nn.functional.silu(torch.nn.functional.group_norm(x.double(), 32, w.double(), b.double(), 1e-6))
print(json.dumps({{"first_s": times[0], "second_s": times[1], "kda_kernel": impl.EXTENSION.module is not None,
                  "max_err": float((y.double() - ref).abs().max())}}))
'''

# c003's loader, verbatim in effect: cpp_extension.load with the impl's flags on the first call.
C003_LOADER = '''
import torch.utils.cpp_extension as cx
from kda_kernels.diffusion.group_norm_silu._impls.h200 import register as impl
def _c003_load(verbose=False):
    if impl.EXTENSION.module is None:
        e = impl.EXTENSION
        impl.EXTENSION.module = cx.load(name=e.name, sources=list(e.sources), extra_cflags=list(e.cflags),
                                        extra_cuda_cflags=list(e.cuda_cflags),
                                        extra_include_paths=list(e.include_paths), verbose=verbose)
    return impl.EXTENSION.module
impl.load_extension = _c003_load
'''


def _run(code: str, env: dict[str, str]) -> dict:
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                       env={**os.environ, "PYTHONPATH": f"{REPO}:{os.environ.get('PYTHONPATH', '')}", **env},
                       cwd=REPO, timeout=900)
    if p.returncode != 0:
        raise RuntimeError(p.stderr[-3000:])
    out = json.loads(p.stdout.strip().splitlines()[-1]) if code is not BUILD else {"log": p.stdout[-500:]}
    out["process_s"] = time.perf_counter() - t0
    return out


BUILD = "import runpy, sys; sys.argv = ['kda_kernels', 'build']; runpy.run_module('kda_kernels', run_name='__main__')"


def main() -> int:
    tmp = Path(tempfile.mkdtemp(prefix="kda-first-call-"))
    torch_ext, aot, empty = tmp / "torch-ext", tmp / "aot", tmp / "empty"
    # c003's import path calls the loader from CALL; insert the c003 loader right after kda_kernels.install()
    c003 = CALL.replace("torch.manual_seed(0)", C003_LOADER + "\ntorch.manual_seed(0)", 1)
    res = {
        "jit_cold": _run(c003, {"TORCH_EXTENSIONS_DIR": str(torch_ext), "KDA_KERNELS_CACHE": str(empty)}),
        "jit_warm": _run(c003, {"TORCH_EXTENSIONS_DIR": str(torch_ext), "KDA_KERNELS_CACHE": str(empty)}),
        "aot_build": _run(BUILD, {"KDA_KERNELS_CACHE": str(aot)}),
        "aot_loaded": _run(CALL, {"KDA_KERNELS_CACHE": str(aot)}),
        "aot_missing": _run(CALL, {"KDA_KERNELS_CACHE": str(tmp / "empty2")}),
    }
    out = os.environ.get("OUT")
    if out:
        Path(out, "first_call.json").write_text(json.dumps(res, indent=2))
    print(f"{'scenario':<12} {'first call':>12} {'second call':>12} {'process':>9}  kda kernel  max err")
    for k, r in res.items():
        if "first_s" in r:
            print(f"{k:<12} {r['first_s'] * 1e3:>10.1f}ms {r['second_s'] * 1e6:>10.1f}us {r['process_s']:>8.1f}s  "
                  f"{str(r['kda_kernel']):<10}  {r['max_err']:.3g}")
        else:
            print(f"{k:<12} {'-':>12} {'-':>12} {r['process_s']:>8.1f}s  (python -m kda_kernels build)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
