"""The conv floor of a VAE decode, convolution by convolution (issue #36, items 1 and 3).

``kda e2e --conv-floor --rows ROW``: one decode of the row, at its tier and built as SGLang builds it, runs
once under a dispatch mode that records every ``aten.convolution`` call (input shape and memory format,
weight, stride, padding, dilation, groups, dtype). Each distinct convolution is then replayed alone, on fresh
random inputs of the same shape, strides and dtype, under a few cuDNN settings:

- ``sglang``: as SGLang runs it (the captured dtype and layout; torch's cuDNN flags as the process has them:
  ``benchmark`` off, ``allow_tf32`` on, so an fp32 decode's convs run TF32 tensor-core kernels);
- ``cudnn_benchmark``: the same, with cuDNN's autotuner choosing the algorithm (only the algorithm changes:
  the same inputs, precision and math, a different summation order: within SGLang's ``lossless`` definition);
- ``other_layout``: the input and weight in the other memory format (channels-last <-> contiguous);
- ``bf16``: inputs and weights cast to bf16 (a yardstick of the tensor cores, not a lossless option for an
  fp32 decode);
- ``fp32_ieee`` (fp32 convs only): ``allow_tf32`` off, what the fp32 decode would cost without TF32;
- ``frames_2d`` (3-D convs with stride, dilation 1 and no padding in time: the causal convs of the video
  VAEs, whose time padding is a separate cat/pad): the sum over the kernel's time taps of one 2-D convolution
  each, with the frames as the batch (for a batch of one, a channels-last 3-D tensor's frames are a
  channels-last 2-D batch: a view, no copy): the same products in the same precision, summed in another order
  (``lossless``), through cuDNN's 2-D kernels.

A variant that does not apply to a convolution (``bf16`` on a bf16 conv, ``fp32_ieee`` on a bf16 one,
``frames_2d`` on a 2-D one) counts SGLang's own time for it in the variant's floor; a variant that failed on a
convolution (memory, no algorithm) has no floor.

The sum over calls of each variant's time is that variant's conv floor; its achieved TFLOP/s is set against
the GPU's dense tensor peak (``PEAK_TFLOPS``). Timing is CUDA events around one call, median of ``reps``
after ``warmup`` calls; the decode's own conv time (the profile's ``conv`` bucket) is the check that the
replay stands for the decode. On a CPU only the capture and an ``sglang`` replay run (the mechanics, not a
measurement).
"""

from __future__ import annotations

import contextlib
import math
import statistics
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch

VARIANTS = ("sglang", "cudnn_benchmark", "other_layout", "frames_2d", "bf16", "fp32_ieee")
# dense (no sparsity) tensor-core peaks, TFLOP/s, by (GPU name substring, compute dtype): NVIDIA's H100/H200
# SXM data sheets (the two share the same SMs and clocks; H200 differs in memory only)
PEAK_TFLOPS = {("H200", "bf16"): 989.0, ("H200", "tf32"): 494.0, ("H200", "fp32"): 67.0,
               ("H100", "bf16"): 989.0, ("H100", "tf32"): 494.0, ("H100", "fp32"): 67.0}


@dataclass(frozen=True)
class ConvCall:
    """One distinct convolution of a decode: what ``aten.convolution`` received."""

    x_shape: tuple[int, ...]
    channels_last: bool
    w_shape: tuple[int, ...]
    bias: bool
    stride: tuple[int, ...]
    padding: tuple[int, ...]
    dilation: tuple[int, ...]
    transposed: bool
    output_padding: tuple[int, ...]
    groups: int
    dtype: str

    @property
    def flops(self) -> int:
        """2 x MACs (ConvFlops' rule): output elements x C_in/groups x kernel volume x 2 (a transposed
        conv: input elements x C_out/groups x kernel volume x 2)."""
        k = math.prod(self.w_shape[2:])
        if self.transposed:
            return 2 * math.prod(self.x_shape) * self.w_shape[1] * k
        return 2 * math.prod(self.out_shape) * self.w_shape[1] * k

    @property
    def out_shape(self) -> tuple[int, ...]:
        spatial = []
        for i, n in enumerate(self.x_shape[2:]):
            k = self.w_shape[2 + i]
            if self.transposed:
                spatial.append((n - 1) * self.stride[i] - 2 * self.padding[i] + self.dilation[i] * (k - 1)
                               + self.output_padding[i] + 1)
            else:
                span = n + 2 * self.padding[i] - self.dilation[i] * (k - 1) - 1
                spatial.append(span // self.stride[i] + 1)
        c_out = self.w_shape[1] * self.groups if self.transposed else self.w_shape[0]
        return (self.x_shape[0], c_out, *spatial)

    def label(self) -> str:
        k = "x".join(map(str, self.w_shape[2:]))
        return (f"{'convT' if self.transposed else 'conv'} {list(self.x_shape)} "
                f"{self.w_shape[1] * self.groups if not self.transposed else self.w_shape[0]}->"
                f"{self.out_shape[1]} k{k} s{''.join(map(str, self.stride))}"
                f" p{''.join(map(str, self.padding))}"
                f"{'+b' if self.bias else ''} {self.dtype}{' cl' if self.channels_last else ''}")


def _channels_last(t: torch.Tensor) -> bool:
    fmt = {4: torch.channels_last, 5: torch.channels_last_3d}.get(t.dim())
    return fmt is not None and not t.is_contiguous() and t.is_contiguous(memory_format=fmt)


def call_of(args: tuple[Any, ...]) -> ConvCall:
    """The ConvCall of one ``aten.convolution(input, weight, bias, stride, padding, dilation, transposed,
    output_padding, groups)`` call."""
    x, w, b, stride, padding, dilation, transposed, output_padding, groups = args[:9]
    return ConvCall(tuple(x.shape), _channels_last(x), tuple(w.shape), b is not None, tuple(stride),
                    tuple(padding), tuple(dilation), bool(transposed), tuple(output_padding), int(groups),
                    str(x.dtype).removeprefix("torch."))


_CONV_FUNCTIONS = ("conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d")


def _tuple(v: Any, n: int) -> tuple[int, ...]:
    return tuple(int(e) for e in v) if isinstance(v, (tuple, list)) else (int(v),) * n


def _functional_call(name: str, out: torch.Tensor, x: torch.Tensor, weight: torch.Tensor,
                     bias: torch.Tensor | None = None, *rest: Any, **kw: Any) -> ConvCall:
    """The ConvCall of one ``torch.nn.functional`` conv call (its arguments as given, its output for the shape
    that a string padding resolves to). Under autocast the conv computes in the autocast dtype."""
    transposed = name.startswith("conv_transpose")
    n = x.dim() - 2
    names = (("stride", "padding", "output_padding", "groups", "dilation") if transposed
             else ("stride", "padding", "dilation", "groups"))
    given = dict(zip(names, rest, strict=False)) | kw
    stride = _tuple(given.get("stride", 1), n)
    dilation = _tuple(given.get("dilation", 1), n)
    padding = given.get("padding", 0)
    k = tuple(weight.shape[2:])
    if isinstance(padding, str):  # "valid" or "same" (stride 1): the symmetric part; odd totals pad one more
        padding = (0,) * n if padding == "valid" else tuple(d * (kk - 1) // 2 for d, kk in zip(dilation, k,
                                                                                                strict=True))
    dev = x.device.type
    autocast = dev in ("cuda", "cpu") and torch.is_autocast_enabled(dev)  # (a meta tensor has no autocast)
    dtype = torch.get_autocast_dtype(dev) if autocast else x.dtype
    c = ConvCall(tuple(x.shape), _channels_last(x), tuple(weight.shape), bias is not None, stride,
                 _tuple(padding, n), dilation, transposed, _tuple(given.get("output_padding", 0), n),
                 int(given.get("groups", 1)), str(dtype).removeprefix("torch."))
    if c.out_shape != tuple(out.shape):  # an asymmetric "same": record the padding that gives its shape
        c = ConvCall(**{**c.__dict__, "padding": tuple(p + (o - e + 1) // 2 for p, o, e in zip(
            c.padding, out.shape[2:], c.out_shape[2:], strict=True))})
    return c


@contextlib.contextmanager
def capture() -> Iterator[dict[ConvCall, int]]:
    """``with capture() as calls: forward()``: {distinct convolution: calls}.

    Recorded at ``torch.nn.functional``'s conv functions (and their ``torch.convNd`` names), which every
    SGLang VAE and the overlay's fast paths call, not with a dispatch mode at ``aten.convolution``: counted
    that way, LTX-2's decode, the one decode that runs under CUDA autocast, had 0 conv FLOPs on an H100."""
    import torch.nn.functional as F

    calls: dict[ConvCall, int] = {}
    saved = {(mod, name): getattr(mod, name) for mod in (F, torch) for name in _CONV_FUNCTIONS
             if hasattr(mod, name)}

    def wrap(name: str, fn: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
        def recorded(*args: Any, **kwargs: Any) -> torch.Tensor:
            out = fn(*args, **kwargs)
            c = _functional_call(name, out, *args, **kwargs)
            calls[c] = calls.get(c, 0) + 1
            return out

        return recorded

    try:
        for (mod, name), fn in saved.items():
            setattr(mod, name, wrap(name, fn))
        yield calls
    finally:
        for (mod, name), fn in saved.items():
            setattr(mod, name, fn)


class ConvFlops:
    """``with ConvFlops(module) as c: forward()``: the multiply-add FLOPs (2 per MAC) of every convolution
    that runs inside (output elements x input channels per group x kernel volume x 2; a transposed one: input
    elements x output channels per group x kernel volume x 2): the conv floor's work.

    Counted by ``capture`` at ``torch.nn.functional``'s conv functions, not with module hooks:
    SGLang's VAE fast paths call ``F.conv3d`` with a module's weight (LTX-2's channels-last causal pad, Wan's
    conv-bias epilogue), which no forward hook of the ``nn.Conv3d`` sees. ``module`` is kept for the callers'
    symmetry."""

    def __init__(self, module: torch.nn.Module | None = None) -> None:
        self.module = module
        self.flops = 0
        self.calls = 0

    def __enter__(self) -> ConvFlops:
        self._capture = capture()
        self._calls = self._capture.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self._capture.__exit__(*exc)
        self.flops = sum(c.flops * n for c, n in self._calls.items())
        self.calls = sum(self._calls.values())


@dataclass
class VariantTime:
    ms: float | None = None  # per call, median
    max_rel_diff: float | None = None  # against the sglang variant's output (same inputs)
    error: str = ""


@dataclass
class ConvResult:
    call: ConvCall
    count: int
    times: dict[str, VariantTime] = field(default_factory=dict)


def _tensors(c: ConvCall, device: str, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor,
                                                                       torch.Tensor | None]:
    dtype = getattr(torch, c.dtype)
    x = torch.randn(c.x_shape, generator=gen, device=device).to(dtype)  # drawn on the device: GBs
    w = torch.randn(c.w_shape, generator=gen, device=device) / math.sqrt(math.prod(c.w_shape[1:]))
    w = w.to(dtype)
    if c.channels_last:
        fmt = torch.channels_last_3d if x.dim() == 5 else torch.channels_last
        x, w = x.contiguous(memory_format=fmt), w.contiguous(memory_format=fmt)
    out_ch = c.out_shape[1]
    b = torch.randn(out_ch, generator=gen, device=device).to(dtype) if c.bias else None
    return x, w, b


def _flip_layout(t: torch.Tensor) -> torch.Tensor:
    if _channels_last(t):
        return t.contiguous()
    fmt = torch.channels_last_3d if t.dim() == 5 else torch.channels_last
    return t.contiguous(memory_format=fmt)


@contextlib.contextmanager
def _cudnn(benchmark: bool | None = None, tf32: bool | None = None) -> Iterator[None]:
    cd = torch.backends.cudnn
    old = cd.benchmark, cd.allow_tf32
    try:
        if benchmark is not None:
            cd.benchmark = benchmark
        if tf32 is not None:
            cd.allow_tf32 = tf32
        yield
    finally:
        cd.benchmark, cd.allow_tf32 = old


def _runner(c: ConvCall, variant: str, x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None,
            ) -> tuple[Callable[[], torch.Tensor], contextlib.AbstractContextManager[None]] | None:
    """(one call, the settings around it) for ``variant``, or None where it does not apply."""
    def conv(xx: torch.Tensor, ww: torch.Tensor, bb: torch.Tensor | None) -> Callable[[], torch.Tensor]:
        return lambda: torch.ops.aten.convolution(xx, ww, bb, list(c.stride), list(c.padding),
                                                  list(c.dilation), c.transposed, list(c.output_padding),
                                                  c.groups)

    if variant == "sglang":
        return conv(x, w, b), contextlib.nullcontext()
    if variant == "cudnn_benchmark":
        return conv(x, w, b), _cudnn(benchmark=True)
    if variant == "other_layout":
        return conv(_flip_layout(x), _flip_layout(w), b), contextlib.nullcontext()
    if variant == "bf16":
        if c.dtype == "bfloat16":
            return None
        cast = [t.to(torch.bfloat16) if t is not None else None for t in (x, w, b)]
        return conv(*cast), contextlib.nullcontext()
    if variant == "fp32_ieee":
        return (conv(x, w, b), _cudnn(tf32=False)) if c.dtype == "float32" else None
    if variant == "frames_2d":
        return (_frames_2d(c, x, w, b), contextlib.nullcontext()) if frames_2d_applies(c) else None
    raise ValueError(f"unknown conv-floor variant {variant!r}; known: {', '.join(VARIANTS)}")


def frames_2d_applies(c: ConvCall) -> bool:
    return (len(c.x_shape) == 5 and not c.transposed and c.groups == 1 and c.w_shape[2] > 1
            and c.stride[0] == 1 and c.dilation[0] == 1 and c.padding[0] == 0)


def _frames_2d(c: ConvCall, x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None
               ) -> Callable[[], torch.Tensor]:
    """out[:, :, t] = sum over time taps kt of conv2d(x[:, :, t + kt], w[:, :, kt]): one 2-D conv per tap over
    the T_out frames as a batch, accumulated in the output's dtype."""
    n, _, t_in = c.x_shape[:3]
    kt = c.w_shape[2]
    t_out = t_in - kt + 1
    taps = [w[:, :, i] for i in range(kt)]  # [C_out, C_in, kh, kw]; channels-last 3-D -> channels-last 2-D

    def frames(i: int) -> torch.Tensor:  # [N * T_out, C, H, W], a view where x is channels-last
        return x[:, :, i:i + t_out].permute(0, 2, 1, 3, 4).reshape(n * t_out, *x.shape[1:2], *x.shape[3:])

    def run() -> torch.Tensor:
        acc = torch.nn.functional.conv2d(frames(0), taps[0], b, c.stride[1:], c.padding[1:], c.dilation[1:])
        for i in range(1, kt):
            acc.add_(torch.nn.functional.conv2d(frames(i), taps[i], None, c.stride[1:], c.padding[1:],
                                                c.dilation[1:]))
        return acc.reshape(n, t_out, *acc.shape[1:]).permute(0, 2, 1, 3, 4)

    return run


def _time(fn: Callable[[], torch.Tensor], cuda: bool, warmup: int, reps: int) -> tuple[float, torch.Tensor]:
    import time

    out = fn()
    for _ in range(warmup):
        out = fn()
    samples = []
    for _ in range(reps):
        if cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            out = fn()
            end.record()
            end.synchronize()
            samples.append(start.elapsed_time(end))
        else:
            t0 = time.perf_counter()
            out = fn()
            samples.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(samples), out


def replay(calls: dict[ConvCall, int], device: str, variants: tuple[str, ...] = VARIANTS, warmup: int = 2,
           reps: int = 5, seed: int = 0) -> list[ConvResult]:
    """Each distinct convolution alone, per variant (CUDA: every variant; CPU: ``sglang`` only)."""
    cuda = device.startswith("cuda")
    results = []
    for c, n in sorted(calls.items(), key=lambda kv: -kv[0].flops * kv[1]):
        res = ConvResult(c, n)
        gen = torch.Generator(device=device).manual_seed(seed)
        x, w, b = _tensors(c, device, gen)
        ref: torch.Tensor | None = None
        for v in variants if cuda else ("sglang",):
            run = _runner(c, v, x, w, b)
            if run is None:
                continue
            fn, ctx = run
            try:
                with torch.no_grad(), ctx:
                    ms, out = _time(fn, cuda, warmup, reps)
            except Exception as e:  # noqa: BLE001 - one variant's failure (memory, no algorithm) is a result
                res.times[v] = VariantTime(error=f"{type(e).__name__}: {e}"[:200])
                continue
            vt = VariantTime(ms=ms)
            if v == "sglang":
                ref = out.float()
            elif ref is not None:
                scale = ref.abs().max().item() or 1.0
                vt.max_rel_diff = (out.float() - ref).abs().max().item() / scale
            res.times[v] = vt
            del out
        results.append(res)
        del x, w, b, ref
        if cuda:
            torch.cuda.empty_cache()
    return results


def peak(gpu_name: str, compute: str) -> float | None:
    for (gpu, dt), v in PEAK_TFLOPS.items():
        if gpu in gpu_name and dt == compute:
            return v
    return None


def compute_dtype(dtype: str, variant: str) -> str:
    """What the tensor cores compute in for a conv of ``dtype`` under ``variant``."""
    if variant == "bf16" or dtype in ("bfloat16", "float16"):
        return "bf16"
    return "fp32" if variant == "fp32_ieee" else "tf32"


def summary(results: list[ConvResult], gpu_name: str) -> dict[str, Any]:
    """Per variant: total ms over the decode's calls, TFLOP/s, and the share of the compute dtype's peak."""
    total_flops = sum(r.call.flops * r.count for r in results)
    out: dict[str, Any] = {"calls": sum(r.count for r in results), "distinct": len(results),
                           "gflop": total_flops / 1e9, "variants": {}}
    for v in VARIANTS:
        if not any(v in r.times for r in results) or any(
                r.times.get(v, r.times.get("sglang", VariantTime())).ms is None for r in results):
            continue  # never ran, or failed on a conv: no floor (not applicable: SGLang's own time counts)
        ms = sum(r.times.get(v, r.times["sglang"]).ms * r.count for r in results)  # type: ignore[operator]
        tflops = total_flops / (ms * 1e-3) / 1e12 if ms else 0.0
        timed = [r for r in results if v in r.times]
        comp = {compute_dtype(r.call.dtype, v if v in r.times else "sglang") for r in results}
        pk = peak(gpu_name, comp.pop()) if len(comp) == 1 else None
        diffs = [r.times[v].max_rel_diff for r in timed if r.times[v].max_rel_diff is not None]
        out["variants"][v] = {"ms": ms, "tflops": tflops, "peak_tflops": pk,
                              "of_peak": tflops / pk if pk else None,
                              "max_rel_diff": max(diffs) if diffs else None}
    return out


def table(results: list[ConvResult], summ: dict[str, Any], top: int = 12) -> str:
    """The ``top`` convolutions by work (TFLOP per decode), each variant's ms per decode, the totals."""
    vs = [v for v in VARIANTS if v in summ["variants"]]
    head = " ".join(f"{v[:14]:>14}" for v in vs)
    lines = [f"{'convolution':<62} {'calls':>5} {'TFLOP':>7} {head}" + ("   (ms per decode)" if vs else "")]
    for r in results[:top]:
        cells = []
        for v in vs:
            t = r.times.get(v)
            cells.append(f"{t.ms * r.count:>14.2f}" if t and t.ms is not None else f"{'-':>14}")
        lines.append(f"{r.call.label()[:62]:<62} {r.count:>5} {r.call.flops * r.count / 1e12:>7.2f} "
                     + " ".join(cells))
    total = f"all {summ['distinct']} distinct"
    sums = " ".join(f"{summ['variants'][v]['ms']:>14.2f}" for v in vs)
    lines.append(f"{total:<62} {summ['calls']:>5} {summ['gflop'] / 1e3:>7.1f} {sums}")
    if vs:
        def rate(v: str) -> str:
            sv = summ["variants"][v]
            return f"{sv['tflops']:.1f}" + (f" ({sv['of_peak']:.0%})" if sv["of_peak"] else "")

        rates = " ".join(f"{rate(v):>14}" for v in vs)
        lines.append(f"{'TFLOP/s (share of the compute dtype peak)':<62} {'':>5} {'':>7} {rates}")
    return "\n".join(lines)


def measure_row(row: Any, device: str, tiny: bool, quality: str, seed: int, reps: int = 5) -> dict[str, Any]:
    """Capture one decode of the VAE ``row`` at ``quality`` (overlay off: SGLang's own decode), replay its
    convolutions, and return the record (``results`` per distinct conv, ``summary`` per variant)."""
    from kda_lab.e2e import measure, tiering

    if row.kind != "vae":
        raise ValueError(f"{row.name} is a {row.kind} row; the conv floor is measured on VAE decode rows")
    if device == "meta":  # the production decode's convolutions, counted with no data: no timing
        from kda_lab.e2e.vae_rows import VAE_SOURCES, meta_decode

        if row.name not in VAE_SOURCES:
            raise ValueError(f"{row.name} has no meta-device decode (rows with one: "
                             f"{', '.join(VAE_SOURCES)})")
        with torch.no_grad(), capture() as calls:
            meta_decode(row.name)()
        results = [ConvResult(c, n) for c, n in sorted(calls.items(), key=lambda kv: -kv[0].flops * kv[1])]
        return _record(row, quality, "meta (shapes only)", calls, results)
    built = row.build(device, tiny, None)
    _retier, forward = tiering.applier(row.kind, built, quality)
    measure.overlay(False)
    with torch.no_grad():
        forward()  # warm: lazy inits and the first cuDNN plans stay out of the capture's way
        with capture() as calls:
            forward()
    del built, forward
    if device.startswith("cuda"):
        torch.cuda.empty_cache()
    results = replay(calls, device, reps=reps, seed=seed)
    gpu = torch.cuda.get_device_name(torch.device(device)) if device.startswith("cuda") else "cpu"
    return _record(row, quality, gpu, calls, results)


def _record(row: Any, quality: str, gpu: str, calls: dict[ConvCall, int], results: list[ConvResult]
            ) -> dict[str, Any]:
    summ = summary(results, gpu)
    return {"row": row.name, "model": row.model, "quality": quality, "gpu_name": gpu,
            "decode_conv_calls": sum(calls.values()),
            "decode_conv_gflop": sum(c.flops * n for c, n in calls.items()) / 1e9,
            "summary": summ,
            "results": [{"conv": r.call.label(), "call": r.call.__dict__, "count": r.count,
                         "gflop": r.call.flops / 1e9, "times": {v: t.__dict__ for v, t in r.times.items()}}
                        for r in results]}
