"""The arrowmt error hierarchy: every error the library raises derives from ArrowMTError."""

from __future__ import annotations


class ArrowMTError(Exception):
    """Root of every error raised by arrowmt on bad input or bad parameters."""


class InvalidParameterError(ArrowMTError, ValueError):
    """A function argument has a value outside what is accepted."""


class FormatError(ArrowMTError):
    """A file is not what it claims to be: wrong magic, truncated, corrupt, inconsistent."""


class InputDataError(ArrowMTError):
    """Source data (text or binarized) violates a rule: bad UTF-8, count mismatch, bad id."""


class VocabularyError(ArrowMTError):
    """A dictionary file is malformed or does not match the data."""


class OutputExistsError(ArrowMTError, FileExistsError):
    """The output already exists and overwriting was not requested."""


class OutputWriteError(ArrowMTError, OSError):
    """Output could not be written (permissions, disk full, a path component is not a folder)."""


class StorageError(ArrowMTError, OSError):
    """Remote storage or the local cache failed: unreachable endpoint, missing credentials or object,
    an object that differs from its manifest, a full cache disk."""


class MissingDependencyError(ArrowMTError, ImportError):
    """An optional dependency is needed for this feature and is not installed."""


def expect(condition: bool, error: type[ArrowMTError], message: str) -> None:
    """Raise ``error(message)`` unless ``condition`` holds."""
    if not condition:
        raise error(message)
