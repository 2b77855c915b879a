"""End to end on the H200: a HunyuanVideo-shaped VAE resnet block through SGLang's apply_group_norm_silu,
before and after kda_kernels.install(). Records one ledger row per shape (function e2e:vae_resnet_block,
row_kind test, so production geomeans are unaffected).

    python kernels/h200_diffusion_group_norm_silu__multi_shape/dev/vae_block.py
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
TASK_DIR = HERE.parent
sys.path[:0] = [str(HERE), str(TASK_DIR.parents[1])]

import vae_block_site  # noqa: E402

import kda_kernels  # noqa: E402
from kda_lab import ledger  # noqa: E402
from kda_lab.measure.env import capture  # noqa: E402
from kda_lab.measure.run import new_run_id  # noqa: E402
from kda_lab.measure.timing import GraphTimer, host_time_us, time_interleaved  # noqa: E402
from kda_lab.paths import repo_root  # noqa: E402
from kda_lab.task import load_task, source_hash  # noqa: E402

SHAPES = [(1, 512, 3, 48, 40), (1, 256, 5, 96, 80), (1, 512, 2, 64, 64)]  # HunyuanVideo VAE production shapes


def main() -> int:
    torch.manual_seed(0)
    dev = torch.device("cuda")
    task = load_task(TASK_DIR)
    sols = ledger.read_solutions(TASK_DIR)
    h = source_hash(task.src_dir)
    cand_id = next((r["id"] for r in reversed(sols) if r["source_hash"] == h), "unregistered")
    env = capture(repo_root(), dev)
    run_id = new_run_id()
    baseline_fn = vae_block_site.apply_group_norm_silu
    rows, blocks = [], {}
    with torch.no_grad():
        for shape in SHAPES:
            blk = vae_block_site.ResnetBlock3D(shape[1]).to(dev, torch.float16).eval()
            sets = [{"x": torch.randn(shape, device=dev, dtype=torch.float16)} for _ in range(3)]
            blocks[shape] = (blk, sets, GraphTimer(lambda a, b=blk: b(a["x"]), sets),
                             host_time_us(lambda a, b=blk: b(a["x"]), sets, calls=20), blk(sets[0]["x"]).float())
        report = kda_kernels.install(strict=True)
        st = kda_kernels.status()
        gn = {k: v for k, v in st.get("functions", st).items() if "group_norm" in k} if isinstance(st, dict) else st
        print("install:", report)
        print("status (group norm):", gn)
        swapped = vae_block_site.apply_group_norm_silu
        assert swapped is not baseline_fn, "the call site still holds SGLang's function after install()"
        for shape, (blk, sets, base_timer, base_host, base_out) in blocks.items():
            out = blk(sets[0]["x"]).float()
            err = (out - base_out).abs().max().item()
            kda_timer = GraphTimer(lambda a, b=blk: b(a["x"]), sets)  # captured through the swapped op
            kda_host = host_time_us(lambda a, b=blk: b(a["x"]), sets, calls=20)
            t = time_interleaved({"baseline": base_timer, "candidate": kda_timer}, trials=10, seed=1).summaries
            sp = t["baseline"].median / t["candidate"].median
            print(f"{shape}: block {t['baseline'].median:.1f} -> {t['candidate'].median:.1f} us ({sp:.3f}x), "
                  f"host {base_host:.1f} -> {kda_host:.1f} us, max |diff| vs SGLang path {err:.3g}")
            rows.append({
                "run_id": run_id, "task": task.slug, "arch": env["arch"], "mode": "bench", "candidate_id": cand_id,
                "source_hash": h, "function": "e2e:vae_resnet_block", "row": "vae_resnet_block_" + "x".join(map(str, shape)),
                "row_kind": "test", "model": "HunyuanVideo", "preset": "hunyuanvideo", "dtype": "float16",
                "shape": f"x=float16{list(shape)} GroupNorm+SiLU->Conv3d x2 through kda_kernels.install()",
                "baseline_us": t["baseline"].median, "baseline_p10_us": t["baseline"].p10,
                "baseline_p90_us": t["baseline"].p90, "candidate_us": t["candidate"].median,
                "candidate_p10_us": t["candidate"].p10, "candidate_p90_us": t["candidate"].p90, "speedup": sp,
                "host_baseline_us": base_host, "host_candidate_us": kda_host, "trials": 10, "input_sets": len(sets),
                "seed": 0, **{k: env[k] for k in ledger.ENV_COLUMNS}, "git_dirty": env["git_dirty"],
                "command": "python kernels/h200_diffusion_group_norm_silu__multi_shape/dev/vae_block.py",
                "note": f"max abs diff vs SGLang path {err:.3g}",
            })
    kda_kernels.uninstall()
    assert vae_block_site.apply_group_norm_silu is baseline_fn, "uninstall() did not restore the call site"
    ledger.append_benchmark_rows(TASK_DIR, rows)
    print(f"recorded {len(rows)} rows (run {run_id})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
