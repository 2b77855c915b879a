"""Repository-wide pytest setup.

On a host without a CUDA GPU, SGLang's Triton kernels run in Triton's CPU interpreter: the variable must be
set before triton is first imported, so it is set here, before any test module is collected.
"""

import os

try:
    import torch

    _has_cuda = torch.cuda.is_available()
except ImportError:
    _has_cuda = False

if not _has_cuda:
    os.environ.setdefault("TRITON_INTERPRET", "1")
