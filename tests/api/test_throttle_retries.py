"""How the engine's AWS clients meet a throttle (adapters/aws.py): botocore's `standard`
retries, as many attempts as the caller can afford, and a transaction DynamoDB cancels for
capacity retried the same way. Throttles are answered at the HTTP seam as AWS answers them
(`aws.throttled_answer`), so botocore's own retry logic is what runs."""

from __future__ import annotations

import types
from collections.abc import Iterator
from typing import Any

import botocore.endpoint
import pytest
from botocore.exceptions import ClientError
from ezgh_engine.adapters import aws
from ezgh_engine.config import settings


@pytest.fixture
def slept(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """botocore's backoff sleeps, recorded instead of slept."""
    sleeps: list[float] = []
    fake = types.SimpleNamespace(sleep=sleeps.append)
    monkeypatch.setattr(botocore.endpoint, "time", fake)
    return sleeps


@pytest.fixture
def throttle(aws_env: None) -> Iterator[dict[str, Any]]:
    """Answer the next `plan["left"]` requests of `plan["service"]` as throttled."""
    plan: dict[str, Any] = {"service": "", "left": 0, "seen": []}

    def answer(service: str, operation: str, request: Any) -> Any:
        if service != plan["service"] or plan["left"] <= 0:
            return None
        plan["left"] -= 1
        plan["seen"].append(operation)
        return aws.throttled_answer(service, operation, request, nth=plan.get("nth", 0))

    stop = aws.respond(answer)
    try:
        yield plan
    finally:
        stop()


def _put(key: str) -> dict[str, Any]:
    item = {"pk": {"S": key}, "sk": {"S": "X"}}
    return {"TableName": settings().runs_table, "Item": item}


def test_a_throttle_is_retried_with_jittered_exponential_backoff(
    throttle: dict[str, Any], slept: list[float]
) -> None:
    throttle.update(service="dynamodb", left=4)
    aws.client("dynamodb").put_item(**_put("p1"))
    assert throttle["seen"] == ["PutItem"] * 4
    assert len(slept) == 4
    for i, delay in enumerate(slept):  # rand(0, 1) x min(1 s x 2^i, 20 s)
        assert 0 <= delay <= min(2**i, 20)
    got = aws.client("dynamodb").get_item(TableName=settings().runs_table, Key=_put("p1")["Item"])
    assert "Item" in got


@pytest.mark.parametrize(
    ("service", "attempts"), [("dynamodb", 5), ("sqs", 5), ("lambda", 3), ("scheduler", 3)]
)
def test_each_service_gets_the_attempts_its_callers_can_afford(
    throttle: dict[str, Any], slept: list[float], service: str, attempts: int
) -> None:
    """DynamoDB and SQS: 5 attempts (up to 15 s of backoff, inside the API's 29 s). Lambda
    and Scheduler: 3, because their callers on the stream go round a throttle that outlasts
    them (the invocations queue) instead of holding the shard."""
    throttle.update(service=service, left=100)
    calls = {
        "dynamodb": lambda: aws.client("dynamodb").put_item(**_put("p2")),
        "sqs": lambda: aws.client("sqs").send_message(
            QueueUrl=settings().invocations_queue_url, MessageBody="{}"
        ),
        "lambda": lambda: aws.client("lambda").invoke(
            FunctionName="invoker", InvocationType="Event", Payload=b"{}"
        ),
        "scheduler": lambda: aws.client("scheduler").delete_schedule(Name="s", GroupName="g"),
    }
    with pytest.raises(ClientError) as raised:
        calls[service]()
    assert aws.is_throttle(raised.value), raised.value.response
    assert len(throttle["seen"]) == attempts
    assert len(slept) == attempts - 1
    assert aws.client(service).meta.config.retries["mode"] == "standard"


def test_a_transaction_cancelled_for_capacity_is_retried_and_commits(
    throttle: dict[str, Any], slept: list[float]
) -> None:
    """botocore retries no `TransactionCanceledException`; one whose every reason is a
    throttle wrote nothing, and the engine's client retries it as a throttle."""
    throttle.update(service="dynamodb", left=2, nth=1)  # odd: cancelled, `ThrottlingError`
    first, second = _put("t1"), _put("t2")
    aws.client("dynamodb").transact_write_items(
        TransactItems=[
            {"Put": {**first, "ConditionExpression": "attribute_not_exists(pk)"}},
            {"Put": second},
        ]
    )
    assert throttle["seen"] == ["TransactWriteItems"] * 2
    assert len(slept) == 2
    table = settings().runs_table
    for item in (first, second):
        assert "Item" in aws.client("dynamodb").get_item(TableName=table, Key=item["Item"])


def test_a_transaction_still_cancelled_for_capacity_is_a_throttle(
    throttle: dict[str, Any], slept: list[float]
) -> None:
    throttle.update(service="dynamodb", left=100, nth=1)
    with pytest.raises(ClientError) as raised:
        aws.client("dynamodb").transact_write_items(TransactItems=[{"Put": _put("t3")}])
    assert raised.value.response["Error"]["Code"] == "TransactionCanceledException"
    assert aws.is_throttle(raised.value)
    assert len(throttle["seen"]) == aws.DEFAULT_MAX_ATTEMPTS
