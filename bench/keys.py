"""Which partition keys a DynamoDB request lands on, derived from the table definitions of
`ezgh_engine.topology` (nothing here names an engine key).

A write lands on its item's key (`pk`) and, for each index of the table (`Table.indexes`),
on the index's partition key when the item carries that attribute: DynamoDB copies the item
there. A Put or a Delete writes the copy; an Update writes it when it changes an attribute
the index projects (every attribute for an `ALL` projection, the default) or the index's
keys; an Update that moves the item from one index key to another writes both (a delete and
a put). A refused (conditional) write writes no copy. So whatever an index's key is, sharded
or not, the copies land where the items say.

Keys written once per environment and hour rather than per run (`hourly_per_environment`)
are named here from the store that writes them.

`IndexKnowledge` keeps the index key values each item carries, learned from the writes seen
(and scans), so an UpdateItem that does not name them is attributed too.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from ezgh_engine.adapters.year_limit_store import PREFIX as YEAR_LIMIT_PREFIX
from ezgh_engine.topology import TOPOLOGY, Index, Table

ItemKey = tuple[str, str, str]  # (physical table, pk, sk)

# Keys written once per Lambda environment, hour and project, whatever the rate of starts:
# the year-limit buckets (`service.year_limits.arm` remembers in memory the buckets its
# environment wrote). A recorded workload writes one per run only because each of its runs
# starts in a fresh project; `bench.scale` scales them by environments, not by starts.
HOURLY_PER_ENVIRONMENT = (YEAR_LIMIT_PREFIX,)


def hourly_per_environment(key: str) -> bool:
    """Whether a partition key is written once per environment, hour and project."""
    return key.startswith(HOURLY_PER_ENVIRONMENT)


def table_of(physical: str) -> Table | None:
    """The topology table whose physical name this is (its key is the name's suffix)."""
    for table in sorted(TOPOLOGY.tables, key=lambda t: -len(t.key)):
        if physical == table.key or physical.endswith(table.key):
            return table
    return None


def projected(index: Index) -> frozenset[str] | None:
    """The attributes an index projects; None for every one (`ALL`). Read from the index's
    `projection` and `non_key_attributes`, when the topology gives them."""
    kind = str(getattr(index, "projection", "ALL")).upper()
    if kind.endswith("ALL"):
        return None
    included = tuple(getattr(index, "non_key_attributes", ()) or ())
    return frozenset({"pk", "sk", index.partition_key, index.sort_key, *included})


_CLAUSE = re.compile(r"\b(SET|REMOVE|ADD|DELETE)\b")


def _top_level(text: str) -> list[str]:
    """`text` split at the commas outside parentheses."""
    parts: list[str] = []
    current: list[str] = []
    depth = 0
    for char in text:
        depth += char == "("
        depth -= char == ")"
        if char == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(char)
    parts.append("".join(current))
    return [p.strip() for p in parts if p.strip()]


def _name(path: str, names: dict[str, str]) -> str:
    head = re.split(r"[.\[]", path.strip(), maxsplit=1)[0]
    return names.get(head, head)


@dataclass
class Update:
    """What an UpdateExpression does: attributes set to a known string (or to something
    else: `UNKNOWN`), removed (None), and every attribute it touches."""

    sets: dict[str, str | None]
    touched: set[str]


UNKNOWN = "?"


def parse_update(expression: str, names: dict[str, str], values: dict[str, Any]) -> Update:
    sets: dict[str, str | None] = {}
    touched: set[str] = set()
    pieces = _CLAUSE.split(expression or "")
    for verb, body in zip(pieces[1::2], pieces[2::2], strict=False):
        for action in _top_level(body):
            if verb == "SET":
                path, _, value = action.partition("=")
                name = _name(path, names)
                literal = values.get(value.strip(), {}) if value.strip().startswith(":") else {}
                sets[name] = str(literal["S"]) if "S" in literal else UNKNOWN
            else:
                name = _name(action.split()[0], names)
                if verb == "REMOVE":
                    sets[name] = None
            touched.add(name)
    return Update(sets, touched)


class IndexKnowledge:
    """The index partition-key values each item carries (as far as writes and scans said)."""

    def __init__(self) -> None:
        self.values: dict[ItemKey, dict[str, str]] = {}

    def learn_item(self, table: str, item: dict[str, Any]) -> None:
        key = item_key(table, item)
        definition = table_of(table)
        if key is None or definition is None:
            return
        self.values[key] = {
            i.partition_key: str(next(iter(item[i.partition_key].values())))
            for i in definition.indexes
            if i.partition_key in item
        }

    def write(
        self, table: str, kind: str, key: ItemKey | None, body: dict[str, Any]
    ) -> list[tuple[str, str]]:
        """Record one successful write (`kind`: Put, Update or Delete; `body` the request's
        action) and answer the index keys it wrote, as (index name, partition key value)."""
        definition = table_of(table)
        if key is None or definition is None or not definition.indexes:
            return []
        before = dict(self.values.get(key, {}))
        touched: set[str] | None = None  # None: the whole item
        if kind == "Put":
            self.learn_item(table, body.get("Item") or {})
        elif kind == "Delete":
            self.values.pop(key, None)
        else:
            update = parse_update(
                str(body.get("UpdateExpression") or ""),
                body.get("ExpressionAttributeNames") or {},
                body.get("ExpressionAttributeValues") or {},
            )
            touched = update.touched
            after = dict(before)
            for name, value in update.sets.items():
                if any(i.partition_key == name for i in definition.indexes):
                    if value is None:
                        after.pop(name, None)
                    else:
                        after[name] = value
            self.values[key] = after
        after_values = self.values.get(key, {})
        return [
            hit
            for index in definition.indexes
            for hit in _copies(index, before, after_values, touched)
        ]


def _copies(
    index: Index, before: dict[str, str], after: dict[str, str], touched: set[str] | None
) -> list[tuple[str, str]]:
    old, new = before.get(index.partition_key), after.get(index.partition_key)
    if old is None and new is None:
        return []
    if old != new:
        return [(index.name, v) for v in (old, new) if v is not None]
    shown = projected(index)
    if touched is None or shown is None or touched & shown:
        return [(index.name, str(new))]
    return []


def item_key(table: str, item: dict[str, Any] | None) -> ItemKey | None:
    if not item or "pk" not in item:
        return None
    sk = item.get("sk", {"S": ""})
    return (table, str(next(iter(item["pk"].values()))), str(next(iter(sk.values()))))


def query_partition(params: dict[str, Any]) -> tuple[str, str] | None:
    """The partition a Query reads: (table, or `table/index`, the partition key's value),
    from the equality of its KeyConditionExpression on the table's or index's key."""
    table = str(params.get("TableName", ""))
    definition = table_of(table)
    index_name = params.get("IndexName")
    attribute = "pk"
    if index_name and definition is not None:
        attribute = next(
            (i.partition_key for i in definition.indexes if i.name == index_name), attribute
        )
    names = params.get("ExpressionAttributeNames") or {}
    values = params.get("ExpressionAttributeValues") or {}
    condition = str(params.get("KeyConditionExpression") or "")
    for left, right in re.findall(r"([#\w]+)\s*=\s*(:\w+)", condition):
        if names.get(left, left) == attribute and right in values:
            place = f"{table}/{index_name}" if index_name else table
            return (place, str(next(iter(values[right].values()))))
    return None
