"""An invocation's lease on a run (or on a branch step), one owner for every side that decides
with it (docs/architecture.md, "Who owns which decision"). Pure.

A run item's ``leaseUntil`` is `NO_LEASE` when no invocation holds the run, an epoch-ms time
while one does (or while a failed delivery backs off until then). Three places ask "does this
run want an invocation?": the stream handler (`wants_invocation`), the topology's stream
filter (a run item with ``leaseUntil`` = `NO_LEASE`) and the lease's conditional write
(``adapters.invocations_store.take_lease``: ``leaseUntil < :now``, i.e. `lease_free`).
tests/unit/test_leases.py holds the filter and the take to this module's predicates.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ezgh_engine.core.protocol_rules import RUN_LIVE_STATUSES

NO_LEASE = 0
# An invocation's lease outlives its request timeout by this much, so a lease never ends
# while the app may still answer.
LEASE_MARGIN_MS = 60_000
# After a failed delivery (the app unreachable): 2 s doubling, capped at 5 minutes.
BACKOFF_BASE_SECONDS = 2.0
BACKOFF_MAX_SECONDS = 300.0


def lease_ms(invoke_timeout_seconds: float) -> int:
    """How long an invocation's lease lasts, for a request timeout of that many seconds."""
    return int(invoke_timeout_seconds * 1000) + LEASE_MARGIN_MS


def backoff_seconds(failures: int) -> float:
    """The wait before the next delivery after ``failures`` failed ones (from 1)."""
    return min(BACKOFF_MAX_SECONDS, BACKOFF_BASE_SECONDS * 2 ** (failures - 1))


def lease_free(lease_until: int, now_ms: int) -> bool:
    """No live lease (none taken, or it ran out): an invocation may take it now."""
    return lease_until < now_ms


def wants_invocation(run: Mapping[str, Any] | None) -> bool:
    """A live run with an unanswered reason to invoke and no lease (not even a backoff)."""
    return bool(
        run
        and run.get("status") in RUN_LIVE_STATUSES
        and int(run.get("invokeSeq", 0)) > int(run.get("handledSeq", 0))
        and int(run.get("leaseUntil", NO_LEASE)) == NO_LEASE
    )
