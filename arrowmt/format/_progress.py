"""Progress bars that show only on an interactive terminal and never when quiet."""

from __future__ import annotations

import sys

from tqdm import tqdm


def progress_bar(total: int | None, desc: str, unit: str = "it", enabled: bool = True) -> tqdm:
    """A tqdm bar on stderr, disabled when ``enabled`` is false or stderr is not a TTY."""
    show = enabled and sys.stderr.isatty()
    return tqdm(total=total, desc=desc, unit=unit, disable=not show, file=sys.stderr, leave=False)
