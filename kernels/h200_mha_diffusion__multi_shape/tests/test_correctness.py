"""This task's correctness tests: the shared checks of kda_lab.testing, parametrized over task.toml by
the lab's pytest plugin (kda_lab/pytest_plugin.py). Add this task's own tests beside this file."""

from kda_lab.testing import TaskTests


class TestTask(TaskTests):
    """Folder contract, the candidate and SGLang in Triton's interpreter (CPU), the candidate on the GPU."""
