"""Tiny driver for ncu: a few candidate calls on representative shapes (dev only)."""
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src"))
import register  # noqa: E402

with torch.no_grad():
    for shape, fp, cap in [((1, 512, 9, 48, 40), 0, 0), ((1, 512, 3, 128, 128), 0, 0),
                           ((1, 512, 3, 128, 128), 0, 102400), ((1, 256, 17, 256, 256), 0, 0)]:
        x = torch.randn(shape, device="cuda", dtype=torch.float16)
        w = torch.rand(shape[1], device="cuda", dtype=torch.float16) + 0.5
        b = torch.randn(shape[1], device="cuda", dtype=torch.float16)
        for _ in range(2):
            register.group_norm_silu_cuda(x, w, b, 32, 1e-6, fp, 0, cap)
        torch.cuda.synchronize()
