"""Pure parts of durable waits and run control: retry backoff, the new wait kinds and
outcomes, branch tokens."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from ezgh_engine.core import retries, tokens
from ezgh_engine.protocol import outcomes


def test_backoff_is_exponential_capped_and_jittered() -> None:
    assert retries.delay_seconds(1, 0.0) == 0.5
    assert retries.delay_seconds(1, 0.999999) == pytest.approx(1.0, rel=1e-5)
    assert retries.delay_seconds(4, 0.0) == 4.0
    assert retries.delay_seconds(30, 0.999999) == pytest.approx(600.0, rel=1e-5)


def test_parse_new_waits_and_outcomes() -> None:
    now = datetime(2026, 1, 1, tzinfo=UTC)
    answer = {
        "outcome": "suspended",
        "waits": [
            {"stepId": "c#1", "name": "c", "kind": "callback"},
            {"stepId": "i#1", "name": "i", "kind": "invoke", "workflow": "kid", "input": [1]},
            {"stepId": "j#1", "name": "j", "kind": "invoke", "workflow": "kid", "app": "billing"},
            {
                "stepId": "m#1",
                "name": "m",
                "kind": "message",
                "queueId": "q",
                "key": "k:1",
                "timeoutSeconds": 60,
            },
            {"stepId": "r#1", "name": "r", "kind": "run", "parallel": True},
        ],
    }
    parsed = outcomes.parse(answer, now)
    assert [w.kind for w in parsed.waits] == ["callback", "invoke", "invoke", "message", "run"]
    assert parsed.waits[1].workflow == "kid" and parsed.waits[4].parallel
    assert parsed.waits[1].app is None and parsed.waits[2].app == "billing"  # another app
    assert outcomes.parse({"outcome": "branch", "stepId": "r#1"}, now).step_id == "r#1"
    assert outcomes.parse({"outcome": "cancelled"}, now).kind == "cancelled"


@pytest.mark.parametrize(
    "wait",
    [
        {"kind": "message", "queueId": "q", "key": "bad key", "timeoutSeconds": 5},
        {"kind": "message", "queueId": "q", "key": "k", "timeoutSeconds": 31 * 86400},
        {"kind": "invoke", "workflow": "bad name!"},
        {"kind": "invoke", "workflow": "kid", "app": "no/such#app"},
        {"kind": "invoke", "workflow": "kid", "app": 7},
    ],
)
def test_bad_waits_are_malformed(wait: dict) -> None:
    answer = {"outcome": "suspended", "waits": [{"stepId": "s#1", "name": "s", **wait}]}
    with pytest.raises(outcomes.MalformedOutcome):
        outcomes.parse(answer, datetime(2026, 1, 1, tzinfo=UTC))


def test_branch_tokens_name_their_step() -> None:
    claims = tokens.InvocationClaims("r", "p", 3, 1, 10**13, "a#1")
    assert tokens.verify("s", tokens.mint("s", claims), 0).step_id == "a#1"
    plain = tokens.InvocationClaims("r", "p", 3, 1, 10**13)
    assert tokens.verify("s", tokens.mint("s", plain), 0).step_id is None
