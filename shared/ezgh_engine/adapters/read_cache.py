"""A per-environment memory of registry items read a moment ago, for the hot read paths.

A queue subscription's delivery read four registry items per message, all on the same keys
for every message of the queue (the queue, its subscription's claim and record, the target
app): a burst of a thousand messages a second read each key a thousand times a second,
consistently. `ReadCache` keeps what was read for `max_age` seconds (real time), so a warm
environment reads each at most once per `max_age`.

What it may serve stale, and for how long, is the caller's to say where it uses it
(`registry_store.get_app_cached`, `queues_store`'s `cached=True` reads). It never serves an
entry older than `max_age`, keeps the highest `version` it has seen of an item (a read that
answers an older one does not replace it), and forgets an item the moment this
environment writes or deletes it (`forget`).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

from ezgh_engine import clock

T = TypeVar("T")


class ReadCache(Generic[T]):
    """Values by key, each for `max_age` seconds; at most `max_entries` (oldest go first).
    `version(value)` orders two reads of one item; `owner(value)` names the item a value is
    of, for `forget` (several keys may hold one item: an app by ID, name and slug)."""

    def __init__(
        self,
        max_age: float,
        *,
        version: Callable[[T], int],
        owner: Callable[[T], str],
        max_entries: int = 1000,
    ) -> None:
        self.max_age = max_age
        self._version = version
        self._owner = owner
        self._max_entries = max_entries
        self._entries: OrderedDict[Hashable, tuple[float, T]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: Hashable, read: Callable[[], T | None]) -> T | None:
        """The value for `key` read less than `max_age` ago, else `read()` (kept when it
        found one). Nothing is kept for an item that is not there."""
        now = clock.monotonic()
        with self._lock:
            held = self._entries.get(key)
            if held is not None and now - held[0] < self.max_age:
                return held[1]
        value = read()
        if value is not None:
            self.put(key, value, now)
        return value

    def put(self, key: Hashable, value: T, at: float | None = None) -> None:
        """Remember `value` for `key` (unless an entry of a newer version is held)."""
        at = clock.monotonic() if at is None else at
        with self._lock:
            held = self._entries.get(key)
            if held is not None and self._version(held[1]) > self._version(value):
                return
            self._entries[key] = (at, value)
            self._entries.move_to_end(key)
            while len(self._entries) > self._max_entries:
                self._entries.popitem(last=False)

    def forget(self, owner: str) -> None:
        """Drop every entry of the item `owner` (written or deleted here)."""
        with self._lock:
            for key in [k for k, (_, v) in self._entries.items() if self._owner(v) == owner]:
                del self._entries[key]

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
