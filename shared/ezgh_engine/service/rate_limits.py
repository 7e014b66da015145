"""Per-key rate limits of the API: one API key may make at most `settings().key_rate_limit`
requests in any one second (`EZGH_KEY_RATE_LIMIT`, 100 by default, 0 for no limit), counted
across every Lambda environment; more are `429 rate_limited` with `Retry-After: 1`.

The count is a DynamoDB counter per key and second (`adapters.rate_limit_store`): one
conditional write per request, the only way the api function's environments, which share
nothing, agree on a count; a limit past 250 a second counts on several items, so the counter
is never a hot partition key. A refusal is remembered in this environment until its second ends,
so a key that keeps sending past its limit costs no more writes here: a flood of one key is
refused from memory after its first refused request per environment and second. The stage's
own throttling (infra/components/api.py) caps every caller together, before any of this runs.
"""

from __future__ import annotations

from ezgh_engine import clock
from ezgh_engine.adapters import rate_limit_store
from ezgh_engine.config import settings
from ezgh_engine.errors import RateLimited

# What a refused caller waits: the counters are per second.
RETRY_AFTER_SECONDS = 1


class _Refusals:
    """What this environment found full in the current second (forgotten when it ends): the
    keys refused, and each key's counter shards found full (`rate_limit_store.take`)."""

    def __init__(self) -> None:
        self.window = -1
        self.keys: set[str] = set()
        self.full: dict[str, set[int]] = {}

    def _at(self, window: int) -> None:
        if window != self.window:
            self.window, self.keys, self.full = window, set(), {}

    def refused(self, key_id: str, window: int) -> bool:
        return window == self.window and key_id in self.keys

    def full_shards(self, key_id: str, window: int) -> set[int]:
        self._at(window)
        return self.full.setdefault(key_id, set())

    def add(self, key_id: str, window: int) -> None:
        self._at(window)
        self.keys.add(key_id)


_refusals = _Refusals()


def admit(key_id: str) -> None:
    """Count one request of `key_id`, or raise `RateLimited` past the key's limit."""
    limit = settings().key_rate_limit
    if limit <= 0:
        return
    window = clock.now_ms() // 1000
    if _refusals.refused(key_id, window) or not rate_limit_store.take(
        key_id, window, limit, _refusals.full_shards(key_id, window)
    ):
        _refusals.add(key_id, window)
        raise RateLimited(
            f"this API key made more than {limit} requests in one second; "
            f"retry after {RETRY_AFTER_SECONDS} s",
            retry_after_seconds=RETRY_AFTER_SECONDS,
        )
