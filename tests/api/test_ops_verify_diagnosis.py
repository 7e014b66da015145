"""`ezgh ops verify --stack`: a failure names the functions that logged errors, with the error."""

from __future__ import annotations

import json
from collections.abc import Iterator

import boto3
import pytest
from botocore.stub import Stubber
from ezgh_engine import clock
from ezgh_engine.adapters import aws
from ezgh_engine.cli import verify
from moto import mock_aws


@pytest.fixture()
def logs(monkeypatch: pytest.MonkeyPatch) -> Iterator[object]:
    for name, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
    }.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    aws.reset_clients()
    with mock_aws():
        yield aws.client("logs")
    aws.reset_clients()


def _log(client: object, function: str, *messages: str) -> None:
    group = f"/aws/lambda/{function}"
    client.create_log_group(logGroupName=group)  # type: ignore[attr-defined]
    client.create_log_stream(logGroupName=group, logStreamName="s")  # type: ignore[attr-defined]
    now_ms = clock.wall_seconds() * 1000
    events = [{"timestamp": now_ms + i, "message": m} for i, m in enumerate(messages)]
    client.put_log_events(logGroupName=group, logStreamName="s", logEvents=events)  # type: ignore[attr-defined]


def test_errors_are_named_by_function_with_the_aws_error(logs: object) -> None:
    denied = json.dumps(
        {
            "level": "ERROR",
            "message": "stream batch failed",
            "exception": "AccessDeniedException: not authorized to perform dynamodb:UpdateItem",
        }
    )
    _log(logs, "stack-Stream-1", "START RequestId: 1", denied)
    _log(logs, "stack-Api-1", "START RequestId: 2", "END RequestId: 2")
    functions = {"stack-Stream-1": "StreamFunction", "stack-Api-1": "ApiFunction",
                 "stack-Never-1": "NeverRanFunction"}  # fmt: skip

    lines = verify.function_errors(functions, since_ms=(clock.wall_seconds() - 60) * 1000)

    assert len(lines) == 1
    assert lines[0].startswith("StreamFunction: stream batch failed AccessDeniedException")
    assert "dynamodb:UpdateItem" in lines[0]


def test_the_stack_functions_are_read_from_its_resources(monkeypatch: pytest.MonkeyPatch) -> None:
    client = boto3.client("cloudformation", region_name="us-east-1")
    stub = Stubber(client)
    summaries = [
        {"LogicalResourceId": "StreamFunction", "PhysicalResourceId": "stack-Stream-1",
         "ResourceType": "AWS::Lambda::Function", "ResourceStatus": "CREATE_COMPLETE",
         "LastUpdatedTimestamp": "2026-01-01T00:00:00Z"},
        {"LogicalResourceId": "Runs", "PhysicalResourceId": "stack-runs",
         "ResourceType": "AWS::DynamoDB::Table", "ResourceStatus": "CREATE_COMPLETE",
         "LastUpdatedTimestamp": "2026-01-01T00:00:00Z"},
    ]  # fmt: skip
    stub.add_response(
        "list_stack_resources", {"StackResourceSummaries": summaries}, {"StackName": "stack"}
    )
    monkeypatch.setattr(aws, "client", lambda service: client)
    with stub:
        assert verify.stack_functions("stack") == {"stack-Stream-1": "StreamFunction"}
