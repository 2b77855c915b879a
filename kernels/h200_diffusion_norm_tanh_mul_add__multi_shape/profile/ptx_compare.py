"""Offline sm_90a compile (no GPU) of SGLang's two kernels and this candidate's, and a comparison of what they
compute: a value numbering of each PTX (``dataflow``) fingerprints every global store (address, value, predicate)
down to the kernel parameters; equal fingerprints mean the same instructions on the same loaded elements in the
same reduction tree, i.e. the same roundings in the same order."""

from __future__ import annotations

import importlib
import json
import os
import re
import subprocess
import sys
import tempfile
import types
from pathlib import Path

os.environ.pop("TRITON_INTERPRET", None)

import triton  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402

TASK_DIR = Path(__file__).resolve().parents[1]
LAYOUT = re.compile(r"\"tt.reduce\"\(%\w+\).*?\n.*?\n.*?\n.*?\) : \((tensor<[^>]*>)")

# Specializations: (name, dim, eps, divisible-by-16 int args). Production: D = 3840, every stride a multiple of
# 16 elements; a narrow and a wide test width.
SPECS = [("D3840", 3840, 1e-5), ("D384", 384, 1e-5), ("D8192", 8192, 1e-5), ("D96", 96, 1e-5)]


def _candidate_module():
    pkg = types.ModuleType("ntma_src")
    pkg.__path__ = [str(TASK_DIR / "src")]  # src/ as a package, as the harness loads it (relative imports)
    sys.modules["ntma_src"] = pkg
    return importlib.import_module("ntma_src.bf16_rmsnorm")


def compile_kernel(fn, n_ptrs: int, n_ints: int, dim: int, eps: float) -> dict[str, str]:
    names = fn.arg_names
    sig = {}
    for i, n in enumerate(names):
        sig[n] = "*bf16" if i < n_ptrs else ("i32" if i < n_ptrs + n_ints else "constexpr")
    const = {names[-3]: dim, names[-2]: eps, names[-1]: triton.next_power_of_2(dim)}
    # Pointers 16-byte aligned and the strides multiples of 16 (what plan() requires); seq_len unspecialized.
    attrs = {(i,): [["tt.divisibility", 16]] for i in range(n_ptrs + n_ints - 1)}
    c = triton.compile(ASTSource(fn, sig, const, attrs), target=GPUTarget("cuda", 90, 32),
                       options={"num_warps": 8})
    return {"ptx": c.asm["ptx"], "ttgir": c.asm["ttgir"]}


COMMUTATIVE = ("add.", "mul.", "min.", "max.", "and.", "or.", "xor.")


def _split_operands(text: str) -> list[str]:
    out, depth, cur = [], 0, ""
    for ch in text:
        if ch in "{[":
            depth += 1
        elif ch in "}]":
            depth -= 1
        if ch == "," and depth == 0:
            out.append(cur.strip())
            cur = ""
        else:
            cur += ch
    if cur.strip():
        out.append(cur.strip())
    return out


def _norm_opcode(op: str) -> str:
    """Cache qualifiers (eviction hints) do not change values: dropped."""
    return ".".join(p for p in op.split(".") if "::" not in p)


def dataflow(ptx: str) -> tuple[list[str], list[str]]:
    """Value numbering of a straight-line PTX kernel: every register's value as a hash of (opcode, operand
    values), leaves being kernel parameters (by index), special registers and immediates; global loads are pure
    functions of their address, shared memory is a state threaded through its stores. Returns the sorted
    fingerprints of the global stores (address, value, predicate: what the kernel computes) and the opcodes it
    could not model (a branch makes the comparison void)."""
    import hashlib

    def h(*parts: str) -> str:
        return hashlib.sha1("|".join(parts).encode()).hexdigest()[:16]

    val: dict[str, str] = {}
    policy: set[str] = set()
    smem = "smem0"
    stores: list[str] = []
    unknown: list[str] = []
    inst = re.compile(r"^\s*(@!?%\w+\s+)?([a-z][\w.:]*)\s*(.*?);\s*$")

    def operand(o: str) -> str:
        o = o.strip()
        if o.startswith("["):
            inner = o[1:-1].strip()
            m = re.match(r"^\w+_param_(\d+)$", inner)
            if m:
                return h("param", m.group(1))
            parts = [x.strip() for x in inner.split("+")]
            return h("addr", *[operand(x) for x in parts])
        if o.startswith("{"):
            return h("vec", *[operand(x) for x in _split_operands(o[1:-1])])
        if o.startswith("%"):
            return val.get(o, h("special", o)) if not re.match(r"^%(r|rs|rd|f|fd|p)\d+$", o) else val.get(o, h("undef"))
        return h("imm", o)

    for line in ptx.splitlines():
        line = line.split("//")[0]
        m = inst.match(line)
        if not m or line.strip().startswith("."):
            continue
        pred, op, rest = m.group(1), m.group(2), m.group(3)
        pred_v = h("pred", pred.strip()[0:2] if pred.strip().startswith("@!") else "@", operand(pred.strip().lstrip("@!"))) if pred else "always"
        ops = _split_operands(rest)
        nop = _norm_opcode(op)
        if op.startswith("createpolicy"):
            policy.add(ops[0])
            continue
        if op in ("ret", "bar.sync", "exit") or op.startswith("bar."):
            if op.startswith("bar."):
                smem = h("bar", smem)
            continue
        if op.startswith("bra") or op.startswith("call"):
            unknown.append(op)
            continue
        ops = [o for o in ops if o not in policy]
        if op.startswith("st.global"):
            stores.append(h("st", nop, pred_v, *[operand(o) for o in ops]))
            continue
        if op.startswith("st.shared"):
            smem = h("sts", smem, nop, pred_v, *[operand(o) for o in ops])
            continue
        dest, srcs = ops[0], ops[1:]
        src_v = [operand(o) for o in srcs]
        if nop.startswith(COMMUTATIVE) and len(src_v) == 2:
            src_v = sorted(src_v)
        if nop.startswith("fma.") and len(src_v) == 3:
            src_v = sorted(src_v[:2]) + src_v[2:]
        if op.startswith("ld.shared"):
            src_v = [smem, *src_v]
        dests = _split_operands(dest[1:-1]) if dest.startswith("{") else [dest]
        for i, d in enumerate(dests):
            new = h(nop, pred_v, str(i), str(len(dests)), *src_v)
            if pred:  # a predicated write keeps the old value where the predicate is off
                new = h("keep", new, val.get(d, h("undef")))
            val[d] = new
    return sorted(stores), unknown


def ptxas_regs(ptx: str) -> str:
    with tempfile.NamedTemporaryFile("w", suffix=".ptx", delete=False) as f:
        f.write(ptx)
    from triton.backends.nvidia.compiler import get_ptxas
    res = subprocess.run([get_ptxas(90).path, "-arch=sm_90a", "-v", f.name, "-o", os.devnull],
                         capture_output=True, text=True)
    os.unlink(f.name)
    m = re.search(r"Used (\d+) registers", res.stdout + res.stderr)
    return m.group(1) if m else "?"


def compare() -> list[dict[str, object]]:
    from sglang.kernels.ops.diffusion.norm import native_bf16_rmsnorm_triton as sg

    cand = _candidate_module()
    pairs = [("rmsnorm_scale", sg._rmsnorm_scale_kernel, cand.rmsnorm_scale_kernel, 4, 3),
             ("rmsnorm_tanh_residual", sg._rmsnorm_tanh_residual_kernel, cand.rmsnorm_tanh_residual_kernel, 5, 4)]
    rows = []
    for fn_name, sg_fn, c_fn, n_ptrs, n_ints in pairs:
        for spec_name, dim, eps in SPECS:
            a = compile_kernel(sg_fn, n_ptrs, n_ints, dim, eps)
            b = compile_kernel(c_fn, n_ptrs, n_ints, dim, eps)
            (sa, ua), (sb, ub) = dataflow(a["ptx"]), dataflow(b["ptx"])
            la, lb = LAYOUT.findall(a["ttgir"]), LAYOUT.findall(b["ttgir"])
            blocked = re.findall(r"#blocked\d* = (#ttg\.blocked<[^>]*>)", a["ttgir"]), \
                re.findall(r"#blocked\d* = (#ttg\.blocked<[^>]*>)", b["ttgir"])
            rows.append({"function": fn_name, "spec": spec_name, "same": sa == sb and not ua and not ub and bool(sa),
                         "stores": [len(sa), len(sb)], "unmodelled": ua + ub, "reduce_layout": [la, lb], "blocked": blocked,
                         "regs": [ptxas_regs(a["ptx"]), ptxas_regs(b["ptx"])]})
    return rows


if __name__ == "__main__":
    result = compare()
    if "--json" in sys.argv:
        print(json.dumps(result))
    else:
        for r in result:
            print(f"{r['function']:22s} {r['spec']:6s} same={r['same']} stores={r['stores']} "
                  f"regs sglang/candidate={r['regs']} blocked={r['blocked']}")
