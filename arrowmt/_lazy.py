"""Lazy exports: a package's face names what it exports once, and each name loads its module on first use.

A face (``arrowmt``, ``arrowmt.format``, ``arrowmt.converters``, ...) imports what it exports: eagerly at the top
(``from arrowmt._errors import ArrowMTError``) or, for what loads on first use, inside ``if TYPE_CHECKING:``, where
type checkers and editors read the names and their types. Those imports are the one table of the face: it ends
with ``__getattr__, __dir__, __all__ = attach(__name__, __file__)``, which reads them back (:func:`face_imports`) and
answers ``__getattr__`` with :func:`load_export`. Importing the face then costs nothing, and a process that uses one
part of a package (the split reader, one converter in the CLI) never loads the rest (the writer, verification, the
vocabulary's ``pyarrow.compute``, the other converters).
"""

from __future__ import annotations

import ast
import importlib
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

NOT_EXPORTS = ("__future__", "typing", __name__)  # what a face imports for itself


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


def face_imports(face: str | Path) -> tuple[list[str], dict[str, tuple[str, ...]]]:
    """What the face file ``face`` exports: the names it imports at its top level (eager), and module -> names of its
    ``if TYPE_CHECKING:`` imports (lazy)."""
    tree = ast.parse(Path(face).read_text(encoding="utf-8"))
    eager = [alias.asname or alias.name for node in _imports(tree.body) for alias in node.names]
    blocks = [node for node in tree.body if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING"]
    lazy: dict[str, tuple[str, ...]] = {}
    for node in _imports([child for block in blocks for child in block.body]):
        lazy[str(node.module)] = (*lazy.get(str(node.module), ()), *(alias.name for alias in node.names))
    return eager, lazy


def _imports(body: list[ast.stmt]) -> list[ast.ImportFrom]:
    return [node for node in body if isinstance(node, ast.ImportFrom) and node.module not in NOT_EXPORTS]


def attach(package: str, face: str | Path) -> tuple[Callable[[str], object], Callable[[], list[str]], list[str]]:
    """``__getattr__``, ``__dir__`` and ``__all__`` of ``package``, whose face file is ``face``: everything it
    imports, the names inside ``if TYPE_CHECKING:`` loaded on first use."""
    eager, lazy = face_imports(face)
    names = sorted({*eager, *(name for found in lazy.values() for name in found)})

    def __getattr__(name: str) -> object:
        return load_export(package, lazy, name)

    def __dir__() -> list[str]:
        return list(names)

    return __getattr__, __dir__, names
