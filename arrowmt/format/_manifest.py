"""The dataset folder's manifest (``arrowmt.json``): splits, shard files, sizes and checksums.

Every name in a manifest is read from a file, so it is never trusted as a path:
:meth:`Manifest.load`, which every reader goes through, accepts only plain file names
inside the folder (see :func:`plain_name_error`) and refuses listed files that are
not regular files there (a symlink leaving the folder, a FIFO, a folder, a device).
"""

from __future__ import annotations

import json
import os
import stat
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from arrowmt._errors import FormatError
from arrowmt.files import SHA256_HEX, file_sha256, not_regular_error, write_bytes_atomic
from arrowmt.format._schema import FORMAT_NAME, FORMAT_VERSION, MANIFEST_NAME, SPLIT_SUFFIX

MAX_JSON_BYTES = 64 << 20  # a manifest of 100,000 shards is ~20 MB
MAX_NAME_BYTES = 255  # NAME_MAX of every common filesystem
DICTIONARY_SUFFIX = ".txt"
REQUIRED_KEYS = frozenset({"format", "format_version", "languages", "dictionaries", "source_format", "files"})
OPTIONAL_KEYS = frozenset({"provenance"})
PAIRS_KEY = "pairs"  # provenance key: the language pairs of a folder holding several (``["de-en", "fr-en"]``)
ROW_ORDER_KEY = "row_order"  # provenance key: split -> row order file of a copy stored in plan order
BLOCK_ORDER_KEY = "block_order"  # provenance key: split -> block table entry of LM blocks stored in plan order
SIDE_FILES_KEY = "side_files"  # provenance key: other side files of the folder (a list of names: sampled lattices)
ENTRY_KEYS = ("file", "rows", "size", "sha256")
SHOWN_CHARS = 80


@dataclass(frozen=True)
class FileEntry:
    """One split (or shard) file as recorded after conversion."""

    file: str
    rows: int
    size: int
    sha256: str

    @classmethod
    def of(cls, path: Path, rows: int) -> FileEntry:
        """The entry of the split file just written at ``path`` (``rows`` rows): its name, size and SHA-256."""
        return cls(file=path.name, rows=rows, size=path.stat().st_size, sha256=file_sha256(path))


@dataclass
class Manifest:
    """What a dataset folder holds; written last by converters, so its presence means 'complete'."""

    languages: dict[str, str | None]
    dictionaries: dict[str, str]
    source_format: str
    files: dict[str, FileEntry] = field(default_factory=dict)
    provenance: dict[str, object] = field(default_factory=dict)  # how the corpus was made (converter options)
    format: str = FORMAT_NAME
    format_version: int = FORMAT_VERSION

    MAX_BYTES: ClassVar[int] = MAX_JSON_BYTES  # the largest manifest read, from disk (load) or object storage
    SAMPLED: ClassVar[tuple[str, str]] = ("sampled/words", "sampled/forms")  # a corpus's sampled segmentations: two
    # arrowmt folders inside it, the rows as word ids and the words' lattices (arrowmt.segments)

    @property
    def language_pairs(self) -> list[str]:
        """The pairs of a folder holding several (split ``{split}.{src}-{tgt}`` each); empty otherwise."""
        pairs = self.provenance.get(PAIRS_KEY)
        return [str(pair) for pair in pairs] if isinstance(pairs, list) else []

    @language_pairs.setter
    def language_pairs(self, pairs: list[str]) -> None:
        self.provenance[PAIRS_KEY] = list(pairs)

    def to_json(self) -> bytes:
        return (json.dumps(asdict(self), sort_keys=True, indent=2) + "\n").encode("utf-8")

    def save(self, folder: str | os.PathLike[str]) -> Path:
        path = manifest_path(folder)
        write_bytes_atomic(path, self.to_json())
        return path

    @classmethod
    def load(cls, folder: str | os.PathLike[str]) -> Manifest:
        """Read and check ``folder``'s manifest: every reader of an arrowmt folder starts here.

        Each problem is one FormatError naming the manifest (and the key and value):
        missing or unreadable manifest, not a regular file, not a JSON object, nesting
        too deep, wrong types, names that are not plain file names, and listed files
        that are not regular files inside the folder. Missing listed files are left to
        the reader that needs them.
        """
        path = manifest_path(folder)
        check_member(Path(folder), MANIFEST_NAME, "the manifest")
        if not os.path.lexists(path) and (hint := data_bin_hint(Path(folder))):
            raise FormatError(f"{path}: missing; {folder} is not a converted arrowmt dataset: {hint}")
        manifest = cls.parse(read_json(path, "manifest", cls.MAX_BYTES), path)
        manifest.check_files(Path(folder), path)
        return manifest

    @classmethod
    def from_bytes(cls, raw: bytes, where: str) -> Manifest:
        """A Manifest from the bytes of a manifest file read elsewhere (object storage: ``where`` is its URL), checked
        as :meth:`load` checks one."""
        return cls.parse(parse_json(raw, where, "manifest", cls.MAX_BYTES), Path(where))

    @classmethod
    def parse(cls, data: object, path: Path) -> Manifest:
        """A Manifest from decoded JSON ``data``, every type and name checked (``path`` names it in errors)."""
        data = _expect(data, dict, "the top level", path)
        _check_keys(data, path)
        if data["format"] != FORMAT_NAME or data["format_version"] != FORMAT_VERSION:
            raise FormatError(
                f"{path}: expected format {FORMAT_NAME!r} version {FORMAT_VERSION}, "
                f"got {_shown(data['format'])} version {_shown(data['format_version'])}"
            )
        return cls(
            languages=_languages(data["languages"], path),
            dictionaries=_dictionaries(data["dictionaries"], path),
            source_format=_expect(data["source_format"], str, "source_format", path),
            files={name: _file_entry(name, entry, path) for name, entry in _expect_dict(data["files"], "files", path)},
            provenance=_expect(data.get("provenance", {}), dict, "provenance", path),
        )

    def file_names(self) -> set[str]:
        """Every file this manifest lists (split files, dictionaries, row orders, block tables), the manifest itself
        excluded."""
        return {entry.file for entry in self.files.values()} | set(self.dictionaries.values()) | self.side_file_names()

    def list_side_files(self, names: list[str]) -> None:
        """Record ``names`` (plain names of files in the folder) as side files of the folder."""
        self.provenance[SIDE_FILES_KEY] = list(names)

    def side_file_names(self) -> set[str]:
        """The side files the folder lists: of splits stored in plan order, row orders
        (:mod:`arrowmt.stored._row_order`) and block tables (:mod:`arrowmt.stored._block_order`); and
        ``provenance["side_files"]`` (a sampled segmentations' lattices)."""
        rows = self.provenance.get(ROW_ORDER_KEY)
        blocks = self.provenance.get(BLOCK_ORDER_KEY)
        others = self.provenance.get(SIDE_FILES_KEY)
        listed = list(rows.values()) if isinstance(rows, dict) else []
        if isinstance(blocks, dict):
            listed += [entry.get("file") for entry in blocks.values() if isinstance(entry, dict)]
        listed += list(others) if isinstance(others, list) else []
        for name in listed:
            error = plain_name_error(name)
            if error:
                raise FormatError(f"manifest provenance: side file {name!r}: {error}")
        return set(listed)

    def check_files(self, folder: Path, path: Path) -> None:
        """FormatError unless every listed file that exists is a regular file inside ``folder``."""
        for name, entry in self.files.items():
            check_member(folder, entry.file, f"listed in {path} as files[{name!r}]")
        for lang, name in self.dictionaries.items():
            check_member(folder, name, f"listed in {path} as dictionaries[{lang!r}]")

    def shards(self, split: str) -> list[str]:
        """File-level names making up ``split``, as fairseq loads them: ``train``, ``train1``, ``train2``, ...

        Numbering starts at 1 and stops at the first missing number (``train`` + ``train2``
        without ``train1`` is just ``train``); a split that does not exist has no shards.
        A name that is itself a shard of another split (``train1`` beside ``train``) is
        only itself: with ``train`` ... ``train12``, ``train1`` never takes ``train11``.
        """
        return self._shards(split, {})

    def splits(self) -> list[str]:
        """Top-level split names: every file-level name that is not a shard of another split."""
        runs: dict[str, int] = {}
        claimed = {shard for name in self.files for shard in self._shards(name, runs)[1:]}
        return sorted(name for name in self.files if name not in claimed)

    def _shards(self, split: str, runs: dict[str, int]) -> list[str]:
        if split not in self.files:
            return []
        if self._is_shard(split, runs):
            return [split]
        return [split, *(f"{split}{k}" for k in range(1, self._run(split, runs) + 1))]

    def _run(self, base: str, runs: dict[str, int]) -> int:
        """How many of ``base1``, ``base2``, ... are listed without a gap (memoized in ``runs``)."""
        if base not in runs:
            count = 0
            while f"{base}{count + 1}" in self.files:
                count += 1
            runs[base] = count
        return runs[base]

    def _is_shard(self, name: str, runs: dict[str, int]) -> bool:
        """Whether ``name`` is ``base`` + ``k`` (k >= 1, no leading zero) inside the numbered run of a listed base."""
        digits = len(name) - len(name.rstrip("0123456789"))
        for cut in range(len(name) - digits, len(name)):
            base, number = name[:cut], name[cut:]
            if number[0] == "0" or len(number) > len(str(len(self.files))) or base not in self.files:
                continue
            if int(number) <= self._run(base, runs):
                return True
        return False


def manifest_path(folder: str | os.PathLike[str]) -> Path:
    """Where ``folder``'s manifest lives."""
    return Path(folder) / MANIFEST_NAME


def split_path(folder: str | os.PathLike[str], name: str) -> Path:
    """Path of the file holding split (or shard) ``name`` inside ``folder``."""
    return Path(folder) / f"{name}{SPLIT_SUFFIX}"


def plain_name_error(value: object, suffix: str = "") -> str | None:
    """Why ``value`` is not a plain file name ending in ``suffix``, or None when it is one.

    A plain name is a non-empty string without a path separator (``/`` or ``\\``),
    without NUL, not starting with ``.`` (so never ``.``, ``..`` or arrowmt's own
    hidden temporaries), at most 255 bytes of UTF-8: it can only name a file inside
    the folder it is joined to.
    """
    expected = f"expected a plain file name{f' ending in {suffix!r}' if suffix else ''} inside the folder"
    expected += " (no '/', '\\', NUL or leading '.')"
    if not isinstance(value, str) or not value or value.startswith("."):
        return f"{expected}, got {_shown(value)}"
    if "/" in value or "\\" in value or "\0" in value or not value.endswith(suffix) or value == suffix:
        return f"{expected}, got {_shown(value)}"
    try:
        size = len(value.encode("utf-8"))
    except UnicodeEncodeError:
        return f"{expected}, got a name that is not valid UTF-8: {_shown(value)}"
    if size > MAX_NAME_BYTES:
        return f"{expected}, got a name of {size} bytes (at most {MAX_NAME_BYTES})"
    return None


def check_member(folder: Path, name: str, where: str) -> None:
    """FormatError unless ``folder/name`` is missing or a regular file inside ``folder``.

    Uses ``lstat``/``stat`` only (never opens the file), so a FIFO or a device cannot
    block; a symlink may point anywhere inside the folder, never outside it.
    """
    path = folder / name
    try:
        st = os.lstat(path)
        if stat.S_ISLNK(st.st_mode):
            _check_link_inside(folder, path, where)
            st = os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        return  # a missing file (or folder) is reported by the reader that needs it
    except OSError as exc:
        raise FormatError(f"{path} ({where}): cannot inspect: {exc.strerror or exc}") from exc
    if not stat.S_ISREG(st.st_mode):
        raise not_regular_error(f"{path} ({where})", st.st_mode)


def _check_link_inside(folder: Path, path: Path, where: str) -> None:
    target = Path(os.path.realpath(path))
    base = Path(os.path.realpath(folder))
    if target == base or not target.is_relative_to(base):
        raise FormatError(
            f"{path} ({where}): expected a file inside {folder}, got a symbolic link to {target} (outside the folder)"
        )


def data_bin_hint(folder: Path) -> str | None:
    """What to do with ``folder`` when it holds a fairseq data-bin (``*.idx`` beside ``*.bin``, a ``dict*.txt``),
    else None."""
    try:
        names = {entry.name for entry in os.scandir(folder)}
    except OSError:
        return None
    indexed = any(n.endswith(".idx") and f"{n[:-4]}.bin" in names for n in names)
    if not indexed or not any(n.startswith("dict") and n.endswith(".txt") for n in names):
        return None
    import shlex  # only for this hint: not loaded by every reading process

    command = f"arrowmt convert fairseq {shlex.quote(str(folder))} OUT"
    return f"it is a fairseq data-bin folder: convert it first with '{command}'"


def read_json(path: Path, what: str, limit: int = MAX_JSON_BYTES) -> Any:
    """Decoded JSON of the regular file ``path``; any problem is one FormatError naming ``path``.

    The file is checked with ``stat`` before it is opened (non-blocking), so a FIFO or
    ``/dev/zero`` in its place fails at once; files over ``limit`` bytes (64 MiB) and nesting too deep
    for the parser are refused.
    """
    try:
        raw = _read_regular(path, limit)
    except FileNotFoundError as exc:
        raise FormatError(f"{path}: missing; {path.parent} is not a converted arrowmt dataset") from exc
    except NotADirectoryError as exc:
        raise FormatError(f"{path.parent}: expected an arrowmt dataset folder, got a file") from exc
    except OSError as exc:
        raise FormatError(f"{path}: cannot read the {what}: {exc.strerror or exc}") from exc
    return parse_json(raw, str(path), what, limit)


def parse_json(raw: bytes, where: str, what: str, limit: int = MAX_JSON_BYTES) -> Any:
    """Decoded JSON of ``raw``, the ``what`` read from ``where``: FormatError naming it when over ``limit`` bytes,
    malformed, or nested too deeply for the parser."""
    if len(raw) > limit:
        raise FormatError(f"{where}: expected at most {limit} bytes, got {len(raw)}")
    try:
        return json.loads(raw.decode("utf-8"))
    except RecursionError:
        raise FormatError(f"{where}: malformed {what}: JSON nested too deeply") from None
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError, over-long integers
        raise FormatError(f"{where}: malformed {what}: {exc}") from None


def _read_regular(path: Path, limit: int) -> bytes:
    st = os.stat(path)
    if not stat.S_ISREG(st.st_mode):
        raise not_regular_error(str(path), st.st_mode)
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    with os.fdopen(fd, "rb") as handle:
        st = os.fstat(handle.fileno())
        if not stat.S_ISREG(st.st_mode):  # replaced between stat and open
            raise not_regular_error(str(path), st.st_mode)
        if st.st_size > limit:
            raise FormatError(f"{path}: expected at most {limit} bytes, got {st.st_size}")
        return handle.read(st.st_size + 1)  # a file grown since fstat reads as malformed, not up to the cap


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= SHOWN_CHARS else f"{text[:SHOWN_CHARS]}... ({len(text)} characters)"


def _expect(value: Any, kind: type, where: str, path: Path) -> Any:
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise FormatError(f"{path}: {where}: expected {kind.__name__}, got {type(value).__name__} {_shown(value)}")
    return value


def _expect_dict(value: Any, where: str, path: Path) -> list[tuple[str, Any]]:
    return list(_expect(value, dict, where, path).items())


def _check_keys(data: dict[str, Any], path: Path) -> None:
    missing, unknown = REQUIRED_KEYS - data.keys(), data.keys() - REQUIRED_KEYS - OPTIONAL_KEYS
    if missing or unknown:
        raise FormatError(
            f"{path}: expected keys {sorted(REQUIRED_KEYS)} (and optionally {sorted(OPTIONAL_KEYS)}), "
            f"got missing {sorted(missing)}, unknown {sorted(unknown)}"
        )


def _checked_name(value: object, suffix: str, where: str, path: Path) -> str:
    if error := plain_name_error(value, suffix):
        raise FormatError(f"{path}: {where}: {error}")
    return value  # type: ignore[return-value]


def _languages(value: Any, path: Path) -> dict[str, str | None]:
    """Column -> language; a language becomes part of exported file names, so it must be a plain name too."""
    return {
        column: None if lang is None else _checked_name(lang, "", f"languages[{column!r}]", path)
        for column, lang in _expect_dict(value, "languages", path)
    }


def _dictionaries(value: Any, path: Path) -> dict[str, str]:
    return {
        lang: _checked_name(name, DICTIONARY_SUFFIX, f"dictionaries[{lang!r}]", path)
        for lang, name in _expect_dict(value, "dictionaries", path)
    }


def _file_entry(name: str, entry: Any, path: Path) -> FileEntry:
    where = f"files[{name!r}]"
    expected_file = _checked_name(f"{name}{SPLIT_SUFFIX}", SPLIT_SUFFIX, f"{where} (the split name)", path)
    entry = _expect(entry, dict, where, path)
    if sorted(entry) != sorted(ENTRY_KEYS):
        raise FormatError(f"{path}: {where}: expected keys {sorted(ENTRY_KEYS)}, got {sorted(entry)}")
    if entry["file"] != expected_file:
        raise FormatError(f"{path}: {where}.file: expected {expected_file!r}, got {_shown(entry['file'])}")
    rows = _expect(entry["rows"], int, f"{where}.rows", path)
    size = _expect(entry["size"], int, f"{where}.size", path)
    sha256 = _expect(entry["sha256"], str, f"{where}.sha256", path)
    if rows < 0 or size < 0 or not SHA256_HEX.fullmatch(sha256):
        raise FormatError(
            f"{path}: {where}: expected rows >= 0, size >= 0 and a 64-digit lowercase hex sha256, "
            f"got rows {rows}, size {size}, sha256 {_shown(sha256)}"
        )
    return FileEntry(file=expected_file, rows=rows, size=size, sha256=sha256)
