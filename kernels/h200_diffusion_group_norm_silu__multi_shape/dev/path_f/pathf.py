"""Path F dev driver: build and call src/gns_path_f.cu (c009's path F, the file the candidate ships) together with the
L2-window microbenchmark dev/path_f/gnsf_l2.cu and the dev binding gns_path_f_binding.cpp, as one dev extension
(torch.utils.cpp_extension.load; its own name and build dir, independent of the candidate's extension). The candidate
reaches the same kernels through register.group_norm_silu_cuda(..., force_path=8, force_cs=chunk MiB, smem_cap=flags | 32).

    import pathf
    ext = pathf.load()                                    # builds once per source hash (nvcc, sm_90a, -O3, no fast-math)
    y = pathf.group_norm_silu(x, w, b, 32, 1e-6, chunk_mb=12, flags=pathf.PDL | pathf.HINTS)
    pathf.plan(x.shape, x.dtype, 32, chunk_mb=12)         # dict: vec, P, gpc, K, launches, ws_bytes, ...

Flags (src/gns_path_f.cu): PDL = 1 (programmatic dependent launch on launches 1..K), HINT_STATS_LAST = 2,
HINT_APPLY_FIRST = 4, HINT_STORE_FIRST = 8 (HINTS = all three), STATS_FIRST = 16 (block order: all stats blocks of a
launch before its apply blocks; default interleaved). y and the partials workspace come from torch's allocator and
the launches go to torch's current stream: the call is CUDA-graph capturable. Errors come back as return codes and
are raised here (no C++ exception crosses the binding).
"""

from __future__ import annotations

import hashlib
import math
import os

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.join(os.path.dirname(os.path.dirname(HERE)), "src")
SOURCES = (os.path.join(SRC, "gns_path_f.cu"), os.path.join(HERE, "gnsf_l2.cu"), os.path.join(HERE, "gns_path_f_binding.cpp"))
HEADERS = (os.path.join(SRC, "gnsf_sched.h"),)
CUDA_FLAGS = ("-O3", "-std=c++17", "-gencode=arch=compute_90a,code=sm_90a")  # no --use_fast_math
CXX_FLAGS = ("-O3", "-std=c++17")

PDL = 1
HINT_STATS_LAST = 2
HINT_APPLY_FIRST = 4
HINT_STORE_FIRST = 8
HINTS = HINT_STATS_LAST | HINT_APPLY_FIRST | HINT_STORE_FIRST
STATS_FIRST = 16

DCODE = {torch.float16: 0, torch.bfloat16: 1, torch.float32: 2}
PLAN_KEYS = ("vec", "tile_elems", "P", "gpc", "K", "launches", "ws_bytes", "max_blocks", "chunk_x_bytes",
             "group_bytes")
# L2 policy codes of the microbenchmark kernel
POL_NORMAL, POL_LAST, POL_FIRST = 0, 1, 2

_ext = None


def source_hash() -> str:
    h = hashlib.sha256()
    for path in SOURCES + HEADERS:
        with open(path, "rb") as f:
            h.update(f.read())
    return h.hexdigest()[:12]


def ext_name() -> str:
    return f"kda_gnsf_{source_hash()}"


def default_build_dir() -> str:
    # not under $OUT: the device tool brings back what is there (a handful of files), not a build tree
    return os.environ.get("GNSF_BUILD_DIR", "/tmp/gnsf_build")


def load(build_dir: str | None = None, verbose: bool = False):
    """Build (first use per source hash) and import the extension."""
    global _ext
    if _ext is None:
        from torch.utils.cpp_extension import load as _load

        bdir = os.path.join(build_dir or default_build_dir(), ext_name())
        os.makedirs(bdir, exist_ok=True)
        _ext = _load(name=ext_name(), sources=list(SOURCES),
                     extra_cflags=list(CXX_FLAGS), extra_cuda_cflags=list(CUDA_FLAGS), extra_include_paths=[SRC, HERE],
                     build_directory=bdir, verbose=verbose)
    return _ext


def plan(shape, dtype, num_groups: int, chunk_mb: float = 12, flags: int = 0, aligned: bool = True) -> dict:
    """The launcher's plan for a contiguous x of this shape (no launch); rc < 0: rejected."""
    n, c = shape[0], shape[1]
    hw = math.prod(shape) // (n * c)
    out = load().plan(DCODE[dtype], n, c, hw, num_groups, int(chunk_mb * (1 << 20)), flags, int(aligned))
    d = {"rc": out[0]}
    d.update(dict(zip(PLAN_KEYS, out[1:], strict=True)))
    return d


def group_norm_silu(x: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None, num_groups: int,
                    eps: float = 1e-5, chunk_mb: float = 12, flags: int = PDL | HINTS) -> torch.Tensor:
    """Path F: y = silu(group_norm(x)) for contiguous x [N, C, *] fp16/bf16/fp32; weight/bias [C] or None."""
    ext = load()
    if x.dtype not in DCODE or not x.is_contiguous() or x.dim() < 2:
        raise ValueError("path F: contiguous fp16/bf16/fp32 x of >= 2 dims expected")
    y = torch.empty_like(x, memory_format=torch.contiguous_format)
    if x.numel() == 0:
        return y
    aligned = x.data_ptr() % 16 == 0 and y.data_ptr() % 16 == 0
    p = plan(tuple(x.shape), x.dtype, num_groups, chunk_mb, flags, aligned)
    if p["rc"] != 0:
        raise ValueError(f"path F: plan rejected ({p['rc']}) for {tuple(x.shape)} G={num_groups}")
    ws = torch.empty(p["ws_bytes"], dtype=torch.uint8, device=x.device)
    empty = x.new_empty(0)
    rc = ext.forward(x, weight if weight is not None else empty, bias if bias is not None else empty, y, ws,
                     num_groups, float(eps), int(chunk_mb * (1 << 20)), flags)
    if rc != 0:
        raise RuntimeError(f"path F: gnsf_forward returned {rc}")
    return y


def l2_stream(a: torch.Tensor, c: torch.Tensor | None, wr: torch.Tensor | None, sink: torch.Tensor,
              pa: int = POL_NORMAL, pc: int = POL_NORMAL, pw: int = POL_NORMAL) -> None:
    """One microbenchmark kernel: read a (uint8 view), optionally read c, optionally write wr = a ^ c."""
    ext = load()
    empty = a.new_empty(0)
    rc = ext.l2_stream(a, c if c is not None else empty, wr if wr is not None else empty, sink, pa, pc, pw)
    if rc != 0:
        raise RuntimeError(f"l2_stream returned {rc}")
