"""The harness's baseline side is SGLang's original even where the kda_kernels overlay is installed (#10 item 7).

With the SGLang patch applied in the lab's environment, `import sglang` installs the overlay, and the facade
entry point a task names (``sglang.kernels.ops.diffusion:<fn>``) is then the KDA object: the harness timed
KDA against itself and recorded nothing. Run in fresh interpreters on the real SGLang with a fixture overlay
promoting GroupNorm+SiLU (KDA_FORCE_ARCH=h200 so it installs on this CPU host).
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

_spec = importlib.util.spec_from_file_location("kda_overlay_fixtures", Path(__file__).with_name("test_overlay_fixtures.py"))
fx = importlib.util.module_from_spec(_spec)
sys.modules.setdefault("kda_overlay_fixtures", fx)
_spec.loader.exec_module(fx)

pytestmark = fx.needs_sglang

TASK = fx.REPO / "kernels" / "h200_diffusion_group_norm_silu__multi_shape"
GNS = "sglang.kernels.ops.diffusion.norm.group_norm_silu_triton"

SETUP = f"""
from kda_lab.task import load_task
from kda_lab.measure.run import RunError, resolve_baseline, resolve_entry
from kda_lab.measure.env import overlay_state
import kda_kernels
task = load_task({str(TASK)!r})
# in a list: install() rebinds every module global holding SGLang's function, __main__'s included (#10 item 11)
original = [importlib.import_module({GNS!r}).triton_group_norm_silu]
spec = task.functions["triton_group_norm_silu"]
before = overlay_state()
"""


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    return fx.make_tree(tmp_path_factory.mktemp("ov"), {"group_norm_silu": {"triton_group_norm_silu": 1.45,
                                                                            "apply_group_norm_silu": 1.4}})


def test_baseline_is_sglangs_original_with_the_overlay_installed(tree):
    r = fx.run_py(tree, SETUP + """
kda_kernels.install(strict=True)
facade = resolve_entry(spec.entry)  # what the harness called before: the facade, now the KDA object
base = resolve_baseline(spec)
emit({"before": before, "after": overlay_state(), "facade_is_kda": kda(facade), "base_is_original": base is original[0],
      "base_is_kda": kda(base)})
""", env={"KDA_FORCE_ARCH": "h200"})
    assert r["facade_is_kda"], "fixture: the overlay must have replaced the facade's entry point"
    assert r["base_is_original"] and not r["base_is_kda"]
    assert r["before"] == "off" and r["after"] == "on:apply_group_norm_silu+triton_group_norm_silu"


def test_a_baseline_that_calls_kda_code_is_refused(tree):
    """SGLang's apply_group_norm_silu calls triton_group_norm_silu through its module global, which the overlay
    rebinds: its original would time KDA's kernel, so the run refuses."""
    r = fx.run_py(tree, SETUP + """
kda_kernels.install(strict=True)
try:
    resolve_baseline(task.functions["apply_group_norm_silu"])
    refused = ""
except RunError as e:
    refused = str(e)
kda_kernels.uninstall()
after = resolve_baseline(task.functions["apply_group_norm_silu"])
emit({"refused": refused, "after_uninstall_ok": not kda(after), "state": overlay_state()})
""", env={"KDA_FORCE_ARCH": "h200"})
    assert "calls triton_group_norm_silu" in r["refused"] and "KDA_KERNELS_DISABLE=1" in r["refused"]
    assert r["after_uninstall_ok"] and r["state"] == "off"


def test_an_entry_point_that_is_a_kda_object_is_refused(tree):
    """A function the overlay does not know resolves through the task's entry point; a KDA object there is
    refused too."""
    r = fx.run_py(tree, SETUP + """
from dataclasses import replace
odd = replace(spec, name="not_a_swap_target", entry="kda_kernels.diffusion.group_norm_silu:triton_group_norm_silu")
try:
    resolve_baseline(odd)
    _r = ""
except RunError as e:
    _r = str(e)
emit({"refused": _r})
""", env={"KDA_FORCE_ARCH": "h200"})
    assert "resolves to a KDA object" in r["refused"]
