"""Retention: every item and object of a run is gone once its run item is (its
TTL, 30 days after it ended, or DeleteRun); DeleteRun leaves no callback index item."""

from __future__ import annotations

from typing import Any

import boto3
import pytest
from ezgh_engine import clock, ids
from ezgh_engine.adapters import aws, payloads, runs_store
from ezgh_engine.adapters import run_items as items
from ezgh_engine.adapters import waits_store as ws
from ezgh_engine.service import callbacks, stream

from tests.api.conftest import ENV
from tests.api.test_races import _run_of


def _a_run_with_everything(
    project_id: str, *, scoped: bool = True
) -> tuple[Any, list[tuple[str, str]]]:
    """An ended run with a run key, a callback step (and its index item), an event, a
    message marker and a large output in S3; answers it and the keys of its other items.
    Not `scoped`: its key item is a project-wide one, from before keys were scoped."""
    run = _run_of(project_id, "a", status="completed", run_key="k-1")
    scope = items.run_key_scope(run.app_id, run.workflow) if scoped else None
    key = (items.run_key_pk(project_id, "k-1", scope), "RUNKEY")
    ws.transact([ws.plain_put({"pk": key[0], "sk": key[1], "runId": run.id})])
    at = clock.iso(clock.now())
    actions, url = callbacks.create_actions(
        run.id, project_id, "approve#1", "approve", None, order="1", at=at, expires=1
    )
    event = {"pk": items.run_pk(run.id), "sk": items.EVENT_PREFIX + "1", "type": "event"}
    marker = {"pk": items.run_pk(run.id), "sk": "MSG#m-1", "type": "msgseen"}
    assert ws.transact([*actions, ws.plain_put(event), ws.plain_put(marker)])
    runs_store.put_payload(project_id, run.id, payloads.RUN_OUTPUT_PATH, '"big"')
    token = url.rsplit("/", 1)[-1]
    index = (ws.callback_pk(ids.sha256_hex(token)), "CALLBACK")
    steps = [(items.run_pk(run.id), items.STEP_PREFIX + "approve#1")]
    return run, [key, index, *steps, (event["pk"], event["sk"]), (marker["pk"], marker["sk"])]


def _left(keys: list[tuple[str, str]]) -> list[tuple[str, str]]:
    return [k for k in keys if ws.get(*k) is not None]


def _objects(project_id: str, run_id: str) -> list[str]:
    s3 = boto3.client("s3", region_name="us-east-1")
    listed = s3.list_objects_v2(Bucket=ENV["EZGH_PAYLOAD_BUCKET"], Prefix=f"{project_id}/{run_id}/")
    return [o["Key"] for o in listed.get("Contents", [])]


@pytest.mark.parametrize("scoped", [True, False], ids=["scoped-key", "project-wide-key"])
def test_the_rest_of_a_run_goes_when_its_run_item_expires(aws_env: None, scoped: bool) -> None:
    project = ids.new_id()
    run, keys = _a_run_with_everything(project, scoped=scoped)
    raw = ws.get(items.run_pk(run.id), items.RUN_SK)
    assert raw is not None and _left(keys) == keys and _objects(project, run.id)
    ws.transact([ws.delete(items.run_pk(run.id), items.RUN_SK)])  # DynamoDB's TTL
    removed = {
        "eventName": "REMOVE",
        "userIdentity": {"type": "Service", "principalId": "dynamodb.amazonaws.com"},
        "dynamodb": {"OldImage": ws.ddb.to_item(raw)},
    }
    stream.handle_record(removed)
    assert _left(keys) == []
    assert _objects(project, run.id) == []


def _expire(run_id: str) -> list[str]:
    """DynamoDB's TTL deletes the run item and the stream shows it; the S3 requests the
    purge made."""
    raw = ws.get(items.run_pk(run_id), items.RUN_SK)
    assert raw is not None
    ws.transact([ws.delete(items.run_pk(run_id), items.RUN_SK)])
    removed = {"eventName": "REMOVE", "dynamodb": {"OldImage": ws.ddb.to_item(raw)}}
    seen: list[str] = []
    stop = aws.observe(lambda r: seen.append(r["operation"]) if r["service"] == "s3" else None)
    try:
        stream.handle_record(removed)
    finally:
        stop()
    return seen


def test_a_run_that_stored_no_payload_is_purged_without_listing_s3(aws_env: None) -> None:
    run = _run_of(ids.new_id(), "a", status="completed")
    assert _expire(run.id) == []


def test_a_payload_no_item_names_is_still_purged(aws_env: None) -> None:
    """A step's candidate output whose step write lost: nothing references the object, but
    its run item was marked before it was stored, so the purge lists the run's objects."""
    project = ids.new_id()
    run = _run_of(project, "a", status="completed")
    path = payloads.step_output_path("a#1", ids.time_ordered_id())
    runs_store.put_payload(project, run.id, path, '"lost"')
    assert _objects(project, run.id)
    assert "ListObjectsV2" in _expire(run.id)
    assert _objects(project, run.id) == []


def test_a_run_item_from_before_payload_marks_is_listed(aws_env: None) -> None:
    project = ids.new_id()
    run = _run_of(project, "a", status="completed")
    ws.transact([ws.plain_put({**items.run_values(run), "payloads": None}, only_new=False)])
    payloads.put(project, run.id, "steps/a%231/w/output", '"old"')
    assert "ListObjectsV2" in _expire(run.id)
    assert _objects(project, run.id) == []


def test_delete_run_leaves_no_callback_index_item(project: Any, monkeypatch: Any) -> None:
    from ezgh_engine.service import timers

    from tests.api.test_races import _synced_app

    app = _synced_app(project, monkeypatch)
    run = project.call("POST", "/runs", body={"appId": app["slug"], "workflow": "onboarding"})
    run_id = run.body["id"]
    actions, url = callbacks.create_actions(
        run_id, project.project_id, "approve#1", "approve", None, order="1", at="x", expires=1
    )
    assert ws.transact(actions)
    assert timers.time_out(run_id)  # the run ends (any end will do)
    index = (ws.callback_pk(ids.sha256_hex(url.rsplit("/", 1)[-1])), "CALLBACK")
    assert ws.get(*index) is not None
    assert project.call("DELETE", f"/runs/{run_id}").status in (200, 204)
    assert ws.get(*index) is None


def test_a_jobs_index_entry_and_failed_items_go_with_its_run(project: Any) -> None:
    """A job's index entry and its failed items are items of its run's partition: when the
    job's run expires (30 days after the job ended), they go with it, listed no more."""
    from ezgh_engine.adapters import flows_store
    from ezgh_engine.adapters.flows_store import FailedItem
    from ezgh_engine.service import flow_jobs

    flow = project.call("POST", "/flows", body={"name": "kept"}).body
    graph = {"nodes": [{"id": "start", "moduleType": "trigger.manual"}], "edges": []}
    assert project.call("POST", "/flows/kept/commits", body={"graph": graph}).status == 201
    job = project.call("POST", "/flows/kept/jobs", body={}).body
    failed = FailedItem(
        id=flow_jobs.failed_item_id(job["id"], 1, "start"),
        project_id=project.project_id,
        job_id=job["id"],
        flow_id=flow["id"],
        node_id="start",
        module_type="trigger.manual",
        input={},
        error={"code": "user", "name": "Boom", "message": "boom"},
        attempts=1,
        created_at=clock.iso(clock.now()),
    )
    flow_jobs.record_failed_item(failed)
    keys = [(items.run_pk(job["id"]), "JOB"), flows_store.failed_item_key(failed.id)]
    assert all(ws.get(*k) is not None for k in keys)
    for key in keys:  # each with a TTL of its own, a backstop
        assert int(ws.get(*key)["ttl"]) > int(clock.now().timestamp())
    assert [j["id"] for j in project.call("GET", "/jobs").body["jobs"]] == [job["id"]]
    _expire(job["id"])
    assert _left(keys) == []
    assert project.call("GET", "/jobs").body["jobs"] == []
    assert project.call("GET", "/failedItems").body["failedItems"] == []
