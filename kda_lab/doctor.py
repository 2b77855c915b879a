"""`kda doctor`: what this machine has for the lab, and the command that fixes each missing piece."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable
from importlib import metadata
from pathlib import Path

from kda_lab import ARCH_CAPABILITY
from kda_lab.evidence import a_gpu, evidence_arch

Check = tuple[str, bool, str, str]  # (what, ok, found, fix)
# The one Humanize install line: docs/workflow.md ("Once per machine") and the launcher print it verbatim
# (tests/test_house_habits.py holds the three to it).
HUMANIZE_INSTALL = ("in Claude Code: /plugin marketplace add git@github.com:PolyArch/humanize.git, "
                    "then /plugin install humanize@PolyArch")


def _run(cmd: list[str]) -> str:
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    except (FileNotFoundError, subprocess.TimeoutExpired):
        return ""
    return (out.stdout or out.stderr).strip() if out.returncode == 0 else ""


def _dist(name: str) -> str:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return ""


def _module_version(module: str) -> str:
    try:
        mod = __import__(module, fromlist=["__version__"])
    except Exception:  # noqa: BLE001 - any import failure means "not usable here"
        return ""
    return str(getattr(mod, "__version__", "present"))


def gpu_evidence_line(name: str, cc: tuple[int, int]) -> str:
    """Which GPU this is and for which arch its `kda check`/`kda bench` rows count (kda_lab.evidence)."""
    arch = evidence_arch(name, cc)
    head = f"{name} cc {cc[0]}.{cc[1]}: "
    if arch in ARCH_CAPABILITY:
        return head + f"rows count as {arch} evidence ({arch}_* tasks)"
    same_cc = [a for a, c in ARCH_CAPABILITY.items() if c == tuple(cc)]
    if same_cc:
        return head + (f"rows are recorded as {arch!r} and count for no task: {same_cc[0]}_* tasks run here, but "
                       f"only {a_gpu(same_cc[0])} makes {same_cc[0]} evidence")
    return head + f"rows would be recorded as {arch!r}; no lab arch has this capability (h200_*/b200_* tasks refuse it)"


def rows_count_for(arches: list[str]) -> Check:
    """For which arch this host's `kda check`/`kda bench` rows count as evidence (README: "On a machine with an
    H200 or B200"); none on a CPU host or a GPU of no lab arch."""
    if arches:
        tasks = ", ".join(f"{a}_*" for a in arches)
        return ("evidence", True, f"this host's rows count for {', '.join(arches)} ({tasks} tasks)", "")
    return ("evidence", True, "this host's rows count for no arch (none: `kda check --interpret` verdicts are CPU "
                              "verdicts; h200 evidence needs an H200, b200 a B200)", "")


def checks() -> list[Check]:
    out: list[Check] = []
    try:
        import torch

        out.append(("torch", True, torch.__version__, ""))
        if torch.cuda.is_available():
            counted = []
            for i in range(torch.cuda.device_count()):
                cc = torch.cuda.get_device_capability(i)
                name = torch.cuda.get_device_name(i)
                out.append((f"GPU {i}", True, gpu_evidence_line(name, cc), ""))
                arch = evidence_arch(name, cc)
                counted += [arch] if arch in ARCH_CAPABILITY and arch not in counted else []
            out.append(rows_count_for(counted))
        else:
            out.append(("GPU", False, "none (CPU only: correctness via --interpret; timings need the GPU box)",
                        "see docs/gpu-box.md to run on the H200 box"))
            out.append(rows_count_for([]))
    except ImportError:
        out.append(("torch", False, "", "pip install -r requirements/cpu.txt"))
    nvcc = _run(["nvcc", "--version"]).splitlines()
    out.append(("nvcc", bool(nvcc), nvcc[-1] if nvcc else "", "install the CUDA toolkit 13.x (nvcc on PATH)"))
    out.append(("triton", bool(_dist("triton")), _dist("triton"), "pip install triton==3.6.0"))
    sgl = _dist("sglang") or _module_version("sglang")
    out.append(("sglang", sgl == "0.5.23", sgl or "missing",
                "pip install --no-deps -r requirements/sglang.txt, its import deps from requirements/cpu.txt (CPU) "
                "or requirements/gpu.txt (GPU machine)"))
    cute = _dist("nvidia-cutlass-dsl") or ("present" if _module_version("cutlass") else "")
    out.append(("CuTe DSL", bool(cute), cute or "missing",
                "pip install -r requirements/gpu.txt (offline GPU box: scripts/gpu_stage.sh, docs/gpu-box.md)"))
    claude = _run(["claude", "--version"])
    out.append(("Claude Code", bool(claude), claude or "missing", "npm install -g @anthropic-ai/claude-code"))
    humanize = _find_humanize()
    out.append(("Humanize plugin", bool(humanize), humanize or "missing", HUMANIZE_INSTALL))
    out.append(("tmux", bool(shutil.which("tmux")), shutil.which("tmux") or "missing", "apt-get install -y tmux"))
    return out


def _find_humanize() -> str:
    root = Path.home() / ".claude"
    if not root.exists():
        return ""
    for p in root.rglob("*"):
        if p.is_dir() and p.name.lower() == "humanize":
            return str(p)
    return ""


def report(show: Callable[[str], None] = print) -> int:
    rows = checks()
    width = max(len(r[0]) for r in rows)
    for what, ok, found, fix in rows:
        show(f"{'ok ' if ok else 'MISSING'} {what:<{width}}  {found}" + ("" if ok else f"\n        fix: {fix}"))
    return 0
