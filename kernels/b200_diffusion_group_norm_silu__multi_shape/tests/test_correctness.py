"""This task's correctness tests: the shared checks of kda_lab.testing, parametrized over task.toml.

SGLang's group-norm wrappers refuse CPU tensors before any Triton kernel runs; kda_lab.interpret_shims_gn
lets the interpreter test run SGLang's real kernels on the rows tagged 'tiny' (see its docstring).
"""

from kda_lab.interpret_shims_gn import install
from kda_lab.testing import task_tests

install()
globals().update(task_tests(__file__))
