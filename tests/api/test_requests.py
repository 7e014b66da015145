"""Request rules every route shares: bodies, sizes, error shapes, idempotency, OpenAPI."""

from __future__ import annotations

import json
import os
import zlib

import boto3
import pytest
from ezgh_engine.api import idempotency
from ezgh_engine.service import apps as apps_service

CONTRACT_PATHS = [
    "/apps",
    "/apps/{appId}",
    "/apps/{appId}/sync",
    "/apiKeys",
    "/apiKeys/{id}",
    "/runs",
    "/runs/{runId}",
    "/runs/{runId}/cancel",
    "/runs/{runId}/retry",
    "/runs/{runId}/events",
    "/runs/{runId}/payloads/{path}",
]
APP = {"name": "billing", "kind": "push", "url": "https://app.example.com/"}


def test_health_needs_no_key(api):
    answer = api("GET", "/v1/health")
    assert answer.status == 200 and answer.body == {"status": "ok"}


def test_openapi_has_every_contract_path(api):
    answer = api("GET", "/v1/openapi.json")
    assert answer.status == 200
    assert answer.body["openapi"].startswith("3.")
    paths = answer.body["paths"]
    prefix = "/v1/organizations/{orgId}/projects/{projectId}"
    for path in CONTRACT_PATHS:
        assert prefix + path in paths, path
    assert "/v1/health" in paths and "/v1/invocations/steps" in paths
    assert "post" in paths[prefix + "/apps"] and "patch" in paths[prefix + "/apps/{appId}"]
    assert "delete" in paths[prefix + "/runs/{runId}"]


@pytest.mark.parametrize("raw", ["{not json", '{"name": "x",}', ""])
def test_malformed_json_is_a_validation_error(project, raw):
    answer = project.call("POST", "/apps", raw_body=raw)
    assert answer.status == 400
    assert answer.body["error"]["code"] == "validation_error"


@pytest.mark.parametrize("raw", ["[1, 2]", '"app"', "42", "null"])
def test_a_body_must_be_a_json_object(project, raw):
    answer = project.call("POST", "/apps", raw_body=raw)
    assert answer.status == 400
    assert answer.body["error"]["code"] == "validation_error"


def test_base64_bodies_are_decoded(project):
    answer = project.call("POST", "/apps", body=APP, base64_body=True)
    assert answer.status == 201


@pytest.mark.parametrize(
    "path",
    [
        "/apps",  # a validated body (Powertools' request validation)
        "/apiKeys",
        "/apps/jobs/tasks/poll",  # a body the route reads itself
    ],
)
@pytest.mark.parametrize("encoded", ["1lnJBw==", "pg==", "not base64!"])
def test_a_base64_body_that_is_not_utf8_is_a_validation_error(project, path, encoded):
    """Found by tests/api/test_fuzz_openapi.py: such a body raised UnicodeDecodeError inside
    Powertools (500). Bodies are decoded once at the edge (`api.events`) and refused 400."""
    from functions.api.handler import handler
    from tests.api.conftest import LambdaContext, make_event

    if path.startswith("/apps/jobs"):
        project.call("POST", "/apps", body={"name": "jobs", "kind": "pull"})
    event = make_event("POST", project.prefix + path, headers=project.auth())
    event["body"], event["isBase64Encoded"] = encoded, True
    answer = handler(event, LambdaContext())
    assert answer["statusCode"] == 400, answer
    assert json.loads(answer["body"]) == {
        "error": {"code": "validation_error", "message": "request body is not UTF-8 text"}
    }


def test_a_callback_body_that_is_not_utf8_is_a_validation_error(project):
    from functions.api.handler import handler
    from tests.api.conftest import LambdaContext, make_event
    from tests.api.steps_helpers import waiting_callback

    _, _, token = waiting_callback()
    event = make_event("POST", f"/v1/callbacks/{token}")
    event["body"], event["isBase64Encoded"] = "1lnJBw==", True
    answer = handler(event, LambdaContext())
    assert answer["statusCode"] == 400, answer
    assert json.loads(answer["body"])["error"]["code"] == "validation_error"


def test_a_body_over_1_mib_is_payload_too_large(project):
    big = json.dumps({**APP, "padding": "x" * (1024 * 1024)})
    answer = project.call("POST", "/apps", raw_body=big)
    assert answer.status == 413
    assert answer.body["error"]["code"] == "payload_too_large"
    # Just under the limit is fine (and unknown fields are ignored).
    ok = json.dumps({**APP, "padding": "x" * (1024 * 1024 - 200)})
    assert project.call("POST", "/apps", raw_body=ok).status == 201


def test_a_run_input_over_1_mib_encoded_is_payload_too_large(project, monkeypatch):
    from ezgh_engine.service import runs

    def never(*args, **kwargs):
        raise AssertionError("must not be called")

    monkeypatch.setattr(runs, "start_run", never)
    # Under 1 MiB as sent, over 1 MiB as the engine encodes it (1e9 becomes 1000000000.0).
    body = '{"appId": "a", "workflow": "w", "input": [' + ",".join(["1e9"] * 200_000) + "]}"
    assert len(body.encode()) < 1024 * 1024
    answer = project.call("POST", "/runs", raw_body=body)
    assert answer.status == 413 and answer.body["error"]["code"] == "payload_too_large"


def test_unknown_routes_are_not_found_and_unserved_methods_not_allowed(project, api):
    assert api("GET", "/v1/nothing").body == {
        "error": {"code": "not_found", "message": "no such path"}
    }
    assert api("GET", "/v1/nothing").status == 404
    put = project.call("PUT", "/apps")
    assert put.status == 405 and put.body["error"]["code"] == "method_not_allowed"
    assert put.headers["Allow"] == "GET, POST"


def test_an_unexpected_error_is_a_plain_500(project, monkeypatch):
    def boom(*args, **kwargs):
        raise RuntimeError("secret detail in /srv/app.py line 3")

    monkeypatch.setattr(apps_service, "list_apps", boom)
    answer = project.call("GET", "/apps")
    assert answer.status == 500
    assert answer.body == {"error": {"code": "internal_error", "message": "internal error"}}
    assert "Traceback" not in answer.raw and "secret detail" not in answer.raw


def test_validation_errors_name_the_field_and_do_not_echo_input(project):
    answer = project.call(
        "POST", "/runs", body={"appId": "a", "workflow": "bad name!", "runKey": "k"}
    )
    assert answer.status == 400
    message = answer.body["error"]["message"]
    assert message.startswith("workflow") and "bad name!" not in message
    bad_key = project.call(
        "POST", "/runs", body={"appId": "a", "workflow": "w", "runKey": "spaces are bad"}
    )
    assert bad_key.status == 400 and bad_key.body["error"]["message"].startswith("runKey")


# --- idempotency ---------------------------------------------------------------------------


def test_same_key_and_body_answers_the_first_answer(project):
    headers = {"idempotency-key": "create-billing-1"}
    first = project.call("POST", "/apps", body=APP, headers=headers)
    again = project.call("POST", "/apps", body=dict(reversed(list(APP.items()))), headers=headers)
    assert first.status == again.status == 201
    assert again.body == first.body  # the same app, signing key included
    assert len(project.call("GET", "/apps").body["apps"]) == 1


def test_same_key_with_another_body_is_a_conflict(project):
    headers = {"idempotency-key": "k-2"}
    assert project.call("POST", "/apps", body=APP, headers=headers).status == 201
    other = project.call("POST", "/apps", body={**APP, "name": "other"}, headers=headers)
    assert other.status == 409
    assert other.body["error"]["code"] == "idempotency_conflict"
    assert [a["name"] for a in project.call("GET", "/apps").body["apps"]] == ["billing"]


def test_keys_are_scoped_per_operation_and_project(project, other_project):
    headers = {"idempotency-key": "shared"}
    assert project.call("POST", "/apps", body=APP, headers=headers).status == 201
    assert other_project.call("POST", "/apps", body=APP, headers=headers).status == 201
    key = project.call("POST", "/apiKeys", body={"name": "n", "permissions": []}, headers=headers)
    assert key.status == 201


def test_a_failed_first_request_lets_the_key_go(project):
    headers = {"idempotency-key": "k-3"}
    assert (
        project.call(
            "POST", "/apps", body={**APP, "url": "https://10.0.0.1/"}, headers=headers
        ).status
        == 400
    )
    assert project.call("POST", "/apps", body=APP, headers=headers).status == 201


def _principal(project):
    from ezgh_engine.service.auth import authenticate

    return authenticate(f"Bearer {project.api_key}")


def test_a_request_still_in_progress_is_a_conflict(project, monkeypatch):
    from ezgh_engine.adapters import idempotency_store

    monkeypatch.setattr(idempotency, "WAIT_SECONDS", 0.2)
    body = idempotency._request_hash(APP)
    pk = idempotency.record_pk(_principal(project), "POST /apps", "busy")
    token, _ = idempotency_store.claim(pk, body, 3600, stale_before_ms=0)
    assert token is not None
    answer = project.call("POST", "/apps", body=APP, headers={"idempotency-key": "busy"})
    assert answer.status == 409 and answer.body["error"]["code"] == "idempotency_conflict"
    assert "in progress" in answer.body["error"]["message"]


def test_an_abandoned_claim_is_taken_over(project, monkeypatch):
    from ezgh_engine.adapters import idempotency_store

    pk = idempotency.record_pk(_principal(project), "POST /apps", "dead")
    idempotency_store.claim(pk, idempotency._request_hash(APP), 3600, stale_before_ms=0)
    monkeypatch.setattr(idempotency, "STALE_CLAIM_MS", -10_000)  # every claim is old now
    answer = project.call("POST", "/apps", body=APP, headers={"idempotency-key": "dead"})
    assert answer.status == 201


def test_bad_idempotency_keys_are_refused(project):
    answer = project.call("POST", "/apps", body=APP, headers={"idempotency-key": "has space"})
    assert answer.status == 400 and "Idempotency-Key" in answer.body["error"]["message"]


def test_a_replayed_api_key_is_the_same_but_not_stored_in_clear(project):
    headers = {"idempotency-key": "mint-ci-key"}
    body = {"name": "ci", "permissions": [{"action": "workflows.runs.read"}]}
    first = project.call("POST", "/apiKeys", body=body, headers=headers)
    again = project.call("POST", "/apiKeys", body=body, headers=headers)
    assert first.status == again.status == 201 and again.body == first.body
    assert len(project.call("GET", "/apiKeys").body["apiKeys"]) == 2
    items = boto3.client("dynamodb").scan(TableName=os.environ["EZGH_REGISTRY_TABLE"])["Items"]
    dump = json.dumps(items, default=repr)
    assert first.body["key"] not in dump and "mint-ci-key" not in dump
    answers = [i["answer"]["B"] for i in items if "answer" in i]
    assert answers
    for sealed in answers:  # sealed, not merely compressed
        with pytest.raises(zlib.error):
            zlib.decompress(sealed)


def test_a_body_without_json_content_type_is_still_read_as_json(project) -> None:
    # curl -d sends application/x-www-form-urlencoded unless told otherwise.
    form = {"content-type": "application/x-www-form-urlencoded"}
    answer = project.call("POST", "/runs", raw_body="{bad", headers=form)
    assert answer.status == 400
    assert answer.body["error"]["message"] == "request body is not valid JSON"
    missing = project.call(
        "POST", "/runs", raw_body='{"appId": "nope", "workflow": "x"}', headers=form
    )
    assert missing.status == 404
