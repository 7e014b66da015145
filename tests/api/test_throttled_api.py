"""DynamoDB throttling the API: the contract's `429 rate_limited` with a Retry-After, never
a 500. Step calls (`/v1/invocations/steps`, the engine's own protocol) keep
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


def _cancelled_for_capacity(operation: str) -> ClientError:
    """DynamoDB's answer to a transaction it throttled: no throttle code (botocore does not
    retry it), a cancellation whose reason is `ThrottlingError` (an on-demand table scaling)."""
    return ClientError(
        {
            "Error": {
                "Code": "TransactionCanceledException",
                "Message": "Transaction cancelled, please refer cancellation reasons for "
                "specific reasons [ThrottlingError, None]",
            },
            "CancellationReasons": [
                {"Code": "ThrottlingError", "Message": "Throughput exceeds the current capacity"},
                {"Code": "None"},
            ],
        },
        operation,
    )


def test_a_delete_cancelled_for_capacity_answers_429_not_404(
    project: Project, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A throttled transaction is not a refused condition: deleting a key, an app or a
    subscription that exists answers 429 (try again), never 404 `not_found` (a revoked-looking
    key that still works), and the thing is still there to delete."""
    from ezgh_engine.adapters import event_sources

    monkeypatch.setenv(event_sources.ENV_EVENT_SOURCES, "local")  # no Lambda mapping to make
    key = project.call("POST", "/apiKeys", body={"name": "k", "permissions": []}).body
    app = project.call("POST", "/apps", body={"name": "busy", "kind": "pull"}).body
    queue = project.call("POST", "/queues", body={"name": "orders"}).body
    sub = project.call(
        "POST",
        "/subscriptions",
        body={
            "queueId": queue["id"],
            "target": {"kind": "https", "url": "https://hooks.example.com/in"},
        },
    ).body
    paths = [f"/apiKeys/{key['id']}", f"/apps/{app['id']}", f"/subscriptions/{sub['id']}"]

    def hook(service: str, operation: str, params: dict[str, Any]) -> None:
        if service == "dynamodb" and operation == "TransactWriteItems":
            raise _cancelled_for_capacity(operation)

    stop = aws.intercept(hook)
    try:
        answers = [project.call("DELETE", path) for path in paths]
    finally:
        stop()
    for answer in answers:
        assert answer.status == 429, answer.body
        assert answer.body["error"]["code"] == "rate_limited"
    for path in paths:  # nothing was deleted; now it is
        assert project.call("DELETE", path).status == 204, path


def test_every_throttle_code_is_one_list() -> None:
    """What the API answers 429 for and what the stores turn into a retryable error read the
    same list (`aws.is_throttle`), a transaction cancelled for capacity included; a refused
    condition stays a refusal even when another item of it was throttled."""
    from ezgh_engine.adapters import ddb
    from ezgh_engine.api.errors import is_throttle
    from ezgh_engine.errors import TransientError

    for code in ("TooManyRequestsException", "RequestLimitExceeded", "RequestThrottled"):
        error = ClientError({"Error": {"Code": code, "Message": "x"}}, "Op")
        assert aws.is_throttle(error) and is_throttle(error)
        with pytest.raises(TransientError):
            ddb.raise_transient(error)
    cancelled = _cancelled_for_capacity("TransactWriteItems")
    assert aws.is_throttle(cancelled) and is_throttle(cancelled)
    with pytest.raises(TransientError):
        ddb.raise_transient(cancelled)
    refused = ClientError(
        {
            "Error": {"Code": "TransactionCanceledException", "Message": "x"},
            "CancellationReasons": [
                {"Code": "ConditionalCheckFailed"},
                {"Code": "ThrottlingError"},
            ],
        },
        "TransactWriteItems",
    )
    assert not aws.is_throttle(refused)
