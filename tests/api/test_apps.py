"""Apps: create, read by id and slug, list, update, sync, delete, and their validation."""

from __future__ import annotations

import pytest
from ezgh_engine.adapters import push
from ezgh_engine.adapters.push import AppUnreachable

URL = "https://app.example.com/api/workflows"


def create(project, name="billing", **extra):
    return project.call("POST", "/apps", body={"name": name, "kind": "push", "url": URL, **extra})


def test_create_answers_the_app_with_its_signing_key_once(project):
    created = create(project)
    assert created.status == 201
    app = created.body
    assert app["name"] == "billing" and app["kind"] == "push" and app["url"] == URL
    assert app["status"] == "pending" and app["workflows"] == [] and app["notifications"] is None
    assert app["slug"].startswith("wfa_") and len(app["id"]) == 36
    assert len(app["signingKey"]) >= 32

    by_id = project.call("GET", f"/apps/{app['id']}")
    by_slug = project.call("GET", f"/apps/{app['slug']}")
    by_name = project.call("GET", f"/apps/{app['name']}")
    assert by_id.status == by_slug.status == by_name.status == 200
    assert by_id.body == by_slug.body == by_name.body
    assert "signingKey" not in by_id.body
    assert by_id.body == {k: v for k, v in app.items() if k != "signingKey"}


def test_list_answers_every_app_of_the_project_only(project, other_project):
    create(project, "alpha")
    create(project, "beta")
    create(other_project, "gamma")
    listed = project.call("GET", "/apps")
    assert listed.status == 200
    assert sorted(a["name"] for a in listed.body["apps"]) == ["alpha", "beta"]
    assert all("signingKey" not in a for a in listed.body["apps"])


def test_duplicate_name_in_a_project_is_refused_but_free_in_another(project, other_project):
    assert create(project).status == 201
    again = create(project)
    assert again.status == 409
    assert again.body["error"]["code"] == "invalid_state"
    assert "billing" in again.body["error"]["message"]
    assert create(other_project).status == 201


@pytest.mark.parametrize("name", ["Billing", "bill_ing", "", "a" * 65, "bill ing"])
def test_bad_names_are_refused_naming_the_field(project, name):
    answer = create(project, name)
    assert answer.status == 400
    assert answer.body["error"]["code"] == "validation_error"
    assert answer.body["error"]["message"].startswith("name")


@pytest.mark.parametrize(
    "url",
    [
        "http://app.example.com/x",  # plain http
        "ftp://app.example.com/x",
        "not a url",
        "https://127.0.0.1/x",  # loopback literal
        "https://localhost:8000/x",
        "https://169.254.169.254/latest",  # link-local (instance metadata)
        "https://10.0.0.7/x",  # private literal
        "https://[::1]/x",
        "https://svc.internal/x",  # a name resolving to a private address
    ],
)
def test_bad_urls_are_refused(project, url):
    answer = project.call("POST", "/apps", body={"name": "billing", "kind": "push", "url": url})
    assert answer.status == 400, answer.body
    assert answer.body["error"]["code"] == "validation_error"
    assert answer.body["error"]["message"].startswith("url")


def test_push_app_gets_its_url_any_time_and_pull_app_has_none(project):
    # A push app served by its owner may be made first (for its signing key), its URL set
    # later; until then a sync says what is missing and runs cannot start.
    later = project.call("POST", "/apps", body={"name": "billing", "kind": "push"})
    assert later.status == 201 and later.body["url"] is None and later.body["signingKey"]
    sync = project.call("POST", f"/apps/{later.body['id']}/sync")
    assert sync.status == 409 and sync.body["error"]["code"] == "app_not_synced"
    assert "no URL yet" in sync.body["error"]["message"]
    start = project.call("POST", "/runs", body={"appId": "billing", "workflow": "w"})
    assert start.status in (404, 409), start.body
    pull = project.call("POST", "/apps", body={"name": "workers", "kind": "pull"})
    assert pull.status == 201 and pull.body["url"] is None
    bad_kind = project.call("POST", "/apps", body={"name": "x", "kind": "lambda"})
    assert bad_kind.status == 400 and bad_kind.body["error"]["message"].startswith("kind")


def test_loopback_urls_are_allowed_under_ezgh_dev(project, monkeypatch):
    from ezgh_engine import config

    monkeypatch.setenv(config.ENV_ALLOW_LOOPBACK, "1")
    config.reset_settings()
    answer = project.call(
        "POST", "/apps", body={"name": "local", "kind": "push", "url": "http://127.0.0.1:8000/"}
    )
    assert answer.status == 201


def test_patch_notifications_and_url(project):
    app = create(project).body
    notifications = {"queueId": "q-1", "on": ["failed", "timedOut"], "workflows": None}
    patched = project.call("PATCH", f"/apps/{app['slug']}", body={"notifications": notifications})
    assert patched.status == 200
    assert patched.body["notifications"] == {**notifications, "groupBy": "run"}
    assert patched.body["url"] == URL  # not mentioned: unchanged

    moved = project.call("PATCH", f"/apps/{app['id']}", body={"url": "https://new.example.com/"})
    assert moved.status == 200 and moved.body["url"] == "https://new.example.com/"
    assert moved.body["notifications"] == {**notifications, "groupBy": "run"}

    off = project.call("PATCH", f"/apps/{app['id']}", body={"notifications": None})
    assert off.status == 200 and off.body["notifications"] is None
    assert project.call("GET", f"/apps/{app['id']}").body["notifications"] is None


@pytest.mark.parametrize(
    ("notifications", "field"),
    [
        ({"queueId": "q", "on": ["exploded"]}, "notifications.on"),
        ({"queueId": "q", "on": []}, "notifications.on"),
        ({"on": ["failed"]}, "notifications.queueId"),
        ({"queueId": "q", "on": ["failed"], "groupBy": "day"}, "notifications.groupBy"),
        ({"queueId": "q", "on": ["failed"], "workflows": ["bad name!"]}, "notifications.workflows"),
        ("failed", "notifications"),
    ],
)
def test_patch_invalid_notifications_is_refused(project, notifications, field):
    app = create(project).body
    answer = project.call("PATCH", f"/apps/{app['id']}", body={"notifications": notifications})
    assert answer.status == 400
    assert answer.body["error"]["code"] == "validation_error"
    assert answer.body["error"]["message"].startswith(field)
    assert project.call("GET", f"/apps/{app['id']}").body["notifications"] is None


def test_patch_bad_url_is_refused(project):
    app = create(project).body
    answer = project.call("PATCH", f"/apps/{app['id']}", body={"url": "https://10.0.0.1/"})
    assert answer.status == 400 and answer.body["error"]["message"].startswith("url")
    assert project.call("GET", f"/apps/{app['id']}").body["url"] == URL


def test_sync_records_the_workflows(project, monkeypatch):
    app = create(project).body
    seen = []

    def fake_sync(stored):
        seen.append(stored)
        return push.Synced(["onboarding", "chargeCustomer"], "1.5")

    monkeypatch.setattr(push, "sync_app", fake_sync)
    synced = project.call("POST", f"/apps/{app['slug']}/sync")
    assert synced.status == 200
    assert synced.body["status"] == "synced"
    assert synced.body["workflows"] == ["onboarding", "chargeCustomer"]
    assert seen[0].signing_key == app["signingKey"]  # the push adapter signs with it
    assert project.call("GET", f"/apps/{app['id']}").body["status"] == "synced"


def test_sync_failure_is_app_not_synced(project, monkeypatch):
    app = create(project).body

    def unreachable(_):
        raise AppUnreachable("connection refused")

    monkeypatch.setattr(push, "sync_app", unreachable)
    answer = project.call("POST", f"/apps/{app['id']}/sync")
    assert answer.status == 409
    assert answer.body["error"]["code"] == "app_not_synced"
    assert "connection refused" in answer.body["error"]["message"]
    assert project.call("GET", f"/apps/{app['id']}").body["status"] == "pending"


def test_delete_frees_the_id_slug_and_name(project):
    app = create(project).body
    deleted = project.call("DELETE", f"/apps/{app['slug']}")
    assert deleted.status == 204 and deleted.raw == ""
    assert project.call("GET", f"/apps/{app['id']}").status == 404
    assert project.call("GET", f"/apps/{app['slug']}").status == 404
    assert project.call("GET", f"/apps/{app['name']}").status == 404
    assert project.call("DELETE", f"/apps/{app['id']}").status == 404
    assert create(project).status == 201


def test_unknown_and_foreign_apps_are_not_found(project, other_project):
    foreign = create(other_project).body
    refs = (foreign["id"], foreign["slug"], foreign["name"], "wfa_0000", "no-such-app")
    for ref in (*refs, "00000000-0000-0000-0000-000000000000"):
        answer = project.call("GET", f"/apps/{ref}")
        assert answer.status == 404 and answer.body["error"]["code"] == "not_found"


def test_changing_apps_needs_apps_update_on_that_app(project):
    create(project, "billing")
    create(project, "other")
    key = project.call(
        "POST",
        "/apiKeys",
        body={
            "name": "ops",
            "permissions": [{"action": "workflows.apps.update", "resource": "billing"}],
        },
    ).body["key"]
    patch = {"url": "https://x.example.com/"}
    assert project.call("PATCH", "/apps/billing-id-unused", key=key, body=patch).status == 404
    (billing,) = project.call("GET", "/apps", key=key).body["apps"]  # the one it may read
    assert billing["name"] == "billing"
    billing_id = billing["id"]
    assert project.call("PATCH", f"/apps/{billing_id}", key=key, body=patch).status == 200
    other_id = project.call("GET", "/apps/other").body["id"]
    refused = project.call("PATCH", f"/apps/{other_id}", key=key, body=patch)
    assert refused.status == 403 and refused.body["error"]["code"] == "forbidden"
    assert create(project, "third").status == 201  # admin
    created = project.call("POST", "/apps", key=key, body={"name": "new", "kind": "pull"})
    assert created.status == 403
