"""Nsight Compute CSV exports -> per-kernel metrics -> a markdown digest (pure Python, no GPU needed).

Two export layouts are understood:

- ``ncu --import R.ncu-rep --csv --page raw`` (what ``kda profile`` uses): one row per kernel, one column per
  metric, a second row with the units;
- ``ncu --csv --page details`` (and ``--metrics ...`` runs): one row per (kernel, section, metric) with
  ``Section Name``, ``Metric Name``, ``Metric Unit``, ``Metric Value`` columns. Human section names
  ("Duration", "DRAM Throughput", ...) are mapped to the raw metric names below; the
  ``Command line profiler metrics`` section already carries raw names.

Anything ncu prints around the table (``==PROF==`` lines, the profiled program's own stdout) is skipped.
Values are normalized: times to ns, sizes to bytes, rates to bytes/s; ``n/a`` means not collected.

Metric names (Nsight Compute documentation, "Metrics Reference" / section files):

=====================================================  ==========================================
gpu__time_duration.sum                                 kernel duration
dram__throughput.avg.pct_of_peak_sustained_elapsed     DRAM throughput, % of peak
dram__bytes_read.sum, dram__bytes_write.sum            DRAM bytes (-> TB/s with the duration)
sm__warps_active.avg.pct_of_peak_sustained_active      achieved occupancy
sm__maximum_warps_per_active_cycle_pct                 theoretical occupancy
launch__registers_per_thread                           registers
l1tex__t_bytes_pipe_lsu_mem_local_op_{ld,st}.sum       local-memory (spill) traffic, bytes
smsp__pcsamp_warps_issue_stalled_<reason>              stall reasons, PC samples
smsp__average_warps_issue_stalled_<reason>_per_issue_active.ratio   stall reasons, cycles per issue
smsp__average_warp_latency_issue_stalled_<reason>      stall reasons (older layout)
=====================================================  ==========================================
"""

from __future__ import annotations

import csv
import io
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field

DURATION = "gpu__time_duration.sum"
DRAM_PCT = "dram__throughput.avg.pct_of_peak_sustained_elapsed"
# ncu 2025.3 on the H200 box exports DRAM % of peak as gpu__dram_throughput (dram__throughput is absent).
METRIC_ALIASES: dict[str, tuple[str, ...]] = {DRAM_PCT: ("gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed",)}
DRAM_READ = "dram__bytes_read.sum"
DRAM_WRITE = "dram__bytes_write.sum"
DRAM_BYTES = "dram__bytes.sum"
DRAM_RATE = "dram__bytes.sum.per_second"
ACHIEVED_OCC = "sm__warps_active.avg.pct_of_peak_sustained_active"
THEORETICAL_OCC = "sm__maximum_warps_per_active_cycle_pct"
REGISTERS = "launch__registers_per_thread"
GRID_SIZE = "launch__grid_size"
BLOCK_SIZE = "launch__block_size"
WAVES = "launch__waves_per_multiprocessor"
SM_PCT = "sm__throughput.avg.pct_of_peak_sustained_elapsed"
MEM_PCT = "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed"
SM_COUNT = "device__attribute_multiprocessor_count"
LOCAL_BYTES = ("l1tex__t_bytes_pipe_lsu_mem_local_op_ld.sum", "l1tex__t_bytes_pipe_lsu_mem_local_op_st.sum")
LOCAL_SECTORS = ("l1tex__t_sectors_pipe_lsu_mem_local_op_ld.sum", "l1tex__t_sectors_pipe_lsu_mem_local_op_st.sum")
LOCAL_INSTS = ("smsp__sass_inst_executed_op_local_ld.sum", "smsp__sass_inst_executed_op_local_st.sum")

# Stall-reason metric families, in order of preference.
STALL_FAMILIES: tuple[tuple[str, re.Pattern[str], str], ...] = (
    ("pc samples", re.compile(r"^smsp__pcsamp_warps_issue_stalled_(?P<r>[a-z0-9_]+?)$"), "samples"),
    ("cycles per issued instruction",
     re.compile(r"^smsp__average_warps_issue_stalled_(?P<r>[a-z0-9_]+)_per_issue_active\.ratio$"), "cycles/issue"),
    ("warp latency", re.compile(r"^smsp__average_warp_latency_issue_stalled_(?P<r>[a-z0-9_]+?)(?:\.(?:ratio|pct|sum))?$"),
     "cycles"),
)
NOT_STALLS = {"selected"}  # "selected" is the issuing state, not a stall
STALL_LEGEND = {
    "pc samples": "share of PC samples (smsp__pcsamp_warps_issue_stalled_*)",
    "cycles per issued instruction": "warp cycles per issued instruction "
                                     "(smsp__average_warps_issue_stalled_*_per_issue_active.ratio)",
    "warp latency": "average warp latency in cycles (smsp__average_warp_latency_issue_stalled_*)",
}

# `--page details`: (section, human metric name) -> raw metric name.
DETAILS_NAMES: dict[tuple[str, str], str] = {
    ("GPU Speed Of Light Throughput", "Duration"): DURATION,
    ("GPU Speed Of Light Throughput", "DRAM Throughput"): DRAM_PCT,
    ("GPU Speed Of Light Throughput", "Memory Throughput"): MEM_PCT,
    ("GPU Speed Of Light Throughput", "Compute (SM) Throughput"): SM_PCT,
    ("Memory Workload Analysis", "Memory Throughput"): DRAM_RATE,
    ("Launch Statistics", "Registers Per Thread"): REGISTERS,
    ("Launch Statistics", "Grid Size"): GRID_SIZE,
    ("Launch Statistics", "Block Size"): BLOCK_SIZE,
    ("Launch Statistics", "Waves Per SM"): WAVES,
    ("Occupancy", "Achieved Occupancy"): ACHIEVED_OCC,
    ("Occupancy", "Theoretical Occupancy"): THEORETICAL_OCC,
}
FIXED_COLUMNS = ("ID", "Process ID", "Process Name", "Host Name", "Kernel Name", "Context", "Stream",
                 "Block Size", "Grid Size", "Device", "CC")

_TIME_NS = {"nsecond": 1.0, "ns": 1.0, "usecond": 1e3, "us": 1e3, "msecond": 1e6, "ms": 1e6, "second": 1e9, "s": 1e9}
_SIZE_PREFIX = {"": 1.0, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "Ki": 1024.0, "Mi": 1024.0**2, "Gi": 1024.0**3}


class NcuParseError(ValueError):
    """Text that is not an Nsight Compute CSV export."""


def to_base(value: float, unit: str) -> float:
    """``value`` in ``unit`` -> ns for times, bytes for sizes, bytes/s for byte rates; other units unchanged."""
    u = unit.strip()
    if u in _TIME_NS:
        return value * _TIME_NS[u]
    m = re.fullmatch(r"(K|M|G|T|Ki|Mi|Gi)?(byte|B)(/(second|s))?", u)
    if m:
        return value * _SIZE_PREFIX[m.group(1) or ""]
    return value


def parse_number(text: str) -> float | None:
    """ncu prints ``1,234,567.5`` (grouped) or ``n/a``; returns None for anything not a number."""
    t = text.strip().replace(",", "")
    if not t or t.lower() in ("n/a", "nan", "-"):
        return None
    try:
        v = float(t)
    except ValueError:
        return None
    return None if math.isnan(v) else v


@dataclass
class Kernel:
    """One profiled kernel launch with its metrics in base units (ns, bytes, bytes/s, %)."""

    id: int
    name: str
    block: str = ""
    grid: str = ""
    metrics: dict[str, float] = field(default_factory=dict)

    def get(self, name: str) -> float | None:
        value = self.metrics.get(name)
        if value is None:  # the same quantity under another name in some ncu versions
            for alias in METRIC_ALIASES.get(name, ()):
                value = self.metrics.get(alias)
                if value is not None:
                    break
        return value

    @property
    def short_name(self) -> str:
        """Demangled name without return type and argument list (``void ns::k<T>(int*)`` -> ``ns::k<T>``)."""
        n = self.name.strip()
        if n.startswith("void "):
            n = n[5:]
        depth = 0
        for i, ch in enumerate(n):
            if ch == "<":
                depth += 1
            elif ch == ">":
                depth -= 1
            elif ch == "(" and depth == 0:
                return n[:i]
        return n

    @property
    def duration_us(self) -> float | None:
        d = self.get(DURATION)
        return None if d is None else d / 1e3

    @property
    def dram_bytes(self) -> float | None:
        r, w = self.get(DRAM_READ), self.get(DRAM_WRITE)
        if r is not None or w is not None:
            return (r or 0.0) + (w or 0.0)
        return self.get(DRAM_BYTES)

    @property
    def dram_tbps(self) -> float | None:
        b, d = self.dram_bytes, self.get(DURATION)
        if b is not None and d:
            return b / (d * 1e-9) / 1e12
        rate = self.get(DRAM_RATE)
        return None if rate is None else rate / 1e12

    @property
    def registers(self) -> int | None:
        r = self.get(REGISTERS)
        return None if r is None else int(round(r))

    @property
    def grid_blocks(self) -> int | None:
        g = self.get(GRID_SIZE)
        if g is not None:
            return int(g)
        dims = [int(x) for x in re.findall(r"\d+", self.grid)]
        return math.prod(dims) if dims else None

    @property
    def local_memory(self) -> tuple[str, float] | None:
        """(kind, amount) of local-memory traffic: ('bytes', n) or ('instructions', n); None if not collected."""
        vals = [self.get(m) for m in LOCAL_BYTES]
        if any(v is not None for v in vals):
            return "bytes", sum(v or 0.0 for v in vals)
        vals = [self.get(m) for m in LOCAL_SECTORS]
        if any(v is not None for v in vals):
            return "bytes", 32.0 * sum(v or 0.0 for v in vals)
        vals = [self.get(m) for m in LOCAL_INSTS]
        if any(v is not None for v in vals):
            return "instructions", sum(v or 0.0 for v in vals)
        return None

    def stalls(self) -> tuple[str, str, list[tuple[str, float, float]]]:
        """(family, unit, [(reason, value, share of the family's total)] sorted by value, largest first)."""
        for family, pattern, unit in STALL_FAMILIES:
            found: dict[str, float] = {}
            for name, value in self.metrics.items():
                m = pattern.match(name)
                if m and not name.endswith("_not_issued"):
                    found[m.group("r")] = value
            if found:
                total = sum(found.values())
                stalls = [(r, v, v / total if total > 0 else 0.0) for r, v in found.items() if r not in NOT_STALLS]
                stalls.sort(key=lambda t: (-t[1], t[0]))
                return family, unit, stalls
        return "", "", []

    def top_stalls(self, n: int = 3) -> list[tuple[str, float, float]]:
        return [s for s in self.stalls()[2] if s[1] > 0][:n]


# ------------------------------------------------------------------------------------------------ parsing

def _csv_rows(text: str) -> list[list[str]]:
    lines = [ln for ln in text.splitlines() if ln.strip() and not ln.startswith("==")]
    start = next((i for i, ln in enumerate(lines) if ln.startswith('"ID"') or ln.startswith("ID,")), None)
    if start is None:
        raise NcuParseError("no ncu CSV header (a line starting with \"ID\") found")
    return [row for row in csv.reader(io.StringIO("\n".join(lines[start:]))) if row]


def parse_csv(text: str) -> list[Kernel]:
    """Kernels of an ncu ``--csv`` export (raw or details layout), in launch order."""
    rows = _csv_rows(text)
    header = rows[0]
    if "Metric Name" in header and "Metric Value" in header:
        return _parse_long(header, rows[1:])
    return _parse_wide(header, rows[1:])


def _parse_wide(header: list[str], rows: list[list[str]]) -> list[Kernel]:
    units = [""] * len(header)
    if rows and rows[0] and rows[0][0].strip() == "":
        units, rows = rows[0], rows[1:]
    col = {name: i for i, name in enumerate(header)}
    kernels = []
    for row in rows:
        if len(row) < len(header):
            row = row + [""] * (len(header) - len(row))
        k = Kernel(id=int(parse_number(row[col["ID"]]) or 0), name=row[col.get("Kernel Name", 0)],
                   block=row[col["Block Size"]] if "Block Size" in col else "",
                   grid=row[col["Grid Size"]] if "Grid Size" in col else "")
        for i, name in enumerate(header):
            if name in FIXED_COLUMNS:
                continue
            v = parse_number(row[i])
            if v is not None:
                k.metrics[name] = to_base(v, units[i] if i < len(units) else "")
        kernels.append(k)
    return kernels


def _parse_long(header: list[str], rows: list[list[str]]) -> list[Kernel]:
    col = {name: i for i, name in enumerate(header)}
    by_id: dict[int, Kernel] = {}
    for row in rows:
        if len(row) < len(header):
            continue
        kid = int(parse_number(row[col["ID"]]) or 0)
        k = by_id.get(kid)
        if k is None:
            k = by_id[kid] = Kernel(id=kid, name=row[col["Kernel Name"]],
                                    block=row[col["Block Size"]] if "Block Size" in col else "",
                                    grid=row[col["Grid Size"]] if "Grid Size" in col else "")
        section = row[col["Section Name"]] if "Section Name" in col else ""
        name = row[col["Metric Name"]].strip()
        raw = DETAILS_NAMES.get((section, name)) or (name if "__" in name else None)
        if raw is None:
            continue
        v = parse_number(row[col["Metric Value"]])
        if v is not None:
            k.metrics[raw] = to_base(v, row[col["Metric Unit"]] if "Metric Unit" in col else "")
    return [by_id[i] for i in sorted(by_id)]


# ------------------------------------------------------------------------------------------------ rules

H200_SMS = 132
DRAM_BOUND_PCT = 80.0
TINY_US = 8.0


def main_kernel(kernels: Iterable[Kernel]) -> Kernel | None:
    ks = [k for k in kernels if k.duration_us is not None]
    return max(ks, key=lambda k: k.duration_us or 0.0) if ks else None


def suggest(kernels: list[Kernel]) -> str:
    """One next step, from the longest kernel's metrics, by the first rule that fires."""
    k = main_kernel(kernels)
    if k is None:
        return "No kernel with a duration was captured: check that the profiled call launched a GPU kernel."
    dur = k.duration_us or 0.0
    dram = k.get(DRAM_PCT)
    ach, theo = k.get(ACHIEVED_OCC), k.get(THEORETICAL_OCC)
    sms = int(k.get(SM_COUNT) or H200_SMS)
    blocks = k.grid_blocks
    local = k.local_memory
    top = k.top_stalls(1)
    top_reason = top[0][0] if top else ""
    if local and local[1] > 0:
        what = f"{local[1]:,.0f} {local[0]}"
        return (f"Register spills: {what} of local-memory traffic at {k.registers} registers/thread. Cut live "
                "registers (fewer loads in flight per thread, smaller per-thread tile, no large unrolled arrays) or "
                "raise the register cap (__launch_bounds__ / maxrregcount); spills add L1/L2/DRAM traffic to a "
                "memory-bound kernel.")
    if blocks is not None and blocks < sms and dur < TINY_US:
        return (f"Launch/latency bound: {blocks} blocks on {sms} SMs for {dur:.2f} µs. Spread the work over more "
                "CTAs (split rows or columns), do less per launch (fewer kernels), and remember the host path "
                "decides rows this small; DRAM bandwidth is not the limit here.")
    if dram is not None and dram >= DRAM_BOUND_PCT:
        return (f"Memory bound near the ceiling: DRAM at {dram:.0f}% of peak. Remaining gains come from moving "
                "fewer bytes (no re-reads, fuse neighbours, keep 16-byte accesses), not from instructions; "
                "parity is the honest target once sol is near 1.")
    if top_reason == "long_scoreboard":
        occ = f", achieved occupancy {ach:.0f}%" if ach is not None else ""
        return (f"Latency bound on global loads: long_scoreboard is the top stall with DRAM at "
                f"{(dram or 0):.0f}% of peak{occ}. Put more bytes in flight per thread: 16-byte vector loads, "
                "issue every load of a row before the first use, more rows per CTA or more resident warps.")
    if ach is not None and theo and (ach < 0.5 * theo or ach < 30.0):
        waves = k.get(WAVES)
        wv = f", {waves:.2f} waves/SM" if waves is not None else ""
        return (f"Low achieved occupancy: {ach:.0f}% of a {theo:.0f}% theoretical{wv}. Look for a tail "
                "(partial last wave) or imbalance; change the block size or the rows per CTA.")
    if top_reason == "barrier":
        return ("Barrier stalls dominate: replace __syncthreads-based CTA reductions with warp shuffles, "
                "reduce once per row instead of per tile, or give each warp its own row.")
    if top_reason in ("short_scoreboard", "mio_throttle", "lg_throttle"):
        return (f"{top_reason} is the top stall: shared-memory/MIO (or LSU queue) pressure. Use fewer, wider "
                "memory instructions (16-byte accesses), fewer shared-memory round trips in the reduction.")
    if top_reason in ("math_pipe_throttle", "wait", "not_selected", "dispatch_stall"):
        return (f"Issue/compute bound ({top_reason} top stall, SM at {(k.get(SM_PCT) or 0):.0f}%): cut "
                "instructions per byte (fewer dtype conversions, vectorized math, no per-element division).")
    return (f"No single limiter stands out (DRAM {(dram or 0):.0f}%, SM {(k.get(SM_PCT) or 0):.0f}%, top stall "
            f"{top_reason or 'n/a'}): compare against the other side's digest and the copy yardstick (sol).")


# ------------------------------------------------------------------------------------------------ digest

def _f(v: float | None, fmt: str = ".1f", none: str = "n/a") -> str:
    return none if v is None else format(v, fmt)


def _local(k: Kernel) -> str:
    lm = k.local_memory
    if lm is None:
        return "not collected"
    if lm[1] == 0:
        return "0"
    return f"{lm[1]:,.0f} {'B' if lm[0] == 'bytes' else 'inst'}"


def _stall_text(k: Kernel, n: int = 3) -> str:
    family, unit, _ = k.stalls()
    top = k.top_stalls(n)
    if not top:
        return "not collected"
    if unit == "samples":
        return ", ".join(f"{r} {share:.0%}" for r, _, share in top)
    return ", ".join(f"{r} {v:.1f}" for r, v, _ in top)


@dataclass
class DigestInput:
    """Everything the digest says besides the kernels (filled by ``kda profile``; tests pass fixed values)."""

    task: str
    row: str
    function: str = ""
    model: str = ""
    shape: str = ""
    model_bytes: float | None = None  # the task's byte model for this row
    seed: int | None = None
    warmup: int | None = None
    captured: str = ""  # e.g. "2026-11-22 on NVIDIA H200, ncu 2025.3.1"
    candidate: str = ""  # e.g. "c003 (source 1a2b3c4d5e6f7a8b)"
    ledger_us: dict[str, float] = field(default_factory=dict)  # latest graph-replay medians from benchmark.csv
    files: dict[str, str] = field(default_factory=dict)  # impl -> raw report path
    command: str = ""


def render_digest(info: DigestInput, impls: dict[str, list[Kernel]]) -> str:
    """The markdown digest for one row; deterministic for given inputs."""
    out = [f"# Nsight Compute digest: `{info.row}`", ""]
    what = [f"task `{info.task}`"]
    if info.function:
        what.append(f"function `{info.function}`")
    if info.model:
        what.append(f"model {info.model}")
    out.append(", ".join(what) + ".")
    if info.shape:
        mb = f"; {info.model_bytes / 1e6:.1f} MB per call by the byte model" if info.model_bytes else ""
        out.append(f"Inputs: `{info.shape}`{mb}.")
    how = ["`ncu --clock-control none` (boost clocks, as the harness measures), caches flushed before each "
           "replay pass (ncu default), one profiled call"]
    if info.warmup is not None:
        how.append(f"after {info.warmup} warm-up calls on a separate input set")
    if info.seed is not None:
        how.append(f"inputs from `make_inputs` seed {info.seed}")
    out.append("Method: " + ", ".join(how) + ".")
    if info.captured:
        out.append(f"Captured {info.captured}.")
    if info.candidate:
        out.append(f"Candidate: {info.candidate}.")
    out += ["", "Durations under ncu are single cold-cache launches: compare them with each other, and take "
            "speedups from `kda bench` (CUDA-graph replay, interleaved), not from this page.", ""]

    out += ["## Summary", "",
            "| impl | kernels | total µs | byte-model TB/s | DRAM % peak | DRAM TB/s | achieved occ. % | "
            "registers | local memory | top stall |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---|---|"]
    totals: dict[str, float] = {}
    for impl, kernels in impls.items():
        total = sum(k.duration_us or 0.0 for k in kernels)
        totals[impl] = total
        mk = main_kernel(kernels)
        tb = info.model_bytes / (total * 1e-6) / 1e12 if info.model_bytes and total else None
        if mk is None:
            out.append(f"| {impl} | {len(kernels)} | n/a | n/a | n/a | n/a | n/a | n/a | n/a | n/a |")
            continue
        out.append(f"| {impl} | {len(kernels)} | {total:.2f} | {_f(tb, '.2f')} | {_f(mk.get(DRAM_PCT))} | "
                   f"{_f(mk.dram_tbps, '.2f')} | {_f(mk.get(ACHIEVED_OCC))} | {_f(mk.get(REGISTERS), '.0f')} | "
                   f"{_local(mk)} | {_stall_text(mk, 1)} |")
    out.append("")
    out.append("Per-impl columns after `total µs` describe the longest kernel.")
    if "baseline" in totals and "candidate" in totals and totals["candidate"] > 0:
        out.append(f"Candidate vs baseline under ncu (sum of kernel durations): "
                   f"{totals['baseline'] / totals['candidate']:.3f}x.")
    if info.ledger_us:
        led = ", ".join(f"{k} {v:.2f} µs" for k, v in info.ledger_us.items())
        out.append(f"Latest `kda bench` medians for this row (graph replay): {led}.")
    out.append("")

    for impl, kernels in impls.items():
        out += [f"## {impl}: kernels", ""]
        if not kernels:
            out += ["No kernel was captured for this side.", ""]
            continue
        out += ["| # | kernel | grid / block | µs | DRAM % | DRAM TB/s | SM % | occ. achieved / theor. % | "
                "regs | local memory | top stalls |",
                "|---:|---|---|---:|---:|---:|---:|---:|---:|---|---|"]
        for i, k in enumerate(kernels):
            name = k.short_name
            name = name if len(name) <= 60 else name[:57] + "..."
            occ = f"{_f(k.get(ACHIEVED_OCC))} / {_f(k.get(THEORETICAL_OCC))}"
            out.append(f"| {i} | `{name}` | {k.grid or '?'} / {k.block or '?'} | {_f(k.duration_us, '.2f')} | "
                       f"{_f(k.get(DRAM_PCT))} | {_f(k.dram_tbps, '.2f')} | {_f(k.get(SM_PCT))} | {occ} | "
                       f"{_f(k.get(REGISTERS), '.0f')} | {_local(k)} | {_stall_text(k)} |")
        mk = main_kernel(kernels)
        family = mk.stalls()[0] if mk is not None else ""
        if family:
            out += ["", f"Top stalls: {STALL_LEGEND[family]}, largest first; `selected` (issuing) is not a stall."]
        out.append("")

    out += ["## Suggested next step", ""]
    for impl, kernels in impls.items():
        out.append(f"- **{impl}**: {suggest(kernels)}")
    out += ["", "Rules, first match wins: local-memory traffic > 0 -> spills; fewer blocks than SMs and < 8 µs -> "
            "launch bound; DRAM >= 80% -> at the ceiling; long_scoreboard top stall -> bytes in flight; achieved "
            "occupancy < half of theoretical (or < 30%) -> tail/imbalance; then barrier, MIO and issue stalls.", ""]
    if info.files or info.command:
        out += ["## Files", ""]
        for impl, path in info.files.items():
            out.append(f"- {impl}: `{path}` (not committed; open with `ncu-ui` or `ncu --import`)")
        if info.command:
            out.append(f"- reproduce on the GPU box: `{info.command}`")
        out.append("")
    return "\n".join(out)
