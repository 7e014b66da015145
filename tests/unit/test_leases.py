""" "Does this run want an invocation?" is decided once (core/leases): the stream
handler's predicate, the topology's stream filter and the lease's conditional write agree."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from ezgh_engine.core import leases
from ezgh_engine.topology import TOPOLOGY, StreamSource

NOW = 1_790_000_000_000
STATUSES = ("running", "cancelling", "completed", "failed", "cancelled", "timedOut")
LEASES = (leases.NO_LEASE, NOW - 1, NOW, NOW + 60_000)


def _states() -> list[dict[str, Any]]:
    cases = itertools.product(STATUSES, (0, 1, 2), (0, 1, 2), LEASES)
    return [
        {"type": "run", "status": s, "invokeSeq": i, "handledSeq": h, "leaseUntil": lease}
        for s, i, h, lease in cases
    ]


def _record(run: dict[str, Any]) -> dict[str, Any]:
    image = {k: {"N": str(v)} if isinstance(v, int) else {"S": v} for k, v in run.items()}
    return {"eventName": "MODIFY", "dynamodb": {"NewImage": image}}


def test_the_stream_filter_passes_every_run_that_wants_an_invocation() -> None:
    source = next(s for s in TOPOLOGY.sources if isinstance(s, StreamSource))
    for run in _states():
        if leases.wants_invocation(run):
            assert source.matches(_record(run)), run
        if run["leaseUntil"] != leases.NO_LEASE:  # leased or backing off: nothing owed yet
            assert not source.matches(_record(run)), run


def test_a_run_that_wants_an_invocation_has_a_free_lease() -> None:
    for run in _states():
        if leases.wants_invocation(run):
            assert leases.lease_free(run["leaseUntil"], NOW)


@pytest.mark.parametrize(("until", "free"), [(0, True), (NOW - 1, True), (NOW, False)])
def test_a_lease_is_free_once_it_ran_out(until: int, free: bool) -> None:
    assert leases.lease_free(until, NOW) is free


def test_lease_length_and_backoff() -> None:
    assert leases.lease_ms(900) == 960_000
    assert [leases.backoff_seconds(n) for n in (1, 2, 3, 9, 20)] == [2, 4, 8, 300, 300]
