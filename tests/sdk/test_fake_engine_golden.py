"""The SDK tests' `FakeEngine` held to the real engine: given the steps a recorded request
carried, it answers each recorded step call as the engine did (tests/golden)."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from sdk_fakes import FakeEngine

from tests.golden import exchanges
from tests.golden.canon import TIME, Canon


def _calls() -> list[Any]:
    return [
        pytest.param(name, n, id=f"{name}-{n}")
        for name in exchanges.names()
        for n, invocation in enumerate(exchanges.load(name)["invocations"])
        if invocation["calls"]
    ]


@pytest.mark.parametrize(("name", "n"), _calls())
def test_the_fake_engine_answers_step_calls_as_the_engine_did(name: str, n: int) -> None:
    invocation = exchanges.load(name)["invocations"][n]
    engine = FakeEngine()
    engine.steps = {s["id"]: copy.deepcopy(s) for s in invocation["request"]["steps"]}
    canon = Canon()
    for call in invocation["calls"]:
        results = engine.apply_call(copy.deepcopy(call["ops"]))
        assert _comparable(canon.to_canonical(results)) == _comparable(call["results"]), call
        engine.calls.append(call["ops"])


def _comparable(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Results without what the fake cannot know: times (canonical anyway) and the IDs the
    engine makes (an inline start's order)."""
    out = []
    for result in results:
        result = dict(result)
        if "inline" in result:
            result["inline"] = {k: v for k, v in result["inline"].items() if k != "order"}
        out.append({k: (TIME if k in ("retryAt",) else v) for k, v in result.items()})
    return out
