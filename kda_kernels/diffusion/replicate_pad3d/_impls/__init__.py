"""Exported copies of promoted task sources, one folder per arch (written by scripts/export_kda_kernels/export.py)."""
