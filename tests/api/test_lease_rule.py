"""The lease's conditional write agrees with `core.leases`: `take_lease` succeeds
exactly when `lease_free` says so, and on every run `wants_invocation` accepts."""

from __future__ import annotations

import pytest
from ezgh_engine import config
from ezgh_engine.adapters import invocations_store as inv
from ezgh_engine.adapters import run_items as items
from ezgh_engine.adapters import waits_store as ws
from ezgh_engine.core import leases

from tests.api.steps_helpers import stored_run, write_raw

NOW = 1_790_000_000_000


def _set_lease(run_id: str, lease_until: int) -> None:
    update = {
        "TableName": config.settings().runs_table,
        "Key": items.run_key(run_id),
        "UpdateExpression": "SET leaseUntil = :until",
        "ExpressionAttributeValues": {":until": {"N": str(lease_until)}},
    }
    write_raw([{"Update": update}])


@pytest.mark.parametrize("lease_until", [leases.NO_LEASE, NOW - 1, NOW, NOW + 60_000])
def test_take_lease_agrees_with_lease_free(aws_env: None, lease_until: int) -> None:
    run = stored_run()
    _set_lease(run.id, lease_until)
    raw = ws.get(f"RUN#{run.id}", "RUN") or {}
    taken = inv.take_lease(run.id, 1, now_ms=NOW, lease_ms=60_000)
    assert (taken is not None) is leases.lease_free(lease_until, NOW)
    if lease_until == leases.NO_LEASE:
        assert leases.wants_invocation(raw) and taken is not None
