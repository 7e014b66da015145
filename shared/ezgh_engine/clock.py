"""The only place in the engine that reads the time.

Everything else is handed a `Clock` (or calls `now()`), so tests skip time instead of
sleeping: install a `SkipClock` with `set_clock()` and move it with `advance()`.
"""

from __future__ import annotations

import atexit
import contextlib
import mmap
import os
import struct
import tempfile
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
    """The machine's clock plus an offset that tests move forward to skip waits.

    `share()` puts the offset in a small memory-mapped file, so the local runtime's
    execution environments (child processes) read the same engine time through
    `SharedOffsetClock`: a test's `advance()` moves every process at once.
    """

    def __init__(self) -> None:
        self._offset = timedelta()
        self._lock = threading.Lock()
        self._shared: mmap.mmap | None = None
        self.shared_path: str | None = None

    def now(self) -> datetime:
        with self._lock:
            return datetime.now(UTC) + self._offset

    def advance(self, delta: timedelta | float) -> None:
        """Jump forward by `delta` (a timedelta or seconds)."""
        if not isinstance(delta, timedelta):
            delta = timedelta(seconds=delta)
        with self._lock:
            self._offset += delta
            if self._shared is not None:
                self._shared[:_OFFSET_SIZE] = struct.pack("<d", self._offset.total_seconds())

    def share(self) -> str:
        """The path of a file holding the offset from now on (made once, kept up to date)."""
        with self._lock:
            if self.shared_path is None:
                fd, path = tempfile.mkstemp(prefix="ezgh-clock-")
                os.write(fd, struct.pack("<d", self._offset.total_seconds()))
                self._shared = mmap.mmap(fd, _OFFSET_SIZE)
                os.close(fd)
                self.shared_path = path
                atexit.register(_remove, path)
            return self.shared_path


_OFFSET_SIZE = struct.calcsize("<d")


def _remove(path: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(path)


class SharedOffsetClock:
    """The machine's clock plus the offset a `SkipClock.share()` file holds (in another
    process: the local runtime's execution environments)."""

    def __init__(self, path: str) -> None:
        self.path = path
        with open(path, "r+b") as file:
            self._map = mmap.mmap(file.fileno(), _OFFSET_SIZE, access=mmap.ACCESS_READ)

    def now(self) -> datetime:
        # Read until two reads agree: a write may land between the bytes of one read.
        raw = self._map[:_OFFSET_SIZE]
        while (again := self._map[:_OFFSET_SIZE]) != raw:
            raw = again
        (seconds,) = struct.unpack("<d", raw)
        return datetime.now(UTC) + timedelta(seconds=seconds)


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
