"""What a task is: its task.toml (schema), workloads, byte model, folder contract and the stamper.

The first stage of the data flow, and torch-free: ``kda tasks`` and ``kda validate`` import this package only.
Chain: ``workloads`` (rows, a leaf) -> ``byte_model`` -> ``twins`` (a twin's ``rows_from``: its home's rows
and tolerances, put together for every reader) -> ``schema`` (Task, load_task, source_hash) -> ``validate``
(folder contract) -> ``stamp`` (``kda new-task``, which also writes the task's launcher).
"""

from kda_lab.task.schema import (
    REQUIRED_FILES,
    FunctionSpec,
    Task,
    TaskError,
    Tolerance,
    all_task_dirs,
    load_candidate,
    load_task,
    parse_task,
    resolve_task_dir,
    source_hash,
)
from kda_lab.task.validate import validate_task_dir

__all__ = [
    "REQUIRED_FILES", "FunctionSpec", "Task", "TaskError", "Tolerance", "all_task_dirs", "load_candidate",
    "load_task", "parse_task", "resolve_task_dir", "source_hash", "validate_task_dir",
]
