"""The public peers' adapters (issue 22), on CPU: argument mapping, semantics, availability, pins.

(a) every call an adapter makes binds to the real function's signature in the pinned wheel (read with ``ast``
    from requirements/peers-cpu.txt's --no-deps install, never imported);
(b) every adapter, run on the real tasks' rows with a stand-in computing the peer's documented semantics in
    torch (tests/peer_standins.py), passes the family's fp64 oracle under the task tolerances, and deliberately
    wrong mappings are rejected by the same check;
(c) ``Peer.load`` refuses a missing package and a wrong version; ``checked_peers`` reports an unimportable peer
    as unavailable;
(d) the Liger adapters run Liger's real Triton kernels in the Triton interpreter and pass the oracle.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
import sys
from importlib import import_module
from pathlib import Path
from typing import Any

import pytest
import torch

from kda_lab.families import contract
from kda_lab.families.peers import FLASHINFER, LIGER, QUACK, Peer, PeerUnavailable, bound
from kda_lab.measure.correctness import RowResult, check_row
from kda_lab.measure.inputs import make_inputs
from kda_lab.task import load_task
from kda_lab.task.workloads import TensorSpec, Workload, parse_arg
from tests.peer_standins import StandIn, find_function, pinned_signature

REPO = Path(__file__).resolve().parents[1]
FAMILIES = ("rotary_embedding", "norm_infer", "group_norm_silu", "norm_scale_shift", "qknorm_rope")
NO_PEERS = ("norm_tanh_mul_add", "fuse_scale_shift")
CPU_ELEMENTS = 400_000  # rows up to this many elements in their largest tensor run on CPU here


def task_of(family: str):
    return load_task(f"h200_diffusion_{family}__multi_shape")


def family_module(family: str):
    return import_module(f"kda_lab.families.{family}")


def small_rows(task, fn: str) -> list[Workload]:
    return [w for w in task.rows() if w.fn == fn and w.primary().numel <= CPU_ELEMENTS]


def dit_rows() -> list[Workload]:
    """Rows in the layout FlashInfer's DiT fusions take (no task row has it: see norm_scale_shift.PEERS):
    bf16, D = 3072, per-token modulation as views with row stride 6*D (WAN's temb.chunk(6, dim=2))."""
    s, d = 8, 3072
    x = {"shape": [1, s, d], "dtype": "bfloat16"}
    chunk = {"shape": [1, s, d], "dtype": "bfloat16", "strides": [s * 6 * d, 6 * d, 1], "dist": "uniform",
             "low": -0.5, "high": 0.5}
    common = {"weight": {"none": True}, "bias": {"none": True}, "norm_type": "layer", "eps": 1e-6}

    def row(name, fn, args):
        return Workload(name=name, fn=fn, kind="test", args={k: parse_arg(k, v) for k, v in args.items()})

    return [
        row("dit_nss", "fused_norm_scale_shift", {"x": x, **common, "scale": chunk, "shift": {**chunk, "offset": d}}),
        row("dit_res_gate", "fused_scale_residual_norm_scale_shift",
            {"residual": x, "x": x, "gate": {**chunk, "offset": 2 * d}, **common, "scale": chunk,
             "shift": {**chunk, "offset": d}}),
        row("dit_res_nogate", "fused_scale_residual_norm_scale_shift",
            {"residual": x, "x": x, "gate": {"none": True}, **common, "scale": chunk, "shift": {**chunk, "offset": d}}),
    ]


def meta_args(w: Workload) -> dict[str, Any]:
    """Row ``w``'s arguments as meta tensors (shapes, dtypes, strides; no data): what ``applies`` reads, for rows
    too large to allocate on CPU."""
    out: dict[str, Any] = {}
    for name, v in w.args.items():
        if isinstance(v, TensorSpec):
            dtype = getattr(torch, v.dtype)
            base = torch.empty(max(v.storage_numel, 1), dtype=dtype, device="meta")
            strides = v.strides or torch.empty(v.shape, device="meta").stride()
            out[name] = base.as_strided(v.shape, strides, v.offset)
        else:
            out[name] = v
    return out


def all_peers() -> list[tuple[str, str, Peer]]:
    return [(fam, fn, p) for fam in FAMILIES for fn, peers in family_module(fam).PEERS.items() for p in peers]


def peer_id(item: tuple[str, str, Peer]) -> str:
    return f"{item[1]}-{item[2].name}"


def run_peer(family: str, w: Workload, peer: Peer, standin: StandIn, seed: int = 5) -> RowResult | str:
    """The peer's verdict on row ``w`` as ``kda bench`` reaches it: applies, then the oracle check."""
    task = task_of(family)
    why = peer.applies(make_inputs(w, "cpu", seed))
    if why:
        return why
    fn = bound(peer, standin.module(peer.module))
    (res,) = check_row(task, w, contract(task.family, w.fn), {peer.name: fn}, seed, "cpu", baseline_impl=peer.name)
    return res


def rows_for(family: str, fn: str) -> list[Workload]:
    rows = small_rows(task_of(family), fn)
    if family == "norm_scale_shift":
        rows += [w for w in dit_rows() if w.fn == fn]
    return rows


# ------------------------------------------------------------------------------------------------ (b) semantics

@pytest.mark.parametrize("item", all_peers(), ids=peer_id)
def test_adapter_matches_the_oracle_on_every_row_it_accepts(item: tuple[str, str, Peer]) -> None:
    family, fn, peer = item
    standin = StandIn()
    applied, failures, reasons = [], [], set()
    for w in rows_for(family, fn):
        res = run_peer(family, w, peer, standin)
        if isinstance(res, str):
            reasons.add(res)
            continue
        applied.append(w.name)
        if not res.ok:
            failures.append(res.describe())
    assert not failures, "\n".join(failures)
    assert applied, f"{peer.label} applies to no row of {fn}: {sorted(reasons)}"
    assert peer.mapping, "every peer writes its mapping down"


def _wrong(peer: Peer, adapt) -> Peer:
    return dataclasses.replace(peer, adapt=adapt)


def _peer(family: str, fn: str, name: str) -> Peer:
    return next(p for p in family_module(family).PEERS[fn] if p.name == name)


def _neox_rotary(rotary, a):  # NeoX halves instead of SGLang's GPT-J pairs
    from kda_lab.families.rotary_embedding import _half_width
    x = a["x"]
    cos = _half_width(a["cos"], x.shape[-1], bool(a["interleaved"]))[: x.shape[-3]]
    sin = _half_width(a["sin"], x.shape[-1], bool(a["interleaved"]))[: x.shape[-3]]
    x4 = x if x.dim() == 4 else x.unsqueeze(0)
    out = rotary.apply_rotary(x4, cos, sin, interleaved=False)
    return out if x.dim() == 4 else out.squeeze(0)


def _cast_rotary(rotary, a):  # GPT-J pairs, but cos/sin rounded to x's dtype first (SGLang multiplies by them as stored)
    from kda_lab.families.rotary_embedding import _half_width
    x = a["x"]
    cos = _half_width(a["cos"], x.shape[-1], bool(a["interleaved"]))[: x.shape[-3]].to(x.dtype)
    sin = _half_width(a["sin"], x.shape[-1], bool(a["interleaved"]))[: x.shape[-3]].to(x.dtype)
    x4 = x if x.dim() == 4 else x.unsqueeze(0)
    out = rotary.apply_rotary(x4, cos, sin, interleaved=True)
    return out if x.dim() == 4 else out.squeeze(0)


def _ln_without_bias(rmsnorm, a):
    if a.get("is_rms_norm", False):
        return rmsnorm.rmsnorm_fwd(a["x"].contiguous(), a.get("weight"), None, eps=float(a["eps"]))[0]
    return rmsnorm.layernorm_fwd(a["x"].contiguous(), a["weight"], None, eps=float(a["eps"]))


def _gn_without_silu(ops, a):
    from kda_lab.families.group_norm_silu import _gn_parts
    x, w, b, g, eps = _gn_parts(a)
    return ops.group_norm.group_norm_forward(x.contiguous(), x.shape[1], g, w, b, eps)[0]


def _modulated_without_shift(ops, a):
    x, d = a["x"].contiguous(), a["x"].shape[-1]
    rows = a["scale"].numel() // d
    return ops.modulated_rms_norm.modulated_rms_norm_forward(x, a.get("weight"), a["scale"].reshape(rows, d), None,
                                                              float(a["eps"]), 0.0, "gemma")[0]


def _dit_unswapped(norm, a):  # returns FlashInfer's (residual_out, norm_out) order, not SGLang's (y, r)
    return norm.fused_dit_gate_residual_layernorm_scale_shift(a["x"], a["residual"], a["gate"], a["scale"],
                                                              a["shift"], epsilon=float(a["eps"]))


def _qknorm_neox_flipped(quack, a):
    return family_module("qknorm_rope").quack_qknorm_rope(quack, {**a, "is_neox": not a["is_neox"]})


WRONG = [
    ("rotary_embedding", "apply_rotary_embedding", "quack", _neox_rotary, "NeoX halves"),
    ("rotary_embedding", "apply_rotary_embedding", "quack", _cast_rotary, "cos/sin cast to x's dtype"),
    ("norm_infer", "norm_infer", "quack", _ln_without_bias, "bias dropped"),
    ("group_norm_silu", "triton_group_norm_silu", "liger", _gn_without_silu, "SiLU left out"),
    ("norm_scale_shift", "fused_norm_scale_shift", "liger", _modulated_without_shift, "shift left out"),
    ("norm_scale_shift", "fused_scale_residual_norm_scale_shift", "flashinfer", _dit_unswapped, "outputs unswapped"),
    ("qknorm_rope", "fused_inplace_qknorm_rope", "quack", _qknorm_neox_flipped, "is_neox flipped"),
]


@pytest.mark.parametrize(("family", "fn", "name", "adapt", "what"), WRONG, ids=[w[-1] for w in WRONG])
def test_a_wrong_mapping_is_rejected_by_the_same_check(family: str, fn: str, name: str, adapt, what: str) -> None:
    peer = _wrong(_peer(family, fn, name), adapt)
    verdicts = [run_peer(family, w, peer, StandIn()) for w in rows_for(family, fn)]
    checked = [v for v in verdicts if isinstance(v, RowResult)]
    assert checked, f"no row to check {what} on"
    assert any(not v.ok for v in checked), f"{what}: the oracle check accepted it on every row"


def test_casting_cos_to_x_dtype_fails_only_on_fp32_tables() -> None:
    """Why the QuACK adapter passes cos/sin as stored: SGLang's kernel multiplies by the table in its own dtype
    (in fp32), so rounding an fp32 table to bf16 first is outside tolerance on the task's fp32-table rows, and
    harmless where the table already is in x's dtype."""
    peer = _wrong(_peer("rotary_embedding", "apply_rotary_embedding", "quack"), _cast_rotary)
    failed = {w.name for w in rows_for("rotary_embedding", "apply_rotary_embedding")
              if isinstance(v := run_peer("rotary_embedding", w, peer, StandIn()), RowResult) and not v.ok}
    assert failed and all(w in {r.name for r in small_rows(task_of("rotary_embedding"), "apply_rotary_embedding")
                                if r.args["cos"].dtype == "float32"} for w in failed), failed


# ------------------------------------------------------------------------------------------------ (a) signatures

@pytest.mark.parametrize("item", all_peers(), ids=peer_id)
def test_every_call_binds_to_the_pinned_signature(item: tuple[str, str, Peer]) -> None:
    family, fn, peer = item
    standin = StandIn()
    for w in rows_for(family, fn):
        run_peer(family, w, peer, standin)
    assert standin.calls, f"{peer.label} made no call on {fn}'s rows"
    for call in standin.calls:
        assert call.name.startswith(peer.module), (call.name, peer.module)
        pinned_signature(call.name).bind(*call.args, **call.kwargs)  # TypeError on a wrong name/arity


def test_a_misspelt_keyword_does_not_bind() -> None:
    sig = pinned_signature("quack.rotary.apply_rotary")
    x = torch.zeros(1, 2, 1, 8)
    sig.bind(x, x, x, interleaved=True)
    with pytest.raises(TypeError):
        sig.bind(x, x, x, interleave=True)  # FlashInfer's spelling, not QuACK's
    with pytest.raises(TypeError):  # epsilon is keyword-only in FlashInfer's DiT fusion
        pinned_signature("flashinfer.norm.fused_dit_residual_layernorm_scale_shift").bind(x, x, x, None, None, None,
                                                                                           1e-6)


def test_signatures_come_from_the_pinned_wheels_not_an_import() -> None:
    from importlib import metadata
    assert metadata.version("quack-kernels") == QUACK[2]
    assert metadata.version("liger-kernel") == LIGER[2]
    assert metadata.version("flashinfer-python") == FLASHINFER[2]
    assert find_function("flashinfer.norm", "fused_dit_gate_residual_layernorm_scale_shift").args.kwonlyargs
    assert "quack" not in sys.modules or not hasattr(sys.modules["quack"], "rotary")


# ------------------------------------------------------------------------------------------------ (c) availability

def test_load_refuses_a_missing_package_and_a_wrong_version() -> None:
    missing = Peer("nope", "kda-no-such-peer-package", "1.0", "kda_no_such_peer", adapt=lambda m, a: None)
    with pytest.raises(PeerUnavailable, match="kda-no-such-peer-package is not installed"):
        missing.load()
    wrong = dataclasses.replace(_peer("rotary_embedding", "apply_rotary_embedding", "quack"), version="0.0.1")
    with pytest.raises(PeerUnavailable, match=r"quack-kernels 0\.6\.5 is installed; the lab pins 0\.0\.1"):
        wrong.load(importer=lambda name: pytest.fail("a wrong version must not be imported"))


def test_load_reports_an_import_failure_and_binds_the_adapter() -> None:
    peer = _peer("norm_infer", "norm_infer", "quack")

    def broken(name: str):
        raise ImportError("libcuda.so.1: cannot open shared object file")

    with pytest.raises(PeerUnavailable, match="import quack.rmsnorm failed: ImportError: libcuda"):
        peer.load(importer=broken)
    standin = StandIn()
    fn = peer.load(importer=lambda name: standin.module(name))
    x, w = torch.randn(3, 16), torch.randn(16, dtype=torch.float32)
    torch.testing.assert_close(fn(x=x, weight=w, bias=None, eps=1e-6, is_rms_norm=False),
                               torch.nn.functional.layer_norm(x, (16,), w, None, 1e-6))
    assert [c.name for c in standin.calls] == ["quack.rmsnorm.layernorm_fwd"]


def test_checked_peers_reports_quack_unavailable_on_a_cpu_host() -> None:
    """Through the harness (kda_lab.measure.run.checked_peers): QuACK is installed at its pin but cannot import
    without the CuTe DSL, so the row records it as unavailable with the reason, and nothing is timed."""
    from kda_lab.measure.run import checked_peers
    task = task_of("rotary_embedding")
    w = next(r for r in task.rows() if r.name == "test_rope_tiny_batch2_tail")
    verdicts, timed = checked_peers(task, w, 3, torch.device("cpu"), make_inputs(w, "cpu", 3))
    assert verdicts["quack"]["verdict"] == "unavailable" and verdicts["quack"]["version"] == "0.6.5"
    assert "import quack.rotary failed" in verdicts["quack"]["why"]
    assert "quack" not in timed


def test_applies_refuses_rows_the_peer_cannot_take() -> None:
    fi = _peer("norm_scale_shift", "fused_norm_scale_shift", "flashinfer")
    task = task_of("norm_scale_shift")
    reasons = {w.name: fi.applies(meta_args(w)) for w in task.rows() if w.fn == "fused_norm_scale_shift"}
    assert all(reasons.values()), "FlashInfer's DiT fusion takes no row of the task (see norm_scale_shift.PEERS)"
    assert "row stride 6*D" in reasons["wan_ti2v_nss_L18144_tok"]
    assert "D = 3072" in reasons["helios_nss_L11040_f32_tok"]
    liger = _peer("norm_scale_shift", "fused_norm_scale_shift", "liger")
    nss = {w.name: liger.applies(meta_args(w)) for w in task.rows() if w.fn == "fused_norm_scale_shift"}
    assert nss["test_rms_weight_2d_mod"] is None and nss["test_rms_bias_ignored"] is None  # [B, D], [1, 1, D]
    assert "RMSNorm" in nss["test_ln_per_frame_4d"]
    x = torch.empty(2, 6, 8, device="meta")
    for shape, ok in (((8,), True), ((1,), False), ((2, 8), True), ((1, 6, 8), False), ((2, 6, 8), True),
                      ((2, 3, 1, 8), True), ((1, 1, 8), True)):
        mod = torch.empty(shape, device="meta")
        args = {"x": x, "scale": mod, "shift": mod, "norm_type": "rms"}
        assert (liger.applies(args) is None) == ok, shape
    ln = _peer("norm_infer", "norm_infer", "quack")
    row = next(w for w in task_of("norm_infer").rows() if w.name == "test_ln_affine_tail")  # bf16 weight
    assert "fp32 weight" in ln.applies(meta_args(row))
    out_row = next(w for w in task_of("norm_infer").rows() if w.name == "test_rms_out_fp32_from_bf16")
    assert "out=" in ln.applies(meta_args(out_row))


# ------------------------------------------------------------------------------------------------ pins

def _pin(path: Path, name: str) -> str:
    m = re.search(rf"^{re.escape(name)}==([^\s;#]+)", path.read_text(), re.M)
    assert m, f"no {name}== pin in {path.name}"
    return m.group(1)


def test_pins_agree_across_the_requirements_and_the_peers() -> None:
    for _name, dist, version in (QUACK, LIGER, FLASHINFER):
        assert _pin(REPO / "requirements/gpu.txt", dist) == version
        assert _pin(REPO / "requirements/peers-cpu.txt", dist) == version
    for _fam, _fn, peer in all_peers():
        assert (peer.name, peer.package, peer.version) in (QUACK, LIGER, FLASHINFER)
    # QuACK's runtime deps, within what quack-kernels 0.6.5 declares (apache-tvm-ffi<0.2,>=0.1.6)
    tvm = tuple(int(p) for p in _pin(REPO / "requirements/gpu.txt", "apache-tvm-ffi").split(".")[:3])
    assert (0, 1, 6) <= tvm < (0, 2)
    _pin(REPO / "requirements/gpu.txt", "torch-c-dlpack-ext")
    _pin(REPO / "requirements/gpu.txt", "einops")


def test_families_without_peers_say_why() -> None:
    for family in NO_PEERS:
        module = family_module(family)
        assert module.PEERS == {}
        assert "Public peers: none" in Path(module.__file__).read_text()


# ------------------------------------------------------------------------------------------------ (d) interpreter

LIGER_INTERPRET = r"""
import json, sys
from kda_lab.families import contract
from kda_lab.interpret.shims.liger import interpretable_liger_ops
from kda_lab.families.peers import bound
from kda_lab.measure.correctness import check_row
from tests.test_peers import task_of, _peer
ops = interpretable_liger_ops()
out = {}
for family, fn, row, dtype in json.loads(sys.argv[1]):
    task = task_of(family)
    w = next(r for r in task.rows() if r.name == row).with_dtype(dtype)
    peer = _peer(family, fn, "liger")
    (res,) = check_row(task, w, contract(task.family, fn), {"liger": bound(peer, ops)}, 7, "cpu",
                       baseline_impl="liger")
    out[w.name] = [res.ok, res.describe()]
print(json.dumps(out))
"""

# (family, function, row, dtype): the interpreter mishandles bf16, so rows run in fp32/fp16 copies
LIGER_ROWS = [
    ("norm_infer", "norm_infer", "test_ln_affine_tail", "float32"),
    ("norm_infer", "norm_infer", "test_rms_weight_bias", "float32"),  # bias: n/a for Liger, not run
    ("norm_infer", "norm_infer", "test_rms_fp32_weight", "float32"),
    ("norm_infer", "triton_one_pass_rms_norm", "test_onepass_odd_d", "float16"),
    ("group_norm_silu", "triton_group_norm_silu", None, "float32"),
    ("norm_scale_shift", "fused_norm_scale_shift", "test_rms_weight_2d_mod", "float32"),
]


def _liger_rows() -> list[tuple[str, str, str, str]]:
    rows = []
    for family, fn, row, dtype in LIGER_ROWS:
        task = task_of(family)
        if row is None:  # the smallest row of the function
            row = min((w for w in task.rows() if w.fn == fn), key=lambda w: w.primary().numel).name
        w = next(r for r in task.rows() if r.name == row).with_dtype(dtype)
        if _peer(family, fn, "liger").applies(meta_args(w)) is None:
            rows.append((family, fn, row, dtype))
    return rows


def test_liger_adapters_run_ligers_triton_kernels_in_the_interpreter() -> None:
    rows = _liger_rows()
    assert len(rows) >= 4, rows
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": str(REPO)}
    proc = subprocess.run([sys.executable, "-c", LIGER_INTERPRET, json.dumps(rows)], capture_output=True, text=True, env=env, cwd=REPO,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    results: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    assert len(results) == len(rows)
    bad = [desc for ok, desc in results.values() if not ok]
    assert not bad, "\n".join(bad)


def test_the_interpreter_run_rejects_a_wrong_liger_mapping() -> None:
    script = r"""
import json
from kda_lab.families import contract
from kda_lab.interpret.shims.liger import interpretable_liger_ops
from kda_lab.families.peers import bound
from kda_lab.measure.correctness import check_row
from tests.test_peers import task_of, _peer, _wrong
ops = interpretable_liger_ops()
task = task_of("norm_infer")
w = next(r for r in task.rows() if r.name == "test_ln_affine_tail").with_dtype("float32")
def dropped_bias(o, a):
    return o.layer_norm.layer_norm_forward(a["x"].contiguous(), a["weight"], a["bias"] * 0, float(a["eps"]))[0]
peer = _wrong(_peer("norm_infer", "norm_infer", "liger"), dropped_bias)
(res,) = check_row(task, w, contract(task.family, "norm_infer"), {"liger": bound(peer, ops)}, 7, "cpu",
                   baseline_impl="liger")
print(json.dumps([res.ok, res.describe()]))
"""
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": str(REPO)}
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, cwd=REPO,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    ok, desc = json.loads(proc.stdout.strip().splitlines()[-1])
    assert not ok, desc


# ------------------------------------------------------------------------------------------------ on the GPU box

GPU_ROWS = {  # (family, function): rows every staged peer (QuACK, Liger) must pass on the H200
    ("rotary_embedding", "apply_rotary_embedding"): ("hunyuanvideo_rope_B1_T27030_H24_D128", "test_rope_tiny_3d",
                                                     "test_rope_tiny_interleaved_full_cos"),
    ("norm_infer", "norm_infer"): ("helios_ln_M8640", "test_rms_fp32_weight"),
    ("norm_infer", "triton_one_pass_rms_norm"): ("hyvideo_onepass_M1320", "test_onepass_3d_heads"),
    ("qknorm_rope", "fused_inplace_qknorm_rope"): ("qwen_T47_H24_D128", "test_fp16_neox_partial_gqa"),
    ("group_norm_silu", "triton_group_norm_silu"): (),  # Liger's GN: verdict recorded, may be wrong (fp16 sums)
    ("norm_scale_shift", "fused_norm_scale_shift"): ("test_rms_weight_2d_mod",),
}


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (the box, with .gpu-stage-a and -b)")
@pytest.mark.parametrize(("family", "fn"), list(GPU_ROWS), ids=[f for _, f in GPU_ROWS])
def test_staged_peers_pass_the_oracle_on_the_gpu(family: str, fn: str) -> None:
    """The real pinned peers through the harness (checked_peers): QuACK and Liger load and pass the oracle on
    the named rows; FlashInfer is 'unavailable' until it is staged, never an error."""
    from kda_lab.measure.run import checked_peers
    task = task_of(family)
    device = torch.device("cuda")
    seen: dict[str, dict[str, Any]] = {}
    for w in task.rows():
        if w.fn != fn or (GPU_ROWS[(family, fn)] and w.name not in GPU_ROWS[(family, fn)]):
            continue
        if not GPU_ROWS[(family, fn)] and w.primary().numel > 50_000_000:
            continue
        verdicts, _timed = checked_peers(task, w, 11, device, make_inputs(w, device, 11))
        for name, v in verdicts.items():
            seen[f"{name}:{w.name}"] = v
            assert v["verdict"] in ("ok", "wrong", "n/a", "unavailable"), v
            if v["verdict"] == "unavailable":  # FlashInfer until staged; QuACK/Liger must have loaded
                assert name == "flashinfer" and ("not installed" in v["why"] or "import" in v["why"]), v
            elif name != "flashinfer" and GPU_ROWS[(family, fn)]:
                assert v["verdict"] in ("ok", "n/a"), (w.name, name, v)
    print(json.dumps(seen, indent=1, default=str))
    assert seen
