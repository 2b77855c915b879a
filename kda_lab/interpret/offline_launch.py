"""Offline sm_90a launches on a CPU host: Triton compiles the real kernels, a stand-in driver records launches.

The kept-launch path of a Triton candidate (``kda_kernels.launch_cache``) must hand Triton's C launcher exactly
what Triton's own dispatch hands it. On a CPU host that is checked without a GPU: in a process where the
interpreter is off, :func:`record_launches` makes Triton compile for sm_90a (ptxas runs, the binary is never
loaded) and swaps the driver for one whose launcher records its arguments instead of launching; it also counts
Triton's dispatches (``JITFunction.run``), so a test can tell a kept launch (no dispatch) from a new one. The
task tests that use it (``kernels/*/tests/test_kept_launch.py``) run it in a child process: it replaces Triton's
active driver for the rest of that process.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class Recorder:
    """What the stand-in saw: every launch (grid, stream, function, metadata, hooks, arguments), how many
    times Triton's dispatch ran, and what each dispatch returned (the CompiledKernel: its PTX, metadata)."""

    launches: list[dict[str, Any]] = field(default_factory=list)
    dispatches: int = 0
    compiled: list[Any] = field(default_factory=list)

    @staticmethod
    def describe(a: Any) -> str:
        """A launch argument as JSON: a tensor as its data pointer's repr (a kept launch may pass the pointer as
        the integer itself), anything else by repr."""
        import torch

        return repr(a.data_ptr()) if isinstance(a, torch.Tensor) else repr(a)


def record_launches(capability: int = 90, sm_count: int = 132, record: bool = True) -> Recorder:
    """Install the recording stand-in as Triton's active driver (for this process) and count dispatches.
    ``record=False`` gives a launcher that does nothing at all: host-cost probes time the Python path without
    the recorder's own work (``kernels/*/profile/host_cpu.py``)."""
    from triton.backends.compiler import GPUTarget
    from triton.runtime.driver import driver
    from triton.runtime.jit import JITFunction

    rec = Recorder()

    class Utils:
        def load_binary(self, *a: Any) -> tuple[int, int, int, int, int]:
            return 1, 7, 64, 0, 1024  # module, function, registers, spills, max threads: never used

        def get_device_properties(self, device: int) -> dict[str, int]:
            return {"max_shared_mem": 232448, "multiprocessor_count": sm_count, "max_num_regs": 65536,
                    "warpSize": 32}

    class StandIn:
        utils = Utils()

        def get_current_target(self) -> GPUTarget:
            return GPUTarget("cuda", capability, 32)

        def get_current_device(self) -> int:
            return 0

        def get_current_stream(self, device: int | None = None) -> int:
            return 1234

        def get_active_torch_device(self) -> Any:
            import torch

            return torch.device("cpu")  # CPU tensors stand for CUDA ones: the launcher touches no memory

        def launcher_cls(self, src: Any, metadata: Any) -> Any:
            if not record:
                return lambda *args: None

            def record_launch(g0: int, g1: int, g2: int, stream: int, function: Any, packed: Any, meta: Any,
                       enter: Any, exit_: Any, *args: Any) -> None:
                rec.launches.append({"grid": [g0, g1, g2], "stream": stream, "function": function,
                                     "packed": repr(packed), "hooks": [type(enter).__name__, type(exit_).__name__],
                                     "meta": meta is not None, "args": [rec.describe(a) for a in args]})
            return record_launch

    driver.set_active(StandIn())
    real_run = JITFunction.run

    def counting_run(self: Any, *args: Any, **kwargs: Any) -> Any:
        rec.dispatches += 1
        kernel = real_run(self, *args, **kwargs)
        rec.compiled.append(kernel)
        return kernel

    JITFunction.run = counting_run
    return rec


def cuda_launcher(launch: Any, **fields: Any) -> Any:
    """A Triton 3.6 ``CudaLauncher`` built without compiling anything: its compiled C ``launch`` is ``launch`` (a
    recorder), no scratch buffers, no PDL or cooperative grid, one CTA per cluster, unless ``fields`` say
    otherwise. The shape ``kda_kernels.launch_direct`` needs to take a kept launch (the offline stand-in driver's
    launcher is a plain function), so CPU tests can check what a direct launch passes."""
    from triton.backends.nvidia.driver import CudaLauncher

    launcher = object.__new__(CudaLauncher)
    launcher.launch = launch
    launcher.num_ctas = 1
    launcher.global_scratch_size = launcher.profile_scratch_size = 0
    launcher.global_scratch_align = launcher.profile_scratch_align = 1
    launcher.launch_cooperative_grid = launcher.launch_pdl = False
    for name, value in fields.items():
        setattr(launcher, name, value)
    return launcher


def offline_candidate(task_dir: Any) -> tuple[Recorder, Any]:
    """The recording stand-in installed (:func:`record_launches`) and the task's candidate loaded with its CUDA
    gates opened for CPU tensors (``runs_here`` true, ``KEEP_ON_CPU``: kept launches keyed on CPU tensors), grad
    off. For a candidate whose register.py has those two hooks (the Triton tasks' kept-launch tests and offline
    builds)."""
    import torch

    from kda_lab.task import load_task
    from kda_lab.task.schema import load_candidate

    rec = record_launches()
    reg = load_candidate(load_task(task_dir))
    reg.runs_here = lambda *t: True
    reg.KEEP_ON_CPU = True
    torch.set_grad_enabled(False)
    return rec, reg


def assert_kept_repeat(first: dict[str, Any], second: dict[str, Any], out_slots: list[int], name: str = "") -> None:
    """``second`` (a kept launch) hands the launcher what ``first`` (Triton's dispatch) did: the same grid, stream,
    function, packed metadata and every argument but the fresh outputs in ``out_slots``; no hook chains and no
    launch metadata while no launch hook is registered (``first`` carries Triton's empty chains)."""
    same = ("grid", "stream", "function", "packed")
    assert {k: first[k] for k in same} == {k: second[k] for k in same}, name
    assert first["hooks"] == ["HookChain", "HookChain"] and second["hooks"] == ["NoneType", "NoneType"], name
    assert not second["meta"], name
    keep = [i for i in range(len(first["args"])) if i not in out_slots]
    assert [first["args"][i] for i in keep] == [second["args"][i] for i in keep], name
    assert len(first["args"]) == len(second["args"]), name


def child_report(test_file: str, timeout_s: int = 900) -> dict[str, Any]:
    """Run ``python test_file --child`` with the interpreter off (the child calls :func:`record_launches` and
    prints one JSON report as its last line) and return that report; a failed child fails the calling test."""
    import json
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    proc = subprocess.run([sys.executable, test_file, "--child"], env=env, capture_output=True, text=True,
                          timeout=timeout_s, check=False)
    if proc.returncode != 0:
        raise AssertionError(f"{test_file} --child exited {proc.returncode}:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])
