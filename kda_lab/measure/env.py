"""Environment capture: every ledger row says where and with what it was measured."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

from kda_lab.evidence import evidence_arch
from kda_lab.measure.gpu_select import gpu_uuid


def _version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return ""


def _sglang_version() -> str:
    v = _version("sglang")
    if v:
        return v
    try:  # installed with --target / PYTHONPATH (the GPU box): no dist-info lookup by path order
        import sglang

        return str(getattr(sglang, "__version__", ""))
    except Exception:  # noqa: BLE001 - absent or broken sglang is reported as empty
        return ""


def _git(root: Path, *args: str) -> str:
    try:
        return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, check=True).stdout.strip()
    except (subprocess.CalledProcessError, FileNotFoundError):
        return ""


def git_state(root: Path) -> tuple[str, str]:
    """(commit, dirty) of the lab checkout. The GPU box gets a copy without .git: KDA_GIT_COMMIT carries it."""
    commit = os.environ.get("KDA_GIT_COMMIT") or _git(root, "rev-parse", "HEAD")
    if os.environ.get("KDA_GIT_DIRTY") is not None:
        dirty = os.environ["KDA_GIT_DIRTY"]
    else:
        status = _git(root, "status", "--porcelain", "--untracked-files=no")
        dirty = "1" if status else ("0" if commit else "")
    return commit or "unknown", dirty


def driver_version() -> str:
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20)
        return out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else ""
    except (FileNotFoundError, subprocess.TimeoutExpired):
        return ""


def overlay_state() -> str:
    """The ``overlay`` column: ``off``, or ``on:`` and the SGLang functions kda_kernels has swapped in this
    process (the SGLang patch installs it at ``import sglang``). Baselines resolve SGLang's originals either
    way (kda_lab.measure.run.resolve_baseline); the column says what else in the process was KDA's."""
    overlay = sys.modules.get("kda_kernels.overlay")
    installed = sorted(overlay.installed()) if overlay is not None else []
    return "on:" + "+".join(installed) if installed else "off"


def capture(root: Path, device: Any = None) -> dict[str, str]:
    import torch

    env = {
        "torch": torch.__version__, "triton": _version("triton"), "sglang": _sglang_version(),
        "cuda": torch.version.cuda or "", "command": shlex.join(["kda", *sys.argv[1:]]) if sys.argv else "",
        "overlay": overlay_state(),
    }
    env["git_commit"], env["git_dirty"] = git_state(root)
    if device is not None and torch.device(device).type == "cuda":
        cc = torch.cuda.get_device_capability(device)
        name = torch.cuda.get_device_name(device)
        # the arch these rows count for comes from the GPU's name (an H100 is (9, 0) too, and not an H200)
        env.update(gpu_name=name, gpu_cc=f"{cc[0]}.{cc[1]}", driver=driver_version(), arch=evidence_arch(name, cc),
                   gpu_uuid=gpu_uuid(device))  # which GPU of the host (kda --gpu; rows before it have none)
    else:
        env.update(gpu_name="cpu", gpu_cc="", driver="", arch="cpu", gpu_uuid="")
    return env
