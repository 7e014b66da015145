"""Group commit for the write-ahead journal: one `fdatasync` makes every record written
before it durable, so concurrent writers share syncs instead of taking turns.

The journal writes a record (into the OS's page cache) under the emulator's lock, right
after moto applied its request, so the file's order is the apply order; `written()` then
answers the record's position. The request's answer waits in `wait_durable(position)`,
outside that lock: the first waiter to find no sync running syncs everything written so
far; the waiters that came meanwhile wait for it and, if it started before their record
was written, for the next one. No answer leaves before its record is durable, and a
durable record's predecessors in the file are durable with it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable


class GroupCommit:
    """Positions (bytes written since the journal opened, never reset: a compaction does not
    move them back) written and known durable, and the sync that moves one to the other."""

    def __init__(self, sync: Callable[[], None]) -> None:
        self._sync = sync
        self._cond = threading.Condition()
        self._written = 0
        self._durable = 0
        self._syncing = False
        self.syncs = 0  # syncs made (fewer than the records they made durable)

    def written(self, size: int) -> int:
        """Count `size` bytes written (already handed to the OS); answer their end position."""
        with self._cond:
            self._written += size
            return self._written

    def all_durable(self) -> None:
        """Everything written so far is durable by other means (a compaction's fsync'd
        snapshot, a truncation of the journal on a reset)."""
        with self._cond:
            self._durable = self._written
            self._cond.notify_all()

    def wait_durable(self, position: int) -> None:
        """Return once everything up to `position` is durable, syncing if no one else is. A
        failed sync raises here (in the syncer; the others try again themselves)."""
        with self._cond:
            while self._durable < position:
                if self._syncing:
                    self._cond.wait()
                    continue
                self._syncing = True
                target = self._written  # every byte counted here was written before the sync
                break
            else:
                return
        synced = False
        try:
            self._sync()
            synced = True
        finally:
            with self._cond:
                self._syncing = False
                if synced:
                    self.syncs += 1
                    self._durable = max(self._durable, target)
                self._cond.notify_all()
