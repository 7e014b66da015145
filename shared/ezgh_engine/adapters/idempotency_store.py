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
    when that answer was too large to keep. `seed` is the first claim's, kept by a takeover:
    the request's effects derive their IDs from it (`ids.effect_id`)."""

    request_hash: str
    claim_token: str
    claimed_at_ms: int
    status: int | None = None
    body: bytes | None = None
    body_kept: bool = True
    seed: str = ""


def _from_item(item: dict[str, Any]) -> IdempotencyRecord:
    body = bytes(item["answer"]["B"]) if "answer" in item else None
    token = item["claimToken"]["S"]
    return IdempotencyRecord(
        request_hash=item["requestHash"]["S"],
        claim_token=token,
        claimed_at_ms=int(item["claimedAt"]["N"]),
        status=int(item["status"]["N"]) if "status" in item else None,
        body=body,
        body_kept="answerOmitted" not in item,
        seed=item["seed"]["S"] if "seed" in item else token,
    )


def _put_claim(
    pk: str, request_hash: str, ttl_seconds: int, seed: str | None, condition: str, values: Any
) -> IdempotencyRecord | None:
    """Put a claim under `condition`; our record, or None when the condition failed."""
    now_ms = clock.now_ms()
    token = ids.new_id()
    record = IdempotencyRecord(request_hash, token, now_ms, seed=seed or token)
    try:
        ddb().put_item(
            TableName=table(),
            Item={
                **item_key(pk, "IDEM"),
                "requestHash": {"S": request_hash},
                "claimToken": {"S": token},
                "claimedAt": {"N": str(now_ms)},
                "seed": {"S": record.seed},
                "ttl": {"N": str(now_ms // 1000 + ttl_seconds)},
            },
            ConditionExpression=condition,
            ExpressionAttributeNames={"#ttl": "ttl", **({"#st": "status"} if seed else {})},
            ExpressionAttributeValues={":now": {"N": str(now_ms // 1000)}, **values},
        )
    except ClientError as err:
        if not is_condition_failure(err):
            raise
        return None
    return record


def claim(
    pk: str, request_hash: str, ttl_seconds: int, *, stale_before_ms: int
) -> tuple[str | None, IdempotencyRecord | None]:
    """Claim an Idempotency-Key.

    Answers `(claim_token, our record)` when this request now owns the key: no record, an
    expired one (DynamoDB deletes expired items late), or an unfinished claim for the same
    body older than `stale_before_ms` (its request died; the takeover keeps its `seed`, so
    the effects it may have had are found again, not made twice). Otherwise
    `(None, record)` with the record found.
    """
    for _ in range(3):  # a record released between our put and our read: claim again
        fresh = "attribute_not_exists(pk) OR #ttl < :now"
        mine = _put_claim(pk, request_hash, ttl_seconds, None, fresh, {})
        if mine is not None:
            return mine.claim_token, mine
        item = get_item(pk, "IDEM")
        if item is None:
            continue
        found = _from_item(item)
        same = found.request_hash == request_hash
        released = found.status is None and found.claimed_at_ms == 0
        stale = found.status is None and found.claimed_at_ms < stale_before_ms and same
        if not (stale or released):
            return None, found
        # Take over the dead or failed request's claim, conditional on it being still that
        # claim; its seed goes on for the same body (its effects may have happened).
        takeover = "claimToken = :old AND attribute_not_exists(#st) AND #ttl >= :now"
        old = {":old": {"S": found.claim_token}}
        seed = found.seed if same else ids.new_id()
        mine = _put_claim(pk, request_hash, ttl_seconds, seed, takeover, old)
        if mine is not None:
            return mine.claim_token, mine
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
    """Let go of our claim (the request failed), so the client may try again with the key.

    The record stays, marked released (`claimedAt` 0), with its seed: a retry with the same
    body takes it over and derives the same effect IDs, so what the failed request did
    before failing (a first batch of messages sent) is not made a second time."""
    try:
        ddb().update_item(
            TableName=table(),
            Key=item_key(pk, "IDEM"),
            UpdateExpression="SET claimedAt = :zero",
            ConditionExpression="claimToken = :t AND attribute_not_exists(#st)",
            ExpressionAttributeNames={"#st": "status"},
            ExpressionAttributeValues={":t": {"S": token}, ":zero": {"N": "0"}},
        )
    except ClientError as err:
        if not is_condition_failure(err):
            raise
