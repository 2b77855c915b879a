"""Every `kda e2e` row: the model rows (kda_lab.e2e.models) and the decodes built through SGLang's loader
(kda_lab.e2e.vae_rows), and the selection by row or model name."""

from __future__ import annotations

from kda_lab.e2e.models import ROWS, Row
from kda_lab.e2e.vae_rows import VAE_ROWS


def all_rows() -> tuple[Row, ...]:
    """The model rows and the video/image VAE decodes built through SGLang's loader."""
    return (*ROWS, *VAE_ROWS)


def select(names: list[str] | None, models: list[str] | None) -> list[Row]:
    """Rows by row name and/or model name (case-insensitive substring of ``model``); all when neither is
    given.
    """
    rows = list(all_rows())
    by_name = {r.name: r for r in rows}
    if names:
        unknown = [n for n in names if n not in by_name]
        if unknown:
            raise KeyError(f"unknown e2e rows {unknown}; known: {', '.join(by_name)}")
        rows = [r for r in rows if r.name in names]
    if models:
        wanted = [m.lower() for m in models]
        rows = [r for r in rows if any(w in r.model.lower() or w in r.name for w in wanted)]
        if not rows:
            raise KeyError(
                f"no e2e row matches models {models}; models: {sorted({r.model for r in all_rows()})}"
            )
    return rows
