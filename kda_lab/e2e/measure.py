"""One e2e row measured: outputs with the overlay off and on (agreement), interleaved timing, profiler shares."""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from kda_lab.e2e.kernels import shares
from kda_lab.paths import kernels_dir
from kda_lab.task.twins import load_raw

DTYPE_NAMES = {torch.float16: "float16", torch.bfloat16: "bfloat16", torch.float32: "float32"}


# ------------------------------------------------------------------------------------------------ overlay state

# Run after every overlay switch: the row's quality tier, applied the way SGLang's stages apply it (a DiT's
# fusions are mounted again so that the overlay's own entry in SGLang's table sees the request; kda_lab.e2e.tiering).
AFTER_SWITCH: list[Callable[[], None]] = []


# An A/A run (`kda e2e --aa`): the "on" arm runs with the overlay off too, so the off/on ratio is the
# measurement's own spread (the yardstick a speedup must clear); set by run_row for one row.
A_A = [False]


def overlay(on: bool) -> None:
    import kda_kernels

    if on and not A_A[0]:
        kda_kernels.install()
    else:
        kda_kernels.uninstall()
    for fn in AFTER_SWITCH:
        fn()


def promoted() -> dict[str, dict[str, Any]]:
    """{function: {family, task, source_hash, installed, call_sites}} for every promoted swap target."""
    import kda_kernels

    out = {}
    for fn, st in kda_kernels.status().items():
        if not st.get("promoted"):
            continue
        stamps = st.get("stamps") or {}
        out[fn] = {"family": st["family"], "task": stamps.get("task") or "", "arches": st.get("arches", []),
                   "source_hash": _export_hash(st["family"]), "installed": st.get("installed", False),
                   "call_sites": st.get("call_sites", [])}
    return out


def _export_hash(family: str) -> str:
    import json
    from pathlib import Path

    import kda_kernels

    base = Path(kda_kernels.__file__).parent / "diffusion" / family / "_impls"
    hashes = []
    for export in sorted(base.glob("*/KDA_EXPORT.json")):
        data = json.loads(export.read_text())
        hashes.append(f"{data.get('arch', export.parent.name)}:{data.get('candidate_id', '?')}@{data.get('source_hash', '?')}")
    return " ".join(hashes)


# ------------------------------------------------------------------------------------------------ agreement

@dataclass(frozen=True)
class Tolerance:
    atol: float
    rtol: float
    source: str

    def check(self, ref: torch.Tensor, out: torch.Tensor) -> tuple[bool, float]:
        """(within, max |out - ref|). Bit-exact tolerance (0, 0) compares bits (NaN positions included)."""
        if ref.shape != out.shape or ref.dtype != out.dtype:
            return False, math.inf
        diff = (out.double() - ref.double()).abs()
        diff = torch.nan_to_num(diff, nan=math.inf)
        max_err = float(diff.max()) if diff.numel() else 0.0
        if self.atol == 0 and self.rtol == 0:
            return bool(torch.equal(ref, out) or (ref.isnan() == out.isnan()).all() and
                        torch.equal(torch.nan_to_num(ref), torch.nan_to_num(out))), max_err
        bound = self.atol + self.rtol * ref.double().abs()
        return bool((diff <= bound).all()), max_err


MODEL_ERR_RATIO = 1.25


def model_agreement(off: torch.Tensor, on: torch.Tensor, fp32: torch.Tensor,
                    ratio: float = MODEL_ERR_RATIO) -> tuple[bool, str]:
    """The model-level criterion for outputs that no per-kernel tolerance can judge (a not bit-exact kernel
    deep inside a VAE moves the fp16 output by an ulp or more): the overlay-on output may be no further from the
    same forward in fp32 (overlay off) than ``ratio`` times SGLang's own output is. Returns (agree, description)."""
    if not (off.shape == on.shape == fp32.shape):
        return False, f"model-level: shapes differ (off {list(off.shape)}, on {list(on.shape)}, fp32 {list(fp32.shape)})"
    ref = fp32.double()
    err_off = float(torch.nan_to_num((off.double() - ref).abs(), nan=math.inf).max())
    err_on = float(torch.nan_to_num((on.double() - ref).abs(), nan=math.inf).max())
    ok = math.isfinite(err_on) and err_on <= ratio * err_off
    return ok, (f"model-level: max |on - fp32| {err_on:.3g} {'<=' if ok else '>'} {ratio:g} x max |off - fp32| "
                f"{err_off:.3g} (the forward in fp32, overlay off)")


def family_tolerance(families: set[str], dtype: torch.dtype, arch: str = "h200") -> Tolerance:
    """The loosest tolerance among these families' tasks for ``dtype`` (kda e2e passes the families whose kernels
    ran in the forward); bit-exact when none applies (a task without a ``[tolerances]`` entry for the dtype, or no
    family: both sides run the same code)."""
    name = DTYPE_NAMES.get(dtype, str(dtype))
    best = Tolerance(0.0, 0.0, "bit-exact")
    for fam in sorted(families):
        path = kernels_dir() / f"{arch}_diffusion_{fam}__multi_shape" / "task.toml"
        if not path.exists():
            continue
        tol = load_raw(path.parent).get("tolerances", {}).get(name)  # a twin's are its home's (rows_from)
        if not tol or tol.get("bitwise"):
            continue
        if tol["atol"] >= best.atol and tol["rtol"] >= best.rtol:
            best = Tolerance(float(tol["atol"]), float(tol["rtol"]), f"{path.parent.name} {name}")
    return best


# ------------------------------------------------------------------------------------------------ timing

@dataclass
class Timing:
    device_ms: dict[str, list[float]] = field(default_factory=lambda: {"off": [], "on": []})
    eager_ms: dict[str, list[float]] = field(default_factory=lambda: {"off": [], "on": []})
    method: str = ""  # "cuda-graph" | "cuda-events" | "wall (cpu)"


def quantile(values: list[float], q: float) -> float:
    v = sorted(values)
    if not v:
        return math.nan
    pos = q * (len(v) - 1)
    lo, hi = math.floor(pos), math.ceil(pos)
    return v[lo] + (v[hi] - v[lo]) * (pos - lo)


def _capture(fwd: Callable[[], Any]) -> torch.cuda.CUDAGraph | None:
    """A CUDA graph of one forward, or None when the module does not capture (host syncs, dynamic shapes)."""
    graph = torch.cuda.CUDAGraph()
    try:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            fwd()  # warm up on the capture stream (lazy inits, autotuning)
        torch.cuda.current_stream().wait_stream(side)
        torch.cuda.synchronize()
        with torch.cuda.graph(graph):
            fwd()
        torch.cuda.synchronize()
        return graph
    except Exception:  # noqa: BLE001 - any capture failure: time with events instead
        torch.cuda.synchronize()
        return None


def time_states(fwd: Callable[[], Any], trials: int, seed: int, cuda: bool, graphs_ok: bool = True) -> Timing:
    """Interleaved off/on trials (order shuffled per trial, seeded): device time per forward (CUDA-graph
    replay when both states capture and ``graphs_ok``, else CUDA events around the eager forward) and eager wall
    time. Request stages pass ``graphs_ok=False``: SGLang runs them eagerly by default."""
    t = Timing()
    rng = random.Random(seed)
    graphs: dict[str, Any] = {}
    if cuda and graphs_ok:
        for state in ("off", "on"):
            overlay(state == "on")
            graphs[state] = _capture(fwd)
        if any(g is None for g in graphs.values()):
            graphs = {}
        t.method = "cuda-graph" if graphs else "cuda-events"
    elif cuda:
        t.method = "cuda-events (eager)"
    else:
        t.method = "wall (cpu)"
    for _ in range(trials):
        order = ["off", "on"]
        rng.shuffle(order)
        for state in order:
            overlay(state == "on")
            if cuda:
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            if cuda:
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
            fwd()
            if cuda:
                end.record()
                torch.cuda.synchronize()
            t.eager_ms[state].append((time.perf_counter() - t0) * 1e3)
            if cuda and not graphs:
                t.device_ms[state].append(start.elapsed_time(end))
            if graphs:
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                graphs[state].replay()
                end.record()
                torch.cuda.synchronize()
                t.device_ms[state].append(start.elapsed_time(end))
    overlay(False)
    del graphs
    return t


# ------------------------------------------------------------------------------------------------ profile

def profile_shares(fwd: Callable[[], Any], on: bool, cuda: bool) -> tuple[dict[str, float], float]:
    """({class: share of device time}, total kernel ms) of one forward under the torch profiler."""
    times = profile_times(fwd, on, cuda)
    return shares(times), sum(times.values()) / 1e3


def profile_times(fwd: Callable[[], Any], on: bool, cuda: bool) -> dict[str, float]:
    """{kernel name: device µs} of one forward under the torch profiler (CPU: aten ops' self time)."""
    from torch.profiler import ProfilerActivity, profile

    overlay(on)
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with profile(activities=acts) as prof:
        fwd()
        if cuda:
            torch.cuda.synchronize()
    overlay(False)
    times: dict[str, float] = {}
    if cuda:
        from torch.autograd import DeviceType

        for ev in prof.events():  # device-side events only: kernels, memcpy, memset (no CPU op double count)
            if ev.device_type == DeviceType.CUDA:
                times[ev.name] = times.get(ev.name, 0.0) + float(ev.time_range.elapsed_us())
    else:  # CPU: aten ops' self time stands in for kernels
        for ev in prof.key_averages():
            if ev.key.startswith("aten::"):
                times[ev.key] = times.get(ev.key, 0.0) + float(ev.self_cpu_time_total)
    return times
