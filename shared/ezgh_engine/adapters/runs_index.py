"""Reading the runs indexes: sharded partitions merged newest first, and run items by key.

A project's runs are listed under `RUNS_INDEX_SHARDS` keys of each narrow index (topology
`RUNS_NARROW_INDEXES`), plus, for runs written before those indexes, one partition of the
whole-item index `gsi1`. A listing reads each partition newest first and merges them. Every
partition shares the sort key `<createdAt>#<runId>` (unique), so one position says where
every partition resumes: each was read down past it, and nothing above it is unseen. The
sealed cursor holds that position.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from botocore.exceptions import ClientError

from ezgh_engine.adapters import ddb
from ezgh_engine.adapters import run_items as items
from ezgh_engine.adapters.aws import client
from ezgh_engine.config import settings
from ezgh_engine.errors import TransientError
from ezgh_engine.topology import RUNS_BY_STATUS, RUNS_INDEX_SHARDS, RUNS_LEGACY_INDEX, Index

# The most index items one listing page evaluates (read, then kept or filtered out): a
# filter its index does not answer stops there with a cursor, however few it matched.
READ_BUDGET = 1000
# BatchGetItem's most keys a request.
_BATCH = 100


@dataclass(frozen=True)
class Partition:
    """One index key to read, with the filters its index does not answer (attribute name →
    value, tested by DynamoDB on the entries it reads)."""

    index: Index
    pk: str
    filters: tuple[tuple[str, str], ...] = ()


def partitions(index: Index, project_id: str, value: str | None) -> list[Partition]:
    """Every shard of a narrow index's key for a project (and filter `value`)."""
    return [
        Partition(index, items.index_pk(index, project_id, value, n))
        for n in range(RUNS_INDEX_SHARDS)
    ]


def legacy_partition(project_id: str, filters: dict[str, str]) -> Partition:
    """The project's runs written before the narrow indexes (`gsi1`, whole items)."""
    return Partition(RUNS_LEGACY_INDEX, items.runs_index_pk(project_id), tuple(filters.items()))


def job_status_partitions(project_id: str, status: str) -> list[Partition]:
    """Every shard of the status index's key of a project's jobs (EzFlow runs) in `status`."""
    return [
        Partition(RUNS_BY_STATUS, "JOBST" + p.pk.removeprefix("RUNST"))
        for p in partitions(RUNS_BY_STATUS, project_id, status)
    ]


@dataclass
class _Reader:
    """A partition being read newest first: what was read and not yet merged (`buffer`,
    newest first), and where its reading stopped (`start`: None once it is read out)."""

    part: Partition
    buffer: list[dict[str, Any]] = field(default_factory=list)
    start: dict[str, Any] | None = None
    read_once: bool = False

    @property
    def done(self) -> bool:
        return self.read_once and self.start is None

    @property
    def frontier(self) -> str:
        """The sort key the reading stopped at: nothing of this partition above it is unseen."""
        return str((self.start or {}).get(self.part.index.sort_key, {}).get("S", ""))


@dataclass(frozen=True)
class Bounds:
    """The sort-key range a listing reads: strictly below `below` (a cursor's position, or
    `createdBefore`), above `above` (`createdAfter`)."""

    below: str | None = None
    above: str | None = None


def _ddb() -> Any:
    return client("dynamodb")


class IndexUnavailable(Exception):
    """A narrow index the stack has not created yet (or is still creating)."""


def _query(reader: _Reader, bounds: Bounds, limit: int) -> int:
    """Read the reader's next chunk; answer how many entries DynamoDB evaluated."""
    part = reader.part
    names = {"#p": part.index.partition_key}
    values: dict[str, Any] = {":p": {"S": part.pk}}
    condition = "#p = :p"
    if bounds.above is not None or bounds.below is not None:
        names["#s"] = part.index.sort_key
    if bounds.above is not None and bounds.below is not None:
        condition += " AND #s BETWEEN :lo AND :hi"
        values[":lo"], values[":hi"] = {"S": bounds.above}, {"S": bounds.below}
    elif bounds.below is not None:
        condition += " AND #s < :hi"
        values[":hi"] = {"S": bounds.below}
    elif bounds.above is not None:
        condition += " AND #s > :lo"
        values[":lo"] = {"S": bounds.above}
    request: dict[str, Any] = {
        "TableName": settings().runs_table,
        "IndexName": part.index.name,
        "KeyConditionExpression": condition,
        "ScanIndexForward": False,
        "Limit": limit,
    }
    if part.filters:
        tests = []
        for i, (name, value) in enumerate(part.filters):
            names[f"#f{i}"], values[f":f{i}"] = name, {"S": value}
            tests.append(f"#f{i} = :f{i}")
        request["FilterExpression"] = " AND ".join(tests)
    request.update(ExpressionAttributeNames=names, ExpressionAttributeValues=values)
    if reader.start is not None:
        request["ExclusiveStartKey"] = reader.start
    try:
        answer = _ddb().query(**request)
    except ClientError as exc:
        if _missing_index(exc):
            raise IndexUnavailable(part.index.name) from None
        ddb.raise_transient(exc)
        raise
    found = [ddb.from_item(i) for i in answer.get("Items", [])]
    # BETWEEN includes its upper end: the cursor's own entry is not read again.
    reader.buffer.extend(f for f in found if bounds.below is None or _sort(f, part) < bounds.below)
    reader.start = answer.get("LastEvaluatedKey")
    reader.read_once = True
    return int(answer.get("ScannedCount", len(found)))


def _missing_index(exc: ClientError) -> bool:
    error = exc.response.get("Error", {})
    message = str(error.get("Message", "")).lower()
    code = error.get("Code")
    # AWS: "The table does not have the specified index", "Cannot read from backfilling
    # global secondary index"; moto and DynamoDB Local say much the same.
    hints = ("specified index", "backfilling", "index not found", "no index", "invalid index")
    return code in ("ValidationException", "ResourceNotFoundException") and any(
        h in message for h in hints
    )


def _sort(entry: dict[str, Any], part: Partition) -> str:
    return str(entry[part.index.sort_key])


@dataclass(frozen=True)
class Page:
    """A merged page: the entries (newest first) and the position the next page starts
    below (None: nothing more)."""

    entries: list[dict[str, Any]]
    position: str | None


def merged_page(
    parts: list[Partition],
    bounds: Bounds,
    *,
    want: int,
    keep: Callable[[dict[str, Any]], bool] = lambda _entry: True,
    budget: int | None = None,
) -> Page:
    """Up to `want` entries of `parts` within `bounds` that `keep` passes, newest first,
    each run once. Each partition is read a chunk at a time, as the merge reaches it; once
    `budget` entries were evaluated, the page ends where every partition was read down to,
    with what it found (perhaps nothing) and that position."""
    budget = READ_BUDGET if budget is None else budget
    readers = [_Reader(p) for p in parts]
    filtered = any(p.filters for p in parts)
    chunk = max(want, 25) if filtered else math.ceil(want / len(parts)) + 2
    read = 0
    first = max(1, min(chunk, budget // len(parts)))
    for reader in readers:  # every partition once, within the budget: each has a frontier
        read += _query(reader, bounds, first)
    out: list[dict[str, Any]] = []
    last: str | None = None
    while len(out) < want:
        for reader in readers:
            while not reader.buffer and not reader.done and read < budget:
                read += _query(reader, bounds, min(chunk, budget - read))
        starved = [r for r in readers if not r.buffer and not r.done]
        live = [r for r in readers if r.buffer]
        # Out of budget, a partition may hold unseen entries above all but `floor`.
        floor = max((r.frontier for r in starved), default=None)
        if not live:
            return Page(out, floor)  # read out (None), or out of budget
        best = max(live, key=lambda r: _sort(r.buffer[0], r.part))
        if floor is not None and _sort(best.buffer[0], best.part) <= floor:
            return Page(out, floor)
        entry = best.buffer.pop(0)
        last = _sort(entry, best.part)
        for other in live:  # the same run under two indexes (moved, not yet unlisted)
            while other.buffer and _sort(other.buffer[0], other.part) == last:
                other.buffer.pop(0)
        if keep(entry):
            out.append(entry)
    more = any(r.buffer or not r.done for r in readers)
    return Page(out, last if more else None)


def entries(parts: list[Partition], bounds: Bounds) -> Iterator[dict[str, Any]]:
    """Every entry of `parts` within `bounds`, partition after partition (no order across
    them), each run once."""
    seen: set[str] = set()
    for part in parts:
        reader = _Reader(part)
        while not reader.done:
            try:
                _query(reader, bounds, 1000)
            except IndexUnavailable:
                if part.index is RUNS_LEGACY_INDEX:
                    break
                raise
            for entry in reader.buffer:
                run_id = run_id_of(entry)
                if run_id not in seen:
                    seen.add(run_id)
                    yield entry
            reader.buffer.clear()


def run_id_of(entry: dict[str, Any]) -> str:
    """The run an index entry lists (its table key `RUN#<id>`)."""
    return str(entry["pk"]).removeprefix(items.run_pk(""))


def run_items(run_ids: list[str]) -> dict[str, dict[str, Any]]:
    """The run items of `run_ids` that exist (plain values), by ID: BatchGetItem, 100 at a
    time, unprocessed keys asked again."""
    found: dict[str, dict[str, Any]] = {}
    table = settings().runs_table
    unique = list(dict.fromkeys(run_ids))
    for start in range(0, len(unique), _BATCH):
        ask: dict[str, Any] = {
            table: {"Keys": [items.run_key(i) for i in unique[start : start + _BATCH]]}
        }
        for _attempt in range(8):
            answer = _ddb().batch_get_item(RequestItems=ask)
            for raw in answer.get("Responses", {}).get(table, []):
                values = ddb.from_item(raw)
                found[str(values["id"])] = values
            ask = answer.get("UnprocessedKeys") or {}
            if not ask:
                break
        else:
            raise TransientError("DynamoDB is busy: runs not read; try again")
    return found
