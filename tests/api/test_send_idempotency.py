"""`POST /queues/{id}/messages` with an Idempotency-Key when storing the answer fails after
SQS took the messages: the caller still gets its answer, a resend answers the
one stored copy, and nothing is sent twice."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from botocore.exceptions import ClientError
from ezgh_engine.adapters import aws

from tests.api.conftest import Project
from tests.api.test_queues import _local_sources, _queue, _sqs_messages, _url

__all__ = ["_local_sources"]  # its autouse fixture applies here too


def _throttle_answer_writes(times: int) -> Iterator[list[str]]:
    """Fail the first `times` writes of an idempotency answer (UpdateItem on IDEM#…)."""
    failed: list[str] = []

    def hook(service: str, operation: str, params: dict[str, Any]) -> None:
        key = str(params.get("Key", {}).get("pk", {}).get("S", ""))
        answer_write = operation == "UpdateItem" and key.startswith("IDEM#")
        if service == "dynamodb" and answer_write and len(failed) < times:
            failed.append(key)
            raise ClientError(
                {"Error": {"Code": "ThrottlingException", "Message": "slow down"}}, operation
            )

    stop = aws.intercept(hook)
    try:
        yield failed
    finally:
        stop()


@pytest.fixture
def answer_write_fails_twice(aws_env: None) -> Iterator[list[str]]:
    yield from _throttle_answer_writes(2)


def test_a_failed_answer_write_neither_fails_the_send_nor_stores_two_copies(
    project: Project, answer_write_fails_twice: list[str]
) -> None:
    queue = _queue(project)
    body = {"messages": [{"body": "hello"}]}
    headers = {"Idempotency-Key": "wfq_abc"}
    path = f"/queues/{queue['id']}/messages"
    first = project.call("POST", path, body=body, headers=headers)
    assert first.status == 200, first.body
    assert len(answer_write_fails_twice) == 2
    again = project.call("POST", path, body=body, headers=headers)
    assert again.status == 200 and again.body == first.body
    assert len(_sqs_messages(_url(queue["id"]))) == 1


class _Crashed(BaseException):
    """The API function's process died mid-request (a Lambda killed): nothing after it ran,
    neither the answer's write nor the release of the claim."""


@pytest.fixture
def crash_at_the_answer_write(aws_env: None) -> Iterator[list[str]]:
    """The first write of an idempotency answer kills the API function: its effect happened
    (SQS took the messages, the run was written), its answer was never stored."""
    crashed: list[str] = []

    def hook(service: str, operation: str, params: dict[str, Any]) -> None:
        key = str(params.get("Key", {}).get("pk", {}).get("S", ""))
        answer_write = operation == "UpdateItem" and key.startswith("IDEM#")
        if service == "dynamodb" and answer_write and not crashed:
            crashed.append(key)
            raise _Crashed(key)

    stop = aws.intercept(hook)
    try:
        yield crashed
    finally:
        stop()


def _delivered_ids(queue_id: str) -> set[str]:
    """The messageId each stored copy is delivered with (what every consumer dedupes on)."""
    from ezgh_engine.adapters import queues_store
    from ezgh_engine.core.queues import delivered_message

    queue = queues_store.get_queue_by_id(queue_id)
    assert queue is not None
    seen = set()
    for copy in _sqs_messages(_url(queue_id)):
        record = {
            "messageId": copy["MessageId"],
            "body": copy["Body"],
            "attributes": copy.get("Attributes", {}),
            "messageAttributes": {
                name: {"stringValue": value["StringValue"], "dataType": "String"}
                for name, value in copy.get("MessageAttributes", {}).items()
            },
        }
        message = delivered_message(record, queue)
        assert "ezgh.messageId" not in message["attributes"]  # the engine's own, hidden
        seen.add(message["messageId"])
    return seen


def test_a_crash_between_the_send_and_its_answer_sends_no_second_message(
    project: Project, crash_at_the_answer_write: list[str], skip_clock: Any
) -> None:
    queue = _queue(project)
    body = {"messages": [{"body": "hello", "attributes": {"k": "v"}}]}
    headers = {"Idempotency-Key": "wfq_crash"}
    path = f"/queues/{queue['id']}/messages"
    with pytest.raises(_Crashed):
        project.call("POST", path, body=body, headers=headers)
    skip_clock.advance(timedelta(seconds=61))  # the dead request's claim is stale now
    again = project.call("POST", path, body=body, headers=headers)
    assert again.status == 200, again.body
    [sent] = again.body["messages"]
    # Whatever SQS holds, every copy is the one message the resend answered.
    assert _delivered_ids(queue["id"]) == {sent["messageId"]}
    third = project.call("POST", path, body=body, headers=headers)
    assert third.status == 200 and third.body == again.body


def test_a_crash_between_the_start_and_its_answer_starts_no_second_run(
    project: Project,
    crash_at_the_answer_write: list[str],
    skip_clock: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from ezgh_engine.adapters import push

    app = project.call(
        "POST", "/apps", body={"name": "billing", "kind": "push", "url": "https://app.example.com/"}
    ).body
    monkeypatch.setattr(push, "sync_app", lambda _app: push.Synced(["onboarding"], "1.5"))
    assert project.call("POST", f"/apps/{app['id']}/sync").status == 200
    body = {"appId": app["id"], "workflow": "onboarding", "input": {"user": 7}}
    headers = {"Idempotency-Key": "start-7"}
    crash_at_the_answer_write.clear()
    with pytest.raises(_Crashed):
        project.call("POST", "/runs", body=body, headers=headers)
    skip_clock.advance(timedelta(seconds=61))
    again = project.call("POST", "/runs", body=body, headers=headers)
    assert again.status == 201, again.body
    listed = project.call("GET", "/runs")
    assert [r["id"] for r in listed.body["runs"]] == [again.body["id"]]


def test_a_send_that_failed_midway_sends_its_first_part_once_on_retry(project: Project) -> None:
    """Two messages too large for one SendMessageBatch: the second call fails, the request
    fails (its claim let go), the resend sends both; the first is the same message."""
    queue = _queue(project)
    big = "x" * 200_000
    body = {"messages": [{"body": "a" + big}, {"body": "b" + big}]}
    headers = {"Idempotency-Key": "wfq_halfway"}
    calls: list[int] = []

    def hook(service: str, operation: str, params: dict[str, Any]) -> None:
        if service == "sqs" and operation == "SendMessageBatch":
            calls.append(1)
            if len(calls) == 2:
                raise ClientError({"Error": {"Code": "InternalError", "Message": "x"}}, operation)

    stop = aws.intercept(hook)
    try:
        failed = project.call("POST", f"/queues/{queue['id']}/messages", body=body, headers=headers)
        assert failed.status >= 429, failed.body
        again = project.call("POST", f"/queues/{queue['id']}/messages", body=body, headers=headers)
    finally:
        stop()
    assert again.status == 200, again.body
    assert _delivered_ids(queue["id"]) == {m["messageId"] for m in again.body["messages"]}


def test_a_resend_soon_after_a_crash_is_answered_not_told_to_wait_a_minute(
    project: Project, crash_at_the_answer_write: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A send's effects are seeded, so a resend that waited for the dead request's claim
    takes it over at once: a step's retries (seconds apart) get the answer, and the run
    does not fail on 409 "still in progress"."""
    from ezgh_engine.api import idempotency

    monkeypatch.setattr(idempotency, "WAIT_SECONDS", 0.2)
    queue = _queue(project)
    body = {"messages": [{"body": "hello", "attributes": {"k": "v"}}]}
    headers = {"Idempotency-Key": "wfq_soon"}
    path = f"/queues/{queue['id']}/messages"
    with pytest.raises(_Crashed):
        project.call("POST", path, body=body, headers=headers)
    again = project.call("POST", path, body=body, headers=headers)
    assert again.status == 200, again.body
    assert _delivered_ids(queue["id"]) == {again.body["messages"][0]["messageId"]}


def test_a_resend_waiting_for_an_unfinished_claim_polls_by_reading(
    project: Project, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A resend that waits for a concurrent first request reads the record while it waits:
    a conditional put that fails still costs a write (and may be throttled: each was a
    chance of a 429 for a request that only waits)."""
    from ezgh_engine.adapters import idempotency_store
    from ezgh_engine.api import idempotency
    from ezgh_engine.service.auth import authenticate

    monkeypatch.setattr(idempotency, "WAIT_SECONDS", 0.5)
    app = {"name": "billing", "kind": "push", "url": "https://app.example.com/"}
    principal = authenticate(f"Bearer {project.api_key}")
    pk = idempotency.record_pk(principal, "POST /apps", "busy")
    token, _ = idempotency_store.claim(pk, idempotency._request_hash(app), 3600, stale_before_ms=0)
    assert token is not None
    puts: list[str] = []

    def hook(service: str, operation: str, params: dict[str, Any]) -> None:
        if operation == "PutItem" and str(params.get("Item", {})).find("IDEM#") >= 0:
            puts.append(operation)

    stop = aws.intercept(hook)
    try:
        answer = project.call("POST", "/apps", body=app, headers={"Idempotency-Key": "busy"})
    finally:
        stop()
    assert answer.status == 409 and "in progress" in answer.body["error"]["message"]
    assert len(puts) == 1, len(puts)  # one claim, then reads
