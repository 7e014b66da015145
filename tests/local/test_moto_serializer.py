"""The emulator answers DynamoDB's items without moto's attribute-by-attribute serializer
(`emulator._quicker_attribute_values`) only where that serializer would answer them
unchanged: every kind of `AttributeValue` serializes to the same JSON both ways, blobs
still go through moto (base64), and the plain path is the one taken for plain items."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest
from ezgh_engine.adapters import aws
from ezgh_engine.local import emulator
from ezgh_engine.local.resources import Provisioned
from moto.core.serialize import JSONSerializer, XFormedAttributePicker
from moto.core.utils import get_service_model

PLAIN: list[Any] = [
    {"S": "text"},
    {"S": ""},
    {"S": 'ünïcode ✓ "quoted" \\ back'},
    {"N": "12.5"},
    {"N": "-0"},
    {"BOOL": True},
    {"BOOL": False},
    {"NULL": True},
    {"SS": ["a", "b"]},
    {"NS": ["1", "2"]},
    {"SS": []},
    {"M": {}},
    {"L": []},
    {"M": {"a.b": {"S": "dotted"}, "n": {"N": "1"}, "m": {"M": {"x": {"L": [{"S": "y"}]}}}}},
    {"L": [{"S": "a"}, {"N": "1"}, {"M": {"k": {"BOOL": False}}}, {"L": [{"NULL": True}]}]},
]
NOT_PLAIN: list[Any] = [
    {"B": b"\x00\xffbytes"},
    {"BS": [b"a", b"b"]},
    {"M": {"blob": {"B": b"x"}, "s": {"S": "y"}}},
    {"L": [{"S": "a"}, {"B": b"z"}]},
    {"S": None},
    {"N": 12},
    {"S": "a", "N": "1"},
    {},
]


def _body(operation: str, result: Any, *, service: str = "dynamodb", moto_only: bool) -> Any:
    model = get_service_model(service).operation_model(operation)
    serializer = JSONSerializer(
        operation_model=model, pretty_print=False, value_picker=XFormedAttributePicker()
    )
    if moto_only:
        assert emulator._moto_serialize_structure is not None
        serializer._serialize_type_structure = (  # type: ignore[method-assign]
            lambda *args: emulator._moto_serialize_structure(serializer, *args)  # type: ignore[misc]
        )
    return json.loads(serializer.serialize(result)["body"])


@pytest.fixture(autouse=True)
def _patched() -> None:
    emulator.lighten_dynamodb()


@pytest.mark.parametrize("value", PLAIN + NOT_PLAIN, ids=repr)
def test_every_attribute_value_serializes_as_moto_serializes_it(value: Any) -> None:
    item = {"pk": {"S": "RUN#1"}, "v": value}
    for operation, result in [
        ("GetItem", {"Item": item}),
        ("UpdateItem", {"Attributes": item}),
        ("Query", {"Items": [item, item], "Count": 2, "LastEvaluatedKey": {"pk": item["pk"]}}),
    ]:
        assert _body(operation, result, moto_only=False) == _body(operation, result, moto_only=True)
    record = {
        "eventID": "1",
        "eventName": "MODIFY",
        "dynamodb": {
            "ApproximateCreationDateTime": datetime(2026, 12, 1, tzinfo=UTC),
            "Keys": {"pk": item["pk"]},
            "NewImage": item,
            "OldImage": item,
            "SequenceNumber": "100",
            "StreamViewType": "NEW_AND_OLD_IMAGES",
        },
    }
    answer = {"Records": [record], "NextShardIterator": "it"}
    fast = _body("GetRecords", answer, service="dynamodbstreams", moto_only=False)
    assert fast == _body("GetRecords", answer, service="dynamodbstreams", moto_only=True)


def test_only_plain_values_skip_moto() -> None:
    assert all(emulator.plain_attribute_value(v) for v in PLAIN)
    assert not any(emulator.plain_attribute_value(v) for v in NOT_PLAIN)


def test_items_and_blobs_round_trip_through_the_server(resources: Provisioned) -> None:
    table = resources.env["EZGH_RUNS_TABLE"]
    ddb = aws.client("dynamodb")
    item = {
        "pk": {"S": "RUN#1"},
        "sk": {"S": "RUN"},
        "blob": {"B": b"\x00\x01binary"},
        "nested": {"M": {"b": {"B": b"\xff"}, "l": {"L": [{"N": "3"}, {"S": "x"}]}}},
        "plain": {"M": {"s": {"SS": ["a"]}, "t": {"BOOL": True}, "z": {"NULL": True}}},
    }
    ddb.put_item(TableName=table, Item=item)
    got = ddb.get_item(TableName=table, Key={"pk": item["pk"], "sk": item["sk"]})["Item"]
    assert got == item  # blobs encoded once by moto, plain values as they were


def test_a_plain_item_is_not_walked_by_moto(monkeypatch: pytest.MonkeyPatch) -> None:
    walked: list[str] = []
    moto_serialize = emulator._moto_serialize_structure
    assert moto_serialize is not None

    def spy(serializer: Any, serialized: Any, value: Any, shape: Any, key: str) -> None:
        walked.append(shape.name)
        moto_serialize(serializer, serialized, value, shape, key)

    monkeypatch.setattr(emulator, "_moto_serialize_structure", spy)
    item = {"pk": {"S": "RUN#1"}, "v": PLAIN[-1], "w": PLAIN[-2]}
    _body("GetItem", {"Item": item}, moto_only=False)
    assert "AttributeValue" not in walked
    _body("GetItem", {"Item": {**item, "b": {"B": b"x"}}}, moto_only=False)
    assert "AttributeValue" in walked
