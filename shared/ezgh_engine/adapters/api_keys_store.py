"""API keys in the `registry` table: minting, finding, listing and revoking them.

A key is two items: `APIKEY#<sha256 of its secret>` (its record: the secret itself is never
stored) and `APIKEYID#<id>` (the pointer by ID). A key minted through the API records its
**chain**: the IDs of the key that minted it and of that key's own creators, the root (a
bootstrap key) first. A key is live while it and every key of its chain exist, so revoking
a key revokes, at once and with one delete, every key it minted and theirs, transitively:

- **authenticating** reads the key, then its chain's pointers in one consistent
  `BatchGetItem` (nothing more for a root key); one missing means revoked (`live`);
- **revoking** deletes the key's two items in one transaction, and then deletes the
  descendants it leaves without a live chain (`sweep_orphans`, each its own conditional
  transaction). That sweep only tidies: a crash half-way leaves descendants that no longer
  authenticate, list or count, and the next revocation in the project sweeps them;
- **minting** checks, in the new key's own transaction, that its creator still exists, so a
  key being revoked mints nothing that outlives it.

Keys minted through the API are counted on the item `PROJECT#<id>` / `APIKEYS` and capped at
`MAX_API_KEYS` a project, in the mint's transaction (bootstrap keys, minted by the operator,
and keys made before keys recorded their creator are not counted). A chain is at most
`MAX_KEY_CHAIN` keys long: authentication reads each of them.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from botocore.exceptions import ClientError

from ezgh_engine import clock, ids
from ezgh_engine.adapters import aws
from ezgh_engine.adapters import ddb as ddb_items
from ezgh_engine.adapters.ddb import cancellation_codes
from ezgh_engine.adapters.read_cache import ReadCache
from ezgh_engine.adapters.registry_store import ddb, get_item, item_key, table
from ezgh_engine.core.models import Principal
from ezgh_engine.errors import Conflict, NotFound, Unauthorized

Permission = tuple[str, str | None]  # (action, resource or None for all)

# The most keys minted through the API that one project holds at once.
MAX_API_KEYS = 500
# The most keys in a key's chain of creators (authentication reads each of them).
MAX_KEY_CHAIN = 8
# How many key items one page of `GET /apiKeys` reads at most (a scoped key's page is
# filtered: it may answer fewer keys, with a cursor where the reading stopped).
LIST_READ_BUDGET = 1000
_COUNTER_SK = "APIKEYS"


@dataclass(frozen=True)
class ApiKey:
    """An API key's record (never its secret)."""

    id: str
    org_id: str
    project_id: str
    name: str
    permissions: tuple[Permission, ...]
    created_at: str
    # The key that minted it (None: a bootstrap key, or one made before keys recorded it).
    created_by: str | None = None
    # Its creators, the root first and `created_by` last; all must exist for it to work.
    chain: tuple[str, ...] = ()

    def to_api(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "name": self.name,
            "permissions": permissions_to_api(self.permissions),
            "createdAt": self.created_at,
            "createdBy": self.created_by,
        }

    def principal(self) -> Principal:
        return Principal(self.org_id, self.project_id, self.id, self.permissions, self.chain)


def permissions_to_api(perms: tuple[Permission, ...]) -> list[dict[str, str]]:
    """`[{action, resource?}]`, the API's shape of a permission list."""
    return [{"action": a, **({"resource": r} if r is not None else {})} for a, r in perms]


def _s(value: str) -> dict[str, str]:
    return {"S": value}


def _key_from_item(item: dict[str, Any]) -> ApiKey:
    perms = json.loads(item["permissions"]["S"])
    return ApiKey(
        id=item["id"]["S"],
        org_id=item["orgId"]["S"],
        project_id=item["projectId"]["S"],
        name=item["name"]["S"],
        permissions=tuple((p["action"], p.get("resource")) for p in perms),
        created_at=item["createdAt"]["S"],
        created_by=item["createdBy"]["S"] if "createdBy" in item else None,
        chain=tuple(v["S"] for v in item.get("chain", {}).get("L", [])),
    )


def _pointer_key(key_id: str) -> dict[str, Any]:
    return item_key(f"APIKEYID#{key_id}", "APIKEYID")


def _counter_key(project_id: str) -> dict[str, Any]:
    return item_key(f"PROJECT#{project_id}", _COUNTER_SK)


# --- minting -----------------------------------------------------------------------------------


def create_api_key(
    org_id: str,
    project_id: str,
    name: str,
    permissions: tuple[Permission, ...],
    *,
    creator: Principal | None = None,
) -> tuple[ApiKey, str]:
    """Store a new key and answer it with its secret (the only time the secret exists).

    With `creator` (a key minting through the API) the key records it, counts against the
    project's cap (409 `invalid_state` past it) and is written only if the creator still
    exists (401 otherwise: it was revoked meanwhile). Without, a root key (bootstrap).
    """
    chain = (*creator.key_chain, creator.key_id) if creator is not None else ()
    if len(chain) > MAX_KEY_CHAIN:
        raise Conflict(
            f"a key minted by this key would have {len(chain)} creators, more than the "
            f"{MAX_KEY_CHAIN} a key may have: mint it with a key closer to the bootstrap key",
            code="invalid_state",
        )
    secret = f"ezgh_{ids.secret_token(32)}"
    digest = ids.sha256_hex(secret)
    key = ApiKey(
        ids.new_id(),
        org_id,
        project_id,
        name,
        permissions,
        clock.iso(clock.now()),
        created_by=creator.key_id if creator is not None else None,
        chain=chain,
    )
    actions = _mint_actions(key, digest)
    try:
        _mint(actions)
    except _AtCap:
        # Keys a crashed revocation left behind still count until swept: sweep, try again.
        if not sweep_orphans(project_id):
            raise
        _mint(actions)
    return key, secret


def _mint_actions(key: ApiKey, digest: str) -> list[dict[str, Any]]:
    record: dict[str, Any] = {
        **item_key(f"APIKEY#{digest}", "APIKEY"),
        "id": _s(key.id),
        "orgId": _s(key.org_id),
        "projectId": _s(key.project_id),
        "name": _s(key.name),
        "permissions": _s(json.dumps(permissions_to_api(key.permissions))),
        "createdAt": _s(key.created_at),
        "gsi1pk": _s(f"KEYS#{key.project_id}"),
        "gsi1sk": _s(key.id),
    }
    if key.created_by is not None:
        record["createdBy"] = _s(key.created_by)
        record["chain"] = {"L": [_s(k) for k in key.chain]}
    pointer = {**_pointer_key(key.id), "hash": _s(digest), "projectId": _s(key.project_id)}
    actions: list[dict[str, Any]] = [
        {
            "Put": {
                "TableName": table(),
                "Item": i,
                "ConditionExpression": "attribute_not_exists(pk)",
            }
        }
        for i in (record, pointer)
    ]
    if key.created_by is None:
        return actions
    creator_alive = {
        "TableName": table(),
        "Key": _pointer_key(key.created_by),
        "ConditionExpression": "attribute_exists(pk)",
    }
    counted = {
        "TableName": table(),
        "Key": _counter_key(key.project_id),
        "UpdateExpression": "SET #n = if_not_exists(#n, :zero) + :one",
        "ConditionExpression": "attribute_not_exists(#n) OR #n < :cap",
        "ExpressionAttributeNames": {"#n": "count"},
        "ExpressionAttributeValues": {
            ":zero": {"N": "0"},
            ":one": {"N": "1"},
            ":cap": {"N": str(MAX_API_KEYS)},
        },
    }
    return [*actions, {"ConditionCheck": creator_alive}, {"Update": counted}]


class _AtCap(Conflict):
    def __init__(self) -> None:
        super().__init__(
            f"this project holds {MAX_API_KEYS} API keys, the most it may: revoke one first",
            code="invalid_state",
        )


def _mint(actions: list[dict[str, Any]]) -> None:
    """Write a new key's transaction: 401 when its creator was revoked meanwhile, `_AtCap`
    when the project holds its most keys."""
    try:
        ddb().transact_write_items(TransactItems=actions)
    except ClientError as err:
        codes = cancellation_codes(err)
        if len(codes) > 2 and codes[2] == "ConditionalCheckFailed":
            raise Unauthorized("unknown or revoked API key") from None
        if len(codes) > 3 and codes[3] == "ConditionalCheckFailed":
            raise _AtCap() from None
        raise


# --- finding -----------------------------------------------------------------------------------


def find_api_key(secret: str) -> ApiKey | None:
    """The live key whose secret is `secret`, or None (unknown, revoked, or minted by a key
    that was revoked since)."""
    item = get_item(f"APIKEY#{ids.sha256_hex(secret)}", "APIKEY")
    if item is None:
        return None
    key = _key_from_item(item)
    return key if not _missing(key.project_id, key.chain) else None


def get_api_key(project_id: str, key_id: str) -> ApiKey | None:
    """A live key of `project_id` by its ID, or None."""
    pointer = get_item(f"APIKEYID#{key_id}", "APIKEYID")
    if not pointer or pointer["projectId"]["S"] != project_id:
        return None
    item = get_item(f"APIKEY#{pointer['hash']['S']}", "APIKEY")
    if item is None:
        return None
    key = _key_from_item(item)
    return key if not _missing(project_id, key.chain) else None


# --- keys read a moment ago (what the engine's own starts act for) ------------------------------
# Per environment, for KEY_CACHE_SECONDS: a queue subscription's deliveries and a schedule's
# fires read the key they act for through `get_api_key_cached` (a burst of a thousand
# messages a second would read the same key, its pointer and its chain a thousand times a
# second, consistently). A key's permissions never change once minted, so what may be stale
# is only its revocation: a key revoked (itself, or one of its creators) in another
# environment may still start runs here for up to KEY_CACHE_SECONDS after its revocation
# answered. A revocation made in this environment is seen at once (`_forget_cached_keys`),
# and a key found revoked is never kept: every later read asks the table again.
KEY_CACHE_SECONDS = 5.0
_keys: ReadCache[ApiKey] = ReadCache(
    KEY_CACHE_SECONDS, version=lambda key: 0, owner=lambda key: key.id
)


def get_api_key_cached(project_id: str, key_id: str) -> ApiKey | None:
    """`get_api_key`, or the key as this environment read it live less than
    `KEY_CACHE_SECONDS` ago (see above for what that may miss)."""
    return _keys.get((project_id, key_id), lambda: get_api_key(project_id, key_id))


def forget_cached_keys() -> None:
    """Forget every key read a moment ago (a revocation here; tests)."""
    _keys.clear()


def _missing(project_id: str, key_ids: Iterable[str]) -> set[str]:
    """Which of `key_ids` are no live key of the project: one consistent batch read of their
    pointers (100 a request, DynamoDB's most)."""
    wanted = sorted(set(key_ids))
    found: set[str] = set()
    for start in range(0, len(wanted), 100):
        keys = [_pointer_key(k) for k in wanted[start : start + 100]]
        request: dict[str, Any] = {
            table(): {"Keys": keys, "ConsistentRead": True, "ProjectionExpression": "pk, projectId"}
        }
        while request:
            answer = ddb().batch_get_item(RequestItems=request)
            for item in answer.get("Responses", {}).get(table(), []):
                if item["projectId"]["S"] == project_id:
                    found.add(item["pk"]["S"].removeprefix("APIKEYID#"))
            request = answer.get("UnprocessedKeys") or {}
    return set(wanted) - found


# --- listing -----------------------------------------------------------------------------------


def list_api_keys(
    project_id: str, *, limit: int, cursor: str | None, keep: Callable[[ApiKey], bool]
) -> tuple[list[ApiKey], str | None]:
    """A page of the project's live keys that `keep` admits, in ID order, and the cursor of
    the next page (sealed, bound to this project's key list). Reads at most
    `LIST_READ_BUDGET` items: a page that admits few keys may come back short, with a
    cursor where the reading stopped."""
    scope = json.dumps(["apiKeys", project_id])
    kwargs: dict[str, Any] = {
        "TableName": table(),
        "IndexName": "gsi1",
        "KeyConditionExpression": "gsi1pk = :p",
        "ExpressionAttributeValues": {":p": _s(f"KEYS#{project_id}")},
    }
    if cursor:
        kwargs["ExclusiveStartKey"] = ddb_items.decode_cursor(cursor, scope=scope)
    found: list[ApiKey] = []
    read = 0
    while True:
        kwargs["Limit"] = min(max(limit * 2, 25), LIST_READ_BUDGET - read)
        answer = ddb().query(**kwargs)
        items = answer.get("Items", [])
        read += len(items)
        keys = [_key_from_item(i) for i in items]
        gone = _missing(project_id, {k for key in keys for k in key.chain})
        for item, key in zip(items, keys, strict=True):
            if gone.isdisjoint(key.chain) and keep(key):
                found.append(key)
                if len(found) == limit:
                    more = item is not items[-1] or "LastEvaluatedKey" in answer
                    return found, _cursor(item, scope) if more else None
        if "LastEvaluatedKey" not in answer:
            return found, None
        kwargs["ExclusiveStartKey"] = answer["LastEvaluatedKey"]
        if read >= LIST_READ_BUDGET:
            return found, _cursor(answer["LastEvaluatedKey"], scope)


def _cursor(item: dict[str, Any], scope: str) -> str:
    position = {k: item[k] for k in ("pk", "sk", "gsi1pk", "gsi1sk")}
    return ddb_items.encode_cursor(position, scope=scope)


def _all_keys(project_id: str) -> list[ApiKey]:
    items: list[dict[str, Any]] = []
    kwargs: dict[str, Any] = {
        "TableName": table(),
        "IndexName": "gsi1",
        "KeyConditionExpression": "gsi1pk = :p",
        "ExpressionAttributeValues": {":p": _s(f"KEYS#{project_id}")},
    }
    while True:
        page = ddb().query(**kwargs)
        items.extend(page.get("Items", []))
        if "LastEvaluatedKey" not in page:
            return [_key_from_item(i) for i in items]
        kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]


# --- revoking ----------------------------------------------------------------------------------


def delete_api_key(project_id: str, key_id: str) -> None:
    """Revoke a key, and with it every key it minted (theirs too): its items go in one
    transaction, which is what stops its descendants; then they are swept. Unknown key:
    NotFound."""
    pointer = get_item(f"APIKEYID#{key_id}", "APIKEYID")
    if not pointer or pointer["projectId"]["S"] != project_id:
        raise NotFound(f"API key {key_id} not found")
    item = get_item(f"APIKEY#{pointer['hash']['S']}", "APIKEY")
    try:
        if item is None or not _remove(project_id, pointer["hash"]["S"], _key_from_item(item)):
            raise NotFound(f"API key {key_id} not found")
    finally:
        forget_cached_keys()  # it, and every key it minted: none acts here from now on
    sweep_orphans(project_id)


def _remove(project_id: str, digest: str, key: ApiKey) -> bool:
    """Delete one key's items (and uncount it) in one transaction; False: gone already."""
    actions: list[dict[str, Any]] = [
        {
            "Delete": {
                "TableName": table(),
                "Key": k,
                "ConditionExpression": "attribute_exists(pk)",
            }
        }
        for k in (item_key(f"APIKEY#{digest}", "APIKEY"), _pointer_key(key.id))
    ]
    if key.created_by is not None:
        actions.append(
            {
                "Update": {
                    "TableName": table(),
                    "Key": _counter_key(project_id),
                    "UpdateExpression": "SET #n = if_not_exists(#n, :one) - :one",
                    "ExpressionAttributeNames": {"#n": "count"},
                    "ExpressionAttributeValues": {":one": {"N": "1"}},
                }
            }
        )
    try:
        ddb().transact_write_items(TransactItems=actions)
    except ClientError as err:
        if cancellation_codes(err) and not aws.is_throttle(err):  # else 429, not a refusal
            return False
        raise
    return True


def sweep_orphans(project_id: str) -> int:
    """Delete the project's keys whose chain names a key that is gone; answer how many.
    Idempotent: each delete is conditional. (A key minted a moment ago may be missing from
    the index it lists: it is swept by a later revocation, and fails authentication anyway.)"""
    keys = _all_keys(project_id)
    # Read consistently: the index may still list a key revoked a moment ago.
    gone = _missing(project_id, {k for key in keys for k in key.chain})
    swept = 0
    for key in keys:
        if gone.isdisjoint(key.chain):
            continue
        pointer = get_item(f"APIKEYID#{key.id}", "APIKEYID")
        if pointer is not None and _remove(project_id, pointer["hash"]["S"], key):
            swept += 1
    return swept
