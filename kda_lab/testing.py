"""Shared correctness tests, parametrized over a task's task.toml (each task's tests/ file is one line).

- CPU: the folder validates; the candidate (src/register.py EXPORTS) and SGLang's Triton baseline run in the
  Triton interpreter on the rows tagged 'tiny', in fp32 and fp16, against the oracle (and bit for bit against
  each other for ``exact`` functions), as ``kda check TASK --interpret`` does. A CUDA candidate skips them.
- GPU (marker ``gpu``): the candidate and the baseline on every row. Without a CUDA GPU these skip with the
  reason, so ``pytest kernels/<task>/tests`` passes on a CPU host as it is.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

import pytest

from kda_lab.families import contract
from kda_lab.task import load_task, validate_task_dir

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True)
class CandidateUnderTest:
    """A task's candidate for its own contract tests (``kernels/<task>/tests/test_candidate*.py``)."""

    task: Any
    module: ModuleType  # src/register.py, loaded as the lab loads it
    device: str  # "cuda" on a GPU host, "cpu" under the Triton interpreter
    floats: tuple[torch.dtype, ...]  # what the device can check: no bf16 in the interpreter


def candidate_under_test(test_file: str) -> CandidateUnderTest:
    """Load the task's candidate on the device this host checks it on. Without a CUDA GPU the kernels run in
    Triton's interpreter (conftest.py sets TRITON_INTERPRET=1) with the lab's shims for SGLang's wrappers; with
    neither, the calling test module is skipped and says why."""
    import torch

    from kda_lab.task.schema import load_candidate

    on_gpu = torch.cuda.is_available()
    if not on_gpu and os.environ.get("TRITON_INTERPRET") != "1":
        pytest.skip("needs a CUDA GPU or the Triton interpreter (TRITON_INTERPRET=1, set by conftest.py)",
                    allow_module_level=True)
    if not on_gpu:
        from kda_lab.interpret import install_shims

        install_shims()
    task = load_task(Path(test_file).resolve().parents[1])
    floats = (torch.float32, torch.float16, torch.bfloat16) if on_gpu else (torch.float32, torch.float16)
    return CandidateUnderTest(task=task, module=load_candidate(task), device="cuda" if on_gpu else "cpu",
                              floats=floats)


class HandedOver:
    """Stands in for SGLang's function inside a candidate module (monkeypatch it over the candidate's captured
    fallback): counts the calls handed over and returns a sentinel the test can recognize."""

    def __init__(self) -> None:
        self.calls = 0
        self.result = object()

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self.calls += 1
        return self.result


def task_of(test_file: str) -> Any:
    """The task whose ``tests/`` folder holds ``test_file``."""
    return load_task(Path(test_file).resolve().parents[1])


class TaskTests:
    """The shared checks of one task, parametrized over its task.toml by :mod:`kda_lab.pytest_plugin`. A task's
    ``tests/test_correctness.py`` is ``class TestTask(TaskTests): pass``; the task is the folder the file is in.

    - ``test_task_folder_is_valid``: ``kda validate``'s checks of the folder;
    - ``test_candidate_and_sglang_in_interpreter`` (CPU, rows tagged ``tiny``, fp32/fp16): the candidate and
      SGLang's kernel in Triton's interpreter against the oracle, as ``kda check --interpret`` does;
    - ``test_candidate_on_gpu`` (marker ``gpu``, every row): the candidate and the baseline on the GPU.
    """

    @classmethod
    def task(cls) -> Any:
        import inspect

        return task_of(inspect.getfile(cls))

    def test_task_folder_is_valid(self) -> None:
        problems = validate_task_dir(self.task().path)
        assert not problems, "\n".join(problems)

    def test_candidate_and_sglang_in_interpreter(self, row: str, dtype: str) -> None:
        if os.environ.get("TRITON_INTERPRET") != "1":
            pytest.skip("interpreter tests run on a CPU host (TRITON_INTERPRET=1, set by conftest.py without a GPU)")
        from kda_lab.interpret import (
            compiles_cuda_itself,
            cuda_sources,
            extensions_blocked,
            interpretable,
            not_runnable_on_cpu,
            sglang_fallbacks_interpretable,
            wrapper_not_interpretable,
        )
        from kda_lab.measure.correctness import check_row
        from kda_lab.measure.run import candidate_identity

        task = self.task()
        cand = candidate_identity(task, register=False)
        cuda = [] if cand.is_baseline else compiles_cuda_itself(task.src_dir)
        if cuda:
            pytest.skip(f"a CUDA candidate cannot run on CPU (src/{cuda[0]}): checked by the gpu tests")
        w = next(w for w in task.workloads if w.name == row)
        if cand.is_baseline and "no_cpu_baseline" in w.tags:
            pytest.skip("the candidate is SGLang's kernel, which does not run on CPU for this row (the gpu tests)")
        native = [] if cand.is_baseline else cuda_sources(task.src_dir)
        why = wrapper_not_interpretable(w.fn, native)
        if why:
            pytest.skip(f"{why} (the gpu tests)")
        module, _, fn = task.functions[w.fn].sglang.partition(":")
        with sglang_fallbacks_interpretable(task, [w.fn]), extensions_blocked() as asked:
            results = check_row(task, w.with_dtype(dtype), contract(task.family, w.fn),
                                {"baseline": interpretable(module, fn), "candidate": cand.exports[w.fn]}, seed=1,
                                device="cpu", installed=cand.exports)
        if asked:
            pytest.skip(f"the candidate asks for its CUDA extension {asked[0]} on CPU: checked by the gpu tests")
        why = next((reason for r in results
                    if r.impl == "candidate" and (reason := not_runnable_on_cpu(r.error, native))), None)
        if why:
            pytest.skip(f"{why} (the gpu tests)")
        # Rows tagged 'no_cpu_baseline' (SGLang's kernel is JIT CUDA: it raises on CPU) check the candidate only,
        # as `kda check --interpret` does for every row.
        checked = [r for r in results if r.impl == "candidate" or "no_cpu_baseline" not in w.tags]
        assert all(r.ok for r in checked), "\n".join(r.describe() for r in checked)

    @pytest.mark.gpu
    def test_candidate_on_gpu(self, row: str) -> None:
        import torch

        from kda_lab.measure.correctness import check_row
        from kda_lab.measure.run import candidate_identity, cuda_device, resolve_entry

        task = self.task()
        if not torch.cuda.is_available():
            pytest.skip(f"needs a CUDA GPU ({task.arch}); on CPU the candidate is checked in the interpreter")
        device = cuda_device(task)
        w = next(w for w in task.workloads if w.name == row)
        cand = candidate_identity(task, register=False)
        impls = {"baseline": resolve_entry(task.functions[w.fn].entry), "candidate": cand.exports[w.fn]}
        results = check_row(task, w, contract(task.family, w.fn), impls, seed=7, device=device,
                            installed=cand.exports)
        assert all(r.ok for r in results if r.impl == "candidate"), "\n".join(r.describe() for r in results)


def _torch_header_key(cxx: str, flags: tuple[str, ...]) -> str | None:
    """What a precompiled ``<torch/extension.h>`` depends on, by content: g++'s version, the flags with each
    ``-isystem`` folder replaced by its position, and the bytes of every file g++ reads for the header under those
    flags (``g++ -M``, in order). Paths and mtimes stay out, so every checkout and venv with the same torch, CUDA
    and Python headers shares one PCH (about 750 MB and 40 s of 2 cores each) and a changed header gets a new one;
    None where the file list cannot be read. g++ accepts a PCH built against other folders of the same headers."""
    import hashlib
    import subprocess

    try:
        version = subprocess.run([cxx, "--version"], capture_output=True, text=True, timeout=60).stdout
        deps = subprocess.run([cxx, *flags, "-M", "-x", "c++", "-"], input="#include <torch/extension.h>\n",
                              capture_output=True, text=True, timeout=300)
        if deps.returncode != 0:
            return None
        key = hashlib.sha256(repr((version, [f"-isystem#{i}" if f.startswith("-isystem") else f
                                             for i, f in enumerate(flags)])).encode())
        for dep in deps.stdout.replace("\\\n", " ").split()[1:]:  # "-: a.h b.h ..."
            key.update(hashlib.sha256(Path(dep).read_bytes()).digest())
    except (OSError, subprocess.SubprocessError):
        return None
    return key.hexdigest()[:24]


_PCH_KEYS: dict[tuple[str, tuple[str, ...]], str | None] = {}


def _torch_header_pch(cxx: str, flags: list[str]) -> list[str]:
    """``-include`` flags for a precompiled ``<torch/extension.h>`` built once per machine (a file lock: xdist
    workers wait for the first) under these flags, in a folder named by the content of what it is built from
    (``_torch_header_key``, read once per process); [] where it cannot be built (the caller parses the headers
    itself: slower, same answer). Parsing torch's headers is most of a binding's syntax check (22 s against 7 s
    with this, on 2 cores; building it: 40-47 s, once). g++ falls back to the plain header on its own where the
    PCH is not valid for a call, so a stale or foreign one costs time, never a wrong answer."""
    import fcntl
    import subprocess
    import tempfile

    cache = (cxx, tuple(flags))
    if cache not in _PCH_KEYS:
        _PCH_KEYS[cache] = _torch_header_key(*cache)
    key = _PCH_KEYS[cache]
    if key is None:
        return []
    folder = Path(tempfile.gettempdir()) / f"kda-torch-pch-{os.getuid()}-{key}"
    header = folder / "kda_torch_extension.h"
    gch = folder / "kda_torch_extension.h.gch"
    try:
        folder.mkdir(exist_ok=True)
        with open(folder / "lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not gch.is_file():
                header.write_text("#include <torch/extension.h>\n")
                part = folder / f"partial-{os.getpid()}.gch"
                res = subprocess.run([cxx, *flags, "-x", "c++-header", str(header), "-o", str(part)],
                                     capture_output=True, text=True, timeout=600)
                if res.returncode != 0:
                    part.unlink(missing_ok=True)
                    return []
                part.rename(gch)
    except (OSError, subprocess.SubprocessError):
        return []
    return ["-include", str(header)]


def assert_binding_compiles(binding: Path, include_dir: Path, tmp_path: Path) -> None:
    """A task's torch binding (.cpp) against this torch's headers and the CUDA toolkit's: a g++ syntax check with
    warnings as errors, so a binding that would not build on the GPU box fails on a CPU host first. Skips where
    g++ or nvcc is missing (CI has both). torch's headers come precompiled (``_torch_header_pch``) where that
    builds; the binding itself is checked in full either way."""
    import shutil
    import subprocess
    import sysconfig
    import tempfile

    cxx, nvcc = shutil.which("g++"), shutil.which("nvcc")
    if not cxx or not nvcc:
        pytest.skip("no g++ / nvcc")
    import torch.utils.cpp_extension as ce

    cuda_include = Path(nvcc).resolve().parents[1] / "include"
    if not (cuda_include / "cuda_runtime.h").is_file():
        cuda_include = Path("/usr/local/cuda/include")
    # a CPU wheel of torch lacks this generated header; one stub for every call, so the PCH's flags are theirs
    stub_root = Path(tempfile.gettempdir()) / f"kda-torch-stub-{os.getuid()}"
    stub = stub_root / "c10/cuda/impl"
    stub.mkdir(parents=True, exist_ok=True)
    if not (stub / "cuda_cmake_macros.h").is_file():
        part = stub / f"cuda_cmake_macros.h.{os.getpid()}"
        part.write_text("#pragma once\n")
        part.replace(stub / "cuda_cmake_macros.h")
    system = [str(stub_root), *ce.include_paths(), str(cuda_include), sysconfig.get_paths()["include"]]
    flags = ["-std=c++20", "-Wall", "-Wextra", "-Werror", *(f"-isystem{p}" for p in system)]
    res = subprocess.run([cxx, "-fsyntax-only", *flags, *_torch_header_pch(cxx, flags), f"-I{include_dir}",
                          f"-DTORCH_EXTENSION_NAME={binding.stem}_syntax", str(binding)],
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-4000:]


def compile_host_cpp(source: Path, include_dir: Path, out: Path, *, shared: bool = False, opt: str = "-O2") -> Path:
    """Build a task's host-side C++ check (a kernel's index or contract logic compiled for the CPU, warnings as
    errors) into ``out``: an executable, or with ``shared`` a library for ctypes. The CPU evidence of the CUDA
    tasks runs through these, so a missing compiler fails rather than skips."""
    import shutil
    import subprocess

    cxx = shutil.which("g++") or shutil.which("c++")
    assert cxx, "a C++ compiler (g++) is needed: nvcc needs one too"
    flags = ["-shared", "-fPIC"] if shared else []
    res = subprocess.run([cxx, "-std=c++17", opt, "-Wall", "-Wextra", "-Werror", *flags, f"-I{include_dir}",
                          str(source), "-o", str(out)], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-4000:]
    return out
