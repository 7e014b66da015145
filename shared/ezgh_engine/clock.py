"""The only place in the engine that reads the time.

Everything else is handed a `Clock` (or calls `now()`), so tests skip time instead of
sleeping: install a `SkipClock` with `set_clock()` and move it with `advance()`.
"""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime, timedelta
from typing import Protocol


class Clock(Protocol):
    def now(self) -> datetime:
        """The current time, aware, in UTC."""
        ...


class SystemClock:
    """The machine's clock."""

    def now(self) -> datetime:
        return datetime.now(UTC)


class SkipClock:
    """The machine's clock plus an offset that tests move forward to skip waits."""

    def __init__(self) -> None:
        self._offset = timedelta()
        self._lock = threading.Lock()

    def now(self) -> datetime:
        with self._lock:
            return datetime.now(UTC) + self._offset

    def advance(self, delta: timedelta | float) -> None:
        """Jump forward by `delta` (a timedelta or seconds)."""
        if not isinstance(delta, timedelta):
            delta = timedelta(seconds=delta)
        with self._lock:
            self._offset += delta


_clock: Clock = SystemClock()


def set_clock(clock: Clock) -> None:
    """Replace the process-wide clock (tests and the local runtime)."""
    global _clock
    _clock = clock


def get_clock() -> Clock:
    return _clock


def now() -> datetime:
    """The current time from the process-wide clock."""
    return _clock.now()


def now_ms() -> int:
    """The current time as integer milliseconds since the epoch."""
    return int(_clock.now().timestamp() * 1000)


def wall_seconds() -> int:
    """The machine's real time in seconds, whatever clock is installed.

    For what other machines check against their own clocks (request signatures), which a
    test's skipped time must not skew.
    """
    return int(time.time())


def monotonic() -> float:
    """Seconds from an arbitrary origin, for measuring durations only."""
    return time.monotonic()


def iso(moment: datetime) -> str:
    """ISO 8601 in UTC with milliseconds and a `Z`, the API's one time format."""
    moment = moment.astimezone(UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def parse_iso(text: str) -> datetime:
    """Parse an ISO 8601 time; a naive one is taken as UTC."""
    value = datetime.fromisoformat(text.replace("Z", "+00:00"))
    return value if value.tzinfo else value.replace(tzinfo=UTC)
