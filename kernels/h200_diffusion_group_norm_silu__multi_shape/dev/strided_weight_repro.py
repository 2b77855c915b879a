"""SGLang 0.5.23's triton_group_norm_silu on strided affine views (upstream-bug material).

    python kernels/h200_diffusion_group_norm_silu__multi_shape/dev/strided_weight_repro.py   # on an H200

weight/bias as every-other-element views of a 2C buffer: SGLang's kernel indexes them as contiguous, so the
output is wrong (H200, 2026-11-24: max error 10.3 in fp32, 10.9 in bf16 against the fp64 reference).
"""

import torch
from sglang.kernels.ops.diffusion.norm.group_norm_silu_triton import triton_group_norm_silu

torch.manual_seed(0)
for dt in (torch.float32, torch.bfloat16):
    x = torch.randn(1, 64, 8, 32, 32, device="cuda", dtype=dt)
    w = torch.randn(128, device="cuda", dtype=dt)[::2]
    b = torch.randn(128, device="cuda", dtype=dt)[::2]
    with torch.no_grad():
        y = triton_group_norm_silu(x, w, b, 32, 1e-6)
    ref = torch.nn.functional.silu(torch.nn.functional.group_norm(x.double(), 32, w.double(), b.double(), 1e-6))
    print("strided weight", dt, "max err", float((y.double() - ref).abs().max()))
