"""Values read by reference (protocol 1.5), kept for the next invocation of the same run.

A reference names a value that never changes (a run's input; a step's result at a path of
its own writer), so a process that invokes a run again (a warm Lambda, a pull worker) need
not read it again: each replay of a run with large results would otherwise read every one of
them again. Bounded by the bytes it holds; the least recently used go first.
"""

from __future__ import annotations

import copy
import json
import threading
from collections import OrderedDict
from typing import Any, Protocol

MAX_BYTES = 64 * 1024 * 1024


class PayloadCache:
    """(run ID, reference) → value, at most `max_bytes` of encoded values (thread-safe)."""

    def __init__(self, max_bytes: int = MAX_BYTES) -> None:
        self.max_bytes = max_bytes
        self._values: OrderedDict[tuple[str, str], tuple[Any, int]] = OrderedDict()
        self._held = 0
        self._lock = threading.Lock()

    def get(self, run_id: str, ref: str) -> tuple[bool, Any]:
        with self._lock:
            found = self._values.get((run_id, ref))
            if found is None:
                return False, None
            self._values.move_to_end((run_id, ref))
            return True, found[0]

    def put(self, run_id: str, ref: str, value: Any) -> None:
        size = len(json.dumps(value, ensure_ascii=False))
        if size > self.max_bytes:
            return
        with self._lock:
            old = self._values.pop((run_id, ref), None)
            self._held -= old[1] if old else 0
            self._values[(run_id, ref)] = (value, size)
            self._held += size
            while self._held > self.max_bytes:
                _, (_, dropped) = self._values.popitem(last=False)
                self._held -= dropped


# One per process: every invocation of a `PushApp` or a `Worker` in it shares it.
CACHE = PayloadCache()


class Reader(Protocol):
    async def read_payload(self, ref: str) -> Any: ...


async def read(reader: Reader, run_id: str, ref: str) -> Any:
    """The value at `ref` of the run: from `CACHE` when this process read it before (a
    reference's value never changes), else read with `reader` and kept."""
    found, value = CACHE.get(run_id, ref)
    if not found:
        value = await reader.read_payload(ref)
        CACHE.put(run_id, ref, value)
    return copy.deepcopy(value)  # the workflow may change what it is given
