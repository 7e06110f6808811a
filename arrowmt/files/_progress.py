"""Progress bars that show only on an interactive terminal and never when quiet."""

from __future__ import annotations

import sys

from tqdm import tqdm


def progress_bar(total: int | None, desc: str, unit: str = "it", enabled: bool = True) -> tqdm:
    """A tqdm bar on stderr, disabled when ``enabled`` is false or stderr is not a TTY (unit "B": KiB, MiB, ...)."""
    show = enabled and sys.stderr.isatty()
    in_bytes = unit == "B"
    return tqdm(
        total=total,
        desc=desc,
        unit=unit,
        disable=not show,
        file=sys.stderr,
        leave=False,
        unit_scale=in_bytes,
        unit_divisor=1024 if in_bytes else 1000,
    )
