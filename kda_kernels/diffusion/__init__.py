"""KDA overlay families: one subpackage per SGLang diffusion kernel family.

``kda_kernels.diffusion.<family>/__init__.py`` holds the generated stamps (``KDA_OPTIMIZED_<fn>``, ...);
``_impls/<arch>/`` holds the exported copy of a promoted task's ``src/`` (``register.py`` defines ``EXPORTS``).
Both are written only by ``kda export`` (``kda_lab.export``).
"""
