"""Exported copies of promoted task sources, one folder per arch (written by `kda export`)."""
