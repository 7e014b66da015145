"""The expression builder (pure): what it writes, and the requests it refuses to build."""

from __future__ import annotations

import pytest
from ezgh_engine.adapters.expressions import ExpressionError, Update, UpdateAction, check, tokens


def test_set_remove_add_and_conditions_with_their_placeholders() -> None:
    request = (
        Update()
        .set("status", "retrying")
        .remove("leaseUntil")
        .add("version", 1)
        .where("#status = :running", running="running")
        .where("attempt = :attempt", attempt=2)
        .request(TableName="t")
    )
    assert request == {
        "TableName": "t",
        "UpdateExpression": "SET #status = :status REMOVE #leaseUntil ADD #version :version",
        "ConditionExpression": "(#status = :running) AND (attempt = :attempt)",
        "ExpressionAttributeNames": {
            "#status": "status",
            "#leaseUntil": "leaseUntil",
            "#version": "version",
        },
        "ExpressionAttributeValues": {
            ":status": {"S": "retrying"},
            ":version": {"N": "1"},
            ":running": {"S": "running"},
            ":attempt": {"N": "2"},
        },
    }


def test_a_condition_alone_has_no_update_expression() -> None:
    request = Update().where("attribute_not_exists(pk)").request()
    assert request == {"ConditionExpression": "attribute_not_exists(pk)"}


def test_one_attribute_set_twice_and_one_value_key_taken_get_distinct_placeholders() -> None:
    update = Update().where("#status = :status", status="running").set("status", "done")
    request = update.request()
    assert request["UpdateExpression"] == "SET #status = :status2"
    assert request["ExpressionAttributeValues"] == {
        ":status": {"S": "running"},
        ":status2": {"S": "done"},
    }
    assert request["ExpressionAttributeNames"] == {"#status": "status"}


def test_attribute_names_that_are_not_words_get_generated_placeholders() -> None:
    request = Update().set("a-b", 1).set("c.d", 2).request()
    assert request["UpdateExpression"] == "SET #a = :v, #a2 = :v2"
    assert request["ExpressionAttributeNames"] == {"#a": "a-b", "#a2": "c.d"}


def test_typed_values_go_as_given() -> None:
    request = Update().set("n", {"N": "5"}, typed=True).request()
    assert request["ExpressionAttributeValues"] == {":n": {"N": "5"}}


def test_a_value_never_used_cannot_be_written() -> None:
    """The defect DynamoDB refuses and moto accepts (a retryable fail's `:at`)."""
    update = Update().set("status", "retrying").bind(at="2026-01-01T00:00:00Z")
    with pytest.raises(ExpressionError, match=r"values defined but not used: \[':at'\]"):
        update.request()


def test_a_value_used_but_not_given_cannot_be_written() -> None:
    update = Update().set_raw("attempt = attempt + :one")
    with pytest.raises(ExpressionError, match=r"values used but not defined: \[':one'\]"):
        update.request()


def test_one_key_bound_to_two_values_is_refused() -> None:
    update = Update().where("startEpoch = :epoch", epoch=1)
    with pytest.raises(ExpressionError, match="two values"):
        update.where("branchEpoch = :epoch", epoch=2)
    update.where("x <> :epoch", epoch=1)  # the same value again is fine
    assert update.request()["ExpressionAttributeValues"] == {":epoch": {"N": "1"}}


def test_a_name_placeholder_cannot_stand_for_two_attributes() -> None:
    update = Update().set("a-b", 1)  # named #a
    with pytest.raises(ExpressionError, match="already names"):
        update.where("attribute_exists(#a)")


def test_copies_are_independent_and_actions_remember_their_builder() -> None:
    action = UpdateAction(Update().set("status", "done"), TableName="t", Key={"pk": {"S": "k"}})
    assert action == {
        "Update": {
            "TableName": "t",
            "Key": {"pk": {"S": "k"}},
            "UpdateExpression": "SET #status = :status",
            "ExpressionAttributeNames": {"#status": "status"},
            "ExpressionAttributeValues": {":status": {"S": "done"}},
        }
    }
    more = UpdateAction(action.extended().set("next", {"a": 1}), **action.target)
    assert more["Update"]["UpdateExpression"] == "SET #status = :status, #next = :next"
    assert action["Update"]["UpdateExpression"] == "SET #status = :status"
    assert action.builder.request()["UpdateExpression"] == "SET #status = :status"


def test_tokens_and_check_read_placeholders_only() -> None:
    assert tokens("#a = :b AND size(#c) > :d_1") == ({"#a", "#c"}, {":b", ":d_1"})
    check(["SET #a = :b"], {"#a": "a"}, {":b": {"S": "x"}})
    with pytest.raises(ExpressionError, match="names defined but not used"):
        check(["SET a = :b"], {"#a": "a"}, {":b": {"S": "x"}})
