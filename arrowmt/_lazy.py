"""Lazy exports: a package's face names what it exports, and each name loads its module on first use.

A face (``arrowmt``, ``arrowmt.format``, ``arrowmt.converters``) maps each module to the names it exports from it
and answers ``__getattr__`` with :func:`load_export`. Importing the face then costs nothing, and a process that uses
one part of a package (the split reader, one converter in the CLI) never loads the rest (the writer, verification,
the vocabulary's ``pyarrow.compute``, the other converters). Type checkers read the face's ``TYPE_CHECKING``
imports of the same names.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Mapping, Sequence


def load_export(package: str, exports: Mapping[str, Sequence[str]], name: str) -> object:
    """``name`` from the module of ``exports`` (module -> names) that exports it, kept on ``package`` for later.

    AttributeError when ``package`` does not export ``name`` (what ``getattr`` and ``from ... import`` expect).
    """
    module = next((module for module, names in exports.items() if name in names), None)
    if module is None:
        raise AttributeError(f"module {package!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    setattr(sys.modules[package], name, value)
    return value
