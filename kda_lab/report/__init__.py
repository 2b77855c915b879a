"""``kda report``: the ledgers rendered (leaderboard, README task table, plots), nothing measured.

Chain: ``model`` (runs, candidates and lineage loaded from the ledgers) -> ``markdown`` (tables, README splice,
``--check``) and ``plots`` (PNGs); both render the one model and neither imports the other.
"""

from kda_lab.report.markdown import (
    END_MARKER,
    LEADERBOARD,
    PLOTS,
    README,
    START_MARKER,
    check,
    expected_files,
    main,
    register,
    render_leaderboard,
    splice_readme,
    task_section,
    task_table,
    write,
)
from kda_lab.report.model import (
    LARGE_ROW_BYTES,
    ORDER_FILE,
    SUSPECT_SOL,
    Candidate,
    Run,
    TaskReport,
    collect,
    load_task_report,
    plot_names,
    read_launchers,
)

__all__ = [
    "END_MARKER", "LEADERBOARD", "PLOTS", "README", "START_MARKER", "check", "expected_files", "main", "register",
    "render_leaderboard", "splice_readme", "task_section", "task_table", "write", "LARGE_ROW_BYTES", "ORDER_FILE",
    "SUSPECT_SOL", "Candidate", "Run", "TaskReport", "collect", "load_task_report", "plot_names", "read_launchers",
]
