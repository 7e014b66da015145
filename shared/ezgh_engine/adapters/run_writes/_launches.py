"""What a suspend starts (a parallel step, a child run, a message waiter): kept in chunk
items ahead of its commit, started by the outbox after it. A child run's or a message
waiter's items are made then, each only if new; a parallel step's item is not: its branch
message carries its values (`branch_values`) and the message's claim creates it
(`steps_store.take_branch_lease`), so a branch costs one write to start and one to end."""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from typing import Any

from botocore.exceptions import ClientError

from ezgh_engine.adapters import ddb
from ezgh_engine.adapters import run_items as items
from ezgh_engine.adapters.intents import Launch, NewItem, NewStep
from ezgh_engine.adapters.run_writes._base import _ddb, _expires, _pack, _table, _unpack
from ezgh_engine.adapters.run_writes._requests import _put, _step_values
from ezgh_engine.adapters.run_writes._writing import _single
from ezgh_engine.core.models import Run

# What a suspend starts is kept in items of at most this size (well under an item's limit).
LAUNCH_CHUNK_BYTES = 256 * 1024
LAUNCH_PREFIX = "LAUNCH#"


def launch_chunks(run: Run, launches: Sequence[Launch], launch_id: str) -> Iterator[NewItem]:
    """The chunk items that keep `launches` until the outbox makes them: their items as
    plain values, in order, at most `LAUNCH_CHUNK_BYTES` of JSON text each."""
    chunk: list[list[dict[str, Any]]] = []
    size = 0
    index = 0
    for launch in launches:
        entry = [_launch_values(run.id, item) for item in launch.items]
        text_size = len(json.dumps(entry, separators=(",", ":")).encode())
        if chunk and size + text_size > LAUNCH_CHUNK_BYTES:
            yield _launch_chunk(run, launch_id, index, chunk)
            chunk, size, index = [], 0, index + 1
        chunk.append(entry)
        size += text_size
    if chunk:
        yield _launch_chunk(run, launch_id, index, chunk)


def _launch_values(run_id: str, item: NewStep | NewItem) -> dict[str, Any]:
    if isinstance(item, NewStep):
        return _step_values(run_id, item.step_id, item.values) | {"$new": True}
    return dict(item.values) | {"$new": item.only_new}


def _launch_chunk(
    run: Run, launch_id: str, index: int, entries: list[list[dict[str, Any]]]
) -> NewItem:
    return NewItem(
        {
            "pk": items.run_pk(run.id),
            "sk": f"{LAUNCH_PREFIX}{launch_id}#{index:05d}",
            "type": "launch",
            "attempt": run.attempt,
            "entries": _pack(entries),
            "ttl": _expires(),
        },
        only_new=False,
    )


def launch_entries(run_id: str, launch_id: str) -> tuple[int, list[list[dict[str, Any]]]]:
    """A committed suspend's launches as kept (`commit`): the run attempt that made them,
    and each launch's items as plain values (`$new`: only if new)."""
    kwargs: dict[str, Any] = {
        "TableName": _table(),
        "KeyConditionExpression": "pk = :pk AND begins_with(sk, :launch)",
        "ExpressionAttributeValues": {
            ":pk": {"S": items.run_pk(run_id)},
            ":launch": {"S": f"{LAUNCH_PREFIX}{launch_id}#"},
        },
        "ConsistentRead": True,
    }
    attempt, entries = 0, []
    while True:
        answer = _ddb().query(**kwargs)
        for raw in answer.get("Items", []):
            chunk = ddb.from_item(raw)
            attempt = int(chunk.get("attempt", 1))
            entries.extend(_unpack(chunk["entries"]))
        if "LastEvaluatedKey" not in answer:
            return attempt, entries
        kwargs["ExclusiveStartKey"] = answer["LastEvaluatedKey"]


# The run attempt whose launch made a parallel step's item (written by the claim that
# creates it, and by the outcome that writes an unclaimed one, `_outcomes.unclaimed_items`).
RUN_ATTEMPT_ATTR = "runAttempt"

# What a branch message carries of its step's launch values: what the claim that creates the
# step's item writes besides what every claim sets (status, attempt, start, lease).
BRANCH_VALUES = ("name", "kind", "order", "ttl", "hist", "histChunks")


def branch_values(entry: Sequence[dict[str, Any]]) -> tuple[str, dict[str, Any]] | None:
    """The step ID and carried values (`BRANCH_VALUES`) of a launch entry that starts a
    parallel step, None for any other entry (a child run, a message wait)."""
    if len(entry) != 1 or entry[0].get("branch") is not True or entry[0].get("type") != "step":
        return None
    values = entry[0]
    return str(values["stepId"]), {k: values[k] for k in BRANCH_VALUES if k in values}


def make_launched(entries: Sequence[list[dict[str, Any]]]) -> int:
    """Write each launch's items, launch after launch in the order the workflow asked for
    them (so their branch invocations are sent in that order), each alone and only if new;
    answer how many launches were written now. A launch whose first item exists with other
    values (the step was recorded otherwise meanwhile: a cancel, another try's launch)
    stops there: what follows it would start machinery for a step that is not this
    launch's."""
    return sum(_make_one(entry) for entry in entries)


def _make_one(entry: list[dict[str, Any]]) -> int:
    made = 0
    for position, raw in enumerate(entry):
        values = {k: v for k, v in raw.items() if k != "$new"}
        try:
            _single(_put(values, only_new=bool(raw.get("$new", True))))
            made = 1
        except ClientError as exc:
            if not ddb.is_condition_failure(exc):
                raise
            if position == 0 and not _same_item(values):
                return 0
    return made


def _same_item(values: dict[str, Any]) -> bool:
    """Whether the item `values` would write exists as they say (an earlier try of the
    same launch wrote it): the same `order`, minted when the suspend was answered."""
    answer = _ddb().get_item(
        TableName=_table(), Key=items.key(values["pk"], values["sk"]), ConsistentRead=True
    )
    existing = ddb.from_item(answer["Item"]) if "Item" in answer else {}
    return bool(existing) and existing.get("order") == values.get("order")
