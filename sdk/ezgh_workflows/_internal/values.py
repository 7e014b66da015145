"""JSON value rules (seed 001, protocol section 4).

Allowed: ``dict`` with ``str`` keys, ``list``, ``tuple`` (as a list), ``str``, ``int``, finite
``float``, ``bool``, ``None``, an aware ``datetime`` and a ``date`` (both as ISO strings).
Anything else raises `InvalidValueError`; an encoding over 1 MiB raises `OutputTooLargeError`.
"""

from __future__ import annotations

import json
import math
from datetime import UTC, date, datetime
from typing import Any

from .errors import InvalidValueError, OutputTooLargeError

MAX_VALUE_BYTES = 1_048_576
# Arrays and objects nest at most this deep (`{"a": [1]}` is 2 levels): the engine's limit
# (`ezgh_engine.core.validation.MAX_DEPTH`), checked here before a value is sent.
MAX_DEPTH = 64


def to_json_value(value: Any, path: str = "$", depth: int = 0) -> Any:
    """Validate ``value`` and return its plain JSON form (tuples as lists, times as strings).

    ``depth`` is the number of arrays and objects around ``value``."""
    if isinstance(value, dict | list | tuple) and depth >= MAX_DEPTH:
        raise InvalidValueError(f"{path}: nested deeper than {MAX_DEPTH} levels (or circular)")
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise InvalidValueError(f"{path}: {value!r} is not a finite number")
        return float(value)
    if isinstance(value, str):
        return _text(value, path)
    if isinstance(value, datetime):
        return _aware_iso(value, path)
    if isinstance(value, date):
        return value.isoformat()
    if isinstance(value, dict):
        return _dict_value(value, path, depth)
    if isinstance(value, list | tuple):
        return [to_json_value(item, f"{path}[{i}]", depth + 1) for i, item in enumerate(value)]
    raise InvalidValueError(f"{path}: a {type(value).__name__} is not a JSON value")


def _text(value: str, path: str) -> str:
    """A ``str`` that is Unicode text: a lone surrogate (``"\\ud800"``) has no UTF-8 form."""
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise InvalidValueError(f"{path}: a lone UTF-16 surrogate is not text") from None
    return str.__str__(value)


def _aware_iso(value: datetime, path: str) -> str:
    if value.tzinfo is None or value.utcoffset() is None:
        raise InvalidValueError(f"{path}: a naive datetime is not allowed (give it a timezone)")
    return value.isoformat()


def _dict_value(value: dict[Any, Any], path: str, depth: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, item in value.items():
        if not isinstance(key, str):
            raise InvalidValueError(f"{path}: key {key!r} is not a string")
        out[_text(key, f"{path} key")] = to_json_value(item, f"{path}.{key}", depth + 1)
    return out


def encode(value: Any) -> str:
    """Encode ``value`` as compact JSON text, enforcing the value rules and the 1 MiB limit."""
    text = json.dumps(
        to_json_value(value), ensure_ascii=False, separators=(",", ":"), allow_nan=False
    )
    size = len(text.encode("utf-8"))
    if size > MAX_VALUE_BYTES:
        raise OutputTooLargeError(
            f"the value is {size} bytes encoded, over the limit of {MAX_VALUE_BYTES} bytes"
        )
    return text


def roundtrip(value: Any) -> Any:
    """Encode and decode again: the value the workflow sees, first run and replay alike."""
    return json.loads(encode(value))


def iso_utc(moment: datetime) -> str:
    """ISO 8601 in UTC with milliseconds and a ``Z``: the protocol's time format."""
    moment = moment.astimezone(UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def parse_iso(text: str) -> datetime:
    """Parse an ISO 8601 time into an aware UTC datetime (a naive one is taken as UTC)."""
    value = datetime.fromisoformat(text.replace("Z", "+00:00"))
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value.astimezone(UTC)
