"""Fixtures for the local runtime's own tests: a real moto server on loopback.

The emulator lives for one test module (the process environment points at one engine at a
time) and is reset per test. For the whole engine, start a `LocalRuntime(port=0, ...)` once
per session and `reset()` it per test (see tests/e2e/conftest.py).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from ezgh_engine.adapters import aws
from ezgh_engine.local.emulator import Emulator
from ezgh_engine.local.resources import Provisioned, provision


@pytest.fixture(scope="module")
def emulator() -> Iterator[Emulator]:
    emu = Emulator()
    emu.start()
    yield emu
    emu.stop()


@pytest.fixture()
def resources(emulator: Emulator) -> Provisioned:
    """Fresh topology resources in a wiped emulator, with the handlers' env applied."""
    emulator.reset()
    done = provision(api_url="http://127.0.0.1:1", token_secret="test-secret")
    emulator.apply_env(done.env)
    return done


def make_queue(name: str, visibility: int = 1) -> tuple[str, str]:
    """A plain test queue (url, arn) with a short visibility timeout."""
    sqs = aws.client("sqs")
    url = sqs.create_queue(QueueName=name, Attributes={"VisibilityTimeout": str(visibility)})[
        "QueueUrl"
    ]
    arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"][
        "QueueArn"
    ]
    return url, arn


def queue_counts(url: str) -> tuple[int, int, int]:
    """(visible, in flight, delayed)."""
    attrs = aws.client("sqs").get_queue_attributes(QueueUrl=url, AttributeNames=["All"])[
        "Attributes"
    ]
    return (
        int(attrs["ApproximateNumberOfMessages"]),
        int(attrs["ApproximateNumberOfMessagesNotVisible"]),
        int(attrs["ApproximateNumberOfMessagesDelayed"]),
    )


def health_api(event: dict[str, Any], context: Any) -> dict[str, Any]:
    """A stand-in api handler: health, and an echo of the event for everything else."""
    if event["rawPath"] == "/v1/health":
        return {
            "statusCode": 200,
            "headers": {"content-type": "application/json"},
            "body": json.dumps({"status": "ok"}),
        }
    return {"statusCode": 200, "body": json.dumps(event)}
