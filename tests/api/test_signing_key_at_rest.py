"""App signing keys are sealed in the registry table: the stored item holds no
clear key, and the engine still signs with it."""

from __future__ import annotations

import json

import boto3
import httpx
import pytest
from ezgh_engine.adapters import push, registry_store

from tests.api.conftest import ENV, Project


def _scan() -> str:
    ddb = boto3.client("dynamodb", region_name="us-east-1")
    items = ddb.scan(TableName=ENV["EZGH_REGISTRY_TABLE"])["Items"]
    return json.dumps(items, default=str)


def test_the_stored_app_holds_no_clear_signing_key(project: Project) -> None:
    app = project.call(
        "POST", "/apps", body={"name": "billing", "kind": "push", "url": "https://a.example.com/"}
    ).body
    key = app["signingKey"]
    dump = _scan()
    assert app["id"] in dump  # the item is there
    assert key not in dump and "signingKey" not in dump.replace("signingKeySealed", "")


def test_the_engine_signs_with_the_sealed_key(
    project: Project, monkeypatch: pytest.MonkeyPatch
) -> None:
    sent: list[httpx.Request] = []

    def handle(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        return httpx.Response(200, json={"workflows": [{"name": "w"}]})

    monkeypatch.setattr(push, "network_transport", lambda: httpx.MockTransport(handle))
    app = project.call(
        "POST", "/apps", body={"name": "billing", "kind": "push", "url": "https://a.example.com/"}
    ).body
    assert project.call("POST", f"/apps/{app['id']}/sync").status == 200
    (request,) = sent
    ts = int(request.headers["x-ezgh-timestamp"])
    v2 = push.sign_v2(app["signingKey"], ts, "POST", "/", "", request.content)
    assert v2 in request.headers["x-ezgh-signature"].split(",")


def test_an_app_stored_before_sealing_is_read_and_sealed_at_its_next_write(
    project: Project,
) -> None:
    app = project.call("POST", "/apps", body={"name": "old", "kind": "pull"}).body
    ddb = boto3.client("dynamodb", region_name="us-east-1")
    key = {"pk": {"S": f"APP#{app['id']}"}, "sk": {"S": "APP"}}
    ddb.update_item(
        TableName=ENV["EZGH_REGISTRY_TABLE"],
        Key=key,
        UpdateExpression="SET signingKey = :k REMOVE signingKeySealed",
        ExpressionAttributeValues={":k": {"S": app["signingKey"]}},
    )
    stored = registry_store.get_app(project.project_id, app["id"])
    assert stored is not None and stored.signing_key == app["signingKey"]
    registry_store.save_app(stored)
    item = ddb.get_item(TableName=ENV["EZGH_REGISTRY_TABLE"], Key=key)["Item"]
    assert "signingKey" not in item and "signingKeySealed" in item
