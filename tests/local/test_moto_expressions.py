"""moto's `UpdateItem` with the emulator's expression speed-ups (`local.moto_expressions`)
answers what moto alone answers: the same items, the same refusals, for every kind of
update expression, each text used again with other values; a text is parsed once, and a
text moto refuses is refused every time."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError
from ezgh_engine.local import moto_expressions
from moto import mock_aws

TABLE = "expressions"
# (key, update expression, names, values, condition): each text appears more than once.
UPDATES: list[tuple[str, str, dict[str, str], dict[str, Any], str | None]] = [
    ("a", "SET #s = :s, n = :n", {"#s": "status"}, {":s": {"S": "one"}, ":n": {"N": "1"}}, None),
    ("a", "SET #s = :s, n = :n", {"#s": "status"}, {":s": {"S": "two"}, ":n": {"N": "5"}}, None),
    ("a", "SET n = n + :d", {}, {":d": {"N": "2"}}, None),
    ("a", "SET n = n + :d", {}, {":d": {"N": "-10"}}, None),
    (
        "a",
        "SET l = list_append(if_not_exists(l, :e), :x)",
        {},
        {":e": {"L": []}, ":x": {"L": [{"S": "p"}]}},
        None,
    ),
    (
        "a",
        "SET l = list_append(if_not_exists(l, :e), :x)",
        {},
        {":e": {"L": []}, ":x": {"L": [{"N": "7"}]}},
        None,
    ),
    ("a", "ADD tags :t, c :one", {}, {":t": {"SS": ["x", "y"]}, ":one": {"N": "1"}}, None),
    ("a", "ADD tags :t, c :one", {}, {":t": {"SS": ["z"]}, ":one": {"N": "1"}}, None),
    ("a", "DELETE tags :t", {}, {":t": {"SS": ["x"]}}, None),
    ("a", "SET m = :m", {}, {":m": {"M": {"in": {"M": {"deep": {"S": "d"}}}}}}, None),
    ("a", "SET m.#i.deep = :v", {"#i": "in"}, {":v": {"S": "changed"}}, None),
    ("a", "SET m.#i.deep = :v", {"#i": "in"}, {":v": {"BOOL": True}}, None),
    ("a", "REMOVE c, l[0]", {}, {}, None),
    ("a", "SET #s = :s", {"#s": "status"}, {":s": {"S": "three"}}, "#s = :old"),
    ("a", "SET #s = :s", {"#s": "status"}, {":s": {"S": "four"}}, "#s = :old"),
    ("b", "SET #s = :s, n = :n", {"#s": "status"}, {":s": {"S": "new"}, ":n": {"N": "0"}}, None),
    ("c", "SET n = n + :d", {}, {":d": {"N": "1"}}, None),  # no such attribute: refused
    ("a", "SET pk = :k", {}, {":k": {"S": "moved"}}, None),  # a key attribute: refused
    ("a", "SET n = :a, n = :b", {}, {":a": {"N": "1"}, ":b": {"N": "2"}}, None),  # overlap
    ("a", "SET #s = :s", {"#s": "status"}, {":s": {"S": ""}}, None),
    ("a", "SET m.#i = :v", {"#i": "in"}, {":v": {"S": "flat"}}, None),
    ("a", "SET missing.path = :v", {}, {":v": {"S": "x"}}, None),  # refused
    ("a", "SET q = :undefined", {}, {}, None),  # an undefined value: refused
    ("a", "SET other = :v", {}, {":v": {"S": "x"}}, None),  # a reserved word: refused
    ("a", "SET other = :v", {}, {":v": {"S": "y"}}, None),  # ... again, from the kept parse
    (
        "a",
        "SET l = list_append(if_not_exists(l, :e), :x), n = if_not_exists(n, :z) + :d "
        "ADD c :one REMOVE gone DELETE tags :t",
        {},
        {
            ":e": {"L": []},
            ":x": {"L": [{"S": "q"}]},
            ":z": {"N": "0"},
            ":d": {"N": "3"},
            ":one": {"N": "1"},
            ":t": {"SS": ["y"]},
        },
        None,
    ),
    # One section of each kind at most, refused as moto refuses (the first kind it checks).
    ("a", "SET f = :v SET g = :v", {}, {":v": {"S": "x"}}, None),
    ("a", "ADD c :one ADD d :one", {}, {":one": {"N": "1"}}, None),
    ("a", "REMOVE f REMOVE g", {}, {}, None),
    ("a", "DELETE tags :t DELETE tags2 :t", {}, {":t": {"SS": ["x"]}}, None),
    (
        "a",
        "SET f = :v REMOVE g SET h = :v ADD c :one",
        {},
        {":v": {"S": "x"}, ":one": {"N": "1"}},
        None,
    ),
    (
        "a",
        "REMOVE g SET f = :v REMOVE h ADD c :one ADD d :one",
        {},
        {":v": {"S": "x"}, ":one": {"N": "1"}},
        None,
    ),
    ("a", "SET f = :v REMOVE g SET h = :v REMOVE i", {}, {":v": {"S": "x"}}, None),
]
REFUSED = "SET = :v"  # not an update expression
# Conditions (and filters), each text twice with other values; some refused.
CONDITIONS: list[tuple[str, dict[str, str], dict[str, Any]]] = [
    ("attribute_exists(pk) AND #s = :s", {"#s": "status"}, {":s": {"S": "two"}}),
    ("attribute_exists(pk) AND #s = :s", {"#s": "status"}, {":s": {"S": "nope"}}),
    (
        "n BETWEEN :lo AND :hi OR NOT (#s IN (:a, :b))",
        {"#s": "status"},
        {":lo": {"N": "0"}, ":hi": {"N": "9"}, ":a": {"S": "x"}, ":b": {"S": "y"}},
    ),
    (
        "n BETWEEN :lo AND :hi OR NOT (#s IN (:a, :b))",
        {"#s": "status"},
        {":lo": {"N": "90"}, ":hi": {"N": "99"}, ":a": {"S": "two"}, ":b": {"S": "y"}},
    ),
    (
        "size(l) > :z AND begins_with(#s, :p) AND contains(tags, :t)",
        {"#s": "status"},
        {":z": {"N": "0"}, ":p": {"S": "t"}, ":t": {"S": "y"}},
    ),
    (
        "size(l) > :z AND begins_with(#s, :p) AND contains(tags, :t)",
        {"#s": "status"},
        {":z": {"N": "0"}, ":p": {"S": "q"}, ":t": {"S": "y"}},
    ),
    ("attribute_type(m.#i, :ty) AND attribute_not_exists(gone)", {"#i": "in"}, {":ty": {"S": "M"}}),
    ("attribute_type(m.#i, :ty) AND attribute_not_exists(gone)", {"#i": "in"}, {":ty": {"S": "S"}}),
    ("n <> :v AND n >= :w", {}, {":v": {"N": "1"}, ":w": {"N": "-100"}}),
    ("no_such_function(n)", {}, {}),  # refused
    ("no_such_function(n)", {}, {}),
    ("n = = :v", {}, {":v": {"N": "1"}}),  # refused
    ("#undefined = :v", {}, {":v": {"N": "1"}}),  # an undefined name: refused
]


@pytest.fixture(scope="module")
def _moto() -> Iterator[Any]:
    moto_expressions.install()
    with mock_aws():
        client = boto3.client("dynamodb", region_name="us-east-1")
        client.create_table(
            TableName=TABLE,
            KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
            AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
            BillingMode="PAY_PER_REQUEST",
        )
        yield client


@pytest.fixture
def ddb(_moto: Any) -> Any:
    _reset(_moto)  # one table for the module (moto's start is the cost), empty per test
    return _moto


def _answers(ddb: Any) -> list[Any]:
    return _answers_of(ddb, UPDATES)


def _answers_of(ddb: Any, updates: list[Any]) -> list[Any]:
    answers: list[Any] = []
    for key, expression, names, values, condition in updates:
        request: dict[str, Any] = {
            "TableName": TABLE,
            "Key": {"pk": {"S": key}},
            "UpdateExpression": expression,
            "ReturnValues": "ALL_NEW",
        }
        if names:
            request["ExpressionAttributeNames"] = names
        if condition:
            values = {**values, ":old": {"S": "two"}}
            request["ConditionExpression"] = condition
        if values:
            request["ExpressionAttributeValues"] = values
        try:
            answers.append(ddb.update_item(**request)["Attributes"])
        except ClientError as error:
            answers.append((error.response["Error"]["Code"], error.response["Error"]["Message"]))
    answers.append(ddb.scan(TableName=TABLE)["Items"])
    return answers


def _conditional_answers(ddb: Any) -> list[Any]:
    ddb.put_item(
        TableName=TABLE,
        Item={
            "pk": {"S": "c"},
            "status": {"S": "two"},
            "n": {"N": "3"},
            "l": {"L": [{"S": "e"}]},
            "tags": {"SS": ["y"]},
            "m": {"M": {"in": {"M": {}}}},
        },
    )
    answers: list[Any] = []
    for i, (condition, names, values) in enumerate(CONDITIONS):
        extra: dict[str, Any] = {"ExpressionAttributeNames": names} if names else {}
        if values:
            extra["ExpressionAttributeValues"] = values
        for call in ("update", "filter"):
            try:
                if call == "update":
                    ddb.update_item(
                        TableName=TABLE,
                        Key={"pk": {"S": "c"}},
                        UpdateExpression=f"SET v{i} = :mark",
                        ConditionExpression=condition,
                        **{**extra, "ExpressionAttributeValues": {**values, ":mark": {"N": "1"}}},
                    )
                    answers.append("updated")
                else:
                    answers.append(
                        ddb.scan(TableName=TABLE, FilterExpression=condition, **extra)["Items"]
                    )
            except ClientError as error:
                answers.append(
                    (error.response["Error"]["Code"], error.response["Error"]["Message"])
                )
            except (KeyError, ValueError) as error:  # moto fails some filters so: compared
                answers.append((type(error).__name__, str(error)))
    return answers


def _reset(ddb: Any) -> None:
    for item in ddb.scan(TableName=TABLE)["Items"]:
        ddb.delete_item(TableName=TABLE, Key={"pk": item["pk"]})


def test_updates_answer_what_moto_answers(ddb: Any) -> None:
    with moto_expressions.disabled():
        expected = _answers(ddb)
    _reset(ddb)
    answered = _answers(ddb)
    assert answered == expected
    assert sum(isinstance(a, tuple) for a in expected) >= 10  # the refusals are compared too
    assert sum("can only be used once" in str(a) for a in expected) >= 5


def test_conditions_answer_what_moto_answers(ddb: Any) -> None:
    with moto_expressions.disabled():
        expected = _conditional_answers(ddb)
    _reset(ddb)
    answered = _conditional_answers(ddb)
    assert answered == expected
    assert "updated" in expected and sum(isinstance(a, tuple) for a in expected) >= 4


def test_a_condition_is_lexed_once(ddb: Any) -> None:
    ddb.put_item(TableName=TABLE, Item={"pk": {"S": "l"}, "n": {"N": "0"}})
    before = moto_expressions.lexes
    for i in range(3):
        ddb.update_item(
            TableName=TABLE,
            Key={"pk": {"S": "l"}},
            UpdateExpression="SET n = :next",
            ConditionExpression="n = :was AND attribute_exists(pk)",
            ExpressionAttributeValues={":next": {"N": str(i + 1)}, ":was": {"N": str(i)}},
        )
    assert moto_expressions.lexes == before + 1
    with pytest.raises(ClientError):  # the kept tokens, with this request's values
        ddb.update_item(
            TableName=TABLE,
            Key={"pk": {"S": "l"}},
            UpdateExpression="SET n = :next",
            ConditionExpression="n = :was AND attribute_exists(pk)",
            ExpressionAttributeValues={":next": {"N": "9"}, ":was": {"N": "0"}},
        )


def test_an_expression_is_parsed_once(ddb: Any) -> None:
    text = "SET parsedOnce = :v, laterValue = :w"
    before = moto_expressions.parses
    for i in range(3):
        ddb.update_item(
            TableName=TABLE,
            Key={"pk": {"S": "once"}},
            UpdateExpression=text,
            ExpressionAttributeValues={":v": {"N": str(i)}, ":w": {"S": f"w{i}"}},
        )
    assert moto_expressions.parses == before + 1
    item = ddb.get_item(TableName=TABLE, Key={"pk": {"S": "once"}})["Item"]
    assert item == {"pk": {"S": "once"}, "parsedOnce": {"N": "2"}, "laterValue": {"S": "w2"}}


def test_a_refused_expression_is_refused_every_time(ddb: Any) -> None:
    for _ in range(2):
        with pytest.raises(ClientError) as refused:
            ddb.update_item(
                TableName=TABLE,
                Key={"pk": {"S": "x"}},
                UpdateExpression=REFUSED,
                ExpressionAttributeValues={":v": {"S": "v"}},
            )
        assert refused.value.response["Error"]["Code"] == "ValidationException"


def test_a_replay_of_the_accepted_updates_makes_the_same_items(ddb: Any) -> None:
    """Inside `replaying()` moto's checks that can only refuse are skipped: the updates
    moto accepted, applied again in order on the state they were accepted on, answer and
    leave what they did the first time. Outside it they refuse again."""
    answers = _answers(ddb)
    accepted = [u for u, a in zip(UPDATES, answers, strict=False) if not isinstance(a, tuple)]
    assert len(accepted) < len(UPDATES)
    first = ddb.scan(TableName=TABLE)["Items"]
    _reset(ddb)
    twice = [("d", "SET f = :v SET g = :v", {}, {":v": {"S": "x"}}, None)]
    with moto_expressions.replaying():
        replayed = _answers_of(ddb, accepted)
        assert not isinstance(_answers_of(ddb, twice)[0], tuple)  # (the checks are skipped)
    assert replayed[:-1] == [a for a in answers[:-1] if not isinstance(a, tuple)]
    assert sorted(map(str, replayed[-1])) == sorted(map(str, first))
    assert isinstance(_answers_of(ddb, twice)[0], tuple)
