"""The rules of a dictionary's symbols that readers need, in numpy only: the specials and the symbols' digest.

A process that only reads a corpus checks each split's dictionary files against the digests the
split recorded (:mod:`arrowmt.splits._dictionaries`) without loading them as
:class:`~arrowmt.format._vocab.Dictionary` objects, which needs ``pyarrow.compute`` (importing it
costs about 2 MiB of private memory per process, with what it imports).
"""

from __future__ import annotations

import hashlib

import numpy as np

SPECIALS: tuple[str, ...] = ("<s>", "<pad>", "</s>", "<unk>")
OVERWRITE_FLAG = "#fairseq:overwrite"
HASH_DOMAIN = b"arrowmt.format._vocab.v1\n"


def symbols_digest(lengths: np.ndarray, joined: bytes) -> str:
    """:meth:`~arrowmt.format._vocab.Dictionary.sha256` of the symbols (specials first) of UTF-8 byte
    ``lengths`` whose bytes are ``joined``: SHA-256 over :data:`HASH_DOMAIN`, the count and each length
    (little-endian int64), then the bytes."""
    digest = hashlib.sha256(HASH_DOMAIN)
    digest.update(np.array([lengths.shape[0]], dtype="<i8").tobytes())
    digest.update(np.asarray(lengths, dtype="<i8").tobytes())
    digest.update(joined)
    return digest.hexdigest()


def text_symbols_digest(data: bytes) -> tuple[int, str] | None:
    """(number of symbols, :meth:`Dictionary.sha256`) of the ``dict.txt`` bytes ``data``, without loading it.

    Only for the plain layout every converter writes (UTF-8, ``\\n`` line ends, lines
    ``<symbol> <decimal count>``, no ``#fairseq:overwrite`` flag), where the symbols are
    exactly what :meth:`Dictionary.load` reads; None for anything else (then load it).
    Uses numpy only: no pyarrow compute kernel (and its memory) in a reading process.
    """
    if b"\r" in data or OVERWRITE_FLAG.encode() in data:
        return None
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return None
    raw = np.frombuffer(data if not data or data.endswith(b"\n") else data + b"\n", dtype=np.uint8)
    ends = np.flatnonzero(raw == ord("\n"))
    starts = np.concatenate([[0], ends[:-1] + 1]).astype(np.int64)
    spaces = np.flatnonzero(raw == ord(" "))
    before = np.searchsorted(spaces, ends) - 1  # the last space before each line end
    if ends.size and (before < 0).any():
        return None
    last = spaces[before] if ends.size else ends
    count = np.int32 if raw.shape[0] < 2**31 else np.int64  # running counts: int32 sums are ~15x faster here
    non_digits = np.concatenate([[0], np.cumsum((raw < ord("0")) | (raw > ord("9")), dtype=count)])
    if ((last < starts) | (ends - last < 2) | (non_digits[ends] != non_digits[last + 1])).any():
        return None  # a line without a space, or a count that is not plain decimal digits
    edges = np.zeros(raw.shape[0] + 1, dtype=count)
    edges[starts] += 1  # each line's symbol is bytes [start, last): starts and lasts are unique, so no add.at
    edges[last] -= 1
    words = raw[np.cumsum(edges, dtype=count)[:-1] > 0].tobytes()
    specials = [symbol.encode("utf-8") for symbol in SPECIALS]
    lengths = np.concatenate([[len(symbol) for symbol in specials], last - starts]).astype("<i8")
    return int(lengths.shape[0]), symbols_digest(lengths, b"".join(specials) + words)
