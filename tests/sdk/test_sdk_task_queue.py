"""The SDK's SigV4 signer for its direct task-queue requests signs exactly as
botocore does: same canonical request, same signature, for the same instant."""

from __future__ import annotations

from datetime import UTC, datetime

import httpx
import pytest
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from ezgh_workflows import ApiError, Worker
from ezgh_workflows._internal import task_queue
from ezgh_workflows._internal.api import ApiClient

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


def _worker_against(answers: dict[str, httpx.Response]) -> tuple[Worker, list[str]]:
    """A Worker whose API calls go to an in-memory engine answering by path suffix."""
    seen: list[str] = []

    def handle(request: httpx.Request) -> httpx.Response:
        seen.append(request.url.path)
        for suffix, answer in answers.items():
            if request.url.path.endswith(suffix):
                return answer
        return httpx.Response(404, json={"error": {"code": "not_found", "message": "?"}})

    worker = Worker(
        "jobs",
        [],
        api_key="k",
        organization_id="o",
        project_id="p",
        base_url="http://engine.test",
        poll_wait_seconds=0,
    )
    worker._api = ApiClient(
        "k",
        "o",
        "p",
        "http://engine.test",
        http_client=httpx.Client(transport=httpx.MockTransport(handle)),
    )
    return worker, seen


@pytest.mark.parametrize("status", [404, 409])
def test_an_engine_that_vends_no_credentials_is_polled_through_the_api(status: int) -> None:
    """409 (no worker role) or 404 (an engine older than vended queue credentials):
    `tasks/poll` as before."""
    refused = httpx.Response(status, json={"error": {"code": "conflict", "message": "no"}})
    worker, seen = _worker_against({"/tasks/access": refused, "/tasks/poll": httpx.Response(204)})
    assert worker._poll() is None and worker._poll() is None
    assert not worker.direct_queue
    assert [p.rsplit("/", 1)[-1] for p in seen] == ["access", "poll", "poll"]


def test_other_errors_of_access_are_not_taken_for_an_old_engine() -> None:
    """A 503 (STS throttled) is retried later on the direct path, not given up."""
    busy = httpx.Response(503, json={"error": {"code": "unavailable", "message": "busy"}})
    worker, _ = _worker_against({"/tasks/access": busy})
    with pytest.raises(ApiError):
        worker._poll()
    assert worker.direct_queue
