"""Fuzzing the API from its own OpenAPI document (schemathesis + hypothesis).

For every operation in `GET /v1/openapi.json`, schemathesis generates requests that follow the
schema (positive) and requests that break it (negative). Each goes through the real API Lambda
handler against in-process moto, in a bootstrapped project with real resources (a synced
pull app, a run, a queue, a subscription, a schedule, a second API key). Most requests carry
the admin key and the project's real `orgId`/`projectId`, and often a real resource ID, so
they reach the services instead of stopping at authentication.

The checks, on every answer: no 5xx; no stack trace in the body; every non-2xx body is
exactly `{"error": {"code": <a contract code>, "message": <str>}}`.

Hermetic: DNS answers a public address for every name, push-app calls fail as unreachable
and long polls do not wait. Derandomized (a fixed seed per operation), no example database.
"""

from __future__ import annotations

import base64
import json
import os
import socket
from collections import Counter
from typing import Any
from urllib.parse import quote, urlencode

import httpx
import pytest
import schemathesis
from ezgh_engine import config
from ezgh_engine.adapters import event_sources
from ezgh_engine.api.app import openapi
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode
from schemathesis.core import NotSet

from tests.api.conftest import LambdaContext, Project, make_event

pytestmark = pytest.mark.moto_only(
    "fuzzing the API's input checks, which answer before DynamoDB is asked anything"
)

MAX_EXAMPLES = 15  # per operation (positive and negative drawn together): 660 requests

CONTRACT_CODES = {
    "validation_error": 400,
    "unauthorized": 401,
    "forbidden": 403,
    "not_found": 404,
    "run_key_conflict": 409,
    "idempotency_conflict": 409,
    "app_not_synced": 409,
    "invalid_state": 409,
    "payload_too_large": 413,
    "rate_limited": 429,
}


def _document() -> dict[str, Any]:
    return dict(json.loads(openapi().body))


def _operations() -> list[Any]:
    schema = schemathesis.openapi.from_dict(_document())
    return [result.ok() for result in schema.get_all_operations()]


OPERATIONS = _operations()


@pytest.fixture
def hermetic(monkeypatch: pytest.MonkeyPatch, aws_env: None) -> None:
    from ezgh_engine.adapters import push
    from ezgh_engine.service import pull

    real = socket.getaddrinfo

    def resolve(host: Any, port: Any, *args: Any, **kwargs: Any) -> Any:
        if host in ("127.0.0.1", "localhost", "::1"):  # DynamoDB Local (the ddblocal param)
            return real(host, port, *args, **kwargs)
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("93.184.215.14", port or 443))]

    def unreachable(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("fuzz: no network", request=request)

    monkeypatch.setattr(socket, "getaddrinfo", resolve)
    monkeypatch.setattr(push, "network_transport", lambda: httpx.MockTransport(unreachable))
    monkeypatch.setattr(pull, "MAX_POLL_SECONDS", 0)
    monkeypatch.setenv(event_sources.ENV_EVENT_SOURCES, "local")
    monkeypatch.setenv(
        config.ENV_INVOCATIONS_QUEUE_ARN, "arn:aws:sqs:us-east-1:123456789012:ezgh-invocations"
    )
    monkeypatch.setenv("EZGH_SCHEDULER_ROLE_ARN", "arn:aws:iam::123456789012:role/scheduler")
    config.reset_settings()
    event_sources.LOCAL.clear()


def _resources(project: Project) -> dict[str, list[str]]:
    """Real IDs to put in paths: a synced pull app, a run, a queue, a subscription, a schedule."""

    def ok(answer: Any) -> dict[str, Any]:
        assert answer.status in (200, 201), answer.body
        return dict(answer.body)

    app = ok(project.call("POST", "/apps", body={"name": "jobs", "kind": "pull"}))
    ok(
        project.call(
            "POST", f"/apps/{app['id']}/workers", body={"workerId": "w", "workflows": ["nightly"]}
        )
    )
    run = ok(
        project.call(
            "POST", "/runs", body={"appId": app["id"], "workflow": "nightly", "input": {"n": 1}}
        )
    )
    queue = ok(project.call("POST", "/queues", body={"name": "orders"}))
    sub = ok(
        project.call(
            "POST",
            "/subscriptions",
            body={
                "queueId": queue["id"],
                "target": {"kind": "https", "url": "https://h.example.com/x"},
            },
        )
    )
    schedule = ok(
        project.call(
            "POST",
            "/schedules",
            body={"appId": app["id"], "workflow": "nightly", "cron": "0 * * * *"},
        )
    )
    key = ok(
        project.call(
            "POST",
            "/apiKeys",
            body={"name": "reader", "permissions": [{"action": "workflows.runs.read"}]},
        )
    )
    return {
        "orgId": [project.org_id],
        "projectId": [project.project_id],
        "appId": [app["id"], app["slug"], "jobs"],
        "runId": [run["id"]],
        "queueId": [queue["id"], "orders"],
        "subId": [sub["id"]],
        "scheduleId": [schedule["id"], schedule["slug"]],
        "id": [key["id"]],
        "path": ["output", "steps/x/output"],
    }


def _request(case: Any, real: dict[str, list[str]], choices: dict[str, int]) -> dict[str, Any]:
    """The API Gateway event for one generated case, with real IDs where `choices` says."""
    params = dict(case.path_parameters or {})
    for name in params:
        pick = choices.get(name, -1)
        if name in real and 0 <= pick < len(real[name]):
            params[name] = quote(real[name][pick], safe="")
    path = case.path
    for name, value in params.items():
        path = path.replace("{" + name + "}", str(value))
    headers = {str(k): str(v) for k, v in (case.headers or {}).items()}
    if choices.get("auth", 0) >= 0 and not path.startswith("/v1/invocations"):
        headers = {k: v for k, v in headers.items() if k.lower() != "authorization"}
        headers["authorization"] = f"Bearer {real['key'][0]}"
    query = {
        str(k): v if isinstance(v, str) else json.dumps(v) for k, v in (case.query or {}).items()
    }
    event = make_event(case.method.upper(), path, headers=headers)
    if isinstance(case.body, bytes):  # a malformed body: API Gateway passes it base64-encoded
        event["body"] = base64.b64encode(case.body).decode()
        event["isBase64Encoded"] = True
    elif not isinstance(case.body, NotSet):
        event["body"] = json.dumps(case.body)
    if query:
        event["rawQueryString"] = urlencode(query)
        event["queryStringParameters"] = query
    return event


def _problems(status: int, raw: str) -> list[str]:
    problems = []
    if status >= 500:
        problems.append(f"status {status}")
    if "Traceback" in raw or 'File "' in raw:
        problems.append("stack trace in body")
    if status >= 400:
        try:
            body = json.loads(raw)
        except ValueError:
            return [*problems, "error body is not JSON"]
        error = body.get("error") if isinstance(body, dict) else None
        if not (
            isinstance(body, dict)
            and set(body) == {"error"}
            and isinstance(error, dict)
            and set(error) == {"code", "message"}
            and isinstance(error["message"], str)
        ):
            problems.append("error body not in the contract's shape")
        elif CONTRACT_CODES.get(error["code"]) != status:
            problems.append(f"code {error['code']!r} with status {status}")
    return problems


@pytest.mark.parametrize("operation", OPERATIONS, ids=[op.label for op in OPERATIONS])
def test_fuzz_operation(operation: Any, project: Project, hermetic: None) -> None:
    from functions.api.handler import handler

    real = {**_resources(project), "key": [project.api_key]}
    strategy = st.one_of(
        operation.as_strategy(generation_mode=GenerationMode.POSITIVE),
        operation.as_strategy(generation_mode=GenerationMode.NEGATIVE),
    )
    # Per parameter: an index into its real values (mostly), or -1 for the generated value.
    # Per parameter: an index into its real values, or -1 (or out of range) for the generated
    # value. The project's own IDs and the admin key nine times in ten.
    mostly = st.sampled_from([0] * 9 + [-1])
    picks = st.fixed_dictionaries(
        {"orgId": mostly, "projectId": mostly, "auth": mostly}
        | {
            name: st.sampled_from([0, 0, 1, 2, -1])
            for name in ("appId", "runId", "queueId", "subId", "scheduleId", "id", "path")
        }
    )
    found: dict[str, str] = {}
    statuses: list[int] = []

    @settings(
        max_examples=MAX_EXAMPLES,
        derandomize=True,
        database=None,
        deadline=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(case=strategy, choices=picks)
    def check(case: Any, choices: dict[str, int]) -> None:
        event = _request(case, real, choices)
        answer = handler(event, LambdaContext())
        raw = answer.get("body") or ""
        statuses.append(int(answer["statusCode"]))
        for problem in _problems(int(answer["statusCode"]), raw):
            found.setdefault(
                problem,
                f"{event['requestContext']['http']['method']} {event['rawPath']}"
                f"?{event['rawQueryString']} body={(event.get('body') or '')[:300]!r}"
                f" -> {answer['statusCode']} {raw[:300]}",
            )

    check()
    if os.environ.get("EZGH_FUZZ_REPORT"):
        print(f"\n{operation.label}: {sorted(Counter(statuses).items())}")
    assert not found, "\n".join(f"{p}: {example}" for p, example in found.items())


# Bodies schemathesis does not generate: JSON nested far past the limit (a RecursionError in
# the decoder was a 500) and lone surrogates (a UnicodeEncodeError was a 500), in the body, in
# a value deep inside it, and in a query parameter.
HOSTILE_BODIES = {
    "nested-10000": '{"input": ' + "[" * 10_000 + "]" * 10_000 + "}",
    "nested-900": '{"name": "x", "input": ' + "[" * 900 + "1" + "]" * 900 + "}",
    "nested-object": '{"target": ' + '{"a":' * 200 + "1" + "}" * 200 + "}",
    "surrogate-value": '{"name": "x\\ud800", "workflow": "\\udfff", "input": {"k": "\\ud800"}}',
    "surrogate-key": '{"\\ud800": 1, "input": {"\\udc00": [1]}}',
    "surrogate-alone": '"\\ud800"',
}


@pytest.mark.parametrize("operation", OPERATIONS, ids=[op.label for op in OPERATIONS])
def test_hostile_json_never_gets_a_5xx(operation: Any, project: Project, hermetic: None) -> None:
    from functions.api.handler import handler

    real = {**_resources(project), "key": [project.api_key]}
    found: list[str] = []
    path = operation.path
    for name, values in real.items():
        path = path.replace("{" + name + "}", quote(values[0], safe=""))
    for label, raw in HOSTILE_BODIES.items():
        headers = {"authorization": f"Bearer {project.api_key}"}
        event = make_event(
            operation.method.upper(),
            path,
            raw_body=raw,
            headers=headers,
            query={"cursor": "\ud800", "workflow": "x\udfff"},
        )
        answer = handler(event, LambdaContext())
        for problem in _problems(int(answer["statusCode"]), answer.get("body") or ""):
            found.append(f"{label}: {problem}: {answer['statusCode']} {answer['body'][:200]}")
    assert not found, "\n".join(found)
