"""API tests: the real handler against in-process moto, with API Gateway HTTP API v2 events."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import boto3
import pytest
from ezgh_engine import clock, config
from ezgh_engine.adapters import aws, registry_store
from ezgh_engine.local.resources import table_params
from ezgh_engine.topology import TOPOLOGY, Table
from moto import mock_aws

from tests.ddblocal import BACKENDS, DynamoDBLocal

# botocore's per-service endpoints (service ids "DynamoDB" and "DynamoDB Streams").
DYNAMODB_ENDPOINT_ENV = ("AWS_ENDPOINT_URL_DYNAMODB", "AWS_ENDPOINT_URL_DYNAMODB_STREAMS")

ENV = {
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SESSION_TOKEN": "testing",
    "EZGH_RUNS_TABLE": "ezgh-runs",
    "EZGH_REGISTRY_TABLE": "ezgh-registry",
    "EZGH_INVOCATIONS_QUEUE_URL": "https://sqs.us-east-1.amazonaws.com/123456789012/ezgh-invocations",
    "EZGH_PAYLOAD_BUCKET": "ezgh-payloads",
    config.ENV_API_URL: "https://engine.example.test",
    config.ENV_TOKEN_SECRET: "test-token-secret",
    # Pull workers' queue credentials (service/pull.queue_access): moto's STS assumes any role.
    "EZGH_TASK_WORKER_ROLE_ARN": "arn:aws:iam::123456789012:role/ezgh-task-worker",
    # No per-key rate limit: a fast test's burst must not meet it by chance (its own tests,
    # tests/api/test_rate_limits.py, set it; the local runtime keeps the default).
    config.ENV_KEY_RATE_LIMIT: "0",
}


def _create_table(ddb: Any, spec: Table, name: str) -> None:
    kwargs: dict[str, Any] = {}
    if spec.stream:
        kwargs["StreamSpecification"] = {
            "StreamEnabled": True,
            "StreamViewType": "NEW_AND_OLD_IMAGES",
        }
    ddb.create_table(**table_params(spec, name), **kwargs)


_setup_clients: dict[tuple[str, str | None], Any] = {}


def _setup_client(service: str, endpoint_url: str | None = None) -> Any:
    """The client `aws_env` sets up a test's resources with: one per worker process (moto's
    mock intercepts a client made before it started as well), not three new ones a test,
    each on a new boto3 session (moto's mock replaces the default session): a third of the
    fixture's time, over 1,500 tests."""
    key = (service, endpoint_url)
    if key not in _setup_clients:
        _setup_clients[key] = boto3.session.Session().client(
            service,
            region_name=ENV["AWS_DEFAULT_REGION"],
            endpoint_url=endpoint_url,
            aws_access_key_id=ENV["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=ENV["AWS_SECRET_ACCESS_KEY"],
            aws_session_token=ENV["AWS_SESSION_TOKEN"],
        )
    return _setup_clients[key]


@pytest.fixture(params=BACKENDS)
def aws_env(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """moto in-process with the topology's tables, queue and bucket, and the env pointing at
    them; under the `ddblocal` param the tables are in AWS's DynamoDB Local instead (SQS, S3
    and the rest stay on moto: its mock lets requests to a loopback endpoint through)."""
    for name, value in ENV.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    for name in DYNAMODB_ENDPOINT_ENV:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv(config.ENV_ALLOW_LOOPBACK, raising=False)
    server: DynamoDBLocal | None = None
    if request.param == "ddblocal":
        server = request.getfixturevalue("dynamodb_local")
        for name in DYNAMODB_ENDPOINT_ENV:
            monkeypatch.setenv(name, server.url)
    with mock_aws():
        config.reset_settings()
        aws.reset_clients()
        registry_store.forget_cached_apps()  # apps read by an earlier test are not this one's
        ddb = _setup_client("dynamodb", server.url if server is not None else None)
        for table in TOPOLOGY.tables:
            _create_table(ddb, table, ENV[table.env_var])
        _setup_client("sqs").create_queue(QueueName="ezgh-invocations")
        _setup_client("s3").create_bucket(Bucket=ENV["EZGH_PAYLOAD_BUCKET"])
        try:
            yield
        finally:
            if server is not None:
                server.wipe()
    config.reset_settings()
    aws.reset_clients()


@dataclass
class Answer:
    status: int
    body: Any
    headers: dict[str, str]
    raw: str


class LambdaContext:
    function_name = "api"
    memory_limit_in_mb = 512
    invoked_function_arn = "arn:aws:lambda:us-east-1:123456789012:function:api"
    aws_request_id = "req-1"


def make_event(
    method: str,
    path: str,
    *,
    body: Any = None,
    raw_body: str | None = None,
    headers: dict[str, str] | None = None,
    query: dict[str, str] | None = None,
    base64_body: bool = False,
) -> dict[str, Any]:
    """An API Gateway HTTP API (payload 2.0) event, as API Gateway sends it."""
    text = raw_body if raw_body is not None else (None if body is None else json.dumps(body))
    all_headers = {
        "content-type": "application/json",
        **{k.lower(): v for k, v in (headers or {}).items()},
    }
    event: dict[str, Any] = {
        "version": "2.0",
        "routeKey": "$default",
        "rawPath": path,
        "rawQueryString": "&".join(f"{k}={v}" for k, v in (query or {}).items()),
        "headers": all_headers,
        "requestContext": {
            "accountId": "123456789012",
            "apiId": "api",
            "domainName": "api.example.test",
            "http": {
                "method": method,
                "path": path,
                "protocol": "HTTP/1.1",
                "sourceIp": "1.2.3.4",
                "userAgent": "t",
            },
            "requestId": "req-1",
            "routeKey": "$default",
            "stage": "$default",
            "time": "13/Oct/2026:18:00:00 +0000",
            "timeEpoch": 0,
        },
        "isBase64Encoded": base64_body,
    }
    if query:
        event["queryStringParameters"] = query
    if text is not None:
        event["body"] = base64.b64encode(text.encode()).decode() if base64_body else text
    return event


def call(method: str, path: str, **kwargs: Any) -> Answer:
    """Send one request through the Lambda handler and decode its answer."""
    from functions.api.handler import handler

    answer = handler(make_event(method, path, **kwargs), LambdaContext())
    raw = answer.get("body") or ""
    try:
        body = json.loads(raw) if raw else None
    except ValueError:
        body = raw
    return Answer(answer["statusCode"], body, answer.get("headers") or {}, raw)


@dataclass
class Project:
    org_id: str
    project_id: str
    api_key: str

    @property
    def prefix(self) -> str:
        return f"/v1/organizations/{self.org_id}/projects/{self.project_id}"

    def auth(self, key: str | None = None, **extra: str) -> dict[str, str]:
        return {"authorization": f"Bearer {key or self.api_key}", **extra}

    def call(
        self,
        method: str,
        subpath: str,
        *,
        key: str | None = None,
        headers: dict[str, str] | None = None,
        **kwargs: Any,
    ) -> Answer:
        return call(
            method, self.prefix + subpath, headers=self.auth(key, **(headers or {})), **kwargs
        )


@pytest.fixture
def project(aws_env: None) -> Project:
    """A bootstrapped project with an admin key."""
    from ezgh_engine.service.auth import bootstrap_admin

    return Project(*bootstrap_admin())


@pytest.fixture
def other_project(aws_env: None) -> Project:
    from ezgh_engine.service.auth import bootstrap_admin

    return Project(*bootstrap_admin())


@pytest.fixture(autouse=True)
def _public_dns(monkeypatch: pytest.MonkeyPatch) -> None:
    """Resolve test host names without the network: `*.example.com` is public, `*.internal` private."""
    import socket

    real = socket.getaddrinfo

    def fake(host: Any, port: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(host, str) and host.endswith("example.com"):
            return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("93.184.215.14", port or 443))]
        if isinstance(host, str) and host.endswith(".internal"):
            return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("10.1.2.3", port or 443))]
        return real(host, port, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", fake)


@pytest.fixture(autouse=True)
def _loopback_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """The engine's outgoing HTTP (push apps, https subscriptions) reaches loopback only: a
    request pinned to any other address fails as a connection error, never leaving the host.
    Tests that answer such requests put a mock transport in `push.network_transport`."""
    import ipaddress

    import httpx
    from ezgh_engine.adapters import push

    class LoopbackOnly(httpx.BaseTransport):
        def __init__(self) -> None:
            self._real = httpx.HTTPTransport()

        def handle_request(self, request: httpx.Request) -> httpx.Response:
            if not ipaddress.ip_address(request.url.host).is_loopback:
                raise httpx.ConnectError("tests: no network beyond loopback", request=request)
            return self._real.handle_request(request)

    monkeypatch.setattr(push, "network_transport", LoopbackOnly)


@pytest.fixture
def skip_clock() -> Iterator[clock.SkipClock]:
    """The engine's clock, skipped forward by the test instead of sleeping."""
    previous = clock.get_clock()
    skipping = clock.SkipClock()
    clock.set_clock(skipping)
    yield skipping
    clock.set_clock(previous)


@pytest.fixture
def api(aws_env: None) -> Any:
    """`api(method, path, ...)`: one request through the handler (see `call`)."""
    return call
