"""A refusal reaches the fairseq user as one line: an uncaught :class:`~arrowmt.ArrowMTError` (an option, folder or
checkpoint the task refuses, its message naming what to change) is printed as ``arrowmt: error: ...`` instead of a
traceback through fairseq's own frames. ``ARROWMT_TRACEBACK=1`` shows the traceback too; other exceptions are
fairseq's as before."""

from __future__ import annotations

import os
import sys
from types import TracebackType

from arrowmt._errors import ArrowMTError

TRACEBACK_ENV = "ARROWMT_TRACEBACK"


def report_refusals() -> None:
    """Install the hook (once per process) in front of the present ``sys.excepthook``."""
    previous = sys.excepthook
    if getattr(previous, "arrowmt_refusals", False):
        return

    def hook(kind: type[BaseException], exc: BaseException, tb: TracebackType | None) -> None:
        if not isinstance(exc, ArrowMTError) or os.environ.get(TRACEBACK_ENV) == "1":
            previous(kind, exc, tb)
            return
        print(f"arrowmt: error: {exc} (the traceback: {TRACEBACK_ENV}=1)", file=sys.stderr, flush=True)

    hook.arrowmt_refusals = True  # type: ignore[attr-defined]
    sys.excepthook = hook
