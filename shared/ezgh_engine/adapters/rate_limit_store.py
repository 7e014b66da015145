"""Per-key request counters in the `registry` table: items per key and one-second window.

`RATE#<key id>#<window>` / `RATE` holds `n`, the requests admitted in that second, and a
`ttl` a few minutes on (DynamoDB's TTL deletes it for free). Taking a request is one
conditional `UpdateItem` (`ADD n 1` if `n` is below the limit): atomic across every Lambda
environment, one write unit, and a new partition key each second.

One item takes at most `ITEM_WRITES_PER_SECOND` writes a second: a key whose limit is
higher counts on several items (`RATE#<key id>#<window>#<n>` for n >= 1 beside the first),
each holding its share of the limit (`shares`), so no partition key of the counter takes
more than a quarter of DynamoDB's 1,000 write units a second per partition key whatever
the limit. A request counts on the next shard in its environment's turn (`take`); a full
shard sends it to the others, so the key is refused only when every shard is full, and the
limit stays exact.
"""

from __future__ import annotations

import itertools
import threading
from typing import Any

from botocore.exceptions import ClientError

from ezgh_engine import ids
from ezgh_engine.adapters import aws
from ezgh_engine.adapters.ddb import is_condition_failure
from ezgh_engine.config import settings

SK = "RATE"
# A window's item outlives its second by this much (seconds), then TTL deletes it.
KEEP_SECONDS = 300
# The most writes a second one counter item takes: a quarter of a partition key's 1,000
# write units, leaving room for the refused writes (each consumes its unit too) and for
# other keys that share the partition.
ITEM_WRITES_PER_SECOND = 250


def counter_pk(key_id: str, window: int, shard: int = 0) -> str:
    base = f"RATE#{key_id}#{window}"
    return base if shard == 0 else f"{base}#{shard}"


def shares(limit: int) -> list[int]:
    """Each counter item's share of `limit`: as few items as hold it at
    `ITEM_WRITES_PER_SECOND` each, the limit split evenly (the first ones take the rest)."""
    count = max(1, -(-limit // ITEM_WRITES_PER_SECOND))
    return [limit // count + (1 if n < limit % count else 0) for n in range(count)]


class _Turns:
    """Which shard this environment's next request counts on: round robin from an offset
    drawn once, so the environments of a busy key spread over its shards."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._turn = itertools.count(int(ids.new_id().replace("-", "")[:8], 16))

    def next(self) -> int:
        with self._lock:
            return next(self._turn)


_turns = _Turns()


def take(key_id: str, window: int, limit: int, full: set[int] | None = None) -> bool:
    """Count one request of `key_id` in second `window` if fewer than `limit` were; answers
    whether it was counted. `full` (the caller's, for this key and second) holds the shards
    found full, which are skipped, and gains those found full now."""
    parts = shares(limit)
    full = set() if full is None else full
    first = _turns.next() % len(parts)
    for step in range(len(parts)):
        shard = (first + step) % len(parts)
        if shard in full:
            continue
        if _take_shard(key_id, window, shard, parts[shard]):
            return True
        full.add(shard)
    return False


def _take_shard(key_id: str, window: int, shard: int, share: int) -> bool:
    try:
        _client().update_item(
            TableName=settings().registry_table,
            Key={"pk": {"S": counter_pk(key_id, window, shard)}, "sk": {"S": SK}},
            UpdateExpression="ADD #n :one SET #ttl = :ttl",
            ConditionExpression="attribute_not_exists(#n) OR #n < :limit",
            ExpressionAttributeNames={"#n": "n", "#ttl": "ttl"},
            ExpressionAttributeValues={
                ":one": {"N": "1"},
                ":limit": {"N": str(share)},
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
