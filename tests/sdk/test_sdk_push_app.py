"""PushApp over HTTP: signatures, sync, describe, errors, ASGI lifespan, Lambda events."""

from __future__ import annotations

import asyncio
import base64
import json
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from ezgh_engine.protocol import PROTOCOL_VERSION
from ezgh_workflows import Context, PushApp, workflow
from sdk_engine import KEY, Engine, make_app, post, signed_headers

pytestmark = pytest.mark.moto_only("the push app's own HTTP and signatures")


@workflow("hello")
async def hello(ctx: Context) -> str:
    return await ctx.step.run("greet", lambda: f"hello {ctx.input['name']}")


SYNC = {"protocol": PROTOCOL_VERSION, "type": "sync"}  # the engine's


def test_sync_lists_workflows(engine: Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EZGH_DEPLOYMENT_ID", "dep-7")
    answer = post(make_app(engine, hello), SYNC)
    assert answer.status_code == 200
    assert answer.json() == {
        "protocol": "1.5",
        "sdk": "ezgh-workflows-python/0.3.0",
        "deploymentId": "dep-7",
        "workflows": [{"name": "hello"}],
    }


def test_deployment_id_goes_with_outcomes_and_step_calls(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("EZGH_DEPLOYMENT_ID", "dep-9")
    answer = post(make_app(engine, hello), engine.invoke_body("hello", {"name": "ada"}))
    assert answer.json()["outcome"] == "completed"
    assert answer.json()["output"] == "hello ada"
    assert answer.json()["deploymentId"] == "dep-9"
    assert engine.deployment_ids == ["dep-9"]  # the step's end rides the answer


def _body(payload: Any) -> bytes:
    return json.dumps(payload).encode()


def _now() -> int:
    return int(time.time())


@pytest.mark.parametrize(
    "make_headers",
    [
        lambda: signed_headers(_body(SYNC), key="wrong-key"),
        lambda: {"content-type": "application/json"},
        lambda: {"x-ezgh-timestamp": str(_now())},
        lambda: signed_headers(_body(SYNC), timestamp=_now() - 302),
        lambda: signed_headers(_body(SYNC), timestamp=_now() + 302),
        lambda: {**signed_headers(_body(SYNC)), "x-ezgh-timestamp": "soon"},
    ],
    ids=["bad", "missing", "no-signature", "stale", "future", "not-int"],
)
def test_unverified_requests_get_401(
    engine: Engine, make_headers: Callable[[], dict[str, str]]
) -> None:
    answer = post(make_app(engine, hello), SYNC, headers=make_headers())
    assert answer.status_code == 401
    assert answer.json()["error"]["code"] == "unauthorized"
    assert "Traceback" not in answer.text


def test_rotated_signatures_and_tolerance(engine: Engine) -> None:
    body = _body(SYNC)
    headers = signed_headers(body, timestamp=_now() - 290)
    headers["x-ezgh-signature"] = "v1=00, " + headers["x-ezgh-signature"]
    assert post(make_app(engine, hello), SYNC, headers=headers).status_code == 200


def test_tampered_body_is_refused(engine: Engine) -> None:
    headers = signed_headers(_body({**SYNC, "x": 1}))
    assert post(make_app(engine, hello), SYNC, headers=headers).status_code == 401


def test_no_signing_key_is_401(engine: Engine) -> None:
    app = PushApp([hello], transport_factory=engine.transport)
    answer = post(app, SYNC)
    assert answer.status_code == 401
    assert "EZGH_SIGNING_KEY" in answer.json()["error"]["message"]
    app.signing_key = KEY  # the local runtime sets it after creating the app
    assert post(app, SYNC).status_code == 200


def test_signing_key_from_environment(engine: Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EZGH_SIGNING_KEY", KEY)
    assert post(PushApp([hello]), SYNC).status_code == 200


def test_unknown_workflow_fails_the_run(engine: Engine) -> None:
    @workflow("nope")
    def nope(ctx: Context) -> None:
        return None

    make_app(engine, hello, nope)  # the deployment that had it, when the run started
    body = engine.invoke_body("nope")
    answer = post(make_app(engine, hello), body)  # the next deployment has it no more
    assert answer.status_code == 200
    assert answer.json()["outcome"] == "failed"
    assert answer.json()["error"]["code"] == "workflows.unknown_workflow"


@pytest.mark.parametrize(
    "payload", [{"type": "other"}, {"type": "invoke", "run": {}}, [1, 2], {"type": "invoke"}]
)
def test_malformed_requests_get_400(engine: Engine, payload: Any) -> None:
    answer = post(make_app(engine, hello), payload)
    assert answer.status_code == 400
    assert answer.json()["error"]["code"] == "validation_error"


def test_sdk_failure_is_500_without_a_trace(engine: Engine) -> None:
    def broken(api: Any, deployment_id: Any) -> Any:
        raise RuntimeError("secret detail")

    make_app(engine, hello)
    body = engine.invoke_body("hello", {"name": "x"})
    app = PushApp([hello], signing_key=KEY, transport_factory=broken)
    answer = post(app, body)
    assert answer.status_code == 500
    assert answer.json()["error"]["code"] == "internal_error"
    assert "secret detail" not in answer.text and "Traceback" not in answer.text


def test_a_step_call_that_stays_throttled_answers_throttled_not_500(engine: Engine) -> None:
    """The engine kept answering 503 past the SDK's retries: not the app's fault. The
    invocation answers the protocol's `throttled` outcome with the engine's `Retry-After`,
    which the engine delivers again without counting a failed delivery (docs/protocol.md)."""
    from ezgh_workflows._internal.transport import EngineBusy

    class Throttled:
        async def send(self, ops: Any) -> Any:
            raise EngineBusy("step call stayed throttled: HTTP 503", 1.0)

        async def aclose(self) -> None:
            return None

    make_app(engine, hello)
    body = engine.invoke_body("hello", {"name": "x"})
    app = PushApp([hello], signing_key=KEY, transport_factory=lambda api, dep: Throttled())
    answer = post(app, body)
    assert answer.status_code == 200
    assert answer.json()["outcome"] == "throttled"
    assert answer.json()["retryAfter"] == 1.0
    assert "HTTP 503" in answer.json()["reason"]


def _asgi(app: PushApp, scope: dict[str, Any], messages: list[dict[str, Any]]) -> list[Any]:
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return messages.pop(0)

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    asyncio.run(app(scope, receive, send))
    return sent


def test_get_describes_and_other_methods_are_405(engine: Engine) -> None:
    app = make_app(engine, hello)
    sent = _asgi(
        app,
        {"type": "http", "method": "GET", "headers": []},
        [{"type": "http.request", "body": b""}],
    )
    assert sent[0]["status"] == 200
    assert json.loads(sent[1]["body"])["protocol"] == "1.5"
    sent = _asgi(
        app,
        {"type": "http", "method": "PUT", "headers": []},
        [{"type": "http.request", "body": b""}],
    )
    assert sent[0]["status"] == 405


def test_lifespan(engine: Engine) -> None:
    sent = _asgi(
        make_app(engine, hello),
        {"type": "lifespan"},
        [{"type": "lifespan.startup"}, {"type": "lifespan.shutdown"}],
    )
    assert [m["type"] for m in sent] == ["lifespan.startup.complete", "lifespan.shutdown.complete"]


def test_asgi_loop_stays_free_during_an_invocation(engine: Engine) -> None:
    """The step's body waits for the loop's own ticker to tick five times: it can end only
    if the loop runs beside the invocation (a blocked loop ticks after it, when the body has
    given up waiting). Not timed: a timed check fails on a slow machine."""
    ticked = threading.Event()

    @workflow("slow")
    def slow(ctx: Context) -> str:
        return ctx.step.run("wait", lambda: "done" if ticked.wait(60) else "loop blocked")

    app = make_app(engine, slow)
    body = _body(engine.invoke_body("slow"))
    ticks: list[int] = []

    async def main() -> Any:
        import httpx

        async def ticker() -> None:
            for tick in range(5):
                ticks.append(tick)
                await asyncio.sleep(0.02)
            ticked.set()

        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://a") as client:
            answer, _ = await asyncio.gather(
                client.post("/", content=body, headers=signed_headers(body)), ticker()
            )
        return answer

    answer = asyncio.run(main())
    assert answer.json()["output"] == "done"
    assert ticks == [0, 1, 2, 3, 4]


def _v2_event(payload: Any, *, b64: bool) -> dict[str, Any]:
    raw = _body(payload)
    return {
        "version": "2.0",
        "requestContext": {"http": {"method": "POST", "path": "/"}},
        "headers": signed_headers(raw),
        "body": base64.b64encode(raw).decode() if b64 else raw.decode(),
        "isBase64Encoded": b64,
    }


@pytest.mark.parametrize("b64", [True, False])
def test_lambda_handler_with_a_v2_event(engine: Engine, b64: bool) -> None:
    app = make_app(engine, hello)
    result = app.lambda_handler(
        _v2_event(engine.invoke_body("hello", {"name": "bo"}), b64=b64), None
    )
    assert result["statusCode"] == 200
    assert result["headers"]["content-type"] == "application/json"
    assert json.loads(result["body"])["output"] == "hello bo"


def test_lambda_handler_with_a_v1_event(engine: Engine) -> None:
    raw = _body(SYNC)
    headers = {k.title(): v for k, v in signed_headers(raw).items()}
    event = {
        "httpMethod": "POST",
        "headers": headers,
        "body": raw.decode(),
        "isBase64Encoded": False,
    }
    result = make_app(engine, hello).lambda_handler(event, None)
    assert result["statusCode"] == 200
    assert json.loads(result["body"])["workflows"] == [{"name": "hello"}]


def test_lambda_handler_refuses_bad_events(engine: Engine) -> None:
    app = make_app(engine, hello)
    assert app.lambda_handler({"nothing": True}, None)["statusCode"] == 400
    event = _v2_event(SYNC, b64=True)
    event["body"] = "%%%"
    assert app.lambda_handler(event, None)["statusCode"] == 400
    event = _v2_event(SYNC, b64=False)
    event["headers"]["x-ezgh-signature"] = "v1=00"
    assert app.lambda_handler(event, None)["statusCode"] == 401


def test_app_refuses_bad_workflow_lists() -> None:
    with pytest.raises(TypeError):
        PushApp([lambda ctx: None])  # type: ignore[list-item]
    with pytest.raises(ValueError):
        PushApp([hello, hello])


def test_unexpected_sdk_errors_are_500_json(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    app = make_app(engine, hello)

    def explode(*args: Any) -> Any:
        raise RuntimeError("hidden")

    monkeypatch.setattr(app, "_dispatch", explode)
    answer = post(app, SYNC)
    assert answer.status_code == 500
    assert answer.json() == {
        "error": {"code": "internal_error", "message": "the SDK failed to handle the request"}
    }
