"""Device and host timing on a CUDA GPU.

Device time: each implementation gets a CUDA graph that calls it once per rotated input set (enough sets to
exceed 3x L2, so every call is L2-cold); a sample is the events-timed replay of that graph, divided by the
number of calls. Samples from all implementations are taken interleaved, in a seeded order per trial.
Host time: median wall time of single back-to-back eager calls through the public entry point (enqueue cost,
no synchronization per call), reported separately and never mixed into device numbers.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from kda_lab.stats import Summary, interleaved_order, summarize

Call = Callable[[dict[str, Any]], Any]


class GraphTimer:
    """One implementation captured over all input sets as a single CUDA graph."""

    def __init__(self, call: Call, arg_sets: list[dict[str, Any]], warmup: int = 2):
        self.calls = len(arg_sets)
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):  # warm-up (JIT compile, autotune) outside the graph
            for _ in range(warmup):
                for a in arg_sets:
                    call(a)
        torch.cuda.current_stream().wait_stream(stream)
        torch.cuda.synchronize()
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            for a in arg_sets:
                call(a)
        torch.cuda.synchronize()
        self.replays = 1
        self.replays = max(1, math.ceil(2000.0 / max(self.sample_us() * self.calls, 1e-3)))  # ~2 ms per sample

    def sample_us(self) -> float:
        """Per-call device time of one sample (``replays`` graph replays)."""
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        self.graph.replay()  # one untimed replay: the graph's first launch after idle is slower
        start.record()
        for _ in range(self.replays):
            self.graph.replay()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) * 1000.0 / (self.replays * self.calls)


@dataclass
class DeviceTimes:
    summaries: dict[str, Summary]
    samples: dict[str, list[float]]


def time_interleaved(timers: dict[str, GraphTimer], trials: int, seed: int) -> DeviceTimes:
    samples: dict[str, list[float]] = {k: [] for k in timers}
    for trial in interleaved_order(list(timers), trials, seed):
        for name in trial:
            samples[name].append(timers[name].sample_us())
    return DeviceTimes({k: summarize(v) for k, v in samples.items()}, samples)


def host_time_us(call: Call, arg_sets: list[dict[str, Any]], calls: int = 50) -> float:
    """Median host cost of one eager call (enqueue time; the device is not waited on per call)."""
    for a in arg_sets[:2]:
        call(a)
    torch.cuda.synchronize()
    walls = []
    for i in range(calls):
        a = arg_sets[i % len(arg_sets)]
        t0 = time.perf_counter_ns()
        call(a)
        walls.append((time.perf_counter_ns() - t0) / 1000.0)
        if i % 8 == 7:
            torch.cuda.synchronize()  # keep the launch queue short so enqueue never blocks on a full queue
    torch.cuda.synchronize()
    walls.sort()
    return walls[len(walls) // 2]


def copy_yardstick(nbytes: int, sets: int, device: torch.device) -> GraphTimer:
    """A same-size streaming copy (nbytes/2 read + nbytes/2 written), rotated like the kernels' inputs.
    A Triton kernel, not Tensor.copy_, which drops to ~2.8 TB/s inside graphs at >= 1 GiB on the H200."""
    from kda_lab.measure.yardstick import copy_kernel_call

    # int32 elements per buffer (nbytes / 2 each way), rounded up to 1024 so Triton sees 16-byte-divisible
    # sizes and vectorizes; an unaligned count silently made the yardstick ~20% slower (measured).
    n = -(-max(1, nbytes // 8) // 1024) * 1024
    bufs = [{"src": torch.randint(-2**30, 2**30, (n,), dtype=torch.int32, device=device),
             "dst": torch.empty(n, dtype=torch.int32, device=device)} for _ in range(sets)]
    return GraphTimer(lambda a: copy_kernel_call(a["src"], a["dst"]), bufs)
