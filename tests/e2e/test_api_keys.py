"""API keys end to end: permissions on every call, project isolation, revocation at once."""

from __future__ import annotations

import pytest
from ezgh_engine.service.auth import bootstrap_admin
from ezgh_workflows import ApiError

from tests.clients import workflows_client

pytestmark = pytest.mark.e2e


_client = workflows_client


def _key(client, *permissions) -> str:
    perms = [dict(zip(("action", "resource"), p, strict=False)) for p in permissions]
    return client.request("POST", "/apiKeys", json={"name": "k", "permissions": perms})["key"]


def _status(call) -> tuple[int, str]:
    with pytest.raises(ApiError) as err:
        call()
    return err.value.status, err.value.code


def test_a_read_only_key_is_refused_a_start(engine, client, app_id):
    reader = _client(engine, _key(client, ("workflows.runs.read",)))
    assert _status(lambda: reader.start_run(app_id, "sequence", {"n": 1})) == (403, "forbidden")
    run = client.start_run(app_id, "sequence", {"n": 1})
    assert reader.get_run(run["id"])["id"] == run["id"]
    assert reader.search_runs()["runs"]
    assert _status(lambda: reader.cancel_run(run["id"]))[0] == 403
    assert _status(lambda: reader.create_app("x", "pull"))[0] == 403
    assert (
        _status(
            lambda: reader.request(
                "POST",
                "/schedules",
                json={"appId": app_id, "workflow": "sequence", "cron": "* * * * *"},
            )
        )[0]
        == 403
    )
    # It cannot mint itself a stronger key.
    assert _status(lambda: _key(reader, ("*",)))[0] == 403
    assert _status(lambda: _key(reader, ("workflows.runs.start",)))[0] == 403


def test_scoped_keys_and_revocation(engine, client, app_id):
    app = client.get_app(app_id)["name"]
    key_id_and_secret = client.request(
        "POST",
        "/apiKeys",
        json={
            "name": "seq-only",
            "permissions": [{"action": "workflows.runs.start", "resource": f"{app}/sequence"}],
        },
    )
    starter = _client(engine, key_id_and_secret["key"])
    assert starter.start_run(app_id, "sequence", {"n": 0})["status"] == "running"
    assert _status(lambda: starter.start_run(app_id, "plain", {}))[0] == 403
    assert _status(lambda: starter.search_runs())[0] == 403  # no workflows.runs.read
    client.request("DELETE", f"/apiKeys/{key_id_and_secret['id']}")
    assert _status(lambda: starter.start_run(app_id, "sequence", {"n": 0})) == (401, "unauthorized")


def test_a_key_of_another_project_sees_nothing(engine, client, app_id):
    run = client.start_run(app_id, "sequence", {"n": 1})
    org2, project2, key2 = bootstrap_admin()
    foreign_on_ours = _client(engine, key2)  # our org/project in the path
    assert _status(lambda: foreign_on_ours.get_run(run["id"]))[0] == 404
    assert _status(lambda: foreign_on_ours.list_apps())[0] == 404
    own = _client(engine, key2, org2, project2)
    assert own.list_apps()["apps"] == []
    assert own.search_runs()["runs"] == []
    assert _status(lambda: own.get_run(run["id"]))[0] == 404
    assert _status(lambda: own.get_app(app_id))[0] == 404
    assert _status(lambda: own.start_run(app_id, "sequence", {}))[0] == 404
