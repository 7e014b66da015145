"""`POST /queues/{id}/messages` with an Idempotency-Key when storing the answer fails after
SQS took the messages (issue 14): the caller still gets its answer, a resend answers the
one stored copy, and nothing is sent twice."""

from __future__ import annotations

from collections.abc import Iterator
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
