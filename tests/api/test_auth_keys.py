"""Authentication, project scoping, and API key management."""

from __future__ import annotations

import pytest
from ezgh_engine.core.flows.jobs import Actor
from ezgh_engine.errors import Forbidden
from ezgh_engine.service.auth import bootstrap_admin
from ezgh_engine.service.flow_authority import acting_principal


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
    # The new key works at once, and listing never shows secrets: the new key sees itself
    # (the keys it could revoke), the admin every key.
    listed = project.call("GET", "/apiKeys", key=key["key"])
    assert listed.status == 200
    assert [k["name"] for k in listed.body["apiKeys"]] == ["ci"]
    everything = project.call("GET", "/apiKeys").body["apiKeys"]
    assert {k["name"] for k in everything} == {"admin (bootstrap)", "ci"}
    for answer in (listed, project.call("GET", "/apiKeys")):
        assert all("key" not in k for k in answer.body["apiKeys"])
        assert key["key"] not in answer.raw

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


# --- keys record their creator: revocation is transitive, at once ---------------------------


def _mint(project, name="k", *, key=None, permissions=(("*", None),)):
    body = {
        "name": name,
        "permissions": [{"action": a, **({"resource": r} if r else {})} for a, r in permissions],
    }
    answer = project.call("POST", "/apiKeys", key=key, body=body)
    assert answer.status == 201, answer.body
    return answer.body


def _works(project, secret):
    return project.call("GET", "/apiKeys", key=secret).status == 200


def _chain(project):
    """admin → leaked (`*`) → ci-deploy (`*`) → reader (runs.read): each minted by the last."""
    leaked = _mint(project, "leaked")
    deploy = _mint(project, "ci-deploy", key=leaked["key"])
    reader = _mint(
        project, "reader", key=deploy["key"], permissions=(("workflows.runs.read", None),)
    )
    return leaked, deploy, reader


def test_a_key_records_the_key_that_minted_it(project):
    leaked, deploy, _ = _chain(project)
    listed = {k["name"]: k for k in project.call("GET", "/apiKeys").body["apiKeys"]}
    admin = listed["admin (bootstrap)"]
    assert admin["createdBy"] is None
    assert listed["leaked"]["createdBy"] == admin["id"]
    assert listed["ci-deploy"]["createdBy"] == leaked["id"]
    assert listed["reader"]["createdBy"] == deploy["id"]
    assert deploy["createdBy"] == leaked["id"]  # the create answer says so too


def test_revoking_a_key_revokes_every_key_it_minted_transitively_and_at_once(project):
    from ezgh_engine.adapters import api_keys_store

    leaked, deploy, reader = _chain(project)
    sibling = _mint(project, "sibling")  # minted by the admin: not the leaked key's
    assert all(_works(project, k["key"]) for k in (leaked, deploy, reader))
    assert project.call("DELETE", f"/apiKeys/{leaked['id']}").status == 204
    for key in (leaked, deploy, reader):
        answer = project.call("GET", "/apiKeys", key=key["key"])
        assert answer.status == 401 and answer.body["error"]["code"] == "unauthorized", key
        # Whatever acts for a key by its ID (a flow's job, schedule or subscription; an
        # app's invoke) finds none either.
        assert api_keys_store.get_api_key(project.project_id, key["id"]) is None
        with pytest.raises(Forbidden, match="is revoked"):
            acting_principal(project.project_id, Actor(key["id"], "api"))
        assert project.call("DELETE", f"/apiKeys/{key['id']}").status == 404
    assert _works(project, sibling["key"]) and _works(project, project.api_key)
    names = {k["name"] for k in project.call("GET", "/apiKeys").body["apiKeys"]}
    assert names == {"admin (bootstrap)", "sibling"}
    assert _stored_key_ids(project) == {k["id"] for k in _listed(project)}  # swept, too


def _listed(project):
    return project.call("GET", "/apiKeys", query={"limit": "100"}).body["apiKeys"]


def _stored_key_ids(project):
    """The IDs of every key item the registry holds for the project (read consistently)."""
    from ezgh_engine.adapters import aws
    from ezgh_engine.config import settings

    items = aws.client("dynamodb").scan(TableName=settings().registry_table, ConsistentRead=True)[
        "Items"
    ]
    return {
        i["id"]["S"]
        for i in items
        if i["sk"]["S"] == "APIKEY" and i["projectId"]["S"] == project.project_id
    }


def test_a_revocation_that_crashes_half_way_leaves_nothing_the_key_minted_working(
    project, monkeypatch
):
    """The revocation dies after deleting the key, before sweeping what it minted: those
    keys fail authentication, are listed nowhere and count for nothing; the next
    revocation in the project sweeps them."""
    from ezgh_engine.adapters import api_keys_store

    leaked, deploy, reader = _chain(project)

    def crash(project_id):
        raise RuntimeError("the function died here")

    monkeypatch.setattr(api_keys_store, "sweep_orphans", crash)
    crashed = project.call("DELETE", f"/apiKeys/{leaked['id']}")
    assert crashed.status == 500
    monkeypatch.undo()
    for key in (leaked, deploy, reader):
        assert project.call("GET", "/apiKeys", key=key["key"]).status == 401, key["name"]
    assert {k["name"] for k in _listed(project)} == {"admin (bootstrap)"}
    assert {deploy["id"], reader["id"]} <= _stored_key_ids(project)  # left behind, inert
    other = _mint(project, "other")
    assert project.call("DELETE", f"/apiKeys/{other['id']}").status == 204
    assert _stored_key_ids(project) == {k["id"] for k in _listed(project)}


def test_a_key_revoked_while_it_mints_leaves_no_key_behind(project):
    """The mint's transaction checks that its creator still exists: a key revoked between
    its authentication and its mint mints nothing."""
    from ezgh_engine.adapters import api_keys_store
    from ezgh_engine.errors import Unauthorized

    leaked = _mint(project, "leaked")
    principal = api_keys_store.find_api_key(leaked["key"]).principal()  # authenticated...
    assert project.call("DELETE", f"/apiKeys/{leaked['id']}").status == 204  # ...revoked
    before = _stored_key_ids(project)
    with pytest.raises(Unauthorized):
        api_keys_store.create_api_key(
            project.org_id, project.project_id, "late", (("*", None),), creator=principal
        )
    assert _stored_key_ids(project) == before


def test_keys_per_project_are_capped(project, monkeypatch):
    from ezgh_engine.adapters import api_keys_store
    from ezgh_engine.service.auth import bootstrap_admin

    monkeypatch.setattr(api_keys_store, "MAX_API_KEYS", 3)
    made = [_mint(project, f"k{i}") for i in range(3)]
    refused = project.call("POST", "/apiKeys", body={"name": "k3", "permissions": []})
    assert refused.status == 409 and refused.body["error"]["code"] == "invalid_state"
    assert "3 API keys" in refused.body["error"]["message"]
    assert "k3" not in {k["name"] for k in _listed(project)}
    # A key minted by a minted key counts too; a revoked one frees its place (with all it
    # minted); a bootstrap key (the operator's) is not counted.
    assert project.call("POST", "/apiKeys", key=made[0]["key"], body={
        "name": "k4", "permissions": []}).status == 409  # fmt: skip
    bootstrap_admin(project.org_id, project.project_id)
    assert project.call("DELETE", f"/apiKeys/{made[0]['id']}").status == 204
    child = _mint(project, "k5", key=made[1]["key"])
    assert project.call("POST", "/apiKeys", body={"name": "k6", "permissions": []}).status == 409
    assert project.call("DELETE", f"/apiKeys/{made[1]['id']}").status == 204  # and k5 with it
    assert [_mint(project, f"k{i}") for i in (7, 8)]
    assert project.call("POST", "/apiKeys", body={"name": "k9", "permissions": []}).status == 409
    assert project.call("GET", "/apiKeys", key=child["key"]).status == 401


def test_the_cap_sweeps_what_a_crashed_revocation_left_counted(project, monkeypatch):
    from ezgh_engine.adapters import api_keys_store

    monkeypatch.setattr(api_keys_store, "MAX_API_KEYS", 3)
    leaked, _, _ = _chain(project)
    monkeypatch.setattr(api_keys_store, "sweep_orphans", lambda project_id: 0)
    assert project.call("DELETE", f"/apiKeys/{leaked['id']}").status == 204
    monkeypatch.undo()
    monkeypatch.setattr(api_keys_store, "MAX_API_KEYS", 3)
    # ci-deploy and reader still count until swept: the mint sweeps them and goes on.
    assert [_mint(project, f"k{i}") for i in range(3)]
    assert project.call("POST", "/apiKeys", body={"name": "k3", "permissions": []}).status == 409


def test_a_chain_of_creators_is_bounded(project, monkeypatch):
    from ezgh_engine.adapters import api_keys_store

    monkeypatch.setattr(api_keys_store, "MAX_KEY_CHAIN", 2)
    first = _mint(project, "first")  # chain: admin
    second = _mint(project, "second", key=first["key"])  # admin, first
    refused = project.call(
        "POST", "/apiKeys", key=second["key"], body={"name": "third", "permissions": []}
    )
    assert refused.status == 409 and refused.body["error"]["code"] == "invalid_state"
    assert "closer to the bootstrap key" in refused.body["error"]["message"]


@pytest.mark.parametrize(
    "name",
    [
        "admin (bootstrap)",
        "Admin (Bootstrap)",
        "admin  (bootstrap) ",
        "admin (boot strap)",
        "admin[bootstrap]",
        "BOOTSTRAP",
        "\u0430dmin (bootstrap)",  # a Cyrillic a
        "admin (b\u043e\u043etstrap)",  # Cyrillic o's: not ASCII
        "ci\ndeploy",
        "   ",
    ],
)
def test_a_key_name_cannot_pass_for_the_bootstrap_keys(project, name):
    answer = project.call("POST", "/apiKeys", body={"name": name, "permissions": []})
    assert answer.status == 400 and answer.body["error"]["code"] == "validation_error"
    assert answer.body["error"]["message"].startswith("name"), answer.body
    assert [k["name"] for k in _listed(project)] == ["admin (bootstrap)"]


def test_ordinary_key_names_are_kept_as_given(project):
    for name in ("ci-deploy", "Billing reader #2", "a.b_c:d/e (staging)"):
        assert _mint(project, name)["name"] == name


# --- GET /apiKeys pages, and answers what the key may manage ---------------------------------


def test_api_keys_page_with_sealed_cursors(project, other_project):
    made = {_mint(project, f"k{i}")["id"] for i in range(5)}
    seen: list[str] = []
    cursor = None
    while True:
        query = {"limit": "2", **({"cursor": cursor} if cursor else {})}
        page = project.call("GET", "/apiKeys", query=query)
        assert page.status == 200, page.body
        assert len(page.body["apiKeys"]) <= 2
        seen += [k["id"] for k in page.body["apiKeys"]]
        cursor = page.body["nextCursor"]
        if cursor is None:
            break
        assert cursor.startswith("c1.")  # sealed: the table's keys are not in it
    assert len(seen) == len(set(seen)) == 6 and made <= set(seen)
    first = project.call("GET", "/apiKeys", query={"limit": "1"}).body["nextCursor"]
    for bad in (first[:-3] + "AAA", "c1.bm90IGEgY3Vyc29y", "eyJwayI6IHt9fQ=="):
        answer = project.call("GET", "/apiKeys", query={"cursor": bad})
        assert answer.status == 400 and answer.body["error"]["code"] == "validation_error"
    # Another project's cursor is no cursor here, nor is a cursor of another list.
    _mint(other_project, "x")
    theirs = other_project.call("GET", "/apiKeys", query={"limit": "1"}).body["nextCursor"]
    assert project.call("GET", "/apiKeys", query={"cursor": theirs}).status == 400
    for limit in ("0", "101", "x"):
        assert project.call("GET", "/apiKeys", query={"limit": limit}).status == 400


def test_a_scoped_key_lists_only_the_keys_it_could_revoke(project):
    runs = _mint(project, "runs", permissions=(("workflows.runs.read", None),))
    alpha = _mint(project, "alpha", permissions=(("workflows.runs.read", "alpha/a"),))
    _mint(project, "beta", permissions=(("workflows.runs.read", "beta/b"),))
    _mint(project, "sender", permissions=(("queues.messages.send", None),))
    mine = _mint(
        project, "mine", key=alpha["key"], permissions=(("workflows.runs.read", "alpha/a"),)
    )

    def names(secret):
        return {k["name"] for k in project.call("GET", "/apiKeys", key=secret).body["apiKeys"]}

    assert names(runs["key"]) == {"runs", "alpha", "beta", "mine"}
    assert names(alpha["key"]) == {"alpha", "mine"}
    assert names(mine["key"]) == {"alpha", "mine"}
    # A key with a page of others' keys answers a short (even empty) page with a cursor.
    page = project.call("GET", "/apiKeys", key=mine["key"], query={"limit": "1"}).body
    assert len(page["apiKeys"]) == 1 and page["nextCursor"]


def test_authentication_reads_the_key_and_its_creators_in_one_batch(project):
    """What a request's authentication costs: a bootstrap key, one read; a minted key, one
    read of itself and one consistent batch read of its chain, however long."""
    from ezgh_engine.adapters import aws

    leaked, _, reader = _chain(project)
    for secret, expected in (
        (project.api_key, ["GetItem"]),
        (leaked["key"], ["GetItem", "BatchGetItem"]),
        (reader["key"], ["GetItem", "BatchGetItem"]),  # a chain of three
    ):
        seen: list[str] = []
        stop = aws.observe(lambda call: seen.append(call["operation"]))  # noqa: B023
        try:
            assert project.call("GET", "/queues", key=secret).status == 200
        finally:
            stop()
        reads = [op for op in seen if op in ("GetItem", "BatchGetItem", "Query")]
        assert reads[: len(expected)] == expected, seen


def test_a_key_cannot_revoke_a_key_that_minted_it(project):
    """A minted key as strong as its creators (here `*`) may not revoke them: that would
    revoke the whole tree they minted. It may revoke itself and what it minted."""
    leaked, deploy, reader = _chain(project)
    admin_id = next(k["id"] for k in _listed(project) if k["createdBy"] is None)
    for target in (admin_id, leaked["id"]):
        refused = project.call("DELETE", f"/apiKeys/{target}", key=deploy["key"])
        assert refused.status == 403 and refused.body["error"]["code"] == "forbidden"
    assert _works(project, project.api_key) and _works(project, leaked["key"])
    assert project.call("DELETE", f"/apiKeys/{deploy['id']}", key=deploy["key"]).status == 204
    assert not _works(project, deploy["key"]) and not _works(project, reader["key"])
    assert _works(project, leaked["key"])
