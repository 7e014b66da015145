"""`ezgh ops teardown` on moto: deletes one stack's run-time queues and subscription mappings,
and nothing of another stack in the same account."""

from __future__ import annotations

import io
import json
import zipfile
from collections.abc import Iterator
from typing import Any

import pytest
from ezgh_engine.adapters import aws, sqs_queues, task_queues
from ezgh_engine.cli import main as cli_main
from ezgh_engine.cli import teardown
from moto import mock_aws

pytestmark = pytest.mark.infra

ENV = {
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SESSION_TOKEN": "testing",
}


@pytest.fixture()
def account(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name, value in ENV.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    with mock_aws():
        aws.reset_clients()
        yield
    aws.reset_clients()


def _zip() -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as z:
        z.writestr("handler.py", "def handler(event, context):\n    return None\n")
    return buffer.getvalue()


def make_stack(prefix: str) -> dict[str, Any]:
    """What the API of stack `prefix` would have made: a FIFO and a standard EZGH queue (each
    with its DLQ), a pull app's task queue, and a subscription mapping to its deliver."""
    sqs, lam = aws.client("sqs"), aws.client("lambda")
    role = aws.client("iam").create_role(
        RoleName=f"{prefix}-deliver-role", AssumeRolePolicyDocument=json.dumps({})
    )["Role"]["Arn"]
    function = f"{prefix}-DeliverFn"
    lam.create_function(
        FunctionName=function,
        Runtime="python3.12",
        Role=role,
        Handler="handler.handler",
        Code={"ZipFile": _zip()},
    )
    urls = []
    for queue_id, fifo in (("11111111-aaaa", False), ("22222222-bbbb", True)):
        for name in sqs_queues.queue_names(queue_id, fifo):
            name = name.replace(sqs_queues.name_prefix(), sqs_queues.name_prefix(prefix), 1)
            attrs = {"FifoQueue": "true"} if fifo else {}
            urls.append(sqs.create_queue(QueueName=name, Attributes=attrs)["QueueUrl"])
    urls.append(sqs.create_queue(QueueName=f"{task_queues.name_prefix(prefix)}app-1")["QueueUrl"])
    arn = sqs.get_queue_attributes(QueueUrl=urls[0], AttributeNames=["QueueArn"])["Attributes"][
        "QueueArn"
    ]
    mapping = lam.create_event_source_mapping(EventSourceArn=arn, FunctionName=function)["UUID"]
    return {"function": function, "queues": sorted(urls), "mapping": mapping}


def queues() -> set[str]:
    return set(aws.client("sqs").list_queues().get("QueueUrls", []))


def mappings(function: str) -> list[str]:
    answer = aws.client("lambda").list_event_source_mappings(FunctionName=function)
    return [m["UUID"] for m in answer["EventSourceMappings"]]


def test_finds_exactly_the_stacks_runtime_resources(account: None) -> None:
    mine, other = make_stack("StackA"), make_stack("StackB")
    found = teardown.find("StackA", mine["function"])
    assert found.queues == mine["queues"]
    assert found.mappings == [mine["mapping"]]
    assert not set(found.queues) & set(other["queues"])


def test_cli_lists_without_yes_and_deletes_with_it(
    account: None, capsys: pytest.CaptureFixture[str]
) -> None:
    mine, other = make_stack("StackA"), make_stack("StackB")
    args = ["ops", "teardown", "--prefix", "StackA", "--deliver-function", mine["function"]]
    assert cli_main.main(args) == 1
    assert f"would delete event source mapping {mine['mapping']}" in capsys.readouterr().out
    assert set(mine["queues"]) <= queues()  # nothing deleted yet

    assert cli_main.main([*args, "--yes"]) == 0
    assert not set(mine["queues"]) & queues()
    assert mappings(mine["function"]) == []
    # The other stack in the same account keeps everything.
    assert set(other["queues"]) <= queues()
    assert mappings(other["function"]) == [other["mapping"]]

    assert cli_main.main([*args, "--yes"]) == 0  # idempotent: nothing left
    assert "nothing the engine created at run time is left" in capsys.readouterr().out


def test_needs_the_stack_or_both_names(account: None, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main.main(["ops", "teardown", "--prefix", "StackA"]) == 2
    assert "--deliver-function" in capsys.readouterr().err
