"""The steps function: step calls at a function URL, and nothing else."""

from __future__ import annotations

import json
from typing import Any

import pytest
from aws_lambda_powertools.utilities.typing import LambdaContext

from tests.api.conftest import make_event


def steps_call(method: str, path: str, **kwargs: Any) -> tuple[int, Any]:
    from functions.steps.handler import handler

    answer = handler(make_event(method, path, **kwargs), LambdaContext())
    return answer["statusCode"], json.loads(answer.get("body") or "null")


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/v1/health"),
        ("GET", "/v1/openapi.json"),
        ("POST", "/v1/organizations/o/projects/p/runs"),
        ("POST", "/v1/callbacks/abc"),
        ("POST", "/v1/invocations/outcome"),
    ],
)
def test_anything_but_a_step_call_is_404_in_the_contract_shape(
    aws_env: None, method: str, path: str
) -> None:
    status, body = steps_call(method, path, body={})
    assert status == 404
    assert set(body) == {"error"}
    assert body["error"]["code"] == "not_found"
    assert set(body["error"]) == {"code", "message"}


@pytest.mark.parametrize("method", ["GET", "PUT", "TRACE", "PROPFIND"])
def test_another_method_on_the_step_path_is_405(aws_env: None, method: str) -> None:
    status, body = steps_call(method, "/v1/invocations/steps", body={})
    assert status == 405 and body["error"]["code"] == "method_not_allowed"


def _expired_token() -> str:
    from ezgh_engine import clock, config
    from ezgh_engine.core import tokens

    claims = tokens.InvocationClaims("r", "p", 1, 1, clock.now_ms() - 1)
    return tokens.mint(config.settings().token_secret, claims)


JUNK = {
    "another path": ("GET", "/", {}),
    "another method": ("DELETE", "/v1/invocations/steps", {}),
    "no token": ("POST", "/v1/invocations/steps", {}),
    "not bearer": ("POST", "/v1/invocations/steps", {"authorization": "Basic eDp5"}),
    "forged token": ("POST", "/v1/invocations/steps", {"authorization": "Bearer e30.c2ln"}),
    "non-ASCII token": ("POST", "/v1/invocations/steps", {"authorization": "Bearer \u00e9.x"}),
    "expired token": ("POST", "/v1/invocations/steps", None),
}


@pytest.mark.parametrize("junk", sorted(JUNK))
def test_junk_is_refused_before_any_work(
    aws_env: None, monkeypatch: pytest.MonkeyPatch, junk: str
) -> None:
    """No routing, no validation, no AWS request: the raw event is refused."""
    from ezgh_engine.adapters import aws
    from ezgh_engine.api.app import resolver

    method, path, headers = JUNK[junk]
    if headers is None:
        headers = {"authorization": f"Bearer {_expired_token()}"}

    def no_resolver(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("junk reached the resolver")

    monkeypatch.setattr(resolver, "resolve", no_resolver)
    requests: list[Any] = []
    stop = aws.observe(requests.append)
    try:
        status, body = steps_call(method, path, raw_body="{" * 1000, headers=headers)
    finally:
        stop()
    assert status in (401, 404, 405), body
    assert set(body) == {"error"} and set(body["error"]) == {"code", "message"}
    assert requests == []


def test_a_step_call_with_a_bad_token_is_401(aws_env: None) -> None:
    status, body = steps_call(
        "POST",
        "/v1/invocations/steps",
        body={"ops": [{"op": "start", "stepId": "a#1", "name": "a", "kind": "run"}]},
        headers={"authorization": "Bearer not-a-token"},
    )
    assert status == 401
    assert body["error"]["code"] == "unauthorized"


def test_invocations_are_told_the_steps_url(aws_env: None, monkeypatch: pytest.MonkeyPatch) -> None:
    from ezgh_engine import config
    from ezgh_engine.topology import STEPS_FUNCTION

    assert config.settings().steps_url == config.settings().api_url  # not set: the API
    monkeypatch.setenv(str(STEPS_FUNCTION.url_env_var), "https://steps.example.test/")
    config.reset_settings()
    try:
        assert config.settings().steps_url == "https://steps.example.test"
    finally:
        monkeypatch.delenv(str(STEPS_FUNCTION.url_env_var))
        config.reset_settings()


def test_push_invocations_call_the_steps_url_and_pull_tasks_the_api(
    aws_env: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pull worker posts heartbeats and its outcome to `api.url` too, which only the API
    serves; push apps only make step calls there."""
    from ezgh_engine import clock, config
    from ezgh_engine.core.models import Run
    from ezgh_engine.service.invoker import invoke_request
    from ezgh_engine.topology import STEPS_FUNCTION

    monkeypatch.setenv(str(STEPS_FUNCTION.url_env_var), "https://steps.example.test")
    config.reset_settings()
    now = clock.iso(clock.now())
    run = Run("r", "o", "p", "a", "w", "running", None, 1, now, now, 1)
    try:
        push = invoke_request(run, "inv", 60_000, clock.now_ms(), app_protocol="1.5")
        pull = invoke_request(run, "inv", 60_000, clock.now_ms(), pull=True, app_protocol="1.5")
        assert push["api"]["url"] == "https://steps.example.test"
        assert pull["api"]["url"] == config.settings().api_url
    finally:
        monkeypatch.delenv(str(STEPS_FUNCTION.url_env_var))
        config.reset_settings()
