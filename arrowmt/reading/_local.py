"""A corpus path as a local folder: the path itself, or for a URL the node-local folder mirroring it.

The mirror's code (:mod:`arrowmt.reading._mirror`, the block store, block indexes) is loaded for a URL only: a
process reading local corpora never loads it (memory in every rank).
"""

from __future__ import annotations

import os
from pathlib import Path

from arrowmt.storage import is_url, local_only_path, local_path


def local_only(path: str | os.PathLike[str], name: str, what: str) -> Path:
    """``path`` as a local folder; InvalidParameterError naming ``name`` for a URL: ``what`` reads local corpora only
    (copy one to disk first with ``arrowmt stage``)."""
    expected = f"a local arrowmt folder ({what} reads corpora on local disk)"
    return local_only_path(path, name, expected, "copy it first: arrowmt stage {url} LOCAL_FOLDER")


def local_folder(
    path: str | os.PathLike[str], cache_dir: str | os.PathLike[str] | None = None, cache_limit: object = None
) -> Path:
    """``path`` itself for a local folder; for a URL, the folder caching it (:func:`arrowmt.reading._mirror.mirror`).

    ``cache_dir`` defaults to :func:`arrowmt.reading._mirror.default_cache_dir`, ``cache_limit`` (bytes, or ``"20G"``)
    to ``$ARROWMT_CACHE_LIMIT``, else no limit.
    """
    if not is_url(path):
        return local_path(path)
    from arrowmt.reading._mirror import CacheOptions, mirror

    return mirror(str(path), CacheOptions.of(cache_dir, cache_limit))
