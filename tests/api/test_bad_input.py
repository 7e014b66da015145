"""Bad input answers the contract's 4xx, never a 5xx, and list cursors are opaque and
authenticated (a tampered or foreign cursor is `400 validation_error`, and shows no table
keys).

Each case here was a 500 before: deep nesting (`RecursionError` in the JSON decoder, the
serializer's depth), a lone surrogate (`UnicodeEncodeError`), a non-ASCII token signature
(`hmac.compare_digest`'s TypeError), a 64-character DNS label (`UnicodeError` from the
resolver) and a crafted cursor (sent to DynamoDB as `ExclusiveStartKey`).
"""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest
from ezgh_engine import clock, config
from ezgh_engine.adapters import ddb
from ezgh_engine.core import tokens, validation

from tests.api.conftest import Project, call, make_event
from tests.api.steps_helpers import lease_token, stored_run, waiting_callback


def _nested(levels: int, leaf: str = "1") -> str:
    return "[" * levels + leaf + "]" * levels


def _start_body(app: str, input_json: str) -> str:
    return f'{{"appId": "{app}", "workflow": "nightly", "input": {input_json}}}'


def _is_validation_error(answer: Any) -> bool:
    return answer.status == 400 and answer.body["error"]["code"] == "validation_error"


# --- nesting and surrogates -------------------------------------------------------------------


def test_a_body_nested_10000_levels_is_400_naming_the_limit(project: Project) -> None:
    raw = '{"name": "x", "kind": "pull", "extra": ' + _nested(10_000) + "}"
    answer = project.call("POST", "/apps", raw_body=raw)
    assert _is_validation_error(answer), answer.body
    assert f"{validation.MAX_DEPTH} levels" in answer.body["error"]["message"]


@pytest.mark.parametrize("levels", [65, 900])
def test_an_input_nested_past_the_limit_is_400(project: Project, levels: int) -> None:
    app = _pull_app(project)
    raw = _start_body(app, _nested(levels))
    answer = project.call("POST", "/runs", raw_body=raw)
    assert _is_validation_error(answer), answer.body
    assert f"{validation.MAX_DEPTH} levels" in answer.body["error"]["message"]


def test_an_input_nested_exactly_to_the_limit_is_accepted(project: Project) -> None:
    app = _pull_app(project)
    raw = _start_body(app, _nested(validation.MAX_DEPTH))
    assert project.call("POST", "/runs", raw_body=raw).status == 201


@pytest.mark.parametrize(
    "raw",
    [
        '{"name": "x\\ud800", "kind": "pull"}',
        '{"name": "x", "kind": "pull", "\\udfff": 1}',
    ],
    ids=["value", "key"],
)
def test_a_lone_surrogate_is_400(project: Project, raw: str) -> None:
    answer = project.call("POST", "/apps", raw_body=raw)
    assert _is_validation_error(answer), answer.body
    assert "surrogate" in answer.body["error"]["message"]


def test_a_lone_surrogate_in_a_run_input_is_400(project: Project) -> None:
    app = _pull_app(project)
    raw = _start_body(app, '{"a": ["\\ud800"]}')
    assert _is_validation_error(project.call("POST", "/runs", raw_body=raw))


def test_a_callback_body_too_deep_or_with_a_surrogate_is_400(aws_env: None) -> None:
    _, _, token = waiting_callback()
    for raw in (_nested(10_000), _nested(65), '"\\ud800"'):
        answer = call("POST", f"/v1/callbacks/{token}", raw_body=raw)
        assert _is_validation_error(answer), (raw[:20], answer.body)
        # A URL that names no callback learns nothing of the body: 404 first.
        unknown = call("POST", "/v1/callbacks/cb_unknown", raw_body=raw)
        assert unknown.status == 404, unknown.body


def test_a_step_call_too_deep_is_400(aws_env: None) -> None:
    from functions.steps.handler import handler
    from tests.api.conftest import LambdaContext

    raw = '{"ops": [{"op": "end", "stepId": "a#1", "output": ' + _nested(2_000) + "}]}"
    token = lease_token(stored_run())
    event = make_event(
        "POST", "/v1/invocations/steps", raw_body=raw, headers={"authorization": f"Bearer {token}"}
    )
    answer = handler(event, LambdaContext())
    assert answer["statusCode"] == 400, answer["body"]
    assert json.loads(answer["body"])["error"]["code"] == "validation_error"


def test_the_depth_rule_counts_containers() -> None:
    validation.check_json_value(json.loads(_nested(validation.MAX_DEPTH)))
    validation.check_json_value(json.loads("[" * validation.MAX_DEPTH + "]" * validation.MAX_DEPTH))
    with pytest.raises(validation.ValidationError):
        validation.check_json_value(json.loads(_nested(validation.MAX_DEPTH + 1, "{}")))
    with pytest.raises(validation.ValidationError):
        validation.encode_value(json.loads(_nested(validation.MAX_DEPTH + 1)))


# --- tokens -------------------------------------------------------------------------------


def _token() -> str:
    claims = tokens.InvocationClaims("r", "p", 1, 1, clock.now_ms() + 60_000)
    return tokens.mint(config.settings().token_secret, claims)


@pytest.mark.parametrize("signature", ["é", "\u00ff" * 43, "ü" + "A" * 42])
def test_a_non_ascii_invocation_token_signature_is_401(aws_env: None, signature: str) -> None:
    from functions.steps.handler import handler
    from tests.api.conftest import LambdaContext

    payload = _token().partition(".")[0]
    event = make_event(
        "POST",
        "/v1/invocations/steps",
        body={"ops": [{"op": "start", "stepId": "a#1", "name": "a", "kind": "run"}]},
        headers={"authorization": f"Bearer {payload}.{signature}"},
    )
    answer = handler(event, LambdaContext())
    assert answer["statusCode"] == 401, answer["body"]


def test_a_non_ascii_task_id_signature_is_401(aws_env: None) -> None:
    answer = call(
        "POST",
        "/v1/invocations/heartbeat",
        body={"taskId": "eyJyIjoicnVuIn0.é"},
        headers={"authorization": f"Bearer {_token()}"},
    )
    assert answer.status == 401 and answer.body["error"]["code"] == "unauthorized"


# --- app URLs ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "url",
    [
        "https://" + "a" * 64 + ".example.invalid/",  # a DNS label is at most 63 characters
        "https://" + "a" * 300 + "/",
        "https://a..example.invalid/",
        "https://\u00e9\u0301" + "x" * 70 + ".invalid/",
    ],
    ids=["long-label", "long-name", "empty-label", "idna"],
)
def test_an_app_url_with_an_impossible_host_is_400(project: Project, url: str) -> None:
    answer = project.call("POST", "/apps", body={"name": "x", "kind": "push", "url": url})
    assert _is_validation_error(answer), answer.body


# --- cursors -------------------------------------------------------------------------------


def _pull_app(project: Project) -> str:
    app = project.call("POST", "/apps", body={"name": "jobs", "kind": "pull"}).body
    worker = {"workerId": "w", "workflows": ["nightly"]}
    assert project.call("POST", f"/apps/{app['id']}/workers", body=worker).status == 200
    return str(app["id"])


def _runs(project: Project, count: int) -> str:
    app = _pull_app(project)
    for n in range(count):
        body = {"appId": app, "workflow": "nightly", "input": {"n": n}}
        assert project.call("POST", "/runs", body=body).status == 201
    return app


def _page(project: Project, **query: str) -> Any:
    return project.call("GET", "/runs", query=query)


def _flip(cursor: str, index: int) -> str:
    chars = list(cursor)
    chars[index] = "A" if chars[index] != "A" else "B"
    return "".join(chars)


def test_cursors_page_through_every_run(project: Project) -> None:
    _runs(project, 3)
    first = _page(project, limit="2")
    assert first.status == 200 and len(first.body["runs"]) == 2
    second = _page(project, limit="2", cursor=first.body["nextCursor"])
    assert second.status == 200, second.body
    ids = [r["id"] for r in first.body["runs"] + second.body["runs"]]
    assert len(set(ids)) == 3 and second.body["nextCursor"] is None


def test_a_cursor_does_not_show_the_tables_keys(project: Project) -> None:
    _runs(project, 2)
    cursor = _page(project, limit="1").body["nextCursor"]
    text = cursor.removeprefix(ddb.CURSOR_PREFIX)
    decoded = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    for leak in (b"gsi1", b"RUN", project.project_id.encode(), b'"S"'):
        assert leak not in decoded


@pytest.mark.parametrize("index", [3, 10, -2])
def test_a_tampered_cursor_is_400(project: Project, index: int) -> None:
    _runs(project, 2)
    cursor = _page(project, limit="1").body["nextCursor"]
    assert _is_validation_error(_page(project, limit="1", cursor=_flip(cursor, index)))


@pytest.mark.parametrize(
    "cursor",
    [
        # The clear form of before: a key DynamoDB refuses as ExclusiveStartKey (was a 500).
        base64.urlsafe_b64encode(json.dumps({"pk": {"S": "x"}}).encode()).decode(),
        base64.urlsafe_b64encode(b'{"pk": {"N": "nan"}, "sk": {"S": ""}}').decode(),
        "c1.",
        "c1.é",
        "c1." + "A" * 2000,
        "%%%",
    ],
)
def test_a_crafted_cursor_is_400(project: Project, cursor: str) -> None:
    _runs(project, 1)
    assert _is_validation_error(_page(project, cursor=cursor))


def test_another_querys_cursor_is_400(project: Project) -> None:
    app = _runs(project, 3)
    cursor = _page(project, limit="1").body["nextCursor"]
    assert _page(project, limit="1", cursor=cursor).status == 200
    assert _is_validation_error(_page(project, limit="1", appId=app, cursor=cursor))
    assert _is_validation_error(_page(project, limit="1", workflow="nightly", cursor=cursor))


def test_another_projects_cursor_is_400(project: Project, other_project: Project) -> None:
    _runs(project, 2)
    _runs(other_project, 2)
    cursor = _page(project, limit="1").body["nextCursor"]
    assert _is_validation_error(_page(other_project, limit="1", cursor=cursor))


def test_an_event_cursor_of_another_run_is_400(project: Project) -> None:
    app = _pull_app(project)
    runs = [
        project.call("POST", "/runs", body={"appId": app, "workflow": "nightly"}).body["id"]
        for _ in range(2)
    ]
    for run in runs:  # two events each: run.created/started and the cancel
        assert project.call("POST", f"/runs/{run}/cancel").status == 202
    first = project.call("GET", f"/runs/{runs[0]}/events", query={"limit": "1"})
    cursor = first.body["nextCursor"]
    assert cursor, first.body
    again = project.call("GET", f"/runs/{runs[0]}/events", query={"limit": "1", "cursor": cursor})
    assert again.status == 200
    other = project.call("GET", f"/runs/{runs[1]}/events", query={"limit": "1", "cursor": cursor})
    assert _is_validation_error(other)
