"""Per-key request counters in the `registry` table: one item per key and one-second window.

`RATE#<key id>#<window>` / `RATE` holds `n`, the requests admitted in that second, and a
`ttl` a few minutes on (DynamoDB's TTL deletes it for free). Taking a request is one
conditional `UpdateItem` (`ADD n 1` if `n` is below the limit): atomic across every Lambda
environment, one write unit, and a new partition key each second, so no counter is hot for
longer than its window.
"""

from __future__ import annotations

from typing import Any

from botocore.exceptions import ClientError

from ezgh_engine.adapters import aws
from ezgh_engine.adapters.ddb import is_condition_failure
from ezgh_engine.config import settings

SK = "RATE"
# A window's item outlives its second by this much (seconds), then TTL deletes it.
KEEP_SECONDS = 300


def counter_pk(key_id: str, window: int) -> str:
    return f"RATE#{key_id}#{window}"


def take(key_id: str, window: int, limit: int) -> bool:
    """Count one request of `key_id` in second `window` if fewer than `limit` were; answers
    whether it was counted."""
    try:
        _client().update_item(
            TableName=settings().registry_table,
            Key={"pk": {"S": counter_pk(key_id, window)}, "sk": {"S": SK}},
            UpdateExpression="ADD #n :one SET #ttl = :ttl",
            ConditionExpression="attribute_not_exists(#n) OR #n < :limit",
            ExpressionAttributeNames={"#n": "n", "#ttl": "ttl"},
            ExpressionAttributeValues={
                ":one": {"N": "1"},
                ":limit": {"N": str(limit)},
                ":ttl": {"N": str(window + KEEP_SECONDS)},
            },
        )
    except ClientError as err:
        if is_condition_failure(err):
            return False
        raise
    return True


def _client() -> Any:
    return aws.client("dynamodb")
