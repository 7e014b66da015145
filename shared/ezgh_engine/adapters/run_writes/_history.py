"""The history a wide launch's parallel steps replay from: a copy of the steps before it,
so that a branch invocation does not read its siblings."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from ezgh_engine.adapters import ddb
from ezgh_engine.adapters import run_items as items
from ezgh_engine.adapters.intents import NewItem
from ezgh_engine.adapters.run_writes._base import _ddb, _expires, _pack, _table, _unpack
from ezgh_engine.adapters.run_writes._writing import write_each

HISTORY_PREFIX = "HIST#"
HISTORY_CHUNK_BYTES = 256 * 1024
# DynamoDB's price of a byte written against a byte read eventually consistent: a write
# unit is 1 KB at $0.625 per million, a read unit 4 KB at half of $0.125 per million.
WRITE_READ_PRICE_RATIO = 40
# Below this many parallel steps a launch keeps no copy: what its branches read of their
# siblings is small, and their requests stay those of the protocol's recorded exchanges.
HISTORY_MIN_BRANCHES = 16


def history_pays(branches: int, history_bytes: int, branch_bytes: int = 300) -> bool:
    """Whether a launch of `branches` parallel steps is cheaper with a copy of the history
    before it (`history_bytes` written once) than without (each branch invocation reads
    the whole run: its `branches` siblings too). An empty history always pays: nothing to
    copy, and no branch reads another."""
    if branches < HISTORY_MIN_BRANCHES:
        return False
    saved = branches * branches * branch_bytes
    return history_bytes == 0 or saved > WRITE_READ_PRICE_RATIO * history_bytes


def write_history(run_id: str, launch_id: str, values: Sequence[Mapping[str, Any]]) -> int:
    """Keep `values` (a run's step items as read before a launch) for that launch's
    parallel steps to replay from, in chunk items; answer how many (0: empty)."""
    chunks: list[list[Mapping[str, Any]]] = [[]]
    size = 0
    for item in values:
        item_size = len(json.dumps(item, separators=(",", ":")).encode())
        if chunks[-1] and size + item_size > HISTORY_CHUNK_BYTES:
            chunks.append([])
            size = 0
        chunks[-1].append(item)
        size += item_size
    if not chunks[-1]:
        return 0
    expires = _expires()
    write_each(
        [
            NewItem(
                {
                    "pk": items.run_pk(run_id),
                    "sk": f"{HISTORY_PREFIX}{launch_id}#{index:05d}",
                    "type": "history",
                    "steps": _pack(chunk),
                    "ttl": expires,
                },
                only_new=False,
            )
            for index, chunk in enumerate(chunks)
        ]
    )
    return len(chunks)


def read_history(run_id: str, launch_id: str) -> list[dict[str, Any]]:
    """The step items `write_history` kept for a launch."""
    kwargs: dict[str, Any] = {
        "TableName": _table(),
        "KeyConditionExpression": "pk = :pk AND begins_with(sk, :hist)",
        "ExpressionAttributeValues": {
            ":pk": {"S": items.run_pk(run_id)},
            ":hist": {"S": f"{HISTORY_PREFIX}{launch_id}#"},
        },
        "ConsistentRead": True,
    }
    found: list[dict[str, Any]] = []
    while True:
        answer = _ddb().query(**kwargs)
        for raw in answer.get("Items", []):
            found.extend(_unpack(ddb.from_item(raw)["steps"]))
        if "LastEvaluatedKey" not in answer:
            return found
        kwargs["ExclusiveStartKey"] = answer["LastEvaluatedKey"]
