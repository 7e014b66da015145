"""The emulator's quicker moto `Query` (`emulator.lighten_dynamodb`, 3.) answers exactly what
DynamoDB would: index order with ties broken by the table's keys, pages and cursors, the
partition only. (It drops moto's sort of the whole table on every query, which made a page
of 100 runs take seconds with 10,000 stored: bench/console_render.py.)"""

from __future__ import annotations

from typing import Any

import pytest
from ezgh_engine.adapters import aws
from ezgh_engine.local.resources import Provisioned


def _pages(**kwargs: Any) -> list[tuple[str, str]]:
    ddb, found, start = aws.client("dynamodb"), [], None
    while True:
        answer = ddb.query(**kwargs, **({"ExclusiveStartKey": start} if start else {}))
        found += [(i["pk"]["S"], i["sk"]["S"]) for i in answer["Items"]]
        start = answer.get("LastEvaluatedKey")
        if not start:
            return found


def test_index_and_table_queries_answer_in_key_order_across_pages(
    resources: Provisioned,
) -> None:
    table = resources.env["EZGH_RUNS_TABLE"]
    ddb = aws.client("dynamodb")
    items = []
    for i in range(40):
        # Two partitions of the index, sort keys with ties (broken by pk, sk), out of order.
        item = {
            "pk": f"RUN#{(i * 7) % 40:02d}",
            "sk": "RUN" if i % 2 else "STEP#a",
            "gsi1pk": "P#one" if i % 3 else "P#two",
            "gsi1sk": f"2026-01-{1 + (i * 13) % 5:02d}",
        }
        items.append(item)
        ddb.put_item(TableName=table, Item={k: {"S": v} for k, v in item.items()})
    one = sorted(
        (i for i in items if i["gsi1pk"] == "P#one"),
        key=lambda i: (i["gsi1sk"], i["pk"], i["sk"]),
        reverse=True,
    )
    got = _pages(
        TableName=table,
        IndexName="gsi1",
        KeyConditionExpression="gsi1pk = :p",
        ExpressionAttributeValues={":p": {"S": "P#one"}},
        ScanIndexForward=False,
        Limit=4,
    )
    assert got == [(i["pk"], i["sk"]) for i in one]
    ranged = _pages(
        TableName=table,
        IndexName="gsi1",
        KeyConditionExpression="gsi1pk = :p AND gsi1sk > :lo",
        ExpressionAttributeValues={":p": {"S": "P#two"}, ":lo": {"S": "2026-01-02"}},
        Limit=3,
    )
    two = sorted(
        (i for i in items if i["gsi1pk"] == "P#two" and i["gsi1sk"] > "2026-01-02"),
        key=lambda i: (i["gsi1sk"], i["pk"], i["sk"]),
    )
    assert ranged == [(i["pk"], i["sk"]) for i in two]
    ddb.put_item(TableName=table, Item={"pk": {"S": "RUN#07"}, "sk": {"S": "EVT#1"}})
    base = _pages(
        TableName=table,
        KeyConditionExpression="pk = :p",
        ExpressionAttributeValues={":p": {"S": "RUN#07"}},
        Limit=1,
    )
    assert base == sorted(
        {("RUN#07", "EVT#1")} | {(i["pk"], i["sk"]) for i in items if i["pk"] == "RUN#07"}
    )


def _scanned(**kwargs: Any) -> tuple[list[dict[str, Any]], int]:
    """Every item a paged Scan answers, in order, and how many pages it took."""
    ddb, found, start, pages = aws.client("dynamodb"), [], None, 0
    while True:
        answer = ddb.scan(**kwargs, **({"ExclusiveStartKey": start} if start else {}))
        found += answer["Items"]
        pages += 1
        start = answer.get("LastEvaluatedKey")
        if not start:
            return found, pages


def test_scans_answer_every_match_in_key_order_across_pages_without_copying_the_table(
    resources: Provisioned, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The quicker `Scan` (`lighten_dynamodb`, 6.): the table's order (on its keys, as moto
    orders them) across pages and cursors, filters and projections applied, an index's
    items only, and what it answered unchanged by later writes; no item of the table is
    deep-copied to answer it."""
    import copy

    from moto.dynamodb.models.dynamo_type import Item

    table = resources.env["EZGH_RUNS_TABLE"]
    ddb = aws.client("dynamodb")
    items = []
    for i in range(30):
        item = {"pk": f"RUN#{(i * 7) % 30:02d}", "sk": "RUN" if i % 3 else f"STEP#{i:02d}"}
        if i % 2:
            item.update(gsi1pk="P#one", gsi1sk=f"2026-01-{1 + i % 5:02d}")
        items.append(item)
        values = {k: {"S": v} for k, v in item.items()}
        ddb.put_item(TableName=table, Item={**values, "n": {"N": str(i)}})
    copied: list[Any] = []
    real_deepcopy = copy.deepcopy

    def watched(value: Any, memo: Any = None) -> Any:
        if type(value) is Item:
            copied.append(value)
        return real_deepcopy(value, memo)

    monkeypatch.setattr(copy, "deepcopy", watched)
    in_order = sorted(items, key=lambda i: (i["pk"], i["sk"]))
    every, pages = _scanned(TableName=table, Limit=4)
    assert [(i["pk"]["S"], i["sk"]["S"]) for i in every] == [(i["pk"], i["sk"]) for i in in_order]
    assert pages > 7
    runs, _ = _scanned(
        TableName=table,
        Limit=5,
        FilterExpression="sk = :run AND n > :low",
        ExpressionAttributeValues={":run": {"S": "RUN"}, ":low": {"N": "10"}},
        ProjectionExpression="pk, n",
    )
    expected = [i for i in in_order if i["sk"] == "RUN" and items.index(i) > 10]
    assert runs == [{"pk": {"S": i["pk"]}, "n": {"N": str(items.index(i))}} for i in expected]
    indexed, _ = _scanned(TableName=table, IndexName="gsi1", Limit=3)
    assert sorted((i["pk"]["S"], i["sk"]["S"]) for i in indexed) == sorted(
        (i["pk"], i["sk"]) for i in items if "gsi1pk" in i
    )
    first = ddb.scan(TableName=table, Limit=1)["Items"][0]
    assert copied == []
    monkeypatch.undo()
    ddb.update_item(
        TableName=table,
        Key={"pk": first["pk"], "sk": first["sk"]},
        UpdateExpression="SET n = :changed",
        ExpressionAttributeValues={":changed": {"N": "-1"}},
    )
    assert first["n"] != {"N": "-1"}
