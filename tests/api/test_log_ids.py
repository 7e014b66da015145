"""The IDs the engine's log lines carry where the work begins: a step call's run and step
(from its verified invocation token and its one op), and an invocation's app once its run
is read."""

from __future__ import annotations

from typing import Any

import pytest

pytestmark = pytest.mark.usefixtures("aws_env")


def _token(run_id: str, *, expires_in_ms: int = 60_000) -> str:
    from ezgh_engine import clock
    from ezgh_engine.config import settings
    from ezgh_engine.core import tokens

    claims = tokens.InvocationClaims(run_id, "p", 1, 1, clock.now_ms() + expires_in_ms)
    return tokens.mint(settings().token_secret, claims)


def _ids(token: str, body: Any) -> dict[str, Any]:
    from ezgh_engine.api.routes_runs import _call_ids

    return {k: v for k, v in _call_ids(token, body).items() if v}


def test_a_step_call_logs_its_run_and_its_one_step() -> None:
    token = _token("r1")
    one = {"ops": [{"op": "start", "stepId": "charge#1", "attempt": 1}]}
    assert _ids(token, one) == {"run_id": "r1", "step_id": "charge#1"}
    two = {"ops": [{"op": "start", "stepId": "a#1"}, {"op": "start", "stepId": "b#1"}]}
    assert _ids(token, two) == {"run_id": "r1"}  # which step is each line's? none then


def test_untrusted_ids_are_not_logged() -> None:
    forged = _token("r1")[:-2] + "xx"
    assert _ids(forged, {"ops": [{"op": "start", "stepId": "a#1"}]}) == {}
    bad_step = {"ops": [{"op": "start", "stepId": "x" * 5000}]}
    assert _ids(_token("r1"), bad_step) == {"run_id": "r1"}
    assert _ids(_token("r1"), ["not", "an", "object"]) == {"run_id": "r1"}


def test_ids_learnt_inside_a_block_end_with_it() -> None:
    from ezgh_engine.observability import logs

    with logs.bound(run_id="r1", invocation_id="i1"):
        logs.also(app_id="a1", step_id=None)
        assert logs.current() == {"run_id": "r1", "invocation_id": "i1", "app_id": "a1"}
    assert logs.current() == {}
