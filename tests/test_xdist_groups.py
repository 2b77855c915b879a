"""The repository conftest's xdist grouping (conftest.py): under ``-n 2 --dist loadgroup`` a module with a
module-scoped fixture runs on one worker, so the fixture is built once. pytest 9.2 with pytest-xdist 3.8 lost
this silently (xdist's group suffix no longer reached the test id: conftest.GroupSuffix), and nothing failed:
every worker just built the fixture again."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO

CONFTEST = f"""
import importlib.util, sys
sys.path.insert(0, {str(REPO)!r})
_spec = importlib.util.spec_from_file_location("kda_root_conftest", {str(REPO / "conftest.py")!r})
_root = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_root)
# its hooks (not pytest_plugins: a root conftest's own setting)
globals().update({{k: v for k, v in vars(_root).items()
                  if k.startswith("pytest_") and k != "pytest_plugins"}})
"""

SHARED = """
import os, pathlib, pytest

@pytest.fixture(scope="module")
def built():
    out = pathlib.Path(os.environ["KDA_GROUP_PROBE"]) / f"built-{os.environ['PYTEST_XDIST_WORKER']}"
    out.write_text("built")
    return out

@pytest.mark.parametrize("i", range(6))
def test_uses_the_module_fixture(built, i):
    assert built.is_file()

def test_beside_it_without_the_fixture():
    pass
"""

PLAIN = """
import pytest

@pytest.mark.parametrize("i", range(6))
def test_plain(i):
    pass
"""


def test_a_module_with_a_module_fixture_runs_on_one_worker(tmp_path: Path) -> None:
    (tmp_path / "conftest.py").write_text(CONFTEST)
    (tmp_path / "test_shared.py").write_text(SHARED)
    (tmp_path / "test_plain.py").write_text(PLAIN)
    probe = tmp_path / "probe"
    probe.mkdir()
    cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-n", "2", "--dist", "loadgroup", "-v",
           "test_shared.py", "test_plain.py"]
    r = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=300,
                       env={**os.environ, "KDA_GROUP_PROBE": str(probe)})
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    ran = re.findall(r"\[(gw\d+)\] \[\s*\d+%\] PASSED (\S+)", r.stdout)
    shared = [(w, nodeid) for w, nodeid in ran if nodeid.startswith("test_shared.py::")]
    assert len(shared) == 7 and all(nodeid.endswith("@test_shared.py") for _, nodeid in shared), r.stdout
    assert len({w for w, _ in shared}) == 1, shared  # the whole module on one worker
    assert [p.name for p in probe.iterdir()] == [f"built-{shared[0][0]}"]  # its fixture built once
    plain = [nodeid for _, nodeid in ran if nodeid.startswith("test_plain.py::")]
    assert len(plain) == 6 and not any("@" in nodeid for nodeid in plain), plain  # spread one by one
