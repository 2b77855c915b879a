"""Offline sm_90a build of ``fuse_scale_shift_kernel`` on a CPU host: SGLang 0.5.23's ``blc_opt`` kernel and the
candidate's MulAdd kernel at production signatures (registers, grid, and the global memory instructions: 16-byte
vectors or narrower). Direction only, not evidence: timings come from the H200.

    env -u TRITON_INTERPRET .venv/bin/python kernels/h200_diffusion_fuse_scale_shift__multi_shape/dev/offline_muladd.py

Same method as offline_sm90.py (its recording driver stand-in and PTX readers); SGLang's wrapper runs from its
own source with its CUDA assertion dropped and its NVIDIA tile choice taken, CPU tensors standing for CUDA ones (never read).
"""

from __future__ import annotations

import inspect
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import offline_sm90 as base  # noqa: E402  (this folder's sibling: the stand-in driver and the PTX readers)

FN = "fuse_scale_shift_kernel"
ROWS = {  # name -> (L, C, scale shape, scale dtype)
    "hunyuanvideo_muladd_L27030": (27030, 3072, (1, 3072), "bfloat16"),
    "qwen_muladd_L19": (19, 3072, (1, 1, 3072), "bfloat16"),
    "wan_t2v_muladd_L37800": (37800, 5120, (1, 1, 5120), "float32"),
}


def main() -> int:
    if os.environ.get("TRITON_INTERPRET") == "1":
        sys.exit("run without TRITON_INTERPRET (env -u TRITON_INTERPRET ...)")
    from kda_lab.interpret.offline_launch import offline_candidate

    rec, cand = offline_candidate(base.TASK_DIR)
    import sglang.kernels.ops.diffusion.modulate.scale_shift_triton as m
    import torch

    text = inspect.getsource(m)  # the module's name is rebound by select_impl: read the CUDA def from the file
    start = text.index("def fuse_scale_shift_kernel(")
    src = text[start:text.index("\ndef ", start)].replace(
        "    assert (x.is_cuda and scale.is_cuda) or (x.is_xpu and scale.is_xpu)\n", "").replace(
        "if x.is_cuda and not is_hip():", "if not is_hip():")  # the NVIDIA tile choice, as on the GPU
    ns: dict = {}
    exec(compile(src, m.__file__, "exec"), m.__dict__ | ns, ns)  # noqa: S102 - SGLang's own source
    compiled = rec.compiled
    for row, (seq, c, sshape, sdt) in ROWS.items():
        x = torch.randn(1, seq, c).bfloat16()
        scale = torch.randn(sshape).to(getattr(torch, sdt))
        shift = torch.randn(1, seq, c).bfloat16()
        for impl, f in (("sglang", ns[FN]), ("candidate", cand.EXPORTS[FN])):
            f(x, scale, shift, 1.0)
            kern = compiled[-1]
            st = base.ptxas_stats(kern.asm["ptx"]) | base.ptx_memory(kern.asm["ptx"])
            print(f"{row:28s} {impl:9s} grid {rec.launches[-1]['grid'][:3]} warps {kern.metadata.num_warps} "
                  f"regs {st['regs']:3d} spill {st['spill']} | SASS LDG.128 {st['sass_ldg128']:2d} other "
                  f"{st['sass_ldg_other']:2d} STG.128 {st['sass_stg128']:2d} other {st['sass_stg_other']:2d}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
