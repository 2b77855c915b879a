"""Launch and agent support: the numbered ``scripts/launch_kernels/kNN_<task>.sh`` wrappers (one per task).

Each wrapper hands its task to ``scripts/launch_kda_kernel_task.sh``, which makes a git worktree and starts
Claude Code with the Humanize commands ready. ``python -m kda_lab.launch`` regenerates every wrapper.
"""
