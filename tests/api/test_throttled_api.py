"""DynamoDB throttling the API: the contract's `429 rate_limited` with a Retry-After, never
a 500 (issue 14). Step calls (`/v1/invocations/steps`, the engine's own protocol) keep
answering a 5xx, which the SDK's step transport resends."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from botocore.exceptions import ClientError
from ezgh_engine.adapters import aws

from tests.api.conftest import Project


@pytest.fixture
def throttled_reads(aws_env: None) -> Iterator[list[str]]:
    """Every DynamoDB read of the runs table is throttled (after botocore's retries)."""
    seen: list[str] = []

    def hook(service: str, operation: str, params: dict[str, Any]) -> None:
        reads = ("GetItem", "Query", "BatchGetItem")
        if service == "dynamodb" and operation in reads and "runs" in params.get("TableName", ""):
            seen.append(operation)
            raise ClientError(
                {"Error": {"Code": "ProvisionedThroughputExceededException", "Message": "slow"}},
                operation,
            )

    stop = aws.intercept(hook)
    try:
        yield seen
    finally:
        stop()


@pytest.mark.parametrize("code", ["ProvisionedThroughputExceededException", "ThrottlingException"])
def test_a_throttled_read_answers_429_rate_limited_with_retry_after(
    project: Project, code: str
) -> None:
    def hook(service: str, operation: str, params: dict[str, Any]) -> None:
        if service == "dynamodb" and operation in ("GetItem", "Query"):
            raise ClientError({"Error": {"Code": code, "Message": "slow down"}}, operation)

    stop = aws.intercept(hook)
    try:
        answer = project.call("GET", "/runs/00000000-0000-4000-8000-000000000000")
        search = project.call("GET", "/runs")
    finally:
        stop()
    for got in (answer, search):
        assert got.status == 429, got.body
        assert set(got.body) == {"error"} and got.body["error"]["code"] == "rate_limited"
        assert got.body["error"]["message"]
        assert int(got.headers["Retry-After"]) >= 1


def test_a_throttled_write_answers_429_too(project: Project) -> None:
    """Writes as well as reads, and `TransientError` (a throttle or transaction conflict the
    engine recognized itself) as well as a raw throttle."""

    def hook(service: str, operation: str, params: dict[str, Any]) -> None:
        writes = ("PutItem", "UpdateItem", "TransactWriteItems", "DeleteItem")
        if service == "dynamodb" and operation in writes:
            raise ClientError(
                {
                    "Error": {"Code": "TransactionCanceledException", "Message": "x"},
                    "CancellationReasons": [{"Code": "TransactionConflict"}],
                }
                if operation == "TransactWriteItems"
                else {"Error": {"Code": "ThrottlingException", "Message": "slow down"}},
                operation,
            )

    stop = aws.intercept(hook)
    try:
        answers = [
            project.call("POST", "/queues", body={"name": "busy"}),
            project.call("POST", "/apps", body={"name": "busy", "kind": "pull"}),
        ]
    finally:
        stop()
    for answer in answers:
        assert answer.status == 429, answer.body
        assert answer.body["error"]["code"] == "rate_limited"
        assert "Retry-After" in answer.headers


def test_a_throttled_step_call_stays_a_5xx_for_the_sdk_to_resend(
    project: Project, throttled_reads: list[str]
) -> None:
    from tests.api.conftest import call
    from tests.api.steps_helpers import lease_token, stored_run

    token = lease_token(stored_run())  # writes only: the throttle is on reads
    answer = call(
        "POST",
        "/v1/invocations/steps",
        body={"ops": [{"op": "start", "stepId": "s#1", "name": "s", "attempt": 1}]},
        headers={"Authorization": f"Bearer {token}"},
    )
    assert throttled_reads, "the step call read nothing"
    assert 500 <= answer.status < 600, answer.body
    assert answer.body["error"]["code"] != "rate_limited"
