#!/usr/bin/env python3
"""On the GPU box: write the environment FlashInfer's JIT needs there, as a file that ~/kda-env.sh sources.

Standard library only: scripts/gpu_stage_flashinfer.sh copies this file into .gpu-stage-e1/ and setup.sh runs it
after FlashInfer is installed. FlashInfer 0.7.2 builds its CUDA modules (the norm module: the fused DiT LayerNorms,
and rmsnorm/layernorm without the CuTe DSL) with ninja and nvcc under $FLASHINFER_WORKSPACE_BASE/.cache/flashinfer,
from $CUDA_HOME (else the nvcc on PATH, else /usr/local/cuda, as flashinfer/jit/cpp_ext.py get_cuda_path finds it):

- its norm.cu includes cublasLt.h and curand_kernel.h: where $CUDA_HOME/include lacks them and the CUDA wheels of
  the box's torch have them (site-packages/nvidia/<name>/include), that folder goes in FLASHINFER_EXTRA_CUDAFLAGS
  as -isystem (after nvcc's own include folder, so the toolkit's headers still win);
- it links with -lcudart -lcuda from $CUDA_HOME/lib64 and lib64/stubs: where neither has them and no system
  folder has the unversioned name, a link named lib<x>.so to the versioned library found (torch's CUDA runtime
  wheel, the driver's libcuda.so.1) goes in <jit>/lib, which goes in FLASHINFER_EXTRA_LDFLAGS as -L;
- it runs `ninja`: without one on PATH, the staged ninja wheel's binary folder (<site>/bin) goes on PATH.

Prints one line per finding; what it cannot find it names, and exits 0 all the same (FlashInfer's CuTe DSL norms
need none of this; its CUDA JIT modules then fail to build, with the compiler's message, when first called).
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import sys
from pathlib import Path

HEADERS = ("cublasLt.h", "curand_kernel.h")  # norm.cu via trtllm/common/cudaUtils.h and reduceKernelUtils.cuh
LIBS = ("cudart", "cuda")  # the JIT's ldflags: -L$cuda_home/lib64 -L$cuda_home/lib64/stubs -lcudart -lcuda
SYSTEM_LIB_DIRS = ("/usr/lib/x86_64-linux-gnu", "/lib/x86_64-linux-gnu", "/usr/lib64", "/lib64", "/usr/lib",
                   "/usr/local/nvidia/lib64", "/usr/local/cuda/compat")


def cuda_home(environ: dict[str, str]) -> Path | None:
    """The CUDA root FlashInfer's JIT will use (flashinfer/jit/cpp_ext.py get_cuda_path)."""
    home = environ.get("CUDA_HOME") or environ.get("CUDA_PATH")
    if home:
        return Path(home)
    nvcc = shutil.which("nvcc", path=environ.get("PATH"))
    if nvcc:
        return Path(nvcc).parent.parent
    default = Path("/usr/local/cuda")
    return default if default.is_dir() else None


def nvidia_wheel_dirs(paths: list[str], kind: str) -> list[Path]:
    """site-packages/nvidia/<name>/<kind> of the CUDA wheels on the path (torch's cuBLAS, cuRAND, runtime)."""
    found = []
    for entry in paths:
        root = Path(entry or ".") / "nvidia"
        if root.is_dir():
            found += sorted(d for d in root.glob(f"*/{kind}") if d.is_dir())
    return found


def header_dirs(home: Path, candidates: list[Path]) -> tuple[list[Path], list[str]]:
    """(-isystem folders to add, headers found nowhere)."""
    add: list[Path] = []
    missing = []
    for name in HEADERS:
        if (home / "include" / name).is_file():
            continue
        where = next((d for d in candidates if (d / name).is_file()), None)
        if where is None:
            missing.append(name)
        elif where not in add:
            add.append(where)
    return add, missing


def versioned(folder: Path, lib: str) -> Path | None:
    hits = sorted(folder.glob(f"lib{lib}.so.*"))
    return hits[0] if hits else None


def lib_dirs(home: Path, candidates: list[Path], system: tuple[str, ...], link_dir: Path) -> tuple[list[Path],
                                                                                                     list[str]]:
    """(-L folders to add, libraries found nowhere). A library only found versioned gets a lib<x>.so link in
    link_dir (the linker's -l wants the unversioned name)."""
    add: list[Path] = []
    missing = []
    for lib in LIBS:
        plain = f"lib{lib}.so"
        if any((d / plain).exists() for d in (home / "lib64", home / "lib64" / "stubs", *map(Path, system))):
            continue
        where = next((d for d in candidates if (d / plain).exists()), None)
        if where is None:
            target = next((v for d in (*candidates, *map(Path, system)) if d.is_dir() and (v := versioned(d, lib))),
                          None)
            if target is None:
                missing.append(plain)
                continue
            link_dir.mkdir(parents=True, exist_ok=True)
            link = link_dir / plain
            if link.is_symlink() or link.exists():
                link.unlink()
            link.symlink_to(target)
            where = link_dir
        if where not in add:
            add.append(where)
    return add, missing


def env_lines(jit: Path, home: Path | None, site: Path, environ: dict[str, str], paths: list[str],
              system: tuple[str, ...] = SYSTEM_LIB_DIRS) -> tuple[list[str], list[str]]:
    """(the env file's lines, one report line per finding)."""
    lines = ["# FlashInfer's JIT on this box: written by .gpu-stage-e1/flashinfer_env.py (scripts/gpu_stage/)",
             f"export FLASHINFER_WORKSPACE_BASE={shlex.quote(str(jit))}"]
    report = [f"flashinfer JIT cache: {jit}/.cache/flashinfer"]
    if shutil.which("ninja", path=environ.get("PATH")) is None:
        if (site / "bin" / "ninja").is_file():
            lines.append(f'export PATH="{site / "bin"}:$PATH"')
            report.append(f"ninja: the staged one, {site / 'bin' / 'ninja'}")
        else:
            report.append("ninja: MISSING (not on PATH and not staged): FlashInfer's CUDA JIT modules cannot build")
    if home is None or not (home / "bin" / "nvcc").exists():
        report.append(f"nvcc: MISSING (CUDA home {home}): FlashInfer's CUDA JIT modules cannot build")
        return lines, report
    report.append(f"nvcc: {home / 'bin' / 'nvcc'}")
    includes, missing_h = header_dirs(home, nvidia_wheel_dirs(paths, "include"))
    libs, missing_l = lib_dirs(home, nvidia_wheel_dirs(paths, "lib"), system, jit / "lib")
    if includes:
        flags = " ".join(f"-isystem {shlex.quote(str(d))}" for d in includes)
        lines.append(f"export FLASHINFER_EXTRA_CUDAFLAGS={shlex.quote(flags)}")
        report.append(f"CUDA headers not in {home}/include, taken from: {', '.join(map(str, includes))}")
    if libs:
        flags = " ".join(f"-L{shlex.quote(str(d))}" for d in libs)
        lines.append(f"export FLASHINFER_EXTRA_LDFLAGS={shlex.quote(flags)}")
        report.append(f"CUDA libraries not in {home}/lib64, linked from: {', '.join(map(str, libs))}")
    for name in missing_h + missing_l:
        report.append(f"{name}: MISSING (not in {home} nor in the nvidia wheels on the path): FlashInfer's CUDA "
                      "JIT norm module cannot build")
    return lines, report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--site", required=True, help="where FlashInfer and its deps were installed (~/kda-site)")
    parser.add_argument("--jit", required=True, help="FLASHINFER_WORKSPACE_BASE: the JIT cache goes under it")
    parser.add_argument("--out", required=True, help="the env file to write")
    args = parser.parse_args(argv)
    jit = Path(args.jit).resolve()
    jit.mkdir(parents=True, exist_ok=True)
    lines, report = env_lines(jit, cuda_home(dict(os.environ)), Path(args.site).resolve(), dict(os.environ),
                              sys.path)
    Path(args.out).write_text("\n".join(lines) + "\n")
    print("\n".join(report), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
