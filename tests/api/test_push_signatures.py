"""Push request signatures, protocol 1.4: the engine's signer against the SDK's
PushApp. A signature covers the method, the path and the invocation (its ID and epoch), so a
request captured off the wire replays only as itself."""

from __future__ import annotations

import json
from typing import Any

import pytest
from ezgh_engine import clock, config
from ezgh_engine.adapters import push
from ezgh_engine.core import tokens
from ezgh_engine.protocol import PROTOCOL_VERSION
from ezgh_workflows import Context, PushApp, workflow

KEY = "push-signing-key"
URL = "https://app.example.invalid/hooks/ezgh"


@workflow("noop")
async def noop(ctx: Context) -> str:
    return "ok"


def _event(path: str, body: bytes, headers: dict[str, str], method: str = "POST") -> dict[str, Any]:
    return {
        "version": "2.0",
        "rawPath": path,
        "requestContext": {"http": {"method": method, "path": path}},
        "headers": {
            "content-type": "application/json",
            **{k.lower(): v for k, v in headers.items()},
        },
        "body": body.decode(),
        "isBase64Encoded": False,
    }


def _invoke_body(invocation_id: str, epoch: int) -> dict[str, Any]:
    claims = tokens.InvocationClaims("run-1", "p", epoch, 1, clock.now_ms() + 60_000)
    return {
        "protocol": PROTOCOL_VERSION,
        "type": "invoke",
        "invocationId": invocation_id,
        # No steps and an unknown workflow: the app answers `failed` without any step call.
        "run": {
            "id": "run-1",
            "appId": "a",
            "workflow": "missing",
            "input": None,
            "attempt": 1,
            "status": "running",
        },
        "steps": [],
        "api": {"url": "http://127.0.0.1:9/", "token": tokens.mint("test-token-secret", claims)},
    }


@pytest.fixture
def secret(aws_env: None) -> None:
    """The engine's settings (its token secret is `test-token-secret`)."""
    assert config.settings().token_secret == "test-token-secret"


def _engine_request(body: dict[str, Any]) -> tuple[bytes, dict[str, str]]:
    raw = json.dumps(body, separators=(",", ":")).encode()
    return raw, push.signed_headers(KEY, URL, raw, push.invocation_of(body))


def _status(path: str, raw: bytes, headers: dict[str, str], method: str = "POST") -> int:
    app = PushApp([noop], signing_key=KEY)
    return int(app.lambda_handler(_event(path, raw, headers, method), None)["statusCode"])


def test_the_engine_signs_the_invocation_and_its_epoch(secret: None) -> None:
    raw, headers = _engine_request(_invoke_body("inv-1", 7))
    assert headers[push.INVOCATION_HEADER] == "inv-1/7"
    forms = headers[push.SIGNATURE_HEADER].split(",")
    assert [f[:3] for f in forms] == ["v1=", "v2="]
    assert _status("/hooks/ezgh", raw, headers) == 200


def test_a_sync_verifies_at_its_path(secret: None) -> None:
    raw, headers = _engine_request({"protocol": PROTOCOL_VERSION, "type": "sync"})
    assert push.INVOCATION_HEADER not in headers
    assert _status("/hooks/ezgh", raw, headers) == 200


def test_a_captured_request_sent_to_another_path_is_refused(secret: None) -> None:
    raw, headers = _engine_request({"protocol": PROTOCOL_VERSION, "type": "sync"})
    assert _status("/other/endpoint", raw, headers) == 401


def test_a_captured_request_with_another_invocation_or_epoch_is_refused(secret: None) -> None:
    raw, headers = _engine_request(_invoke_body("inv-1", 7))
    for forged in ("inv-1/8", "inv-2/7", ""):
        changed = {**headers, push.INVOCATION_HEADER: forged}
        assert _status("/hooks/ezgh", raw, changed) == 401, forged


def test_a_signature_of_one_invocation_does_not_deliver_another(secret: None) -> None:
    """The invocation header is signed, and must name the body's own invocationId."""
    _, headers = _engine_request(_invoke_body("inv-1", 7))
    other = json.dumps(_invoke_body("inv-2", 7), separators=(",", ":")).encode()
    assert _status("/hooks/ezgh", other, headers) == 401


def test_the_first_form_alone_is_refused(secret: None) -> None:
    raw, headers = _engine_request({"protocol": PROTOCOL_VERSION, "type": "sync"})
    v1_only = {**headers, push.SIGNATURE_HEADER: headers[push.SIGNATURE_HEADER].split(",")[0]}
    assert _status("/hooks/ezgh", raw, v1_only) == 401
