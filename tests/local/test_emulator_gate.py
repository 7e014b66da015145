"""`ezgh dev`'s embedded emulator answers the engine alone (`local/emulator_gate.py`): requests
signed with this start's own credentials, a pull worker's vended session on its own task
queue (receive and delete, nothing else), and the engine's calls of moto's management API.
Anyone else on loopback (another local user, a web page, a process with the old fixed
`testing` keys) gets 403, and so does a presigned URL, whoever signed it."""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError
from ezgh_engine.adapters import aws
from ezgh_engine.local import emulator_gate
from ezgh_engine.local.account import ACCOUNT_ID, REGION
from ezgh_engine.local.emulator import Emulator
from ezgh_engine.local.lambda_async import AsyncInvokes
from ezgh_engine.service.pull import session_policy
from ezgh_engine.topology import TOPOLOGY

from .conftest import make_queue


def _client(service: str, emulator: Emulator, **credentials: str) -> Any:
    return boto3.client(
        service,
        endpoint_url=emulator.endpoint_url,
        region_name=REGION,
        **credentials,
    )


def _raw(emulator: Emulator, path: str, headers: dict[str, str] | None = None) -> int:
    request = urllib.request.Request(
        emulator.endpoint_url + path,
        data=b"{}",
        method="POST",
        headers={"X-Amz-Target": "DynamoDB_20120810.ListTables", **(headers or {})},
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return int(answer.status)
    except urllib.error.HTTPError as error:
        return int(error.code)


STRANGERS = {
    "the old fixed keys": {"aws_access_key_id": "testing", "aws_secret_access_key": "testing"},
    "made-up keys": {"aws_access_key_id": "AKIAEXAMPLE", "aws_secret_access_key": "x"},
}


@pytest.mark.parametrize("who", sorted(STRANGERS))
def test_other_credentials_are_refused(resources: Any, emulator: Emulator, who: str) -> None:
    calls = {
        "dynamodb": lambda c: c.list_tables(),
        "sqs": lambda c: c.list_queues(),
        "s3": lambda c: c.list_buckets(),
        "scheduler": lambda c: c.list_schedules(),
    }
    for service, call in calls.items():
        with pytest.raises(ClientError) as refused:
            call(_client(service, emulator, **STRANGERS[who]))
        assert refused.value.response["ResponseMetadata"]["HTTPStatusCode"] == 403, service


def test_the_engine_s_own_credentials_pass(resources: Any, emulator: Emulator) -> None:
    assert os.environ["AWS_ACCESS_KEY_ID"] == emulator.access_key_id != "testing"
    assert aws.client("dynamodb").list_tables()["TableNames"]
    assert aws.client("sqs").list_queues()["QueueUrls"]


def test_unsigned_requests_and_the_management_api_are_refused(
    resources: Any, emulator: Emulator
) -> None:
    assert _raw(emulator, "/") == 403
    assert _raw(emulator, "/", {"Authorization": "AWS4-HMAC-SHA256 nothing"}) == 403
    for path in ("/moto-api/reset", "/moto-api/data.json", "/moto-api/"):
        assert _raw(emulator, path) == 403
        assert _raw(emulator, path, {emulator_gate.KEY_HEADER: "guess"}) == 403
    assert aws.client("dynamodb").list_tables()["TableNames"]  # nothing was reset


def test_a_presigned_url_is_refused_even_with_the_engine_s_key(
    resources: Any, emulator: Emulator
) -> None:
    s3 = aws.client("s3")
    bucket = resources.env[TOPOLOGY.bucket_env_var]
    s3.put_object(Bucket=bucket, Key="secret.json", Body=b"{}")
    url = s3.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": "secret.json"})
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(url, timeout=10)
    assert refused.value.code == 403


def _worker_session(queue_arn: str) -> dict[str, str]:
    creds = aws.client("sts").assume_role(
        RoleArn=f"arn:aws:iam::{ACCOUNT_ID}:role/ezgh-task-worker",
        RoleSessionName="ezgh-tasks-test",
        DurationSeconds=900,
        Policy=session_policy(queue_arn),
    )["Credentials"]
    return {
        "aws_access_key_id": creds["AccessKeyId"],
        "aws_secret_access_key": creds["SecretAccessKey"],
        "aws_session_token": creds["SessionToken"],
    }


def test_a_pull_worker_s_session_reaches_its_own_queue_only(
    resources: Any, emulator: Emulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    own_url, own_arn = make_queue("ezgh-tasks-own")
    other_url, _ = make_queue("ezgh-tasks-other")
    engine_sqs = aws.client("sqs")
    engine_sqs.send_message(QueueUrl=own_url, MessageBody="task")
    engine_sqs.send_message(QueueUrl=other_url, MessageBody="not yours")
    worker = _client("sqs", emulator, **_worker_session(own_arn))
    (message,) = worker.receive_message(QueueUrl=own_url, WaitTimeSeconds=0)["Messages"]
    worker.delete_message(QueueUrl=own_url, ReceiptHandle=message["ReceiptHandle"])
    for forbidden in (
        lambda: worker.receive_message(QueueUrl=other_url, WaitTimeSeconds=0),
        lambda: worker.send_message(QueueUrl=own_url, MessageBody="x"),
        lambda: worker.list_queues(),
        lambda: _client("dynamodb", emulator, **_worker_session(own_arn)).list_tables(),
    ):
        with pytest.raises(ClientError) as refused:
            forbidden()
        assert refused.value.response["ResponseMetadata"]["HTTPStatusCode"] == 403
    # Past its expiry (the machine's clock, as STS's) the session reaches nothing.
    real = emulator_gate.clock.wall_seconds
    monkeypatch.setattr(emulator_gate.clock, "wall_seconds", lambda: real() + 3600)
    with pytest.raises(ClientError):
        worker.receive_message(QueueUrl=own_url, WaitTimeSeconds=0)


def test_the_local_lambda_api_answers_the_engine_alone(resources: Any, emulator: Emulator) -> None:
    invokes = AsyncInvokes(TOPOLOGY)
    url = invokes.serve()
    try:
        invokes.provision(resources.queue_urls)
        name = next(f for f in TOPOLOGY.functions if f.async_invoke).key
        stranger = boto3.client(
            "lambda", endpoint_url=url, region_name=REGION, **STRANGERS["the old fixed keys"]
        )
        with pytest.raises(ClientError) as refused:
            stranger.invoke(FunctionName=f"ezgh-{name}", InvocationType="Event", Payload=b"{}")
        assert refused.value.response["ResponseMetadata"]["HTTPStatusCode"] == 403
        request = urllib.request.Request(
            f"{url}/2015-03-31/functions/x/invocations", data=json.dumps({}).encode()
        )
        with pytest.raises(urllib.error.HTTPError) as unsigned:
            urllib.request.urlopen(request, timeout=10)
        assert unsigned.value.code == 403
        assert invokes.accepted == 0
    finally:
        invokes.shutdown()
