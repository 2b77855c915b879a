"""ctypes front end of the CPU emulator of c007's CUDA kernel (qknorm_rope_emu.cpp; see its header).

The emulator is built with g++ (C++20, -ffp-contract=off) into a shared library, once per content of its sources
(src/qknorm_rope_core.cuh, src/qknorm_rope_contract.h, qknorm_rope_emu.cpp) and variant macro, in a cache folder
under the system temp directory. Tensors are CPU tensors; the emulator runs the kernel on their memory in place.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import torch

HERE = Path(__file__).resolve().parent
SRC = HERE.parents[1] / "src"
SOURCES = (SRC / "qknorm_rope_core.cuh", SRC / "qknorm_rope_contract.h", HERE / "qknorm_rope_emu.cpp")

LAYOUTS = {(False, False): 0, (False, True): 1, (True, False): 2, (True, True): 3}  # (is_neox, full width)
DTYPE_CODES = {torch.float16: 1, torch.bfloat16: 2, torch.float32: 3, torch.int32: 4, torch.int64: 5}


class EmuError(AssertionError):
    """A check of the emulated run failed (the message says which)."""


def build(variant: str = "") -> Path:
    """The emulator library for ``variant``: '', 'late_next' (-DKDA_QKR_LATE_NEXT: the double buffer's next-row
    loads after the current row's store) or 'no_verify' (-DKDA_QKR_NO_VERIFY: the speculated cache row used
    without checking the position)."""
    cxx = shutil.which("g++") or shutil.which("c++")
    assert cxx, "a C++ compiler (g++) is needed: nvcc needs one too"
    h = hashlib.sha256(variant.encode())
    for p in SOURCES:
        h.update(p.read_bytes())
    out_dir = Path(tempfile.gettempdir()) / f"kda_qkr_emu-{os.getuid()}" / h.hexdigest()[:16]
    lib = out_dir / "libqkr_emu.so"
    if lib.is_file():
        return lib
    out_dir.mkdir(parents=True, exist_ok=True)
    tmp = out_dir / f"libqkr_emu.{os.getpid()}.so"
    flags = {"": [], "late_next": ["-DKDA_QKR_LATE_NEXT"], "no_verify": ["-DKDA_QKR_NO_VERIFY"]}[variant]
    subprocess.run([cxx, "-std=c++20", "-O2", "-ffp-contract=off", "-fPIC", "-shared", "-Wall", "-Wextra", "-Werror",
                    "-Wno-unknown-pragmas", *flags, f"-I{SRC}", str(HERE / "qknorm_rope_emu.cpp"), "-o", str(tmp)],
                   check=True, capture_output=True, text=True)
    tmp.replace(lib)
    return lib


class EmuCall(ctypes.Structure):
    _fields_ = [(n, ctypes.c_void_p) for n in ("q", "k", "qw", "kw", "cache", "pos")] + [
        (n, ctypes.c_int64) for n in ("n", "hq", "hk", "d", "q_st", "q_sh", "k_st", "k_sh", "cache_rows",
                                      "cache_width")] + [
        (n, ctypes.c_int32) for n in ("layout", "x_f16", "cache_kind", "pos_64", "rope")] + [
        ("eps", ctypes.c_float)] + [
        (n, ctypes.c_int32) for n in ("resident_ctas", "pipe_mode", "grid_mode", "early_trigger")] + [
        ("plan", ctypes.c_int32 * 5), ("pad_", ctypes.c_int32), ("cache_loads", ctypes.c_int64),
        ("shuffles", ctypes.c_int64)]


class TensorDesc(ctypes.Structure):
    _fields_ = [(n, ctypes.c_int32) for n in ("dim", "dtype", "is_cuda", "device", "requires_grad", "pad_")] + [
        ("sizes", ctypes.c_int64 * 3), ("strides", ctypes.c_int64 * 3), ("addr", ctypes.c_uint64)]


class CallDesc(ctypes.Structure):
    _fields_ = [("t", TensorDesc * 6), ("head_dim", ctypes.c_int64), ("rope_dim", ctypes.c_int64)] + [
        (n, ctypes.c_int32) for n in ("is_neox", "full_width", "current_device", "cc_major", "cc_minor",
                                      "grad_mode")]


class Decision(ctypes.Structure):
    _fields_ = [(n, ctypes.c_int32) for n in ("ok", "empty", "layout", "rope", "head_dim", "x_f16", "cache_kind",
                                              "pos_64")]


_LIBS: dict[str, ctypes.CDLL] = {}


def lib(variant: str = "") -> ctypes.CDLL:
    if variant not in _LIBS:
        so = ctypes.CDLL(str(build(variant)))
        so.kda_qkr_emulate.argtypes = [ctypes.POINTER(EmuCall), ctypes.c_char_p, ctypes.c_int]
        so.kda_qkr_decide.argtypes = [ctypes.POINTER(CallDesc), ctypes.POINTER(Decision)]
        so.kda_qkr_kernel_pays.argtypes = [ctypes.c_int64, ctypes.c_int64, ctypes.c_int64]
        so.kda_qkr_plan.argtypes = [ctypes.c_uint32, ctypes.c_uint32, ctypes.c_int, ctypes.c_uint32,
                                    ctypes.c_uint32, ctypes.c_int, ctypes.c_int, ctypes.POINTER(ctypes.c_uint32)]
        so.kda_qkr_round.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int]
        so.kda_qkr_widen_f16.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]
        so.kda_qkr_div.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_uint32]
        _LIBS[variant] = so
    return _LIBS[variant]


def emulate(q: torch.Tensor, k: torch.Tensor, q_weight: torch.Tensor, k_weight: torch.Tensor,
            cache: torch.Tensor, positions: torch.Tensor, *, is_neox: bool, full_width: bool, rope_dim: int,
            eps: float, resident_ctas: int = 6 * 132, pipe_mode: int = 0, grid_mode: int = 0,
            early_trigger: bool = False, variant: str = "", layout: int | None = None) -> dict[str, Any]:
    """Run the kernel on CPU tensors in place (the caller has checked the contract). ``layout`` overrides the
    layout the flags name (the wrong-variant tests). Returns the plan and counters; raises EmuError when a check
    of the run fails."""
    for t in (q, k, q_weight, k_weight, cache, positions):
        assert t.device.type == "cpu"
    c = EmuCall()
    for name, t in zip(("q", "k", "qw", "kw", "cache", "pos"), (q, k, q_weight, k_weight, cache, positions),
                       strict=True):
        setattr(c, name, t.data_ptr())
    c.n, c.hq, c.d = q.shape
    c.hk = k.shape[1]
    c.q_st, c.q_sh = q.stride(0), q.stride(1)
    c.k_st, c.k_sh = k.stride(0), k.stride(1)
    c.cache_rows, c.cache_width = cache.shape
    c.layout = LAYOUTS[(is_neox, full_width)] if layout is None else layout
    c.x_f16 = int(q.dtype == torch.float16)
    c.cache_kind = 0 if cache.dtype == torch.float32 else (2 if cache.dtype == torch.float16 else 1)
    c.pos_64 = int(positions.dtype == torch.int64)
    c.rope = rope_dim
    c.eps = eps
    c.resident_ctas, c.pipe_mode, c.grid_mode = resident_ctas, pipe_mode, grid_mode
    c.early_trigger = int(early_trigger)
    msg = ctypes.create_string_buffer(1024)
    rc = lib(variant).kda_qkr_emulate(ctypes.byref(c), msg, len(msg))
    if rc:
        raise EmuError(msg.value.decode())
    keys = ("pipe", "rounds", "n_rows", "blocks", "step_head")
    return {**dict(zip(keys, c.plan, strict=True)), "cache_loads": c.cache_loads, "shuffles": c.shuffles}


def describe(t: object, *, as_cuda: bool = True, device: int = 0) -> TensorDesc:
    """A tensor as the torch binding describes it (CPU tensors stand for CUDA ones unless ``as_cuda`` is off)."""
    d = TensorDesc()
    if not isinstance(t, torch.Tensor) or t.dim() > 3:
        d.dim = -1
        return d
    d.dim = t.dim()
    d.dtype = DTYPE_CODES.get(t.dtype, 0)
    d.is_cuda = int(as_cuda)
    d.device = device
    d.requires_grad = int(t.requires_grad)
    for i in range(t.dim()):
        d.sizes[i], d.strides[i] = t.shape[i], t.stride(i)
    d.addr = t.data_ptr()
    return d


def decide(q: Any, k: Any, q_weight: Any, k_weight: Any, cos_sin_cache: Any, positions: Any, *, is_neox: bool,
           eps: float = 1e-6, head_dim: int = 0, rope_dim: int = 0, cache_has_full_width: bool = False,
           current_device: int = 0, cc: tuple[int, int] = (9, 0), grad_mode: bool = False,
           devices: tuple[int, ...] = (0,) * 6, as_cuda: bool = True) -> Decision:
    """The contract's verdict on a call (src/qknorm_rope_contract.h), as the binding would describe it."""
    c = CallDesc()
    for i, (t, dev) in enumerate(zip((q, k, q_weight, k_weight, cos_sin_cache, positions), devices, strict=True)):
        c.t[i] = describe(t, as_cuda=as_cuda, device=dev)
    c.head_dim, c.rope_dim = head_dim, rope_dim
    c.is_neox, c.full_width = int(is_neox), int(cache_has_full_width)
    c.current_device = current_device
    c.cc_major, c.cc_minor = cc
    c.grad_mode = int(grad_mode)
    out = Decision()
    lib().kda_qkr_decide(ctypes.byref(c), ctypes.byref(out))
    return out


def kernel_pays(n_tokens: int, q_heads: int, k_heads: int) -> bool:
    """Whether the binding takes an in-contract call of this size (src/qknorm_rope_contract.h's kernel_pays)."""
    return bool(lib().kda_qkr_kernel_pays(n_tokens, q_heads, k_heads))


def plan(n_tokens: int, rows_per_token: int, head_dim: int, resident0: int, resident1: int, pipe_mode: int = 0,
         grid_mode: int = 0) -> dict[str, int]:
    """make_plan (src/qknorm_rope_core.cuh): resident0/resident1 = CTAs the GPU holds of the PIPE 0/1 kernel."""
    out = (ctypes.c_uint32 * 6)()
    lib().kda_qkr_plan(n_tokens, rows_per_token, head_dim, resident0, resident1, pipe_mode, grid_mode, out)
    return dict(zip(("pipe", "rounds", "n_rows", "blocks", "step_head", "step_tok"), out, strict=True))


def round_bits(x: torch.Tensor, to: torch.dtype) -> torch.Tensor:
    """The kernel's float -> bf16/fp16 rounding (host side) of a float32 tensor, as int16 bits."""
    x = x.contiguous()
    out = torch.empty(x.shape, dtype=torch.int16)
    lib().kda_qkr_round(x.data_ptr(), out.data_ptr(), x.numel(), int(to == torch.float16))
    return out


def widen_f16(bits: torch.Tensor) -> torch.Tensor:
    """The kernel's fp16 -> float widening (host side) of int16 bits."""
    bits = bits.contiguous()
    out = torch.empty(bits.shape, dtype=torch.float32)
    lib().kda_qkr_widen_f16(bits.data_ptr(), out.data_ptr(), bits.numel())
    return out


def divide(n: torch.Tensor, d: int) -> torch.Tensor:
    """The kernel's n // d (multiply-high by div_magic(d)) of uint32 values held in an int64 tensor."""
    n32 = n.to(torch.int64).to(torch.int32).contiguous()  # the low 32 bits
    out = torch.empty_like(n32)
    lib().kda_qkr_div(n32.data_ptr(), out.data_ptr(), n32.numel(), d)
    return out.to(torch.int64) & 0xFFFFFFFF
