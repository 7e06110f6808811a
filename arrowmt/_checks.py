"""The one check of an integer parameter, with one message style for every layer."""

from __future__ import annotations

from numbers import Integral

from arrowmt._errors import InvalidParameterError


def check_integer(name: str, value: object, low: int, high: int | None = None, *, high_name: str | None = None) -> int:
    """``value`` as an int when it is an integer (not a bool) with ``low <= value < high`` (no upper bound if None).

    Else InvalidParameterError ``"<name>: expected an integer >= <low>, got <value>"``, or
    ``"... an integer in [<low>, <high>) ..."`` with ``high`` written as ``high_name`` when given.
    """
    return _checked(name, value, low, high, high_name, "")


def check_optional_integer(name: str, value: object, low: int) -> int | None:
    """None, or ``value`` as :func:`check_integer` takes it (the message says that None is accepted too)."""
    return None if value is None else _checked(name, value, low, None, None, "None or ")


def _checked(name: str, value: object, low: int, high: int | None, high_name: str | None, also: str) -> int:
    if isinstance(value, Integral) and not isinstance(value, bool):
        number = int(value)
        if number >= low and (high is None or number < high):
            return number
    expected = f"an integer >= {low}" if high is None else f"an integer in [{low}, {high_name or high})"
    raise InvalidParameterError(f"{name}: expected {also}{expected}, got {value!r}")
