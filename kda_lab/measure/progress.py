"""Progress bars for anything longer than a few seconds (stderr, so tables on stdout stay clean)."""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator
from typing import TypeVar

T = TypeVar("T")


def progress(items: Iterable[T], desc: str) -> Iterator[T]:
    try:
        from tqdm import tqdm
    except ImportError:  # tqdm is a lab dependency; stay usable without it
        yield from items
        return
    # disable=None: bars only on a terminal, so logs captured on the GPU box stay readable.
    yield from tqdm(items, desc=desc, file=sys.stderr, leave=False, dynamic_ncols=True, disable=None)
