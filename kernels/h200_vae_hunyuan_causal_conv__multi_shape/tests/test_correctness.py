"""This task's correctness tests: the shared checks of kda_lab.testing, parametrized over task.toml."""

from kda_lab.testing import task_tests

globals().update(task_tests(__file__))
