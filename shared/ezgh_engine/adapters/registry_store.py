"""DynamoDB access to the `registry` table: projects and apps, with the item layout of
docs/architecture.md ("registry"). API keys are in `api_keys_store`, idempotency records in
`idempotency_store`.

Every write is conditional, so two racing requests never both win. Secrets are never stored
in clear: an API key is kept as its SHA-256 only, an app's signing key sealed (AES-GCM under
the engine's secret, bound to the app's item: `signingKeySealed`).
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from botocore.exceptions import ClientError

from ezgh_engine import clock, ids
from ezgh_engine.adapters import aws
from ezgh_engine.adapters.ddb import cancellation_codes, is_condition_failure
from ezgh_engine.adapters.read_cache import ReadCache
from ezgh_engine.config import settings
from ezgh_engine.core import sealing
from ezgh_engine.core.flows.jobs import interpreter_app_id
from ezgh_engine.core.models import App, Notifications
from ezgh_engine.core.validation import is_uuid
from ezgh_engine.errors import Conflict, NotFound

# --- low-level helpers ---------------------------------------------------------------------


def ddb() -> Any:
    """The DynamoDB client (low level)."""
    return aws.client("dynamodb")


def table() -> str:
    """The registry table's physical name."""
    return settings().registry_table


def item_key(pk: str, sk: str) -> dict[str, Any]:
    return {"pk": {"S": pk}, "sk": {"S": sk}}


def _s(value: str) -> dict[str, str]:
    return {"S": value}


def get_item(pk: str, sk: str) -> dict[str, Any] | None:
    # Consistent reads: a revoked key or a deleted app must stop working at once.
    answer = ddb().get_item(TableName=table(), Key=item_key(pk, sk), ConsistentRead=True)
    item: dict[str, Any] | None = answer.get("Item")
    return item


def _query_gsi1(partition: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    kwargs: dict[str, Any] = {
        "TableName": table(),
        "IndexName": "gsi1",
        "KeyConditionExpression": "gsi1pk = :p",
        "ExpressionAttributeValues": {":p": _s(partition)},
    }
    while True:
        page = ddb().query(**kwargs)
        items.extend(page.get("Items", []))
        if "LastEvaluatedKey" not in page:
            return items
        kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]


# --- projects ------------------------------------------------------------------------------


def get_project_org(project_id: str) -> str | None:
    """The organization that owns `project_id`, or None when there is no such project."""
    item = get_item(f"PROJECT#{project_id}", "PROJECT")
    return item["orgId"]["S"] if item else None


def ensure_project(org_id: str, project_id: str) -> None:
    """Create the project item unless it exists; a project of another org is a conflict."""
    try:
        ddb().put_item(
            TableName=table(),
            Item={
                **item_key(f"PROJECT#{project_id}", "PROJECT"),
                "orgId": _s(org_id),
                "createdAt": _s(clock.iso(clock.now())),
            },
            ConditionExpression="attribute_not_exists(pk)",
        )
    except ClientError as err:
        if not is_condition_failure(err):
            raise
        if get_project_org(project_id) != org_id:
            raise Conflict(f"project {project_id} belongs to another organization") from err


# --- apps ----------------------------------------------------------------------------------


def _signing_cipher() -> bytes:
    return sealing.derive_key(settings().token_secret, "app-signing-key")


def _seal_signing_key(app_id: str, key: str) -> bytes:
    """An app's signing key as stored: AES-GCM-sealed under the engine's secret and bound to
    the app's item, so the table alone (a backup, a read-only role) reveals no key."""
    nonce = sealing.nonce_from(ids.secret_token(16))
    return sealing.seal(_signing_cipher(), key.encode(), f"APP#{app_id}".encode(), nonce)


def _signing_key_of(item: dict[str, Any]) -> str:
    """The app's signing key in clear; an item written before keys were sealed holds it in
    clear (`signingKey`) until its next write."""
    if "signingKeySealed" not in item:
        return str(item["signingKey"]["S"])
    sealed = item["signingKeySealed"]["B"]
    plain = sealing.unseal(_signing_cipher(), bytes(sealed), f"APP#{item['id']['S']}".encode())
    if plain is None:
        raise RuntimeError(
            f"app {item['id']['S']}: its signing key does not unseal (secret rotated?)"
        )
    return plain.decode()


def _app_item(app: App) -> dict[str, Any]:
    item: dict[str, Any] = {
        **item_key(f"APP#{app.id}", "APP"),
        "id": _s(app.id),
        "slug": _s(app.slug),
        "orgId": _s(app.org_id),
        "projectId": _s(app.project_id),
        "name": _s(app.name),
        "kind": _s(app.kind),
        "status": _s(app.status),
        "workflows": {"L": [_s(w) for w in app.workflows]},
        "signingKeySealed": {"B": _seal_signing_key(app.id, app.signing_key)},
        "createdAt": _s(app.created_at),
        "version": {"N": str(app.version)},
        "gsi1pk": _s(f"APPS#{app.project_id}"),
        "gsi1sk": _s(app.name),
    }
    if app.url is not None:
        item["url"] = _s(app.url)
    if app.notifications is not None:
        item["notifications"] = _s(json.dumps(app.notifications.to_api()))
    if app.protocol is not None:
        item["protocol"] = _s(app.protocol)
    if app.key_id is not None:
        item["keyId"] = _s(app.key_id)
    return item


def _app_from_item(item: dict[str, Any]) -> App:
    notifications = None
    if "notifications" in item:
        data = json.loads(item["notifications"]["S"])
        notifications = Notifications(
            queue_id=data["queueId"],
            on=tuple(data["on"]),
            workflows=None if data.get("workflows") is None else tuple(data["workflows"]),
            group_by=data.get("groupBy", "run"),
        )
    return App(
        id=item["id"]["S"],
        slug=item["slug"]["S"],
        org_id=item["orgId"]["S"],
        project_id=item["projectId"]["S"],
        name=item["name"]["S"],
        kind=item["kind"]["S"],
        url=item["url"]["S"] if "url" in item else None,
        status=item["status"]["S"],
        workflows=tuple(w["S"] for w in item.get("workflows", {}).get("L", [])),
        signing_key=_signing_key_of(item),
        created_at=item["createdAt"]["S"],
        notifications=notifications,
        version=int(item["version"]["N"]),
        protocol=item["protocol"]["S"] if "protocol" in item else None,
        key_id=item["keyId"]["S"] if "keyId" in item else None,
    )


def create_app(app: App) -> App:
    """Store a new app with its name and slug items in one transaction.

    A name already taken in the project raises Conflict (`invalid_state`).
    """
    name_item = {
        **item_key(f"APPNAME#{app.project_id}#{app.name}", "APPNAME"),
        "appId": _s(app.id),
    }
    slug_item = {**item_key(f"APPSLUG#{app.slug}", "APPSLUG"), "appId": _s(app.id)}
    puts = [_app_item(app), name_item, slug_item]
    try:
        ddb().transact_write_items(
            TransactItems=[
                {
                    "Put": {
                        "TableName": table(),
                        "Item": item,
                        "ConditionExpression": "attribute_not_exists(pk)",
                    }
                }
                for item in puts
            ]
        )
    except ClientError as err:
        reasons = cancellation_codes(err)
        if len(reasons) > 1 and reasons[1] == "ConditionalCheckFailed":
            raise Conflict(
                f"an app named {app.name!r} already exists in this project", code="invalid_state"
            ) from err
        raise
    return app


def _get_app_by_id(app_id: str) -> App | None:
    item = get_item(f"APP#{app_id}", "APP")
    return _app_from_item(item) if item else None


def get_app(project_id: str, app_ref: str) -> App | None:
    """The app named by its UUID, its `wfa_` slug or its name, or None (unknown, or of
    another project). Every `{appId}` in a path is read through here, so all accept the
    three forms alike (as queues accept an ID or a name). The engine's interpreter is never
    found here, by any form (`service.flow_hosting`)."""
    app_id: str | None = app_ref
    if app_ref.startswith("wfa_"):
        app_id = _app_id_of(f"APPSLUG#{app_ref}", "APPSLUG")
    elif not is_uuid(app_ref):
        app_id = _app_id_of(f"APPNAME#{project_id}#{app_ref}", "APPNAME")
    if app_id == interpreter_app_id(project_id):
        return None  # the engine's interpreter (a record an earlier engine wrote): not an app
    app = _get_app_by_id(app_id) if app_id else None
    if app is None or app.project_id != project_id:
        return None
    _apps.put((project_id, app_ref), app)  # a fresh read: what the memory serves from now
    return app


# --- apps read a moment ago (the hot read paths) -------------------------------------------
# Per environment, for APP_CACHE_SECONDS: a queue subscription's deliveries, scheduled starts,
# run-ended notifications and a gather's branch invocations read their app through
# `get_app_cached` (a burst of messages read one app item once per message, consistently).
# What may be stale, for up to that long after a change made in another environment: an app
# deleted or unsynced still looks startable (the run started then fails
# `workflows.app_deleted` at its first invocation: a run's main invocation reads its app
# consistently, always; a branch may still invoke it, and its step's end is a fact the
# failed run keeps), a sync's new URL or signing key is not used yet (the delivery fails,
# forgets the app, `forget_cached_app`, and its retry reads it afresh), and notification
# settings are the previous ones. A change made in this environment is seen at once (`_apps.forget`); a
# refusal is never served from memory (`derived_runs` reads again before refusing).
APP_CACHE_SECONDS = 5.0
_apps: ReadCache[App] = ReadCache(
    APP_CACHE_SECONDS, version=lambda app: app.version, owner=lambda app: app.id
)


def get_app_cached(project_id: str, app_ref: str) -> App | None:
    """`get_app`, or the app as this environment read it less than `APP_CACHE_SECONDS`
    ago (see above for what that may miss)."""
    return _apps.get((project_id, app_ref), lambda: get_app(project_id, app_ref))


def forget_cached_app(app_id: str) -> None:
    """Forget what this environment read of one app (a delivery to it failed: the next
    one reads it as it is now, a sync's new URL or signing key)."""
    _apps.forget(app_id)


def forget_cached_apps() -> None:
    """Forget every app read a moment ago (tests that write items behind the store's back)."""
    _apps.clear()


def _app_id_of(pk: str, sk: str) -> str | None:
    item = get_item(pk, sk)
    return item["appId"]["S"] if item else None


def list_apps(project_id: str) -> list[App]:
    """Every app of the project, by name (never the engine's interpreter)."""
    hidden = interpreter_app_id(project_id)
    return [_app_from_item(i) for i in _query_gsi1(f"APPS#{project_id}") if i["id"]["S"] != hidden]


def save_app(app: App) -> App:
    """Write `app` over the stored one if nobody changed it since it was read (its `version`).

    Answers the app with its new version; a concurrent change raises Conflict.
    """
    saved = replace(app, version=app.version + 1)
    try:
        ddb().put_item(
            TableName=table(),
            Item=_app_item(saved),
            ConditionExpression="version = :v",
            ExpressionAttributeValues={":v": {"N": str(app.version)}},
        )
    except ClientError as err:
        if is_condition_failure(err):
            raise Conflict(f"app {app.id} changed or was deleted meanwhile; retry") from err
        raise
    finally:
        _apps.forget(app.id)
    return saved


def update_app_after_sync(
    app: App, workflows: list[str], protocol: str | None = None, *, key_id: str | None = None
) -> App:
    """Record what a sync learnt: the app's workflows, status `synced`, the protocol version
    it speaks (when given; a worker's announce without one leaves it), and with `key_id` the
    key whose sync (or worker's announce) it was, which the app's code now acts for.

    Only these fields change (no version check), so a sync never loses a concurrent PATCH
    of the URL or notifications; the version still moves on.
    """
    update = "SET workflows = :w, #s = :s, version = version + :one"
    values = {":w": {"L": [_s(w) for w in workflows]}, ":s": _s("synced"), ":one": {"N": "1"}}
    names = {"#s": "status"}
    if protocol is not None:
        update += ", #p = :p"
        names["#p"] = "protocol"
        values[":p"] = _s(protocol)
    if key_id is not None:
        update += ", keyId = :k"
        values[":k"] = _s(key_id)
    try:
        answer = ddb().update_item(
            TableName=table(),
            Key=item_key(f"APP#{app.id}", "APP"),
            UpdateExpression=update,
            ConditionExpression="attribute_exists(pk)",
            ExpressionAttributeNames=names,
            ExpressionAttributeValues=values,
            ReturnValues="ALL_NEW",
        )
    except ClientError as err:
        if is_condition_failure(err):
            raise NotFound(f"app {app.id} not found") from err
        raise
    finally:
        _apps.forget(app.id)
    return _app_from_item(answer["Attributes"])


def delete_app(app: App) -> None:
    """Delete the app with its name and slug items in one transaction."""
    keys = [
        item_key(f"APP#{app.id}", "APP"),
        item_key(f"APPNAME#{app.project_id}#{app.name}", "APPNAME"),
        item_key(f"APPSLUG#{app.slug}", "APPSLUG"),
    ]
    try:
        delete_with_pointers(keys, f"app {app.id}")
    finally:
        _apps.forget(app.id)


def delete_with_pointers(keys: list[dict[str, Any]], what: str) -> None:
    """Delete an item (`keys[0]`, which must exist) and its name/slug pointer items in one
    transaction; `NotFound` naming `what` when it is gone already."""
    deletes: list[dict[str, Any]] = [{"Delete": {"TableName": table(), "Key": k}} for k in keys]
    deletes[0]["Delete"]["ConditionExpression"] = "attribute_exists(pk)"
    try:
        ddb().transact_write_items(TransactItems=deletes)
    except ClientError as err:
        if cancellation_codes(err) and not aws.is_throttle(err):  # else 429, not a refusal
            raise NotFound(f"{what} not found") from err
        raise
