"""This task's correctness tests: the shared checks of kda_lab.testing, parametrized over task.toml.

The rotary kernels need two interpreter shims on a CPU host (one autotune config, GPU-like bf16 rounding in the
LTX-2 kernel): kda_lab/interpret_shims_rope.py. ``install()`` does nothing unless TRITON_INTERPRET=1.
"""

from kda_lab.interpret_shims_rope import install as _install_rope_shims
from kda_lab.testing import task_tests

_install_rope_shims()
globals().update(task_tests(__file__))
