"""A VAE resnet block the way SGLang's VAEs write it: a module-level import of the facade's
``apply_group_norm_silu`` (the binding kda_kernels.install() must rebind), GroupNorm+SiLU -> Conv3d twice."""

import torch
from sglang.kernels.ops.diffusion import apply_group_norm_silu
from torch import nn


class ResnetBlock3D(nn.Module):
    def __init__(self, channels: int, eps: float = 1e-6):
        super().__init__()
        self.norm1 = nn.GroupNorm(32, channels, eps=eps, affine=True)
        self.conv1 = nn.Conv3d(channels, channels, kernel_size=3, padding=1)
        self.norm2 = nn.GroupNorm(32, channels, eps=eps, affine=True)
        self.conv2 = nn.Conv3d(channels, channels, kernel_size=3, padding=1)
        self.act = nn.SiLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = apply_group_norm_silu(x, self.norm1, self.act)
        h = self.conv1(h)
        h = apply_group_norm_silu(h, self.norm2, self.act)
        return x + self.conv2(h)
