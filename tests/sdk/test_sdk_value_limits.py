"""The SDK holds values to the engine's limits before sending them: the nesting
limit is the engine's own constant, and a lone surrogate is refused in the workflow, not
answered 400 by the engine later."""

from __future__ import annotations

import json

import pytest
from ezgh_engine.core import validation
from ezgh_workflows._internal import values
from ezgh_workflows._internal.errors import InvalidValueError


def _nested(levels: int, leaf: str = "1") -> object:
    return json.loads("[" * levels + leaf + "]" * levels)


def test_the_sdk_and_the_engine_share_one_nesting_limit() -> None:
    assert values.MAX_DEPTH == validation.MAX_DEPTH


def test_a_value_nested_to_the_limit_is_sent_and_one_level_more_is_refused() -> None:
    assert values.encode(_nested(values.MAX_DEPTH))
    for deeper in (_nested(values.MAX_DEPTH + 1), _nested(values.MAX_DEPTH, "{}")):
        with pytest.raises(InvalidValueError, match="nested deeper"):
            values.encode(deeper)
        with pytest.raises(validation.ValidationError):  # the engine agrees
            validation.encode_value(deeper)


def test_a_circular_value_is_refused() -> None:
    loop: list[object] = []
    loop.append(loop)
    with pytest.raises(InvalidValueError):
        values.encode(loop)


@pytest.mark.parametrize("value", ["a\ud800", {"k": ["\udfff"]}, {"\ud800": 1}])
def test_a_lone_surrogate_is_refused(value: object) -> None:
    with pytest.raises(InvalidValueError, match="surrogate"):
        values.encode(value)
