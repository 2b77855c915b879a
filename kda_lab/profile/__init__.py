"""``kda profile``: Nsight Compute on one row (``command``), its reports digested by ``ncu``.

``python -m kda_lab.profile --launch ...`` is the child process ``ncu`` runs (see :func:`command.launch`).
"""

from kda_lab.profile.command import launch, main, register

__all__ = ["launch", "main", "register"]
