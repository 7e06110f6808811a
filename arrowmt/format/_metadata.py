"""Split metadata stored as JSON in the Arrow schema (never pickle)."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field

from arrowmt._errors import FormatError
from arrowmt.files import canonical_json
from arrowmt.format._schema import FORMAT_NAME, READABLE_SPLIT_VERSIONS, SPLIT_FORMAT_VERSION


@dataclass(frozen=True)
class ColumnInfo:
    """What one token column holds."""

    role: str
    lang: str | None
    dictionary: str
    dictionary_sha256: str
    vocab_size: int
    tokens: int


@dataclass(frozen=True)
class SpecialIds:
    """Ids of the special symbols (fairseq defaults)."""

    bos: int = 0
    pad: int = 1
    eos: int = 2
    unk: int = 3


@dataclass(frozen=True)
class SplitMetadata:
    """Everything a reader needs to know about a split file besides its data."""

    split: str
    rows: int
    rows_per_batch: int
    columns: dict[str, ColumnInfo]
    special_ids: SpecialIds = field(default_factory=SpecialIds)
    source_format: str = "unknown"
    format: str = FORMAT_NAME
    format_version: int = SPLIT_FORMAT_VERSION
    # a copy in plan order (``arrowmt order``): its row order file and a digest of the manifest entry naming the plan
    # its rows are stored by (:func:`arrowmt.stored._row_order.order_marker`); None, and not written, elsewhere
    stored_order: dict[str, str] | None = None

    @property
    def languages(self) -> dict[str, str | None]:
        return {name: info.lang for name, info in self.columns.items()}

    def to_json(self) -> bytes:
        """Canonical JSON bytes (sorted keys), so equal metadata gives equal files (a plain split's are what they
        were before ``stored_order`` was added)."""
        fields = asdict(self)
        if fields["stored_order"] is None:
            del fields["stored_order"]
        return canonical_json(fields)

    @classmethod
    def from_json(cls, raw: bytes, where: str) -> SplitMetadata:
        """Parse metadata bytes read from ``where``; FormatError if anything is off."""
        try:
            data = json.loads(raw.decode("utf-8"))
            _check_format(data, where)
            columns = {name: ColumnInfo(**info) for name, info in data.pop("columns").items()}
            specials = SpecialIds(**data.pop("special_ids"))
            return cls(columns=columns, special_ids=specials, **data)
        except FormatError:
            raise
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            raise FormatError(f"{where}: arrowmt metadata is malformed: {exc}") from exc


def _check_format(data: dict, where: str) -> None:
    if not isinstance(data, dict):
        raise FormatError(f"{where}: arrowmt metadata is malformed: expected a JSON object, got {type(data).__name__}")
    if data.get("format") != FORMAT_NAME:
        raise FormatError(f"{where}: metadata 'format': expected {FORMAT_NAME!r}, got {data.get('format')!r}")
    version = data.get("format_version")
    if type(version) is not int or version not in READABLE_SPLIT_VERSIONS:
        raise FormatError(
            f"{where}: metadata 'format_version': expected one of {list(READABLE_SPLIT_VERSIONS)}, got {version!r} "
            "(written by another arrowmt version)"
        )
