"""Strict parsing of sleep durations: ``"3d"``, ``"1h30m"``, ``"90s"``, numbers, timedeltas."""

from __future__ import annotations

import math
import re
from datetime import timedelta

MAX_SLEEP_SECONDS = 365 * 86_400

_UNITS: dict[str, float] = {
    "w": 604_800,
    "d": 86_400,
    "h": 3_600,
    "m": 60,
    "s": 1,
    "ms": 0.001,
}
_ORDER = list(_UNITS)
_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|w|d|h|m|s)")

Duration = str | int | float | timedelta


def parse_duration(value: object) -> float:
    """Seconds for a duration, between 0 and one year; `ValueError` for anything else.

    Strings are one or more ``<number><unit>`` parts with units ``w d h m s ms``, largest
    first and each at most once, without spaces: ``"2w"``, ``"1h30m"``, ``"1.5s"``, ``"250ms"``.
    """
    seconds = _to_seconds(value)
    if not math.isfinite(seconds) or seconds < 0:
        raise ValueError(f"invalid sleep duration {value!r}: must be a finite, positive duration")
    if seconds > MAX_SLEEP_SECONDS:
        raise ValueError(f"invalid sleep duration {value!r}: at most a year (365 days)")
    return seconds


def parse_duration_unbounded(value: object) -> float:
    """Seconds for a finite, non-negative duration, however long (the caller checks the
    year, so that a longer sleep fails its step instead of raising in the workflow)."""
    seconds = _to_seconds(value)
    if not math.isfinite(seconds) or seconds < 0:
        raise ValueError(f"invalid sleep duration {value!r}: must be a finite, positive duration")
    return seconds


def _to_seconds(value: object) -> float:
    if isinstance(value, bool):
        raise ValueError(f"invalid sleep duration {value!r}: a bool is not a duration")
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        return _parse_text(value)
    raise ValueError(
        f"invalid sleep duration {value!r}: use a string such as '3d' or '1h30m', "
        "a number of seconds, or a timedelta"
    )


def _parse_text(text: str) -> float:
    position, total, last_rank = 0, 0.0, -1
    while position < len(text):
        match = _PART.match(text, position)
        rank = _ORDER.index(match.group(2)) if match else -1
        if match is None or rank <= last_rank:
            raise ValueError(
                f"invalid sleep duration {text!r}: expected parts like '3d', '1h30m' or '90s' "
                "(units w, d, h, m, s, ms, largest first, each once, no spaces)"
            )
        total += float(match.group(1)) * _UNITS[match.group(2)]
        position, last_rank = match.end(), rank
    if not text:
        raise ValueError("invalid sleep duration '': empty")
    return total
