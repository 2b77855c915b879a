"""CPU variant of the overlay's layout fuzz (issue #10 item 15; the full run is tests/test_overlay_fuzz_gpu.py).

SGLang 0.5.23's ``triton_group_norm_silu`` runs its real Triton kernels on CPU tensors in Triton's interpreter
(kda_lab.interpret's GroupNorm shims). That wrapper is put in place of SGLang's function before the repository's
own overlay is installed, so the overlay's fallback path is SGLang's Triton kernel exactly as on a non-H200 GPU.
Each layout case runs through SGLang and through the overlay against the fp64 oracle: the overlay must be right
wherever SGLang accepts the input; SGLang's strided-affine bug must reproduce (the kernel reads
``weight_ptr + c`` whatever the stride).
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

_spec = importlib.util.spec_from_file_location("kda_overlay_fixtures", Path(__file__).with_name("test_overlay_fixtures.py"))
fx = importlib.util.module_from_spec(_spec)
sys.modules.setdefault("kda_overlay_fixtures", fx)
_spec.loader.exec_module(fx)

pytestmark = fx.needs_sglang


def test_group_norm_layout_fuzz_in_the_interpreter():
    r = fx.run_py(None, [f"""
    sys.path.insert(0, {str(Path(__file__).parent)!r})
    import overlay_fuzz_cases as fz
    """, """
    from kda_lab import interpret
    interpret.ensure_interpreter()
    interpret.install_shims()
    mod = importlib.import_module("sglang.kernels.ops.diffusion.norm.group_norm_silu_triton")
    sglang = interpret.interpretable(mod.__name__, "triton_group_norm_silu")
    mod.__dict__["triton_group_norm_silu"] = sglang  # SGLang's Triton path for CPU tensors, before install
    import kda_kernels
    # this fuzz is GroupNorm's: strict about that family only (another promoted family's SGLang baseline, e.g. the
    # CuTe DSL norm_scale_shift kernels, cannot even be imported on a CPU host; install() says so in status())
    st = kda_kernels.install(strict=True, families=["group_norm_silu"])
    from sglang.kernels.ops.diffusion import triton_group_norm_silu as overlay
    tol = fz.tolerances("group_norm_silu")
    rows = []
    for name, args in fz.cases("triton_group_norm_silu", "cpu", (torch.float32, torch.float16), big=False):
        row = fz.compare("triton_group_norm_silu", name, args, overlay, sglang, tol)
        row["verdict"] = fz.verdict(row)
        rows.append(row)
    emit({"installed": st["triton_group_norm_silu"]["installed"], "baseline_is_interpreted":
          overlay.__kda_baseline__ is sglang, "rows": rows})
    """], env={"TRITON_INTERPRET": "1"}, timeout=900)
    assert r["installed"] and r["baseline_is_interpreted"]
    bad = [row for row in r["rows"] if row["verdict"]]
    assert bad == [], json.dumps(bad, indent=1)
    wrong = sorted(row["case"] for row in r["rows"] if "ok" in row["sglang"] and not row["sglang"]["ok"])
    print("SGLang wrong (interpreter):", wrong)
    assert "float32/affine_strided" in wrong and "float32/affine_broadcast" in wrong, wrong
    assert all(row["overlay"].get("ok") for row in r["rows"] if row["case"] in wrong)


def test_the_fuzz_takes_tolerances_from_the_task_of_the_gpus_arch():
    sys.path.insert(0, str(Path(__file__).parent))
    import overlay_fuzz_cases as fz

    for arch in ("h200", "b200"):
        tol = fz.tolerances("group_norm_silu", arch)
        assert tol["source"] == f"kernels/{arch}_diffusion_group_norm_silu__multi_shape/task.toml", tol
        assert tol["float16"] == (2e-3, 2e-3)
    assert fz.tolerances("replicate_pad3d_none")["source"].startswith("default")
