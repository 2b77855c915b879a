"""scripts/setup_env.sh's install plan, run for real against a stand-in ``.venv/bin/python`` (and a stand-in
uv) that record every call instead of installing: torch goes through pip with --no-deps (pip's configuration
may name the local CPU wheel, which uv does not read), every other install goes through the pinned uv with
pip's exact arguments, pip does it all where uv does not install or KDA_NO_UV=1, and a current stamp installs
nothing."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

from tests.conftest import REPO

PINS = ("requirements/cpu.txt", "requirements/e2e-cpu.txt", "requirements/sglang.txt",
        "requirements/peers-cpu.txt", "pyproject.toml")
# The rest of the plan, in order: the same arguments whichever installer runs them, and whether the install
# writes .pyc files (the peers' source is read, never imported on CPU: none).
REST = [("-r requirements/cpu.txt", True),
        ("--no-deps -r requirements/sglang.txt", True),
        ("--no-deps -e .", True),
        ("--no-deps -r requirements/peers-cpu.txt", False),
        ("--no-deps --upgrade --target .venv/e2e-site -r requirements/e2e-cpu.txt", True)]
UV_REST = [f"uv pip install -q --python .venv/bin/python{' --compile-bytecode' if pyc else ''} {rest}"
           for rest, pyc in REST]
PIP_REST = [f"pip install -q{'' if pyc else ' --no-compile'} {rest}" for rest, pyc in REST]
UV_VERSION = re.search(r"^uv_version=(\S+)$", (REPO / "scripts/setup_env.sh").read_text(), re.M).group(1)

FAKE_PYTHON = r"""#!/usr/bin/env bash
# records `-m pip ...`; a --target .venv/.uv install of uv makes a recording uv there (or fails: UV_FAILS)
set -euo pipefail
log=LOG
if [ "$1" = -c ]; then echo "torch 0 triton 0 sglang 0"; exit 0; fi
echo "pip ${*:3}" >> "$log"
if [[ " $* " == *" --target .venv/.uv "* ]]; then
  [ ! -f UV_FAILS ] || exit 1
  mkdir -p .venv/.uv/bin
  uv=.venv/.uv/bin/uv
  printf '#!/usr/bin/env bash\nif [ "$1" = --version ]; then echo "uv VERSION"; exit 0; fi\n' > "$uv"
  printf 'echo "uv $*" >> %s\n' "$log" >> "$uv"
  chmod +x "$uv"
fi
"""


def _checkout(tmp_path: Path) -> tuple[Path, Path]:
    root = tmp_path / "repo"
    (root / "scripts").mkdir(parents=True)
    shutil.copy2(REPO / "scripts/setup_env.sh", root / "scripts/setup_env.sh")
    for rel in PINS:
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / rel, root / rel)
    log = tmp_path / "calls.log"
    py = root / ".venv/bin/python"
    py.parent.mkdir(parents=True)
    py.write_text(FAKE_PYTHON.replace("LOG", str(log)).replace("UV_FAILS", str(tmp_path / "uv-fails"))
                  .replace("VERSION", UV_VERSION))
    py.chmod(0o755)
    return root, log


def _run(root: Path, **env: str) -> subprocess.CompletedProcess:
    python_dir = Path(shutil.which("python3") or "python3").parent  # python3.11 for the version check
    return subprocess.run(["scripts/setup_env.sh"], cwd=root, capture_output=True, text=True, timeout=60,
                          env={"PATH": f"/usr/bin:/bin:{python_dir}", **env})


def _pip_head() -> list[str]:
    pins = (REPO / "requirements/cpu.txt").read_text().splitlines()
    torch = next(line for line in pins if line.startswith("torch=="))
    return ["pip install -q --upgrade pip", f"pip install -q --no-deps {torch}"]


def test_uv_installs_all_but_torch_with_pips_arguments(tmp_path: Path) -> None:
    root, log = _checkout(tmp_path)
    r = _run(root)
    assert r.returncode == 0, r.stdout + r.stderr
    assert log.read_text().splitlines() == [
        *_pip_head(), f"pip install -q --upgrade --target .venv/.uv uv=={UV_VERSION}", *UV_REST]
    assert (root / ".venv/.kda-env-stamp").is_file() and "environment ready" in r.stdout
    # a current stamp installs nothing; a changed pin runs the plan again, reusing the installed uv
    log.unlink()
    assert _run(root).returncode == 0 and not log.exists()
    with (root / "requirements/cpu.txt").open("a") as f:
        f.write("# a changed pin file\n")
    assert _run(root).returncode == 0
    assert not any("uv==" in line for line in log.read_text().splitlines())


def test_pip_does_it_all_where_uv_does_not_install_or_is_refused(tmp_path: Path) -> None:
    root, log = _checkout(tmp_path)
    (tmp_path / "uv-fails").touch()
    r = _run(root)
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"uv {UV_VERSION} did not install; installing with pip" in r.stderr
    assert log.read_text().splitlines() == [
        *_pip_head(), f"pip install -q --upgrade --target .venv/.uv uv=={UV_VERSION}", *PIP_REST]
    (tmp_path / "uv-fails").unlink()
    (root / ".venv/.kda-env-stamp").unlink()
    log.unlink()
    r = _run(root, KDA_NO_UV="1")
    assert r.returncode == 0 and "did not install" not in r.stderr, r.stdout + r.stderr
    assert log.read_text().splitlines() == [*_pip_head(), *PIP_REST]
