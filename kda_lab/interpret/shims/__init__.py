"""Per-family interpreter shims, named like ``kda_lab/families/<family>.py``; each has ``install() -> bool``."""
