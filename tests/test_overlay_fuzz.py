"""CPU variant of the overlay's layout fuzz (issue #10 item 15; the full run is tests/test_overlay_fuzz_gpu.py).

SGLang 0.5.23's ``triton_group_norm_silu`` runs its real Triton kernels on CPU tensors in Triton's interpreter
(kda_lab.interpret's GroupNorm shims). That wrapper is put in place of SGLang's function before the repository's
own overlay is installed, so the overlay's fallback path is SGLang's Triton kernel exactly as on a non-H200 GPU.
Each layout case runs through SGLang and through the overlay against the fp64 oracle: the overlay must be right
wherever SGLang accepts the input; SGLang's strided-affine bug must reproduce (the kernel reads
``weight_ptr + c`` whatever the stride).
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

_spec = importlib.util.spec_from_file_location("kda_overlay_fixtures", Path(__file__).with_name("test_overlay_fixtures.py"))
fx = importlib.util.module_from_spec(_spec)
sys.modules.setdefault("kda_overlay_fixtures", fx)
_spec.loader.exec_module(fx)

pytestmark = fx.needs_sglang


def test_group_norm_layout_fuzz_in_the_interpreter():
    r = fx.run_py(None, [f"""
    sys.path.insert(0, {str(Path(__file__).parent)!r})
    import overlay_fuzz_cases as fz
    """, """
    from kda_lab import interpret
    interpret.ensure_interpreter()
    interpret.install_shims()
    mod = importlib.import_module("sglang.kernels.ops.diffusion.norm.group_norm_silu_triton")
    sglang = interpret.interpretable(mod.__name__, "triton_group_norm_silu")
    mod.__dict__["triton_group_norm_silu"] = sglang  # SGLang's Triton path for CPU tensors, before install
    import kda_kernels
    # this fuzz is GroupNorm's: strict about that family only (another promoted family's SGLang baseline, e.g. the
    # CuTe DSL norm_scale_shift kernels, cannot even be imported on a CPU host; install() says so in status())
    st = kda_kernels.install(strict=True, families=["group_norm_silu"])
    from sglang.kernels.ops.diffusion import triton_group_norm_silu as overlay
    tol = fz.tolerances("group_norm_silu")
    rows = []
    for name, args in fz.cases("triton_group_norm_silu", "cpu", (torch.float32, torch.float16), big=False):
        row = fz.compare("triton_group_norm_silu", name, args, overlay, sglang, tol)
        row["verdict"] = fz.verdict(row)
        rows.append(row)
    emit({"installed": st["triton_group_norm_silu"]["installed"], "baseline_is_interpreted":
          overlay.__kda_baseline__ is sglang, "rows": rows})
    """], env={"TRITON_INTERPRET": "1"}, timeout=900)
    assert r["installed"] and r["baseline_is_interpreted"]
    bad = [row for row in r["rows"] if row["verdict"]]
    assert bad == [], json.dumps(bad, indent=1)
    wrong = sorted(row["case"] for row in r["rows"] if "ok" in row["sglang"] and not row["sglang"]["ok"])
    print("SGLang wrong (interpreter):", wrong)
    assert "float32/affine_strided" in wrong and "float32/affine_broadcast" in wrong, wrong
    assert all(row["overlay"].get("ok") for row in r["rows"] if row["case"] in wrong)


def test_the_fuzz_takes_tolerances_from_the_task_of_the_gpus_arch():
    sys.path.insert(0, str(Path(__file__).parent))
    import overlay_fuzz_cases as fz

    for arch in ("h200", "b200"):
        tol = fz.tolerances("group_norm_silu", arch)
        assert tol["source"] == f"kernels/{arch}_diffusion_group_norm_silu__multi_shape/task.toml", tol
        assert tol["float16"] == (2e-3, 2e-3)
    assert fz.tolerances("replicate_pad3d_none")["source"].startswith("default")


LOAD_CASES = f"""
sys.path.insert(0, {str(Path(__file__).parent)!r})
import overlay_fuzz_cases as fz
"""

# The families whose layout cases come from test rows tagged "tiny" or "fuzz" (the family's h200 task.toml),
# and what SGLang 0.5.23 does with CPU tensors: norm_infer's two functions have torch CPU fallbacks; the
# bf16-native Z-Image norms return None off CUDA; the CuTe DSL adaLN norms cannot be imported without CUDA.
NORM_FUNCTIONS = {
    "norm_infer": "cpu_fallback", "triton_one_pass_rms_norm": "cpu_fallback",
    "rmsnorm_scale": "none_on_cpu", "rmsnorm_tanh_residual": "none_on_cpu",
    "fused_norm_scale_shift": "cuda_only", "fused_scale_residual_norm_scale_shift": "cuda_only",
}


def test_every_promoted_op_has_layout_cases_that_build_on_cpu():
    """The CPU side of the GPU opcheck/fuzz tests' ``missing`` check: every promoted op (wrappers excluded, as
    there) has layout cases; they build on CPU; for the norm families they meet the oracle and, where SGLang runs
    on CPU, SGLang's own function."""
    r = fx.run_py(None, [LOAD_CASES, f"NORM_FUNCTIONS = {sorted(NORM_FUNCTIONS)!r}", """
    import kda_kernels
    from kda_kernels.registry import TARGETS
    from kda_lab.families import contract, family_module
    st = kda_kernels.status()
    promoted = [t.function for t in TARGETS if st[t.function]["promoted"] and t.kind != "wrapper"]
    counts, missing, build_errors, norm = {}, [], {}, {}
    for fn in promoted:
        try:
            gen = fz.cases(fn, "cpu", (torch.float32,), big=False)
            if gen is None:
                missing.append(fn)
                continue
            built = list(gen)
        except Exception as e:
            build_errors[fn] = f"{type(e).__name__}: {e}"[:300]
            continue
        counts[fn] = len(built)
        if fn not in NORM_FUNCTIONS:
            continue
        family = fz.family_of(fn)
        tol = fz.tolerances(family)
        try:
            base = kda_kernels.baseline(fn)
        except Exception as e:  # the CuTe DSL module needs CUDA to import
            base, unavailable = None, f"{type(e).__name__}: {e}"[:200]
        else:
            unavailable = None
        rows = []
        for name, args in built:
            if base is not None:
                row = fz.compare(fn, name, args, base, base, tol)
            else:
                row = {"case": name}
                try:
                    contract(family, fn).oracle(fz._private(args))
                except Exception as e:
                    row["oracle_error"] = f"{type(e).__name__}: {e}"[:200]
            if family == "norm_tanh_mul_add":
                m = family_module(family)
                other = args["scale"] if fn == "rmsnorm_scale" else args["gate"]
                row["outside_predicate"] = m.accepts(args["x"], args["weight"], other, args.get("residual"))
            rows.append(row)
        norm[fn] = {"unavailable": unavailable, "rows": rows}
    emit({"promoted": promoted, "counts": counts, "missing": missing, "build_errors": build_errors, "norm": norm})
    """], timeout=600)
    assert r["missing"] == [], f"promoted ops without layout cases (tag test rows tiny/fuzz in the h200 task.toml): {r['missing']}"
    assert r["build_errors"] == {}, json.dumps(r["build_errors"], indent=1)
    assert all(n > 0 for n in r["counts"].values()), r["counts"]
    assert set(NORM_FUNCTIONS) <= set(r["promoted"]), r["promoted"]
    print("cases per promoted op:", r["counts"])
    for fn, how in NORM_FUNCTIONS.items():
        got = r["norm"][fn]
        names = [row["case"] for row in got["rows"]]
        assert any(n.endswith("/as_row") for n in names) and any(n.endswith("/strided") for n in names), names
        if how == "cpu_fallback":  # SGLang's torch CPU fallback runs every case and meets the oracle
            assert got["unavailable"] is None, got["unavailable"]
            bad = [row for row in got["rows"] if "oracle_error" in row or not row["sglang"].get("ok")]
            assert bad == [], json.dumps(bad, indent=1)
        elif how == "none_on_cpu":  # SGLang returns None off CUDA; the oracle refuses exactly what SGLang would
            assert got["unavailable"] is None, got["unavailable"]
            assert all(row["sglang"] == {"none": True} for row in got["rows"]), got["rows"]
            mismatch = [row for row in got["rows"] if ("oracle_error" in row) != (row["outside_predicate"] is not None)]
            assert mismatch == [], json.dumps(mismatch, indent=1)
            assert all(row["outside_predicate"] is None for row in got["rows"] if row["case"].endswith("/as_row"))
        else:  # CuTe DSL: not importable on a CPU host; the cases build and the oracle takes every one
            assert got["unavailable"], "expected SGLang's CuTe DSL module to need CUDA on this host"
            assert [row for row in got["rows"] if "oracle_error" in row] == []


# SGLang 0.5.23's one-pass RMSNorm kernel loads ``w_ptr + d_offset`` whatever w's stride, so a strided [D] weight
# view (the fuzz's "/strided" cases) gives wrong values; the promoted impl hands such weights to SGLang, so the
# overlay was wrong there too until it canonicalized that weight like GroupNorm's
# (kda_kernels.contracts._canonical_one_pass_rms_norm): SGLang must stay wrong there and the overlay right.
ONE_PASS_STRIDED_W = "triton_one_pass_rms_norm", "/strided"

INTERPRETED_NORM_INFER = """
from kda_lab import interpret
interpret.ensure_interpreter()
interpret.install_shims()
from kda_kernels.registry import target
sg = {}
for fn in ("norm_infer", "triton_one_pass_rms_norm"):
    mod_name, _, name = target(fn).sglang.partition(":")
    mod = importlib.import_module(mod_name)
    sg[fn] = interpret.interpretable(mod_name, name)
    mod.__dict__[name] = sg[fn]  # SGLang's Triton path for CPU tensors, before install
import kda_kernels
st = kda_kernels.install(strict=True, families=["norm_infer"])
"""


def test_norm_infer_layout_fuzz_in_the_interpreter():
    """norm_infer / triton_one_pass_rms_norm over their layout cases (fp32 and fp16 copies of the tiny rows) in
    Triton's interpreter: SGLang's Triton kernels against the promoted impl's Triton path (KDA_FORCE_ARCH=h200
    routes CPU tensors to the h200 impl, which runs them under the interpreter), both against the fp64 oracle."""
    r = fx.run_py(None, [LOAD_CASES, INTERPRETED_NORM_INFER, """
    from sglang.kernels.ops import diffusion as D
    rows, info = [], {}
    for fn in ("norm_infer", "triton_one_pass_rms_norm"):
        overlay = getattr(D, fn)
        info[fn] = {"installed": st[fn]["installed"], "forced_arch": st[fn]["forced_arch"],
                    "baseline_is_interpreted": overlay.__kda_baseline__ is sg[fn]}
        tol = fz.tolerances("norm_infer")
        for dt in ("float32", "float16"):
            for name, args in fz.cases(fn, "cpu", (), big=False, as_dtype=dt):
                row = fz.compare(fn, name, args, overlay, sg[fn], tol)
                row["verdict"] = fz.verdict(row)
                rows.append(row)
    emit({"info": info, "rows": rows})
    """], env={"TRITON_INTERPRET": "1", "KDA_FORCE_ARCH": "h200"}, timeout=900)
    for fn, i in r["info"].items():
        assert i == {"installed": True, "forced_arch": "h200", "baseline_is_interpreted": True}, (fn, i)
    fns = {row["fn"] for row in r["rows"]}
    assert fns == {"norm_infer", "triton_one_pass_rms_norm"}, fns
    assert any(row["case"].startswith("test_ln_out_padded_rows") for row in r["rows"])  # out= rows are in
    known = [row for row in r["rows"] if (row["fn"], row["case"][-len("/strided"):]) == ONE_PASS_STRIDED_W]
    bad = [row for row in r["rows"] if row["verdict"]]
    assert bad == [], json.dumps(bad, indent=1)
    # the upstream bug above reproduces (SGLang wrong on every strided-weight one-pass case), the overlay is right
    assert known and all(row["sglang"].get("ok") is False for row in known), json.dumps(known, indent=1)
    assert all(row["overlay"].get("ok") is True for row in known), json.dumps(known, indent=1)
    wrong = sorted(f"{row['fn']}:{row['case']}" for row in r["rows"] if "ok" in row["sglang"] and not row["sglang"]["ok"])
    print("SGLang wrong (interpreter):", wrong)


def test_norm_infer_ops_pass_opcheck_in_the_interpreter():
    """The GPU opcheck test's per-case logic on CPU, through overlay_fuzz_cases' helpers: SGLang's refusals are
    probed on stride-keeping copies (sglang_refusal), out= calls check kda::norm_infer_out (opcheck_target)."""
    r = fx.run_py(None, [LOAD_CASES, INTERPRETED_NORM_INFER, """
    checked, fails, refused = {}, {}, {}
    for fn in ("norm_infer", "triton_one_pass_rms_norm"):
        ops, op_fails, op_refused = fz.opcheck_cases(fn, kda_kernels.baseline(fn),
                                                     fz.cases(fn, "cpu", (), big=False, as_dtype="float32"),
                                                     rest=fz.LAYOUT_OPCHECK)
        checked.update(ops)
        fails.update(op_fails)
        refused.update(op_refused)
    emit({"checked": checked, "fails": fails, "refused": refused})
    """], env={"TRITON_INTERPRET": "1", "KDA_FORCE_ARCH": "h200"}, timeout=900)
    assert r["fails"] == {}, json.dumps(r["fails"], indent=1)
    assert {"kda.norm_infer.default", "kda.norm_infer_out.default", "kda.triton_one_pass_rms_norm.default"} \
        <= set(r["checked"]), r["checked"]
    assert {n.split("/")[0] for n in r["checked"]["kda.norm_infer_out.default"]} == \
        {"test_ln_out_padded_rows[float32]", "test_rms_out_fp32_from_bf16[float32]"}, r["checked"]
    # SGLang asserts unit-stride weight/bias: the strided weight views are refused, not failed
    assert any(k.startswith("norm_infer/test_ln_affine_tail") and k.endswith("/strided") for k in r["refused"]), r["refused"]



# ------------------------------------------------------------------ rotary embeddings and the select01 LayerNorm
# SGLang 0.5.23 inputs these functions accept (no assert, no raise) and compute wrong, by case tag (the test rows'
# rows' derived "/strided" views and overlay_fuzz_cases.LAYOUT_EXTRAS); docs/overlay.md has the table:
# - apply_rotary_embedding: x's last dim not unit-stride (its kernel reads x[2i], x[2i+1] at offsets 2i, 2i+1);
# - apply_ltx2_split_rotary_emb: x not contiguous (indexed as contiguous [B,S,H*D]), cos/sin last dim not unit-stride;
# - the select01 pair: scale0..gate1/index passed as ``t.contiguous()`` with the strides of ``t`` itself (transposed
#   or chunk views, last-dim strides, [1, C] rows / a [1, L] index broadcast over B > 1; some of those read past
#   the end of the copy). SGLang's in-tree caller (fused_scale_shift_gate.py's layers) passes contiguous [B, *].
SGLANG_WRONG_TAGS = {
    "apply_rotary_embedding": {"strided", "x_last_dim_permuted"},
    "apply_ltx2_split_rotary_emb": {"strided", "x_rows_view", "x_batch_permuted", "cos_sin_last_strided"},
    "fuse_layernorm_scale_shift_gate_select01_kernel": {
        "mods_transposed", "mods_transposed_pair_dtypes", "index_transposed", "mods_chunk_views",
        "mods_last_strided", "index_strided", "mods_batch_broadcast", "index_batch_broadcast"},
}
SGLANG_WRONG_TAGS["fuse_residual_layernorm_scale_shift_gate_select01_kernel"] = \
    SGLANG_WRONG_TAGS["fuse_layernorm_scale_shift_gate_select01_kernel"]

INTERPRETED_ROTARY_SELECT01 = """
from kda_lab import interpret
interpret.ensure_interpreter()
interpret.install_shims()
from kda_kernels.registry import target
FNS = ("apply_rotary_embedding", "apply_ltx2_split_rotary_emb", "fuse_layernorm_scale_shift_gate_select01_kernel",
       "fuse_residual_layernorm_scale_shift_gate_select01_kernel", "fuse_scale_shift_kernel")
sg = {}
for fn in FNS:
    mod_name, _, name = target(fn).sglang.partition(":")
    mod = importlib.import_module(mod_name)
    sg[fn] = interpret.interpretable(mod_name, name)
    mod.__dict__[name] = sg[fn]  # SGLang's Triton path for CPU tensors, before install
import kda_kernels
st = kda_kernels.install(strict=True, families=["rotary_embedding", "fuse_scale_shift"])
"""


def _sglang_wrong(row: dict) -> bool:  # overlay_fuzz_cases.sglang_wrong, on the subprocess's JSON rows
    return "ok" in row["sglang"] and not row["sglang"]["ok"]


ARCHES = ("h200", "baseline")


def test_rotary_and_select01_layout_fuzz_in_the_interpreter():
    """apply_rotary_embedding, apply_ltx2_split_rotary_emb, the select01 LayerNorm pair and fuse_scale_shift_kernel over
    their layout cases
    (fp32 and fp16 copies of the tiny rows, plus the hand-written layouts) in Triton's interpreter, SGLang's Triton
    kernels and the overlay both against the fp64 oracle, once per forced arch. ``h200``: KDA_FORCE_ARCH routes CPU
    tensors to the promoted h200 impls (SGLang's kernel for what they hand back); ``baseline``: the overlay's path on
    every other device (the canonicalization in front of SGLang's own kernel), after ``install(force=True)``
    re-reads KDA_FORCE_ARCH. SGLang's side and the oracle do not depend on the arch: they run once per case
    (``compare``'s ``reuse``), the overlay once per arch. A function that is not promoted gets its contract's
    canonicalization in front of SGLang's kernel by hand, as the overlay does once it is."""
    r = fx.run_py(None, [LOAD_CASES, INTERPRETED_ROTARY_SELECT01, f"ARCHES = {ARCHES!r}", """
    from sglang.kernels.ops import diffusion as D
    from kda_kernels.contracts import CONTRACTS
    out, reuse = {}, {}
    for arch in ARCHES:
        if arch != os.environ["KDA_FORCE_ARCH"]:
            os.environ["KDA_FORCE_ARCH"] = arch
            st = kda_kernels.install(strict=True, force=True, families=["rotary_embedding", "fuse_scale_shift"])
        rows, info = [], {}
        for fn in FNS:
            overlay = getattr(D, fn)
            promoted = st[fn]["installed"]
            info[fn] = {"installed": promoted, "forced_arch": st[fn]["forced_arch"],
                        "baseline_is_interpreted": (overlay.__kda_baseline__ if promoted else overlay) is sg[fn]}
            if not promoted:
                def overlay(*a, _sg=sg[fn], _c=CONTRACTS[fn].canonical, **k):
                    a, k = _c(a, k) if _c is not None else (a, k)
                    return _sg(*a, **k)
            tol = fz.tolerances(fz.family_of(fn))
            for dt in ("float32", "float16"):
                for name, args in fz.cases(fn, "cpu", (), big=False, as_dtype=dt):
                    row = fz.compare(fn, name, args, overlay, sg[fn], tol, reuse=reuse)
                    row["verdict"] = fz.verdict(row)
                    rows.append(row)
        out[arch] = {"info": info, "rows": rows}
    emit(out)
    """], env={"TRITON_INTERPRET": "1", "KDA_FORCE_ARCH": ARCHES[0]}, timeout=1200)
    import kda_kernels

    # what the exports' manifests promote (the exporter's decision, which flips with each measured candidate):
    # install() must put exactly those in, on the forced arch
    promoted = {fn for fn, st in kda_kernels.status().items() if st["promoted"]}
    for arch in ARCHES:
        for fn, i in r[arch]["info"].items():
            want = {"installed": fn in promoted, "forced_arch": arch if fn in promoted else None,
                    "baseline_is_interpreted": True}
            assert i == want, (arch, fn, i)
        bad = [row for row in r[arch]["rows"] if row["verdict"]]
        assert bad == [], (arch, json.dumps(bad, indent=1))
        for fn, tags in SGLANG_WRONG_TAGS.items():
            got = [row for row in r[arch]["rows"] if row["fn"] == fn]
            assert len(got) > 10, (arch, fn, len(got))
            wrong = {row["case"].split("/")[-1] for row in got if _sglang_wrong(row)}
            print(arch, fn, "SGLang wrong (interpreter):", sorted(wrong))
            assert wrong == tags, (arch, fn, sorted(wrong))
            # the overlay is right on every one of them (and everywhere else: no verdict above)
            assert all(row["overlay"].get("ok") is True for row in got if _sglang_wrong(row)), (arch, fn)
    # the same cases under both arches (SGLang's side taken from the first for the second)
    assert [(row["fn"], row["case"]) for row in r["h200"]["rows"]] == \
        [(row["fn"], row["case"]) for row in r["baseline"]["rows"]]


def test_rotary_and_select01_ops_pass_opcheck_in_the_interpreter():
    """torch.library.opcheck of the three promoted ops over their fp32 layout cases (h200 impls in the interpreter):
    the fakes describe what the canonicalized call returns (a contiguous output where a permuted x was copied,
    where SGLang's own output kept x's layout with wrong values)."""
    r = fx.run_py(None, [LOAD_CASES, INTERPRETED_ROTARY_SELECT01, """
    checked, fails, refused = {}, {}, {}
    for fn in FNS[:3]:
        ops, op_fails, op_refused = fz.opcheck_cases(fn, kda_kernels.baseline(fn),
                                                     fz.cases(fn, "cpu", (), big=False, as_dtype="float32"),
                                                     rest=fz.LAYOUT_OPCHECK)
        checked.update(ops)
        fails.update(op_fails)
        refused.update(op_refused)
    emit({"checked": checked, "fails": fails, "refused": refused})
    """], env={"TRITON_INTERPRET": "1", "KDA_FORCE_ARCH": "h200"}, timeout=1200)
    assert r["fails"] == {}, json.dumps(r["fails"], indent=1)
    assert {"kda.apply_rotary_embedding.default", "kda.apply_ltx2_split_rotary_emb.default",
            "kda.fuse_layernorm_scale_shift_gate_select01_kernel.default"} <= set(r["checked"]), r["checked"]
    assert any(n.endswith("/x_last_dim_permuted") for n in r["checked"]["kda.apply_rotary_embedding.default"])
    assert any(n.endswith("/x_batch_permuted") for n in r["checked"]["kda.apply_ltx2_split_rotary_emb.default"])
    # SGLang asserts a contiguous x: the select01 "/strided" cases are refused, not failed
    assert any(k.endswith("/strided") and "select01" in k for k in r["refused"]), r["refused"]


def test_cases_sglang_faults_on_are_not_run_and_the_overlay_must_be_right_there():
    """fused_inplace_qknorm_rope faults the GPU on misaligned operands (sticky: it would end the fuzz's process),
    so the fuzz does not call SGLang there; the overlay must still be right. CPU tensors never fault."""
    import torch

    sys.path.insert(0, str(Path(__file__).parent))
    import overlay_fuzz_cases as fz

    flat = torch.randn(70)
    args = {"q": flat[7:].view(7, 9), "positions": torch.arange(3)}
    assert fz.sglang_faults("fused_inplace_qknorm_rope", args) is None  # CPU
    assert fz.sglang_faults("norm_infer", args) is None
    assert fz.sglang_refusal("fused_inplace_qknorm_rope", lambda **a: 1 / 0, args)  # CPU: probed as before
    row = {"sglang": {"error": "not run: faults", "faults": True}}
    assert fz.verdict({**row, "overlay": {"ok": True}}) is None
    assert fz.verdict({**row, "overlay": {"error": "RuntimeError: x"}})  # an overlay refusal is wrong here
    assert fz.verdict({**row, "overlay": {"ok": False, "max_abs_err": 3.0}})
