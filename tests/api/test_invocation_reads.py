"""The reads an invocation makes beyond its request (protocol 1.5): history pages and values
given as references, at the steps function and the API, with the invocation's token only,
of that token's run only."""

from __future__ import annotations

import json
from typing import Any

import pytest
from aws_lambda_powertools.utilities.typing import LambdaContext

from tests.api.conftest import make_event

pytestmark = pytest.mark.usefixtures("aws_env")


def _steps_function(path: str, body: Any, token: str) -> tuple[int, Any]:
    from functions.steps.handler import handler

    event = make_event("POST", path, body=body, headers={"authorization": f"Bearer {token}"})
    answer = handler(event, LambdaContext())
    return answer["statusCode"], json.loads(answer.get("body") or "null")


def _token(run_id: str, project_id: str = "p", *, expires_in_ms: int = 60_000) -> str:
    from ezgh_engine import clock
    from ezgh_engine.config import settings
    from ezgh_engine.core import tokens

    claims = tokens.InvocationClaims(run_id, project_id, 1, 1, clock.now_ms() + expires_in_ms)
    return tokens.mint(settings().token_secret, claims)


def _put(project_id: str, run_id: str, path: str, value: Any) -> None:
    from ezgh_engine.adapters import payloads

    payloads.put(project_id, run_id, path, json.dumps(value))


def test_a_value_is_read_with_the_runs_token() -> None:
    _put("p", "run-a", "steps/big%231/w1/output", {"n": 1})
    status, body = _steps_function(
        "/v1/invocations/payload", {"ref": "steps/big%231/w1/output"}, _token("run-a")
    )
    assert (status, body) == (200, {"value": {"n": 1}})


def test_another_runs_token_reads_nothing_of_this_run() -> None:
    _put("p", "run-a", "input", "secret")
    status, body = _steps_function("/v1/invocations/payload", {"ref": "input"}, _token("run-b"))
    assert status == 404 and body["error"]["code"] == "not_found"
    status, _ = _steps_function("/v1/invocations/payload", {"ref": "input"}, _token("run-a", "q"))
    assert status == 404  # the project is the token's too


@pytest.mark.parametrize(
    "ref", ["", "output", "../run-a/input", "steps/a/b/c/output", "steps/x y/output", 7]
)
def test_only_the_references_the_protocol_gives_are_read(ref: Any) -> None:
    status, body = _steps_function("/v1/invocations/payload", {"ref": ref}, _token("run-a"))
    assert status == 400 and body["error"]["code"] == "validation_error"


@pytest.mark.parametrize("path", ["/v1/invocations/payload", "/v1/invocations/history"])
def test_a_forged_or_expired_token_is_401(path: str) -> None:
    body = {"ref": "input", "cursor": "c1.x"}
    assert _steps_function(path, body, "not-a-token")[0] == 401
    assert _steps_function(path, body, _token("run-a", expires_in_ms=-1))[0] == 401


def test_a_history_cursor_opens_only_its_own_runs_history() -> None:
    from ezgh_engine.service import wire

    cursor = wire.history_cursor("run-a", wire.PHASE_ENDED)
    status, body = _steps_function("/v1/invocations/history", {"cursor": cursor}, _token("run-b"))
    assert status == 400 and body["error"]["code"] == "validation_error"
    status, body = _steps_function("/v1/invocations/history", {"cursor": cursor}, _token("run-a"))
    assert (status, body) == (200, {"steps": [], "nextCursor": None})


def _call(token: str, ops: list[dict[str, Any]], **extra: Any) -> Any:
    status, body = _steps_function(
        "/v1/invocations/steps", {"deploymentId": None, "ops": ops, **extra}, token
    )
    assert status == 200, body
    return body["results"]


def test_a_recorded_result_gives_a_large_output_by_reference_to_a_caller_that_reads_them() -> None:
    """A step call's answer has a size of its own too (1.5): a `recorded` result gives an
    output kept in S3 as its reference to an SDK that said 1.5, inline to one that did not."""
    from tests.api.steps_helpers import lease_token, stored_run

    run = stored_run()
    token = lease_token(run)
    big = "b" * 70_000  # over 64 KiB: kept in S3
    _call(token, [{"op": "start", "stepId": "a#1", "name": "a", "kind": "run", "attempt": 1}])
    _call(token, [{"op": "complete", "stepId": "a#1", "output": big}])
    again = {"op": "start", "stepId": "a#1", "name": "a", "kind": "run", "attempt": 1}
    (new,) = _call(token, [again], protocol="1.5")
    assert new["result"] == "recorded" and "output" not in new["step"]
    ref = new["step"]["outputRef"]
    assert _steps_function("/v1/invocations/payload", {"ref": ref}, token)[1] == {"value": big}
    (old,) = _call(token, [again])  # a caller before 1.5
    assert old["result"] == "recorded" and old["step"]["output"] == big
