"""Retention gaps a targeted attack found that `service/retention.py` still left (see also
tests/api/test_retention.py): a refused late step call's large output, and a message
wait's index item, which lives outside the run's partition."""

from __future__ import annotations

import pytest
from ezgh_engine import ids
from ezgh_engine.adapters import run_items as items
from ezgh_engine.adapters import waits_store as ws
from ezgh_engine.config import settings
from ezgh_engine.service import retention, timers

from tests.api.steps_helpers import complete, lease_token, start, steps_call, stored_run
from tests.api.test_races import _run_of
from tests.api.test_retention import _objects


@pytest.mark.parametrize("ending", ["timedOut", "deleted"])
def test_a_refused_late_step_call_leaves_no_payload(aws_env: None, ending: str) -> None:
    """The late call is refused (409) after the run ended, or after it was deleted and its
    payloads purged: its large output must not be written first, an object nothing would
    ever delete (the run's purge has run, or runs before the object exists)."""
    run = stored_run()
    token = lease_token(run)
    steps_call(token, [start("big#1")])
    assert timers.time_out(run.id)
    if ending == "deleted":
        retention.purge_run(run.id, run.project_id, None)
        ws.transact([ws.delete(items.run_pk(run.id), items.RUN_SK)])
    large = "x" * (settings().payload_inline_bytes + 10)
    status, body, _ = steps_call(token, [complete("big#1", large)])
    assert status == 409, body
    assert _objects(run.project_id, run.id) == []


def test_a_message_waits_index_item_goes_with_its_run(aws_env: None) -> None:
    """A run that ended while a message wait's index item was left (the best-effort cleanup
    after its end failed): the purge deletes it too."""
    project = ids.new_id()
    run = _run_of(project, "a", status="failed")
    pk = ws.msgwait_pk(project, "q-1", "order-7")
    step = {
        "name": "paid",
        "kind": "message",
        "status": "waiting",
        "attempt": 1,
        "order": "1",
        "queueId": "q-1",
        "msgKey": "order-7",
        "projectId": project,
    }
    index = {"pk": pk, "sk": f"{run.id}#paid#1", "type": "msgwait", "runId": run.id}
    assert ws.transact([ws.step_put(run.id, "paid#1", step), ws.plain_put(index)])
    retention.purge_run(run.id, project, None)
    assert ws.get(pk, f"{run.id}#paid#1") is None
    assert ws.query_pk(items.run_pk(run.id)) == [] or all(
        i.get("sk") == items.RUN_SK for i in ws.query_pk(items.run_pk(run.id))
    )
