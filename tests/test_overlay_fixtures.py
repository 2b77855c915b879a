"""Fixture overlay trees and subprocess helpers shared by the overlay, export and patch tests.

The real ``kda_kernels`` tree stays with nothing promoted until real GPU evidence exists, so tests build a
temporary copy of the package in which chosen families are "exported": an ``_impls/<arch>/register.py`` whose
EXPORTS are fp32 torch references (the lab's oracle style) with call counters, a ``KDA_EXPORT.json`` manifest
and the family ``__init__.py`` rendered by the real exporter (kda_lab.export.overlay). SGLang state is process-global, so every
scenario runs in a fresh interpreter with the copy first on ``sys.path``.

Other test modules load this file by path (``load_fixtures()``), so it works with or without tests/__init__.py.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def sglang_available() -> bool:
    return importlib.util.find_spec("sglang") is not None


needs_sglang = pytest.mark.skipif(not sglang_available(), reason="needs the sglang 0.5.23 package (CPU venv)")


def cuda_available() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except Exception:  # noqa: BLE001 - a broken torch means no GPU tests, not an import error
        return False


needs_cuda = pytest.mark.skipif(not cuda_available(), reason="needs a CUDA GPU")


# ------------------------------------------------------------------------------------------ fixture impls

IMPL_HEADER = '''"""Fixture impl (tests): fp32 torch references with call counters."""
import collections

import torch
import torch.nn.functional as F

CALLS = collections.Counter()


def _rms(x, eps):
    xf = x.float()
    return xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)


def _bcast(t, B, L, C):
    t = t.float()
    if t.dim() == 0 or t.numel() == 1:
        return t.reshape(1, 1, 1)
    if t.dim() == 1:
        return t.reshape(1, 1, C)
    if t.dim() == 2:
        return t[:, None, :]
    if t.dim() == 4:
        f = t.shape[1]
        return t.expand(t.shape[0], f, L // f, C).reshape(t.shape[0], L, C)
    return t
'''

IMPLS: dict[str, str] = {
    "fuse_scale_shift_kernel": '''
def fuse_scale_shift_kernel(x, scale, shift, scale_constant=1.0, block_l=128, block_c=128):
    CALLS["fuse_scale_shift_kernel"] += 1
    B, L, C = x.shape
    y = x.float() * (scale_constant + _bcast(scale, B, L, C)) + _bcast(shift, B, L, C)
    return y.to(x.dtype)
''',
    "fuse_layernorm_scale_shift_gate_select01_kernel": '''
def _select01(x, weight, bias, scale0, shift0, gate0, scale1, shift1, gate1, index, eps):
    xf = x.float()
    mean = xf.mean(-1, keepdim=True)
    xh = (xf - mean) * torch.rsqrt((xf - mean).pow(2).mean(-1, keepdim=True) + eps)
    if weight is not None:
        xh = xh * weight.float()
    if bias is not None:
        xh = xh + bias.float()
    sel = index.bool()[..., None]
    pick = lambda a, b: torch.where(sel, b.float()[:, None, :], a.float()[:, None, :])  # noqa: E731
    y = xh * (1 + pick(scale0, scale1)) + pick(shift0, shift1)
    return y.to(x.dtype), pick(gate0, gate1).to(x.dtype).contiguous()


def fuse_layernorm_scale_shift_gate_select01_kernel(x, weight, bias, scale0, shift0, gate0, scale1, shift1,
                                                    gate1, index, eps):
    CALLS["fuse_layernorm_scale_shift_gate_select01_kernel"] += 1
    return _select01(x, weight, bias, scale0, shift0, gate0, scale1, shift1, gate1, index, eps)
''',
    "fuse_residual_layernorm_scale_shift_gate_select01_kernel": '''
def fuse_residual_layernorm_scale_shift_gate_select01_kernel(x, residual, residual_gate, weight, bias, scale0,
                                                             shift0, gate0, scale1, shift1, gate1, index, eps):
    CALLS["fuse_residual_layernorm_scale_shift_gate_select01_kernel"] += 1
    r = residual.float() + residual_gate.float() * x.float()
    y, g = _select01(r, weight, bias, scale0, shift0, gate0, scale1, shift1, gate1, index, eps)
    return y.to(x.dtype), r.to(x.dtype), g.to(x.dtype)
''',
    "fused_inplace_qknorm_rope": '''
def fused_inplace_qknorm_rope(q, k, q_weight, k_weight, cos_sin_cache, positions, *, is_neox, eps=1e-6,
                              head_dim=0, rope_dim=0, round_norm_before_rope=False, cache_has_full_width=False):
    CALLS["fused_inplace_qknorm_rope"] += 1
    width = cos_sin_cache.shape[-1]
    rd = rope_dim or (width // 2 if cache_has_full_width else width)
    half = rd // 2
    cs = cos_sin_cache[positions.long()].float()
    cos, sin = cs[:, None, :half], cs[:, None, half:rd] if not cache_has_full_width else cs[:, None, rd:rd + half]
    for t, w in ((q, q_weight), (k, k_weight)):
        e = _rms(t, eps) * w.float()
        rot = e[..., :rd]
        if is_neox:
            x1, x2 = rot[..., :half], rot[..., half:]
            out = torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), -1)
        else:
            x1, x2 = rot[..., 0::2], rot[..., 1::2]
            out = torch.stack((x1 * cos - x2 * sin, x2 * cos + x1 * sin), -1).flatten(-2)
        t.copy_(torch.cat((out, e[..., rd:]), -1).to(t.dtype))
''',
    "norm_infer": '''
def norm_infer(x, weight, bias, eps, is_rms_norm=False, out=None):
    CALLS["norm_infer"] += 1
    xf = x.float()
    if is_rms_norm:
        y = _rms(x, eps)
    else:
        m = xf.mean(-1, keepdim=True)
        y = (xf - m) * torch.rsqrt((xf - m).pow(2).mean(-1, keepdim=True) + eps)
    if weight is not None:
        y = y * weight.float()
    if bias is not None:
        y = y + bias.float()
    if out is None:
        return y.to(x.dtype).contiguous()
    out.copy_(y)
    return out
''',
    "triton_one_pass_rms_norm": '''
def triton_one_pass_rms_norm(x, w, eps=1e-6):
    CALLS["triton_one_pass_rms_norm"] += 1
    return (_rms(x, eps) * w.float()).to(x.dtype).contiguous()
''',
    "triton_group_norm_silu": '''
def triton_group_norm_silu(x, weight, bias, num_groups, eps=1e-5):
    CALLS["triton_group_norm_silu"] += 1
    y = F.silu(F.group_norm(x.float(), num_groups, weight.float(), bias.float(), eps)).to(x.dtype)
    return y.contiguous() if x.is_cuda else y  # SGLang's layouts: Triton path contiguous, CPU eager keeps x's


# a CPU reference: it takes CPU tensors (KDA_FORCE_ARCH routes them here only because it says so)
triton_group_norm_silu.supports = lambda x, *args, **kwargs: True


def apply_group_norm_silu(x, norm, activation):  # exported for the ledgers; the overlay unpacks into the op
    CALLS["apply_group_norm_silu"] += 1
    return triton_group_norm_silu(x, norm.weight, norm.bias, norm.num_groups, norm.eps)
''',
    "apply_rotary_embedding": '''
def apply_rotary_embedding(x, cos, sin, interleaved=False):
    CALLS["apply_rotary_embedding"] += 1
    xf = x.float()
    c, s = cos.float()[..., None, :], sin.float()[..., None, :]
    if interleaved:
        x1, x2 = xf[..., 0::2], xf[..., 1::2]
        return torch.stack((x1 * c - x2 * s, x2 * c + x1 * s), -1).flatten(-2).to(x.dtype)
    h = xf.shape[-1] // 2
    x1, x2 = xf[..., :h], xf[..., h:]
    return torch.cat((x1 * c - x2 * s, x2 * c + x1 * s), -1).to(x.dtype)
''',
    "apply_ltx2_split_rotary_emb": '''
def apply_ltx2_split_rotary_emb(x, cos, sin):
    CALLS["apply_ltx2_split_rotary_emb"] += 1
    B, S, HD = x.shape
    H, half = cos.shape[1], cos.shape[-1]
    xv = x.float().reshape(B, S, H, 2 * half).transpose(1, 2)
    x1, x2 = xv[..., :half], xv[..., half:]
    c, s = cos.float(), sin.float()
    out = torch.cat((x1 * c - x2 * s, x2 * c + x1 * s), -1)
    return out.transpose(1, 2).reshape(B, S, HD).to(x.dtype)
''',
    "rmsnorm_scale": '''
def rmsnorm_scale(x, weight, scale, eps):
    CALLS["rmsnorm_scale"] += 1
    return (_rms(x, eps) * weight.float() * scale.float()).to(x.dtype).contiguous()
''',
    "rmsnorm_tanh_residual": '''
def rmsnorm_tanh_residual(x, gate, residual, weight, eps):
    CALLS["rmsnorm_tanh_residual"] += 1
    return (residual.float() + torch.tanh(gate.float()) * _rms(x, eps) * weight.float()).to(x.dtype).contiguous()
''',
    "fused_norm_scale_shift": '''
def fused_norm_scale_shift(x, weight, bias, scale, shift, norm_type, eps=1e-5):
    CALLS["fused_norm_scale_shift"] += 1
    return x.clone()
''',
    "fused_scale_residual_norm_scale_shift": '''
def fused_scale_residual_norm_scale_shift(residual, x, gate, weight, bias, scale, shift, norm_type, eps=1e-5):
    CALLS["fused_scale_residual_norm_scale_shift"] += 1
    return x.clone(), residual.clone()
''',
}
IMPLS["apply_group_norm_silu"] = ""  # defined with triton_group_norm_silu


def register_source(functions: list[str], extra: str = "") -> str:
    body = [IMPL_HEADER]
    names = list(functions)
    if "apply_group_norm_silu" in names and "triton_group_norm_silu" not in names:
        names.append("triton_group_norm_silu")
    for fn in dict.fromkeys(names):
        body.append(IMPLS[fn])
    body.append(extra)
    body.append("\nEXPORTS = {" + ", ".join(f"{fn!r}: {fn}" for fn in functions) + "}\n")
    return "\n".join(body)


# ------------------------------------------------------------------------------------------ fixture trees

def copy_package(dest_root: Path) -> Path:
    """A copy of the real kda_kernels with nothing promoted: real exports (e.g. the H200 GroupNorm) are removed
    and the family __init__ files re-rendered, so fixtures start from a known-empty overlay."""
    dest_root.mkdir(parents=True, exist_ok=True)
    shutil.copytree(REPO / "kda_kernels", dest_root / "kda_kernels",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"), dirs_exist_ok=True)
    from kda_lab.export.overlay import render_family_init

    for fam in (dest_root / "kda_kernels" / "diffusion").iterdir():
        if not (fam / "__init__.py").exists():
            continue
        for arch_dir in (fam / "_impls").glob("*"):
            if arch_dir.is_dir():
                shutil.rmtree(arch_dir)
        (fam / "__init__.py").write_text(render_family_init(fam.name, {}))
    return dest_root


def add_promotion(root: Path, family: str, arch: str, functions: dict[str, float], register: str | None = None,
                  slug: str | None = None, supports: str = "") -> None:
    """Write _impls/<arch>/ (register.py, manifest) for ``family`` and re-render the family __init__."""
    from kda_lab.export.overlay import MANIFEST, write_family_init

    d = root / "kda_kernels" / "diffusion" / family / "_impls" / arch
    if d.exists():
        shutil.rmtree(d)
    d.mkdir(parents=True)
    (d / "__init__.py").write_text('"""fixture"""\n')
    (d / "register.py").write_text(register if register is not None else register_source(list(functions), supports))
    manifest = {
        "slug": slug or f"{arch}_fixture_{family}", "arch": arch, "family": family, "source_hash": "fixture",
        "candidate_id": "c001", "files": {}, "generated": ["__init__.py"],
        "functions": {fn: {"speedup": s, "worst": s, "rows": 1} for fn, s in functions.items()},
        "not_promoted": {},
        "evidence": {"check": {}, "bench": {"commit": "f1x7ure", "date": "2026-11-21", "run_id": "r-fixture",
                                            "gpu_name": "fixture"}},
    }
    (d / MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    write_family_init(root, family)


FULL = {
    "fuse_scale_shift": {"fuse_scale_shift_kernel": 1.25, "fuse_layernorm_scale_shift_gate_select01_kernel": 1.1,
                         "fuse_residual_layernorm_scale_shift_gate_select01_kernel": 1.05},
    "qknorm_rope": {"fused_inplace_qknorm_rope": 1.09},
    "norm_infer": {"norm_infer": 1.3, "triton_one_pass_rms_norm": 1.2},
    "group_norm_silu": {"triton_group_norm_silu": 1.45, "apply_group_norm_silu": 1.4},
    "rotary_embedding": {"apply_rotary_embedding": 1.3, "apply_ltx2_split_rotary_emb": 1.01},
    "norm_tanh_mul_add": {"rmsnorm_scale": 1.2, "rmsnorm_tanh_residual": 1.2},
}


def make_tree(tmp: Path, promotions: dict[str, dict[str, float]] | None = None, arch: str = "h200") -> Path:
    root = copy_package(tmp / "overlay")
    for family, fns in (FULL if promotions is None else promotions).items():
        add_promotion(root, family, arch, fns)
    return root


# -------------------------------------------------------------------------------------------- subprocess

PRELUDE = r'''
import json, os, sys, types, warnings, importlib, importlib.machinery
import torch

# CPU-only torch lacks torch.cpu.get_device_properties, which sglang's norm_triton asks for at import.
if not hasattr(torch.cpu, "get_device_properties"):
    torch.cpu.get_device_properties = lambda *a, **k: types.SimpleNamespace(warp_size=32)

# sglang's AOT kernel wheel (sgl_kernel) is not part of the lab's environments; on a CUDA host layernorm.py
# imports two names from it at module level. A stub lets the module import; nothing here calls them.
try:
    import sgl_kernel  # noqa: F401
except ImportError:
    class _SglKernelStub(types.ModuleType):
        def __getattr__(self, name):
            if name.startswith("__"):
                raise AttributeError(name)
            def missing(*a, **k):
                raise RuntimeError(f"sgl_kernel.{name}: stub (sgl_kernel is not installed)")
            return missing
    sys.modules["sgl_kernel"] = _SglKernelStub("sgl_kernel")
    sys.modules["sgl_kernel"].__spec__ = importlib.machinery.ModuleSpec("sgl_kernel", None)

# These tests drive the overlay outside any SGLang pipeline, so no request sets a quality tier: the whole
# subprocess runs at SGLang's default request tier, lossless (the tier tests pass KDA_TEST_QUALITY=exact).
# "none": no block, only SGLang's stages set the tier (tests/test_tiers.py). The block opens when kda_kernels.tiers
# is first imported, so a test of `import sglang` without (or with a broken) kda_kernels imports nothing of it.
class _QualityOnImport:
    level = os.environ.get("KDA_TEST_QUALITY", "lossless")
    opened = []

    def find_spec(self, name, path=None, target=None):
        if name != "kda_kernels.tiers":
            return None
        sys.meta_path.remove(self)
        import importlib.util
        spec = importlib.util.find_spec(name)
        run = spec.loader.exec_module

        def exec_then_open(module):
            run(module)
            block = module.quality(self.level)
            block.__enter__()
            self.opened.append(block)

        spec.loader.exec_module = exec_then_open
        return spec


if _QualityOnImport.level != "none":
    sys.meta_path.insert(0, _QualityOnImport())

LN = "sglang.multimodal_gen.runtime.layers.layernorm"
EW = "sglang.multimodal_gen.runtime.layers.elementwise"
RU = "sglang.multimodal_gen.runtime.layers.rotary_embedding.utils"
FSG = "sglang.multimodal_gen.runtime.layers.fused_scale_shift_gate"
FACADE = "sglang.kernels.ops.diffusion"


def import_call_sites():
    mods = {n: importlib.import_module(n) for n in (LN, EW, RU)}
    # fused_scale_shift_gate binds the select01 kernels only when current_platform.is_cuda(); on this CPU host
    # pretend for the duration of its import, so its real module-level import runs.
    from sglang.multimodal_gen.runtime.platforms import current_platform
    current_platform.is_cuda = lambda: True
    try:
        mods[FSG] = importlib.import_module(FSG)
    finally:
        del current_platform.is_cuda
    return mods


def zimage_functions():
    """zimage.py's real fused helpers (in-function facade imports). The module itself needs transformers and
    tvm_ffi, absent from the CPU venv, so its source is read and the three definitions executed as written."""
    import ast
    import sglang
    path = os.path.join(os.path.dirname(sglang.__file__), "multimodal_gen/runtime/models/dits/zimage.py")
    tree = ast.parse(open(path).read())
    keep = {"ZImageRMSNorm", "zimage_rmsnorm_tanh_mul_add", "zimage_rmsnorm_scale"}
    nodes = [n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef)) and n.name in keep]
    assert {n.name for n in nodes} == keep, [n.name for n in nodes]
    ns = {"torch": torch, "nn": torch.nn}
    exec(compile(ast.Module(body=nodes, type_ignores=[]), path, "exec"), ns)
    return ns


def kda(obj):
    return isinstance(obj, types.FunctionType) and obj.__dict__.get("__kda_kernel__") is True


def calls(family, arch="h200"):
    m = sys.modules.get(f"kda_kernels.diffusion.{family}._impls.{arch}.register")
    return dict(m.CALLS) if m else {}


def emit(obj):
    print("RESULT " + json.dumps(obj, default=str))
'''


def run_py(root: Path | None, code: str | list[str], env: dict[str, str] | None = None, timeout: int = 300,
           expect_ok: bool = True, cwd: Path | None = None) -> dict[str, Any]:
    """Run PRELUDE + code in a fresh interpreter with ``root`` (a fixture tree) first on the path; returns the
    JSON passed to emit() plus stderr/returncode."""
    paths = [str(root)] if root else []
    paths.append(str(REPO))
    e = dict(os.environ)
    e.pop("KDA_FORCE_ARCH", None)
    e.pop("KDA_KERNELS_DISABLE", None)
    e["PYTHONPATH"] = os.pathsep.join(paths + ([e["PYTHONPATH"]] if e.get("PYTHONPATH") else []))
    if root is not None:  # keep inductor's cache with the fixture tree (a temporary folder)
        e.setdefault("TORCHINDUCTOR_CACHE_DIR", str(Path(root) / ".inductor-cache"))
    e.update(env or {})
    parts = [code] if isinstance(code, str) else code
    src = PRELUDE + "\n" + "\n".join(textwrap.dedent(c) for c in parts)
    p = subprocess.run([sys.executable, "-c", src], capture_output=True, text=True, env=e, timeout=timeout,
                       cwd=str(cwd or root or REPO))
    result: dict[str, Any] = {}
    for line in p.stdout.splitlines():
        if line.startswith("RESULT "):
            result = json.loads(line[len("RESULT "):])
    result["_rc"] = p.returncode
    result["_stderr"] = p.stderr
    if expect_ok and p.returncode != 0:
        raise AssertionError(f"subprocess failed ({p.returncode}):\n{p.stdout[-3000:]}\n{p.stderr[-6000:]}")
    return result


# ------------------------------------------------------------------------------------- tests of the helpers

def test_fixture_tree_renders_with_the_real_exporter(tmp_path):
    root = make_tree(tmp_path, {"fuse_scale_shift": {"fuse_scale_shift_kernel": 1.25}})
    text = (root / "kda_kernels/diffusion/fuse_scale_shift/__init__.py").read_text()
    assert "KDA_OPTIMIZED_fuse_scale_shift_kernel = True" in text
    assert "KDA_OPTIMIZED_fuse_layernorm_scale_shift_gate_select01_kernel = False" in text
    assert 'KDA_SPEEDUP_fuse_scale_shift_kernel: dict[str, float] = {"h200": 1.25}' in text
    # the fixture register.py is importable python defining EXPORTS
    compile((root / "kda_kernels/diffusion/fuse_scale_shift/_impls/h200/register.py").read_text(), "r", "exec")
