"""Security properties not proven elsewhere (see docs/guarantees.md, "Security").

Already covered, not repeated here: the ASGI PushApp's 401s (tests/sdk/test_sdk_push_app.py),
bad URLs at app create (tests/api/test_apps.py), keys on another project's path, stronger
keys and foreign revocations (tests/api/test_auth_keys.py, tests/e2e/test_api_keys.py), a
completed callback answering 409 end to end (tests/e2e/test_waits.py).
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import hmac
import ipaddress
import json
import socket
from typing import Any

import httpx
import pytest
from ezgh_engine import clock, config, ids
from ezgh_engine.adapters import push
from ezgh_engine.adapters import run_items as items
from ezgh_engine.adapters import waits_store as ws
from ezgh_engine.core.models import Run
from ezgh_engine.protocol import PROTOCOL_VERSION
from ezgh_engine.service import callbacks
from ezgh_workflows import Context, PushApp, workflow
from ezgh_workflows._internal import clock as sdk_clock

from tests.api.conftest import Project, call
from tests.api.steps_helpers import waiting_callback as _waiting_callback

# --- push requests: the engine's signer against the SDK's Lambda entry point ---------------

KEY = "whsec-test-signing-key"
SYNC = json.dumps({"protocol": PROTOCOL_VERSION, "type": "sync"}).encode()


@workflow("hello")
async def hello(ctx: Context) -> str:
    return "hi"


def _event(body: bytes, headers: dict[str, str]) -> dict[str, Any]:
    return {
        "version": "2.0",
        "requestContext": {"http": {"method": "POST", "path": "/"}},
        "headers": {"content-type": "application/json", **headers},
        "body": body.decode(),
        "isBase64Encoded": False,
    }


def _signed(body: bytes, *, key: str = KEY, timestamp: int | None = None) -> dict[str, str]:
    """The headers the engine's own signer makes for a sync to `/` (at `timestamp`)."""
    ts = clock.wall_seconds() if timestamp is None else timestamp
    v1 = push.sign(key, ts, body)
    v2 = push.sign_v2(key, ts, "POST", "/", "", body)
    return {"x-ezgh-timestamp": str(ts), "x-ezgh-signature": f"{v1},{v2}"}


def test_a_request_signed_by_the_engine_is_accepted() -> None:
    answer = PushApp([hello], signing_key=KEY).lambda_handler(_event(SYNC, _signed(SYNC)), None)
    assert answer["statusCode"] == 200
    assert json.loads(answer["body"])["workflows"] == [{"name": "hello"}]


@pytest.mark.parametrize(
    "headers",
    [
        lambda: _signed(SYNC, key="another-apps-key"),  # bad signature
        lambda: {},  # missing both headers
        lambda: {"x-ezgh-timestamp": str(clock.wall_seconds())},  # missing signature
        lambda: _signed(b'{"type":"sync"}'),  # a signature of another body
        lambda: _signed(SYNC, timestamp=clock.wall_seconds() + 301),  # from the future
        lambda: {**_signed(SYNC), "x-ezgh-signature": "v1=" + "0" * 64},
    ],
    ids=["bad", "missing", "no-signature", "other-body", "future", "zeros"],
)
def test_unverified_push_requests_are_refused_401(headers: Any) -> None:
    answer = PushApp([hello], signing_key=KEY).lambda_handler(_event(SYNC, headers()), None)
    assert answer["statusCode"] == 401
    assert json.loads(answer["body"])["error"]["code"] == "unauthorized"
    assert "Traceback" not in answer["body"]


def test_a_captured_request_replayed_later_is_refused_401(monkeypatch: pytest.MonkeyPatch) -> None:
    """A valid request recorded off the wire and sent again 301 s later fails the window."""
    app = PushApp([hello], signing_key=KEY)
    captured = _event(SYNC, _signed(SYNC))
    assert app.lambda_handler(captured, None)["statusCode"] == 200
    later = sdk_clock.unix_seconds() + 301
    monkeypatch.setattr(sdk_clock, "unix_seconds", lambda: later)
    assert app.lambda_handler(captured, None)["statusCode"] == 401


# --- callback tokens -----------------------------------------------------------------------


def _complete(token: str, body: Any) -> Any:
    return call("POST", f"/v1/callbacks/{token}", body=body)


def _state(run: Run, step_id: str) -> tuple[Any, Any]:
    step = ws.get(items.run_pk(run.id), items.STEP_PREFIX + step_id) or {}
    head = ws.get(items.run_pk(run.id), items.RUN_SK) or {}
    return {k: step.get(k) for k in ("status", "output", "endedAt")}, head.get("invokeSeq")


def test_forged_callback_tokens_answer_exactly_like_unknown_ones(aws_env: None) -> None:
    run, step_id, token = _waiting_callback()
    assert len(token) == 43  # 256 bits, URL-safe base64
    salt = ws.get(items.run_pk(run.id), items.STEP_PREFIX + step_id)["cbSalt"]  # type: ignore[index]
    flipped = ("B" if token[0] == "A" else "A") + token[1:]
    forged = [
        callbacks.token_for(run.id, step_id, "guessed-salt"),  # the right run and step
        flipped,  # one character off
        token[:-1],  # truncated
        token + "A",
        ids.secret_token(32),  # random, well-formed
        "A" * 200,
    ]
    other_secret = "not-the-engine-secret"
    digest = hmac.new(
        other_secret.encode(), f"cb:{run.id}:{step_id}:{salt}".encode(), hashlib.sha256
    ).digest()
    forged.append(base64.urlsafe_b64encode(digest).rstrip(b"=").decode())  # another secret
    unknown = _complete(ids.secret_token(32), {"x": 1})
    assert unknown.status == 404
    for candidate in forged:
        answer = _complete(candidate, {"approved": True})
        assert (answer.status, answer.body) == (404, unknown.body), candidate
    assert _state(run, step_id)[0]["status"] == "waiting"  # nothing changed
    assert _complete(token, {"approved": True}).status == 200  # the real one still works


def test_a_completed_callback_answers_409_and_changes_nothing(aws_env: None) -> None:
    run, step_id, token = _waiting_callback()
    assert _complete(token, {"approved": True}).status == 200
    before = _state(run, step_id)
    assert before[0]["status"] == "completed" and before[1] == 2
    again = _complete(token, {"approved": False})
    assert again.status == 409 and again.body["error"]["code"] == "invalid_state"
    assert _state(run, step_id) == before  # same output, same endedAt, no new invocation


def test_callback_tokens_differ_for_the_same_run_and_step(aws_env: None) -> None:
    tokens = {_waiting_callback()[2] for _ in range(3)}
    assert len(tokens) == 3


# --- push app URLs: refused at update and at call time --------------------------------------

FORBIDDEN_HOSTS = {
    "https://169.254.169.254/latest/meta-data": "169.254.169.254",  # instance metadata
    "https://10.0.0.1/x": "10.0.0.1",
    "https://127.0.0.1/x": "127.0.0.1",
    "https://rebind.example.net/x": "127.0.0.1",  # a name resolving to loopback
}


@pytest.fixture
def dns(monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """A name table: names not in it resolve to a public address."""
    table: dict[str, str] = {"rebind.example.net": "127.0.0.1"}

    def resolve(host: Any, port: Any, *args: Any, **kwargs: Any) -> Any:
        address = table.get(str(host), "93.184.215.14")
        with contextlib.suppress(ValueError):
            address = str(ipaddress.ip_address(host))
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (address, port or 443))]

    monkeypatch.setattr(socket, "getaddrinfo", resolve)
    return table


@pytest.fixture
def requests_sent(monkeypatch: pytest.MonkeyPatch) -> list[httpx.Request]:
    """Every HTTP request the engine sends to an app, as it leaves the pinned transport (its URL
    holds the checked address, its Host header the name), answered by a mock transport: sync,
    or a redirect to the metadata service for `/redirect`."""
    sent: list[httpx.Request] = []

    def handle(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        if request.url.path == "/redirect":
            return httpx.Response(302, headers={"location": "http://169.254.169.254/latest/"})
        return httpx.Response(200, json={"workflows": [{"name": "w"}]})

    monkeypatch.setattr(push, "network_transport", lambda: httpx.MockTransport(handle))
    return sent


def _sent_to(request: httpx.Request) -> str:
    """`https://<Host header><path>` of a request sent through the pinned transport."""
    return f"{request.url.scheme}://{request.headers['host']}{request.url.raw_path.decode()}"


def _push_app(project: Project, url: str = "https://app.example.net/hooks") -> dict[str, Any]:
    answer = project.call("POST", "/apps", body={"name": "billing", "kind": "push", "url": url})
    assert answer.status == 201, answer.body
    return dict(answer.body)


@pytest.mark.parametrize("url", list(FORBIDDEN_HOSTS))
def test_a_push_app_url_to_a_forbidden_address_is_refused_at_update(
    project: Project, dns: dict[str, str], url: str
) -> None:
    app = _push_app(project)
    answer = project.call("PATCH", f"/apps/{app['id']}", body={"url": url})
    assert answer.status == 400 and answer.body["error"]["code"] == "validation_error"
    assert project.call("GET", f"/apps/{app['id']}").body["url"] == app["url"]


def test_a_name_resolving_to_loopback_is_refused_at_create(
    project: Project, dns: dict[str, str]
) -> None:
    answer = project.call(
        "POST", "/apps", body={"name": "x", "kind": "push", "url": "https://rebind.example.net/"}
    )
    assert answer.status == 400 and answer.body["error"]["code"] == "validation_error"


@pytest.mark.parametrize("address", sorted(set(FORBIDDEN_HOSTS.values())))
def test_a_name_that_later_resolves_to_a_forbidden_address_is_not_called(
    project: Project, dns: dict[str, str], requests_sent: list[httpx.Request], address: str
) -> None:
    """DNS changed after the app was created: the check at call time refuses, no request."""
    app = _push_app(project)
    dns["app.example.net"] = address
    answer = project.call("POST", f"/apps/{app['id']}/sync")
    assert answer.status == 409 and answer.body["error"]["code"] == "app_not_synced"
    assert requests_sent == []


def test_a_redirect_is_not_followed(
    project: Project, dns: dict[str, str], requests_sent: list[httpx.Request]
) -> None:
    app = _push_app(project, "https://app.example.net/redirect")
    answer = project.call("POST", f"/apps/{app['id']}/sync")
    assert answer.status == 409 and answer.body["error"]["code"] == "app_not_synced"
    assert [_sent_to(r) for r in requests_sent] == ["https://app.example.net/redirect"]


def test_the_public_address_is_called(
    project: Project, dns: dict[str, str], requests_sent: list[httpx.Request]
) -> None:
    app = _push_app(project)
    assert project.call("POST", f"/apps/{app['id']}/sync").status == 200
    assert len(requests_sent) == 1


@pytest.mark.parametrize(
    "url", ["https://169.254.169.254/latest/meta-data", "http://169.254.169.254/"]
)
def test_link_local_stays_refused_under_ezgh_dev(
    project: Project, dns: dict[str, str], monkeypatch: pytest.MonkeyPatch, url: str
) -> None:
    """The loopback allowance of `ezgh dev` is for loopback (and private) apps, not for the
    metadata service."""
    monkeypatch.setenv(config.ENV_ALLOW_LOOPBACK, "1")
    config.reset_settings()
    answer = project.call("POST", "/apps", body={"name": "x", "kind": "push", "url": url})
    assert answer.status == 400 and answer.body["error"]["code"] == "validation_error"
    ok = project.call(
        "POST", "/apps", body={"name": "y", "kind": "push", "url": "http://127.0.0.1:8000/"}
    )
    assert ok.status == 201


# --- API keys ------------------------------------------------------------------------------


def test_an_idempotent_replay_needs_the_same_caller(project: Project) -> None:
    """An Idempotency-Key replay answers the first answer without running the request, so
    it must not hand one key's answer (here: a new admin key's secret) to another key."""
    body = {"name": "ops-admin", "permissions": [{"action": "*"}]}
    headers = {"idempotency-key": "create-ops-admin"}
    first = project.call("POST", "/apiKeys", body=body, headers=headers)
    assert first.status == 201
    weak = project.call(
        "POST",
        "/apiKeys",
        body={"name": "reader", "permissions": [{"action": "workflows.runs.read"}]},
    ).body["key"]
    replay = project.call("POST", "/apiKeys", key=weak, body=body, headers=headers)
    assert replay.status == 403 and replay.body["error"]["code"] == "forbidden"
    assert first.body["key"] not in replay.raw
    # The first caller still gets its answer again.
    again = project.call("POST", "/apiKeys", body=body, headers=headers)
    assert (again.status, again.body) == (201, first.body)


def test_an_idempotency_key_does_not_cross_projects(
    project: Project, other_project: Project
) -> None:
    body = {"name": "ci", "permissions": [{"action": "workflows.runs.read"}]}
    headers = {"idempotency-key": "same-key"}
    mine = project.call("POST", "/apiKeys", body=body, headers=headers)
    theirs = other_project.call("POST", "/apiKeys", body=body, headers=headers)
    assert mine.status == theirs.status == 201
    assert mine.body["id"] != theirs.body["id"] and mine.body["key"] != theirs.body["key"]


def test_a_workflow_scoped_key_cannot_start_another_workflow(project: Project) -> None:
    app = project.call("POST", "/apps", body={"name": "jobs", "kind": "pull"}).body
    project.call(
        "POST", f"/apps/{app['id']}/workers", body={"workerId": "w", "workflows": ["a", "b"]}
    )
    scoped = project.call(
        "POST",
        "/apiKeys",
        body={"name": "a-only", "permissions": [{"action": "*", "resource": "jobs/a"}]},
    ).body["key"]
    ok = project.call("POST", "/runs", key=scoped, body={"appId": app["id"], "workflow": "a"})
    assert ok.status == 201, ok.body
    no = project.call("POST", "/runs", key=scoped, body={"appId": app["id"], "workflow": "b"})
    assert no.status == 403 and no.body["error"]["code"] == "forbidden"
    wider = project.call(
        "POST", "/apiKeys", key=scoped, body={"name": "w", "permissions": [{"action": "*"}]}
    )
    assert wider.status == 403


def test_a_key_cannot_act_on_another_projects_resources_through_its_own_path(
    project: Project, other_project: Project
) -> None:
    app = other_project.call("POST", "/apps", body={"name": "jobs", "kind": "pull"}).body
    for method, sub, body in (
        ("PATCH", f"/apps/{app['id']}", {"url": None}),
        ("DELETE", f"/apps/{app['id']}", None),
        ("POST", f"/apps/{app['id']}/workers", {"workerId": "w", "workflows": ["x"]}),
        ("POST", f"/apps/{app['slug']}/tasks/poll", {"waitSeconds": 0}),
        ("POST", f"/apps/{app['slug']}/tasks/access", None),
    ):
        answer = project.call(method, sub, body=body)
        assert answer.status == 404, (method, sub, answer.body)
    assert other_project.call("GET", f"/apps/{app['id']}").body["status"] == "pending"
