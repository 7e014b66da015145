"""Authentication, project scoping, and API key management."""

from __future__ import annotations

import pytest
from ezgh_engine.service.auth import bootstrap_admin


def test_missing_malformed_and_unknown_keys_are_unauthorized(project, api):
    path = f"{project.prefix}/apps"
    for headers in (
        {},
        {"authorization": "Basic abc"},
        {"authorization": "Bearer "},
        {"authorization": "Bearer ezgh_nope"},
    ):
        answer = api("GET", path, headers=headers)
        assert answer.status == 401, headers
        assert answer.body["error"]["code"] == "unauthorized"


def test_a_key_on_another_project_or_org_path_is_not_found(project, other_project, api):
    theirs = other_project.prefix
    answer = api("GET", f"{theirs}/apps", headers=project.auth())
    assert answer.status == 404 and answer.body["error"]["code"] == "not_found"
    wrong_org = f"/v1/organizations/{other_project.org_id}/projects/{project.project_id}/apps"
    assert api("GET", wrong_org, headers=project.auth()).status == 404
    not_uuid = f"/v1/organizations/acme/projects/{project.project_id}/apps"
    assert api("GET", not_uuid, headers=project.auth()).status == 404


def test_create_list_delete_api_keys(project):
    created = project.call(
        "POST",
        "/apiKeys",
        body={
            "name": "ci",
            "permissions": [
                {"action": "workflows.runs.start", "resource": "billing/charge"},
                {"action": "workflows.runs.read"},
            ],
        },
    )
    assert created.status == 201
    key = created.body
    assert key["name"] == "ci" and key["key"].startswith("ezgh_")
    assert key["permissions"] == [
        {"action": "workflows.runs.start", "resource": "billing/charge"},
        {"action": "workflows.runs.read"},
    ]
    # The new key works at once, and listing never shows secrets.
    listed = project.call("GET", "/apiKeys", key=key["key"])
    assert listed.status == 200
    assert {k["name"] for k in listed.body["apiKeys"]} == {"admin (bootstrap)", "ci"}
    assert all("key" not in k for k in listed.body["apiKeys"])
    assert key["key"] not in listed.raw

    deleted = project.call("DELETE", f"/apiKeys/{key['id']}")
    assert deleted.status == 204
    assert project.call("DELETE", f"/apiKeys/{key['id']}").status == 404
    assert [k["name"] for k in project.call("GET", "/apiKeys").body["apiKeys"]] == [
        "admin (bootstrap)"
    ]


def test_a_revoked_key_is_refused_at_once(project):
    key = project.call(
        "POST", "/apiKeys", body={"name": "tmp", "permissions": [{"action": "*"}]}
    ).body
    assert project.call("GET", "/apps", key=key["key"]).status == 200
    assert project.call("DELETE", f"/apiKeys/{key['id']}").status == 204
    answer = project.call("GET", "/apps", key=key["key"])
    assert answer.status == 401 and answer.body["error"]["code"] == "unauthorized"


@pytest.mark.parametrize(
    "wanted",
    [
        [{"action": "*"}],
        [{"action": "workflows.runs.start"}],  # all workflows, but it holds one
        [{"action": "workflows.runs.start", "resource": "billing/refund"}],
        [{"action": "workflows.apps.update", "resource": "billing"}],
    ],
)
def test_a_key_cannot_create_a_stronger_key(project, wanted):
    limited = project.call(
        "POST",
        "/apiKeys",
        body={
            "name": "limited",
            "permissions": [{"action": "workflows.runs.start", "resource": "billing/charge"}],
        },
    ).body["key"]
    answer = project.call(
        "POST", "/apiKeys", key=limited, body={"name": "escalate", "permissions": wanted}
    )
    assert answer.status == 403
    assert answer.body["error"]["code"] == "forbidden"
    assert "escalate" not in [k["name"] for k in project.call("GET", "/apiKeys").body["apiKeys"]]


def test_a_key_can_create_a_key_it_covers_but_not_revoke_a_stronger_one(project):
    limited = project.call(
        "POST",
        "/apiKeys",
        body={"name": "limited", "permissions": [{"action": "workflows.runs.start"}]},
    ).body["key"]
    narrower = project.call(
        "POST",
        "/apiKeys",
        key=limited,
        body={
            "name": "narrower",
            "permissions": [{"action": "workflows.runs.start", "resource": "billing/charge"}],
        },
    )
    assert narrower.status == 201
    admin_id = next(
        k["id"]
        for k in project.call("GET", "/apiKeys").body["apiKeys"]
        if k["name"] == "admin (bootstrap)"
    )
    assert project.call("DELETE", f"/apiKeys/{admin_id}", key=limited).status == 403
    assert project.call("DELETE", f"/apiKeys/{narrower.body['id']}", key=limited).status == 204


def test_keys_of_another_project_cannot_be_deleted(project, other_project):
    theirs = other_project.call("POST", "/apiKeys", body={"name": "x", "permissions": []}).body
    assert project.call("DELETE", f"/apiKeys/{theirs['id']}").status == 404
    assert other_project.call("GET", "/apps", key=theirs["key"]).status == 200


def test_bad_api_key_bodies_are_validation_errors(project):
    for body, field in (
        ({"permissions": []}, "name"),
        ({"name": "x"}, "permissions"),
        ({"name": "x", "permissions": [{"resource": "a"}]}, "permissions.0.action"),
    ):
        answer = project.call("POST", "/apiKeys", body=body)
        assert answer.status == 400
        assert answer.body["error"]["message"].startswith(field), answer.body


def test_bootstrap_admin_is_repeatable(aws_env):
    org, proj, key1 = bootstrap_admin()
    org2, proj2, key2 = bootstrap_admin(project_id=proj)
    assert (org2, proj2) == (org, proj) and key1 != key2
    org3, _, _ = bootstrap_admin(org, proj)
    assert org3 == org


def _key(project, *permissions):
    body = {
        "name": "k",
        "permissions": [{"action": a, **({"resource": r} if r else {})} for a, r in permissions],
    }
    answer = project.call("POST", "/apiKeys", body=body)
    assert answer.status == 201, answer.body
    return answer.body["key"]


def test_star_on_a_queue_id_is_no_grant_on_a_flow_of_that_name(project):
    """A name of one kind never matches a resource of another: `*` scoped to a queue's ID
    neither creates nor runs a flow that someone named with that ID."""
    queue = project.call("POST", "/queues", body={"name": "victim"}).body["id"]
    star = _key(project, ("*", queue))
    assert project.call("POST", f"/queues/{queue}/messages", key=star, body={
        "messages": [{"body": "mine"}]}).status == 200  # fmt: skip
    made = project.call("POST", "/flows", key=star, body={"name": queue})
    assert made.status == 403 and made.body["error"]["code"] == "forbidden", made.body
    assert project.call("GET", f"/flows/{queue}").status == 404
    project.call("POST", "/flows", body={"name": queue})  # made by the admin
    for method, path, body in (
        ("GET", f"/flows/{queue}", None),
        ("POST", f"/flows/{queue}/jobs", {}),
        ("POST", f"/flows/{queue}/commits", {"graph": {"nodes": [{"id": "s", "moduleType": "trigger.manual"}]}}),
        ("PATCH", f"/flows/{queue}", {"description": "taken"}),
    ):  # fmt: skip
        answer = project.call(method, path, key=star, body=body)
        assert answer.status == 403, (method, path, answer.body)
    assert project.call("POST", "/apiKeys", key=star, body={
        "name": "flow", "permissions": [{"action": "flows.manage", "resource": queue}]}).status == 403  # fmt: skip


def test_a_qualified_resource_scopes_star_to_a_flow(project):
    star = _key(project, ("*", "flow:orders"))
    assert project.call("POST", "/flows", key=star, body={"name": "orders"}).status == 201
    assert project.call("POST", "/flows", key=star, body={"name": "other"}).status == 403
    assert (
        project.call("POST", "/apps", key=star, body={"name": "orders", "kind": "pull"}).status
        == 403
    )
    mismatched = project.call("POST", "/apiKeys", body={
        "name": "x", "permissions": [{"action": "queues.messages.send", "resource": "flow:orders"}]})  # fmt: skip
    assert mismatched.status == 400 and "flow" in mismatched.body["error"]["message"]
