"""Helpers for tests that read a moto table's stream directly."""

from __future__ import annotations

from typing import Any

from ezgh_engine.adapters import aws


def table_with_stream(name: str) -> str:
    """Create a table keyed by `pk` with a NEW_AND_OLD_IMAGES stream; its stream ARN."""
    ddb = aws.client("dynamodb")
    ddb.create_table(
        TableName=name,
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
        StreamSpecification={"StreamEnabled": True, "StreamViewType": "NEW_AND_OLD_IMAGES"},
    )
    return str(ddb.describe_table(TableName=name)["Table"]["LatestStreamArn"])


def pks(records: list[dict[str, Any]]) -> list[str]:
    """The `pk` of each stream record."""
    return [r["dynamodb"]["Keys"]["pk"]["S"] for r in records]
