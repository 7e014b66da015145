"""The SDK's SigV4 signer for its direct task-queue requests (issue 18) signs exactly as
botocore does: same canonical request, same signature, for the same instant."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from ezgh_workflows._internal import task_queue

URL = "https://sqs.us-east-1.amazonaws.com/"
BODY = b'{"QueueUrl":"https://sqs.us-east-1.amazonaws.com/123456789012/s-tasks-a","WaitTimeSeconds":20}'


@pytest.mark.parametrize("token", ["FQoGZXIvYXdzEBYaDtoken/+=", None])
def test_the_signature_is_botocores(token: str | None) -> None:
    headers = {"Content-Type": task_queue.CONTENT_TYPE, "X-Amz-Target": "AmazonSQS.ReceiveMessage"}
    request = AWSRequest(method="POST", url=URL, data=BODY, headers=dict(headers))
    SigV4Auth(Credentials("ASIAEXAMPLE", "secret/key+x", token), "sqs", "us-east-1").add_auth(
        request
    )
    moment = datetime.strptime(request.headers["X-Amz-Date"], "%Y%m%dT%H%M%SZ").replace(tzinfo=UTC)
    ours = task_queue.sign_v4(
        url=URL,
        body=BODY,
        headers=headers,
        access_key="ASIAEXAMPLE",
        secret_key="secret/key+x",
        session_token=token,
        region="us-east-1",
        service="sqs",
        moment=moment,
    )
    assert ours["Authorization"] == request.headers["Authorization"]
    assert ours.get("X-Amz-Security-Token") == request.headers.get("X-Amz-Security-Token")


def test_a_local_endpoint_with_a_port_is_signed_with_its_host_and_port() -> None:
    signed = task_queue.sign_v4(
        url="http://127.0.0.1:4566/",
        body=b"{}",
        headers={"Content-Type": task_queue.CONTENT_TYPE},
        access_key="A",
        secret_key="S",
        session_token=None,
        region="us-east-1",
        service="sqs",
        moment=datetime(2026, 12, 1, tzinfo=UTC),
    )
    request = AWSRequest(
        method="POST",
        url="http://127.0.0.1:4566/",
        data=b"{}",
        headers={"Content-Type": task_queue.CONTENT_TYPE, "X-Amz-Date": "20261201T000000Z"},
    )
    auth = SigV4Auth(Credentials("A", "S"), "sqs", "us-east-1")
    request.context["timestamp"] = "20261201T000000Z"
    expected = auth.signature(
        auth.string_to_sign(request, auth.canonical_request(request)), request
    )
    assert signed["Authorization"].endswith(f"Signature={expected}")
