"""Layout fuzz cases for the overlay's swap targets, and the comparison against the lab's fp64 oracles.

Shared by tests/test_overlay_fuzz_gpu.py (the H200) and tests/test_overlay_fuzz.py (CPU, SGLang's Triton kernels
in the interpreter). Not a test module: the tests load it by path inside their subprocesses.

For every swap target (kda_kernels.registry.TARGETS): ``cases(fn, device)`` yields ``(name, args)`` over the
layouts SGLang accepts. The GroupNorm family (promoted) has hand-written cases: strided and broadcast views,
storage offsets, channels_last, transposed x, mixed affine dtypes, empty tensors, one-element groups, the KDA
impl's own sizes and SGLang's chunked path. Every other target derives its cases from its family's TEST_ROWS
(kda_lab/families/<family>.py): each row tagged "tiny" or "fuzz" (``FUZZ_TAGS``; "tiny" rows also run in the CPU
Triton interpreter, "fuzz" marks small rows of families the interpreter cannot run: bf16-only or CuTe DSL
kernels) as-is, plus its floating-point tensors turned into strided views and into storage-offset views. A
promoted target without cases is a failure (``missing_cases``).

``compare(fn, args, overlay, sglang)`` runs both on private copies and measures each against the oracle.
``sglang_refusal(fn, baseline, args)`` says whether SGLang raises on a case (probed on copies that keep strides);
``opcheck_target(fn, args)`` names the ``kda::`` op (and its arguments) that ``torch.library.opcheck`` checks for a
case: the mutating ``kda::<fn>_out`` for an out-kind call with ``out=``, nothing (None) for an optional-kind call
outside SGLang's predicate (the public object hands those to SGLang; the op is never entered).
"""

from __future__ import annotations

import math
import tomllib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch

REPO = Path(__file__).resolve().parents[1]
DEFAULT_TOL = {"bfloat16": (1.6e-2, 8e-3), "float16": (2e-3, 2e-3), "float32": (1e-4, 1e-4)}
Case = tuple[str, dict[str, Any]]
FUZZ_TAGS = ("tiny", "fuzz")  # TEST_ROWS rows that become layout-fuzz cases
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
        tol = tomllib.loads(toml.read_text()).get("tolerances", {})
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


def fuzz_rows(fn: str) -> list[dict[str, Any]]:
    """The raw TEST_ROWS rows of ``fn`` tagged for the fuzz (``FUZZ_TAGS``); [] without any."""
    from kda_lab.families import family_module

    rows = getattr(family_module(family_of(fn)), "TEST_ROWS", "")
    if f'fn = "{fn}"' not in rows:
        return []
    return [raw for raw in tomllib.loads(rows)["workloads"]
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


def cases(fn: str, device: str, dtypes: tuple[torch.dtype, ...], big: bool,
          as_dtype: str | None = None) -> Iterator[Case] | None:
    """Layout cases for ``fn``; None when there is no generator for it (for a TEST_ROWS family: no row of ``fn``
    tagged for the fuzz). TEST_ROWS rows keep their declared dtypes (``dtypes`` is GroupNorm's) unless
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


def sglang_refusal(fn: str, baseline: Callable[..., Any], args: dict[str, Any]) -> str | None:
    """Why SGLang's own function refuses this case (it raises), else None. Called on private copies that keep
    every stride and storage offset (``Tensor.clone()`` would hand it contiguous tensors: a strided weight that
    SGLang's ``norm_infer`` asserts against would pass the probe, and the op would then raise inside opcheck)."""
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
            tol: dict[str, tuple[float, float]]) -> dict[str, Any]:
    """One case: SGLang and the overlay against the fp64 oracle (and against each other's layout)."""
    from kda_lab.families import contract

    c = contract(family_of(fn), fn)
    x = next(v for v in args.values() if isinstance(v, torch.Tensor))
    dtype = str(x.dtype).removeprefix("torch.")
    row: dict[str, Any] = {"fn": fn, "case": name, "dtype": dtype, "tol": tol.get(dtype), "tol_source": tol.get("source")}
    try:
        with torch.no_grad():
            ref = c.oracle(_private(args))
    except Exception as e:  # noqa: BLE001 - e.g. the oracle's group view of an empty tensor
        ref = None
        row["oracle_error"] = f"{type(e).__name__}: {e}"[:200]
    for side, f in (("sglang", sglang), ("overlay", overlay)):
        r = run_side(fn, f, args)
        if "error" in r:
            row[side] = {"error": r["error"]}
        elif r["out"] is None:
            row[side] = {"none": True}  # the optional kind: SGLang declined (the caller's eager path runs)
        else:
            strides = [list(o.stride()) for o in r["out"]]
            shapes = [list(o.shape) for o in r["out"]]
            if ref is None:  # no oracle: the overlay must match SGLang's shapes and layout, and be finite
                ok = all(bool(torch.isfinite(o).all()) for o in r["out"])
                row[side] = {"max_abs_err": None, "ok": ok, "strides": strides, "shapes": shapes}
            else:
                err, ok = _error(r["out"], ref, dtype, tol)
                row[side] = {"max_abs_err": err, "ok": ok, "strides": strides, "shapes": shapes}
    return row


def verdict(row: dict[str, Any]) -> str | None:
    """Why the overlay is wrong on this row (None: right). The overlay must be right wherever SGLang accepts
    the input, and match SGLang's layout and its refusals/None answers."""
    s, o = row["sglang"], row["overlay"]
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
    if o["shapes"] != s["shapes"] or o["strides"] != s["strides"]:
        return f"overlay strides {o['strides']} != SGLang's {s['strides']}"
    return None


def sglang_wrong(row: dict[str, Any]) -> bool:
    s = row["sglang"]
    return "ok" in s and not s["ok"]
