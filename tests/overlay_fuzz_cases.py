"""Layout fuzz cases for the overlay's swap targets, and the comparison against the lab's fp64 oracles.

Shared by tests/test_overlay_fuzz_gpu.py (the H200) and tests/test_overlay_fuzz.py (CPU, SGLang's Triton kernels
in the interpreter). Not a test module: the tests load it by path inside their subprocesses.

For every swap target (kda_kernels.registry.TARGETS): ``cases(fn, device)`` yields ``(name, args)`` over the
layouts SGLang accepts. The GroupNorm family (promoted) has hand-written cases: strided and broadcast views,
storage offsets, channels_last, transposed x, mixed affine dtypes, empty tensors, one-element groups, the KDA
impl's own sizes and SGLang's chunked path. Every other target derives its cases from its family's test rows (the home task.toml)
(kda_lab/families/<family>.py): each row tagged "tiny" or "fuzz" (``FUZZ_TAGS``; "tiny" rows also run in the CPU
Triton interpreter, "fuzz" marks small rows of families the interpreter cannot run: bf16-only or CuTe DSL
kernels) as-is, plus its floating-point tensors turned into strided views and into storage-offset views, plus
for the rotary and select01 functions the hand-written layouts of ``LAYOUT_EXTRAS`` (one operand at a time:
permuted dense x, row views, transposed/chunk/broadcast modulation rows and index; those that make SGLang read
past its own copy run on CPU only). A promoted target without cases is a failure (``missing_cases``).

``compare(fn, args, overlay, sglang)`` runs both on private copies and measures each against the oracle.
``sglang_refusal(fn, baseline, args)`` says whether SGLang raises on a case (probed on copies that keep strides);
``opcheck_target(fn, args)`` names the ``kda::`` op (and its arguments) that ``torch.library.opcheck`` checks for a
case: the mutating ``kda::<fn>_out`` for an out-kind call with ``out=``, nothing (None) for an optional-kind call
outside SGLang's predicate (the public object hands those to SGLang; the op is never entered).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import torch

from kda_lab.task.twins import load_raw

REPO = Path(__file__).resolve().parents[1]
DEFAULT_TOL = {"bfloat16": (1.6e-2, 8e-3), "float16": (2e-3, 2e-3), "float32": (1e-4, 1e-4)}
Case = tuple[str, dict[str, Any]]
FUZZ_TAGS = ("tiny", "fuzz")  # test rows (task.toml) that become layout-fuzz cases
# Families whose SGLang kernel assumes aligned data: their storage-offset views keep this many bytes of alignment
# (SGLang's CuTe DSL norm_scale_shift kernels compile with assumed_align=32; its layers pass .contiguous()
# tensors, so a misaligned view is outside the contract and could fault the GPU instead of raising).
OFFSET_ALIGN_BYTES = {"norm_scale_shift": 32}


def family_of(fn: str) -> str:
    from kda_kernels.registry import target

    return target(fn).family


def tolerances(family: str, arch: str = "h200") -> dict[str, tuple[float, float]]:
    """The family's task tolerances: the task folder of this arch first (the fuzz runs on that GPU), then any
    other arch's task of the family, else the defaults."""
    tomls = sorted((REPO / "kernels").glob(f"*_diffusion_{family}__*/task.toml"),
                   key=lambda p: (not p.parent.name.startswith(f"{arch}_"), p.parent.name))
    for toml in tomls:
        tol = load_raw(toml.parent).get("tolerances", {})  # a twin's are its home's (rows_from)
        if tol:
            out = {k: (float(v["atol"]), float(v["rtol"])) for k, v in tol.items()}
            out["source"] = str(toml.relative_to(REPO))  # type: ignore[assignment]
            return out
    return {**DEFAULT_TOL, "source": "default (no task folder for this family): review before calling it a bug"}


# ------------------------------------------------------------------------------------------ GroupNorm

def _gns(device: str, dtypes: tuple[torch.dtype, ...], big: bool) -> Iterator[Case]:
    g = torch.Generator(device=device).manual_seed(0)

    def t(*shape: int, dtype: torch.dtype) -> torch.Tensor:
        return torch.randn(*shape, generator=g, device=device, dtype=torch.float32).to(dtype)

    C, G = 32, 8
    for dt in dtypes:
        n = str(dt).removeprefix("torch.")
        w, b = (t(C, dtype=torch.float32).abs() + 0.5).to(dt), t(C, dtype=dt)

        def case(name: str, x: torch.Tensor, weight: torch.Tensor = w, bias: torch.Tensor = b, groups: int = G,
                 eps: float = 1e-5, _n: str = n) -> Case:
            return f"{_n}/{name}", {"x": x, "weight": weight, "bias": bias, "num_groups": groups, "eps": eps}

        yield case("contiguous_4d", t(2, C, 5, 7, dtype=dt))
        yield case("2d", t(3, C, dtype=dt))
        yield case("3d_tail", t(2, C, 37, dtype=dt), eps=1e-6)
        yield case("5d", t(1, C, 3, 4, 5, dtype=dt))
        yield case("one_element_groups", t(4, C, dtype=dt), groups=C)
        yield case("one_group", t(2, C, 3, 3, dtype=dt), groups=1)
        yield case("channels_last", t(2, C, 5, 7, dtype=dt).to(memory_format=torch.channels_last))
        yield case("channels_last_3d", t(1, C, 3, 4, 5, dtype=dt).to(memory_format=torch.channels_last_3d))
        yield case("x_strided_view", t(2, C, 5, 14, dtype=dt)[..., ::2])
        yield case("x_transposed", t(2, 7, 5, C, dtype=dt).permute(0, 3, 2, 1))
        yield case("x_storage_offset", t(2 * C * 35 + 3, dtype=dt)[3:].view(2, C, 5, 7))
        yield case("x_broadcast_batch", t(1, C, 5, 7, dtype=dt).expand(3, C, 5, 7))
        x = t(2, C, 5, 7, dtype=dt)
        yield case("affine_strided", x, t(2 * C, dtype=dt)[::2], t(2 * C, dtype=dt)[::2])
        yield case("affine_broadcast", x, t(1, dtype=dt).expand(C), t(1, dtype=dt).expand(C))
        yield case("affine_storage_offset", x, t(C + 5, dtype=dt)[5:], t(C + 3, dtype=dt)[3:])
        yield case("affine_weight_only_strided", x, t(3 * C, dtype=dt)[::3], b)
        if dt != torch.float32:
            yield case("affine_fp32", x, w.float(), b.float())
        yield case("empty_batch", t(0, C, 4, 4, dtype=dt))
        yield case("empty_spatial", t(2, C, 0, dtype=dt))
        if big:  # GPU: the KDA impl's sizes (groups > 16 KB) and SGLang's chunked path (groups >= 2^18)
            xk = t(1, 64, 64, 64, dtype=dt)
            wk, bk = (t(64, dtype=torch.float32).abs() + 0.5).to(dt), t(64, dtype=dt)  # the affine has x's 64 channels
            yield case("kda_size", xk, wk, bk, groups=8)
            yield case("kda_size_affine_strided", xk, t(128, dtype=dt)[::2], t(128, dtype=dt)[::2], groups=8)
            yield case("kda_size_channels_last", xk.to(memory_format=torch.channels_last), wk, bk, groups=8)
            xc = t(1, 4, 256, 1024, dtype=dt)
            yield case("chunked", xc, t(4, dtype=dt), t(4, dtype=dt), groups=1)
            yield case("chunked_affine_strided", xc, t(8, dtype=dt)[::2], t(8, dtype=dt)[::2], groups=1)


def _apply(cases: Iterator[Case]) -> Iterator[Case]:
    """apply_group_norm_silu over the same tensors: an affine nn.GroupNorm holding exactly those views."""
    from kda_lab.families.group_norm_silu import prepare_apply

    for name, a in cases:
        if a["x"].numel() == 0 and a["x"].shape[0] == 0:
            continue  # nn.GroupNorm rejects an empty batch before SGLang is reached; nothing to compare
        yield name, prepare_apply(dict(a))


# -------------------------------------------------------------------------------------- everything else

def _strided(t: torch.Tensor) -> torch.Tensor:
    """The same values as a view with stride 2 on the last dim (storage twice as long)."""
    if t.dim() == 0 or t.numel() == 0:
        return t
    wide = torch.empty(*t.shape[:-1], 2 * t.shape[-1], dtype=t.dtype, device=t.device)
    view = wide[..., ::2]
    view.copy_(t)
    return view


def _offset(t: torch.Tensor, align_bytes: int = 0) -> torch.Tensor:
    """The same values in a contiguous view 7 elements into its storage (``align_bytes`` into it, when the
    family's kernel needs aligned data)."""
    k = max(1, align_bytes // t.element_size()) if align_bytes else 7
    flat = torch.empty(t.numel() + k, dtype=t.dtype, device=t.device)
    view = flat[k:].view(t.shape)
    view.copy_(t)
    return view


# ------------------------------------------------ hand-written layouts on top of a row (the derived cases miss them)

def _dense_permuted(t: torch.Tensor, d0: int, d1: int) -> torch.Tensor:
    """The same values, dense in memory, with dims d0 and d1 swapped in the storage order (not contiguous)."""
    return t.transpose(d0, d1).contiguous().transpose(d0, d1)


def _rows_view(t: torch.Tensor) -> torch.Tensor:
    """The same values as a view of the first columns of a wider tensor: last stride 1, rows padded (not dense)."""
    wide = torch.empty(*t.shape[:-1], t.shape[-1] + 3, dtype=t.dtype, device=t.device)
    view = wide[..., : t.shape[-1]]
    view.copy_(t)
    return view


def _chunk_view(t: torch.Tensor) -> torch.Tensor:
    """A [B, C] tensor as the middle chunk of a [B, 3C] one (``mod.chunk(3, dim=-1)``, as Qwen-Image's _modulate
    slices its modulation before SGLang's layer makes the chunks contiguous): stride (3C, 1)."""
    wide = torch.empty(t.shape[0], 3 * t.shape[1], dtype=t.dtype, device=t.device)
    view = wide[:, t.shape[1]: 2 * t.shape[1]]
    view.copy_(t)
    return view


# A case here is (tag, args, reads_past_its_copy). READS_PAST_ITS_COPY: SGLang 0.5.23's select01 wrappers pass
# ``t.contiguous()`` to the kernel with the strides of ``t`` itself; where those strides reach further than the
# dense copy (a [B, 3C] chunk view, a last-dim stride 2, a [1, C] row broadcast over B > 1) its kernel reads past
# the end of the copy. Those cases run on CPU only (the interpreter reads neighbouring heap memory: wrong values);
# on a GPU such a read is garbage or an illegal-address fault that would end the whole fuzz process.
READS_PAST_ITS_COPY = True
LayoutExtra = tuple[str, dict[str, Any], bool]


def _rotary_extras(base: dict[str, Any]) -> Iterator[LayoutExtra]:
    # x dense but its last dim not unit-stride: SGLang's x.view succeeds, its kernel reads x[2i], x[2i+1] as if
    # the stride were 1 (and writes its empty_like(x) output, which keeps that layout, the same way)
    yield "x_last_dim_permuted", {**base, "x": _dense_permuted(base["x"], -1, -2)}, False
    # cos/sin transposed (SGLang makes them contiguous itself: right)
    yield "cos_sin_transposed", {**base, "cos": _dense_permuted(base["cos"], 0, 1),
                                 "sin": _dense_permuted(base["sin"], 0, 1)}, False


def _ltx2_extras(base: dict[str, Any]) -> Iterator[LayoutExtra]:
    # SGLang's kernel indexes x and its empty_like(x) output as contiguous [B,S,H*D], whatever x's strides
    yield "x_rows_view", {**base, "x": _rows_view(base["x"])}, False
    if base["x"].shape[0] > 1 and base["x"].shape[1] > 1:
        yield "x_batch_permuted", {**base, "x": _dense_permuted(base["x"], 0, 1)}, False
    # cos/sin with a non-unit last stride, x contiguous (the derived /strided case strides x as well)
    yield "cos_sin_last_strided", {**base, "cos": _strided(base["cos"]), "sin": _strided(base["sin"])}, False


_MODS = ("scale0", "shift0", "gate0", "scale1", "shift1", "gate1")


def _select01_extras(base: dict[str, Any]) -> Iterator[LayoutExtra]:
    b = base["x"].shape[0]
    mods = {k: base[k] for k in _MODS}
    yield "mods_transposed", {**base, **{k: _dense_permuted(v, 0, 1) for k, v in mods.items()}}, False
    # the same with scale1 in another float dtype than scale0: outside the promoted impl's contract (one dtype per
    # pair), so the impl hands the call to SGLang's kernel, which reads the transposed views wrong
    other = torch.float16 if base["scale1"].dtype == torch.float32 else torch.float32
    yield "mods_transposed_pair_dtypes", {**base, **{k: _dense_permuted(v, 0, 1) for k, v in mods.items()},
                                          "scale1": _dense_permuted(base["scale1"].to(other), 0, 1)}, False
    yield "index_transposed", {**base, "index": _dense_permuted(base["index"], 0, 1)}, False
    yield "mods_chunk_views", {**base, **{k: _chunk_view(v) for k, v in mods.items()}}, b > 1
    yield "mods_last_strided", {**base, **{k: _strided(v) for k, v in mods.items()}}, READS_PAST_ITS_COPY
    yield "index_strided", {**base, "index": _strided(base["index"])}, READS_PAST_ITS_COPY
    if b > 1:  # [1, C] rows / a [1, L] index broadcast over the batch (the oracle's broadcast, SGLang's reads)
        yield "mods_batch_broadcast", {**base, **{k: v[:1].clone() for k, v in mods.items()}}, READS_PAST_ITS_COPY
        yield "mods_batch_expanded", {**base, **{k: v[:1].expand(b, -1) for k, v in mods.items()}}, False
        yield "index_batch_broadcast", {**base, "index": base["index"][:1].clone()}, READS_PAST_ITS_COPY


LAYOUT_EXTRAS: dict[str, Callable[[dict[str, Any]], Iterator[LayoutExtra]]] = {
    "apply_rotary_embedding": _rotary_extras,
    "apply_ltx2_split_rotary_emb": _ltx2_extras,
    "fuse_layernorm_scale_shift_gate_select01_kernel": _select01_extras,
    "fuse_residual_layernorm_scale_shift_gate_select01_kernel": _select01_extras,
}


def fuzz_rows(fn: str) -> list[dict[str, Any]]:
    """The test rows of ``fn`` (its family's home task.toml) tagged for the fuzz (``FUZZ_TAGS``); [] without any."""
    from kda_lab.families.rows import family_test_rows

    return [raw for raw in family_test_rows(family_of(fn))
            if raw["fn"] == fn and any(t in FUZZ_TAGS for t in raw.get("tags", ()))]


def _from_test_rows(fn: str, device: str, rows: list[dict[str, Any]], as_dtype: str | None) -> Iterator[Case]:
    from functools import partial

    from kda_lab.measure.inputs import make_inputs
    from kda_lab.task.workloads import parse_workload

    offset = partial(_offset, align_bytes=OFFSET_ALIGN_BYTES.get(family_of(fn), 0))
    for raw in rows:
        w = parse_workload(raw)
        if as_dtype is not None:
            w = w.with_dtype(as_dtype)
        base = make_inputs(w, device, seed=1)
        yield f"{w.name}/as_row", base
        for tag, view in (("strided", _strided), ("offset", offset)):
            yield f"{w.name}/{tag}", {k: view(v) if isinstance(v, torch.Tensor) and v.is_floating_point() else v
                                      for k, v in base.items()}
        extra = LAYOUT_EXTRAS.get(fn)
        if extra is not None:
            for tag, args, past_copy in extra(base):
                if past_copy and device != "cpu":
                    continue  # see READS_PAST_ITS_COPY
                yield f"{w.name}/{tag}", args


def cases(fn: str, device: str, dtypes: tuple[torch.dtype, ...], big: bool,
          as_dtype: str | None = None) -> Iterator[Case] | None:
    """Layout cases for ``fn``; None when there is no generator for it (for a family with test rows: no row of ``fn``
    tagged for the fuzz). Test rows keep their declared dtypes (``dtypes`` is GroupNorm's) unless
    ``as_dtype`` names one for every floating-point tensor (CPU interpreter runs: "float32"/"float16")."""
    if fn == "triton_group_norm_silu":
        return _gns(device, dtypes, big)
    if fn == "apply_group_norm_silu":
        return _apply(_gns(device, dtypes, big))
    try:
        rows = fuzz_rows(fn)
    except Exception:  # noqa: BLE001 - a family without an oracle module yet
        return None
    if not rows:
        return None
    return _from_test_rows(fn, device, rows, as_dtype)


# SGLang 0.5.23 kernels that fault the GPU (a sticky CUDA error that ends the process) instead of raising, on inputs
# their wrapper accepts: the fuzz does not call them there. fused_inplace_qknorm_rope (qknorm_rope.cuh, 16-byte
# accesses) on an operand that is not 16-byte aligned (H200, 2026-11-27: `CUDA error: misaligned address` on the
# `offset` variants); the overlay runs such calls on aligned copies (kda_kernels.contracts._canonical_qknorm).
FAULTS_ON_MISALIGNED = {"fused_inplace_qknorm_rope": 16}


def sglang_faults(fn: str, args: dict[str, Any]) -> str | None:
    """Why calling SGLang's own function on this case would fault the GPU, else None (CPU cases never fault)."""
    align = FAULTS_ON_MISALIGNED.get(fn)
    if align is None:
        return None
    bad = [k for k, v in args.items() if isinstance(v, torch.Tensor) and v.is_cuda and v.data_ptr() % align]
    return f"faults (misaligned address): {', '.join(bad)} not {align}-byte aligned" if bad else None


def sglang_refusal(fn: str, baseline: Callable[..., Any], args: dict[str, Any]) -> str | None:
    """Why SGLang's own function refuses this case (it raises), else None. Called on private copies that keep
    every stride and storage offset (``Tensor.clone()`` would hand it contiguous tensors: a strided weight that
    SGLang's ``norm_infer`` asserts against would pass the probe, and the op would then raise inside opcheck).
    A case SGLang would fault on (``sglang_faults``) is not probed: it does not raise, so it is not refused."""
    if sglang_faults(fn, args) is not None:
        return None
    try:
        with torch.no_grad():
            baseline(**_private(args))
    except Exception as e:  # noqa: BLE001 - an input SGLang itself refuses is not the op's to accept
        return f"{type(e).__name__}: {e}"[:200]
    return None


def opcheck_target(fn: str, args: dict[str, Any]) -> tuple[Any, dict[str, Any]] | None:
    """The ``kda::`` op overload that ``torch.library.opcheck`` checks for this case, and its arguments:
    ``kda::<fn>``, or for an out-kind call with a tensor ``out=`` the mutating ``kda::<fn>_out`` (the plain op's
    schema has no ``out``: ``kda_kernels.contracts``). None for an optional-kind call outside SGLang's predicate
    (``kda_kernels.contracts.accepts_<fn>``): the public object returns SGLang's ``None`` there without entering
    the op, whose body raises on a ``None``. Call after ``kda_kernels.install()`` (which registers the ops)."""
    from kda_kernels.contracts import CONTRACTS
    from kda_kernels.registry import target

    t, c = target(fn), CONTRACTS[fn]
    if t.kind == "optional" and c.accepts is not None and not c.accepts(**args):
        return None
    if t.kind == "out":
        if isinstance(args.get("out"), torch.Tensor):
            defaults = {k: p.default for k, p in c.signature.parameters.items() if p.default is not p.empty}
            names = tuple(c.out_signature.parameters)  # type: ignore[union-attr]
            return getattr(torch.ops.kda, f"{fn}_out").default, {n: args.get(n, defaults.get(n)) for n in names}
        return getattr(torch.ops.kda, fn).default, {k: v for k, v in args.items() if k != "out"}
    return getattr(torch.ops.kda, fn).default, args


# -------------------------------------------------------------------------------------------- comparing

def _private(args: dict[str, Any]) -> dict[str, Any]:
    from kda_lab.measure.inputs import clone_args

    return clone_args(args) if "norm" not in args else dict(args)


# What every case gets where the full opcheck of each op's first case is enough for the rest (the CPU suite: the
# Triton interpreter makes AOT dispatch tracing the cost of the whole test). test_faketensor is the layout check:
# the fake's output metadata against the real call's, per case.
LAYOUT_OPCHECK = ("test_schema", "test_faketensor")


def opcheck_cases(fn: str, baseline: Callable[..., Any], gen: Iterable[Case],
                  rest: tuple[str, ...] | None = None
                  ) -> tuple[dict[str, list[str]], dict[str, str], dict[str, str]]:
    """``torch.library.opcheck`` of ``fn``'s ``kda::`` op over the cases of ``gen``: ({op: [case names checked]},
    {case: failure}, {case: why SGLang refuses it}). Grad disabled, as SGLang's diffusion models call these
    (inference): with grad enabled the op, like SGLang's function, takes another valid path than under AOT
    tracing, which opcheck reads as a mismatch. An input SGLang itself refuses is not the op's to accept.
    ``rest``: opcheck's test_utils for every case after each op's first (None: all of them everywhere)."""
    checked: dict[str, list[str]] = {}
    fails: dict[str, str] = {}
    refused: dict[str, str] = {}
    for name, args in gen:
        with torch.no_grad():
            why = sglang_refusal(fn, baseline, args)  # probed on copies that keep strides/offsets
            target = None if why is not None else opcheck_target(fn, args)
            if target is None:
                refused[f"{fn}/{name}"] = why or "outside SGLang's predicate (it returns None; no op call)"
                continue
            op, op_args = target
            utils = {} if rest is None or str(op) not in checked else {"test_utils": rest}
            try:
                torch.library.opcheck(op, (), op_args, **utils)
            except Exception as e:  # noqa: BLE001 - every failure is reported, not the first
                fails[f"{fn}/{name}"] = f"{type(e).__name__}: {e}"[:700]
            checked.setdefault(str(op), []).append(name)
    return checked, fails, refused


def _error(out: tuple[torch.Tensor, ...], ref: tuple[torch.Tensor, ...], dtype: str,
           tol: dict[str, tuple[float, float]]) -> tuple[float, bool]:
    atol, rtol = tol.get(dtype, DEFAULT_TOL["float32"])
    worst, ok = 0.0, True
    for o, r in zip(out, ref, strict=True):
        if o.shape != r.shape:
            return math.inf, False
        if o.numel() == 0:
            continue
        d = (o.double() - r.double()).abs()
        worst = max(worst, float(d.nan_to_num(math.inf).max()))
        ok = ok and bool((d <= atol + rtol * r.double().abs()).all())
    return worst, ok


def run_side(fn: str, f: Callable[..., Any], args: dict[str, Any]) -> dict[str, Any]:
    """Call ``f`` on private copies of ``args``; outputs as the family contract defines them, or the error."""
    from kda_lab.families import contract

    c = contract(family_of(fn), fn)
    a = _private(args)
    try:
        with torch.no_grad():
            res = f(**a)
        outs = c.outputs(res, a) if res is not None or c.mutates else None
    except Exception as e:  # noqa: BLE001 - SGLang refusing an input is data, not a test error
        return {"error": f"{type(e).__name__}: {e}"[:300]}
    return {"out": outs}


def compare(fn: str, name: str, args: dict[str, Any], overlay: Callable[..., Any], sglang: Callable[..., Any],
            tol: dict[str, tuple[float, float]], reuse: dict[Any, Any] | None = None) -> dict[str, Any]:
    """One case: SGLang and the overlay against the fp64 oracle (and against each other's layout). ``reuse``: a
    dict kept across calls on the same cases (same ``fn``, ``name`` and inputs, e.g. one overlay per forced
    arch): the oracle's answer and SGLang's side are computed on a case's first call and taken from it after,
    so only the overlay runs again (SGLang's function and the oracle do not depend on the overlay's arch)."""
    from kda_lab.families import contract

    c = contract(family_of(fn), fn)
    x = next(v for v in args.values() if isinstance(v, torch.Tensor))
    dtype = str(x.dtype).removeprefix("torch.")
    row: dict[str, Any] = {"fn": fn, "case": name, "dtype": dtype, "tol": tol.get(dtype), "tol_source": tol.get("source")}
    key = (fn, name, dtype)
    if reuse is not None and key in reuse:
        ref, oracle_error, sglang_side = reuse[key]
    else:
        oracle_error, sglang_side = None, None
        try:
            with torch.no_grad():
                ref = c.oracle(_private(args))
        except Exception as e:  # noqa: BLE001 - e.g. the oracle's group view of an empty tensor
            ref = None
            oracle_error = f"{type(e).__name__}: {e}"[:200]
    if oracle_error is not None:
        row["oracle_error"] = oracle_error
    faults = sglang_faults(fn, args)
    outs: dict[str, Any] = {}
    for side, f in (("sglang", sglang), ("overlay", overlay)):
        if side == "sglang" and faults is not None:
            row[side] = {"error": f"not run: {faults}", "faults": True}
            continue
        if side == "sglang" and sglang_side is not None:
            r = sglang_side
        else:
            r = run_side(fn, f, args)
            if side == "sglang":
                sglang_side = r
        if "error" in r:
            row[side] = {"error": r["error"]}
        elif r["out"] is None:
            row[side] = {"none": True}  # the optional kind: SGLang declined (the caller's eager path runs)
        else:
            outs[side] = r["out"]
            strides = [list(o.stride()) for o in r["out"]]
            shapes = [list(o.shape) for o in r["out"]]
            if ref is None:  # no oracle: the overlay must match SGLang's shapes and layout, and be finite
                ok = all(bool(torch.isfinite(o).all()) for o in r["out"])
                row[side] = {"max_abs_err": None, "ok": ok, "strides": strides, "shapes": shapes}
            else:
                err, ok = _error(r["out"], ref, dtype, tol)
                row[side] = {"max_abs_err": err, "ok": ok, "strides": strides, "shapes": shapes}
    if "sglang" in outs and "overlay" in outs:  # the exact tier's promise: the overlay's bits are SGLang's
        a, b = outs["sglang"], outs["overlay"]
        row["bit_equal"] = len(a) == len(b) and all(bits_equal(x, y) for x, y in zip(a, b, strict=True))
    if reuse is not None:
        reuse[key] = ref, oracle_error, sglang_side
    return row


def bits_equal(x: torch.Tensor, y: torch.Tensor) -> bool:
    """Same dtype, shape and bytes (NaN payloads and signed zeros included)."""
    if x.dtype != y.dtype or x.shape != y.shape:
        return False
    return torch.equal(x.contiguous().view(-1).view(torch.uint8), y.contiguous().view(-1).view(torch.uint8))


def exact_tier_verdict(row: dict[str, Any]) -> str | None:
    """Why an ``exact``-tier call through the overlay is not SGLang's, bit for bit (None: it is). Where SGLang
    refuses, returns None or computes a wrong answer, the overlay keeps its own rules (verdict)."""
    s = row["sglang"]
    if s.get("faults") or "error" in s or s.get("none") or not s.get("ok", True):
        return verdict(row)
    if row.get("bit_equal") is not True:
        return f"exact tier: the overlay's output differs from SGLang's (bit_equal={row.get('bit_equal')})"
    return None


def verdict(row: dict[str, Any]) -> str | None:
    """Why the overlay is wrong on this row (None: right). The overlay must be right wherever SGLang accepts
    the input, and match SGLang's layout and its refusals/None answers."""
    s, o = row["sglang"], row["overlay"]
    if s.get("faults"):  # SGLang accepts the input and faults: the overlay must be right there
        return None if o.get("ok") else f"SGLang faults here and the overlay is not right: {o}"
    if "error" in s:
        return None if "error" in o or o.get("ok") else f"SGLang refused but the overlay is wrong: {o}"
    if s.get("none"):
        return None if o.get("none") or o.get("ok") else f"SGLang returned None, the overlay {o}"
    if "error" in o:
        return f"overlay raised where SGLang did not: {o['error']}"
    if o.get("none"):
        return "overlay returned None where SGLang returned a tensor"
    if not o["ok"]:
        return f"overlay max abs error {o['max_abs_err']} over tolerance"
    # SGLang's layout is the contract where its values are right; where they are wrong the overlay computed on
    # canonical inputs (kda_kernels.contracts: e.g. a contiguous copy of a permuted x), and its layout is what
    # its fake describes (the opcheck tests check that), not the layout of SGLang's wrong answer
    if o["shapes"] != s["shapes"] or (o["strides"] != s["strides"] and s.get("ok", True)):
        return f"overlay strides {o['strides']} != SGLang's {s['strides']}"
    return None


def sglang_wrong(row: dict[str, Any]) -> bool:
    s = row["sglang"]
    return "ok" in s and not s["ok"]
