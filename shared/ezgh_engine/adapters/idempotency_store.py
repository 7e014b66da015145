"""Idempotency records in the `registry` table: `IDEM#<projectId>#<method path>#<key>` / `IDEM`.

A record is claimed with a conditional put before the request runs, then holds the first
answer (status and body) until its `ttl` (48 h). The body is stored as the opaque bytes the
caller gives (`api.idempotency` compresses and encrypts it: answers can hold secrets).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from botocore.exceptions import ClientError

from ezgh_engine import clock, ids
from ezgh_engine.adapters.ddb import is_condition_failure
from ezgh_engine.adapters.registry_store import ddb, get_item, item_key, table

# Leave room under DynamoDB's 400 KB item limit for the other attributes.
_MAX_STORED_ANSWER = 350_000


@dataclass(frozen=True)
class IdempotencyRecord:
    """A claimed key. `status` is set once the first answer is known; `body_kept` is False
    when that answer was too large to keep."""

    request_hash: str
    claim_token: str
    claimed_at_ms: int
    status: int | None = None
    body: bytes | None = None
    body_kept: bool = True


def _from_item(item: dict[str, Any]) -> IdempotencyRecord:
    body = bytes(item["answer"]["B"]) if "answer" in item else None
    return IdempotencyRecord(
        request_hash=item["requestHash"]["S"],
        claim_token=item["claimToken"]["S"],
        claimed_at_ms=int(item["claimedAt"]["N"]),
        status=int(item["status"]["N"]) if "status" in item else None,
        body=body,
        body_kept="answerOmitted" not in item,
    )


def claim(
    pk: str, request_hash: str, ttl_seconds: int, *, stale_before_ms: int
) -> tuple[str | None, IdempotencyRecord | None]:
    """Claim an Idempotency-Key.

    Answers `(claim_token, None)` when this request now owns the key: no record, an expired
    one (DynamoDB deletes expired items late), or an unfinished claim for the same body older
    than `stale_before_ms` (its request died). Otherwise `(None, record)` with the record found.
    """
    for _ in range(3):  # a record released between our put and our read: claim again
        now_ms = clock.now_ms()
        token = ids.new_id()
        try:
            ddb().put_item(
                TableName=table(),
                Item={
                    **item_key(pk, "IDEM"),
                    "requestHash": {"S": request_hash},
                    "claimToken": {"S": token},
                    "claimedAt": {"N": str(now_ms)},
                    "ttl": {"N": str(now_ms // 1000 + ttl_seconds)},
                },
                ConditionExpression=(
                    "attribute_not_exists(pk) OR #ttl < :now OR (attribute_not_exists(#st)"
                    " AND claimedAt < :stale AND requestHash = :h)"
                ),
                ExpressionAttributeNames={"#ttl": "ttl", "#st": "status"},
                ExpressionAttributeValues={
                    ":now": {"N": str(now_ms // 1000)},
                    ":stale": {"N": str(stale_before_ms)},
                    ":h": {"S": request_hash},
                },
            )
            return token, None
        except ClientError as err:
            if not is_condition_failure(err):
                raise
        item = get_item(pk, "IDEM")
        if item is not None:
            return None, _from_item(item)
    raise RuntimeError(f"could not claim idempotency record {pk}")


def get(pk: str) -> IdempotencyRecord | None:
    """The record under `pk`, if any."""
    item = get_item(pk, "IDEM")
    return _from_item(item) if item else None


def finish(pk: str, token: str, status: int, answer: bytes) -> None:
    """Store the first answer under our claim (a no-op if the claim was taken over).

    An answer over the item size limit is not kept; the record still says the key was used.
    """
    values: dict[str, Any] = {":s": {"N": str(status)}, ":t": {"S": token}}
    if len(answer) <= _MAX_STORED_ANSWER:
        update = "SET #st = :s, answer = :a"
        values[":a"] = {"B": answer}
    else:
        # Too large to keep: remember that there was an answer, so the key is not reused.
        update = "SET #st = :s, answerOmitted = :o"
        values[":o"] = {"BOOL": True}
    try:
        ddb().update_item(
            TableName=table(),
            Key=item_key(pk, "IDEM"),
            UpdateExpression=update,
            ConditionExpression="claimToken = :t",
            ExpressionAttributeNames={"#st": "status"},
            ExpressionAttributeValues=values,
        )
    except ClientError as err:
        if not is_condition_failure(err):
            raise


def release(pk: str, token: str) -> None:
    """Let go of our claim (the request failed), so the client may try again with the key."""
    try:
        ddb().delete_item(
            TableName=table(),
            Key=item_key(pk, "IDEM"),
            ConditionExpression="claimToken = :t",
            ExpressionAttributeValues={":t": {"S": token}},
        )
    except ClientError as err:
        if not is_condition_failure(err):
            raise
