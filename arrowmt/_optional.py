"""Optional dependencies: import one, or raise MissingDependencyError saying how to install it."""

from __future__ import annotations

import importlib
from types import ModuleType

from arrowmt._errors import MissingDependencyError


def install_hint(extra: str) -> str:
    """The command that installs arrowmt's optional dependencies ``extra`` (a ``pyproject`` extra)."""
    return f"pip install 'arrowmt[{extra}]'"


def require(module: str, extra: str, feature: str, package: str | None = None) -> ModuleType:
    """Import ``module`` for ``feature``; MissingDependencyError when it (or the package it is in) is absent.

    The message: ``"<feature> needs the '<package>' package; install it with: pip install 'arrowmt[<extra>]'"``
    (``package`` defaults to the top-level name of ``module``). An ImportError raised inside an
    installed package is not hidden.
    """
    top = module.partition(".")[0]
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name not in (top, module):
            raise
        raise MissingDependencyError(
            f"{feature} needs the '{package or top}' package; install it with: {install_hint(extra)}"
        ) from None
