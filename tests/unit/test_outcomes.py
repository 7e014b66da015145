from datetime import UTC, datetime, timedelta

import pytest
from ezgh_engine.protocol.outcomes import MalformedOutcome, parse

NOW = datetime(2026, 10, 13, 18, 0, tzinfo=UTC)


def test_completed_keeps_output_and_deployment():
    outcome = parse({"outcome": "completed", "output": {"a": 1}, "deploymentId": "d1"}, NOW)
    assert (outcome.kind, outcome.output, outcome.deployment_id) == ("completed", {"a": 1}, "d1")


def test_completed_with_null_output():
    assert parse({"outcome": "completed", "output": None}, NOW).output is None


def test_failed_keeps_error():
    error = {"code": "user", "name": "CardDeclinedError", "message": "Card declined"}
    outcome = parse({"outcome": "failed", "error": error}, NOW)
    assert outcome.error is not None and outcome.error.to_api() == error


def test_sleep_seconds_and_until():
    waits = [
        {"stepId": "cooldown#1", "name": "cooldown", "kind": "sleep", "seconds": 259200},
        {"stepId": "x", "name": "x", "kind": "sleep", "until": "2026-10-14T18:00:00Z"},
    ]
    outcome = parse({"outcome": "suspended", "waits": waits}, NOW)
    assert [s.wake_at for s in outcome.sleeps] == [NOW + timedelta(days=3), NOW + timedelta(days=1)]


@pytest.mark.parametrize(
    "answer",
    [
        {},
        {"outcome": "weird"},
        {"outcome": "completed"},
        {"outcome": "failed", "error": "boom"},
        {"outcome": "suspended", "waits": []},
        {"outcome": "suspended", "waits": [{"kind": "sleep", "stepId": "a#1", "name": "a"}]},
        {
            "outcome": "suspended",
            "waits": [{"kind": "sleep", "stepId": "a#1", "name": "a", "seconds": -1}],
        },
        {
            "outcome": "suspended",
            "waits": [{"kind": "sleep", "stepId": "bad id", "name": "a", "seconds": 1}],
        },
        {"outcome": "suspended", "waits": [{"kind": "teleport", "stepId": "a#1", "name": "a"}]},
    ],
)
def test_malformed_answers_fail_closed(answer):
    with pytest.raises(MalformedOutcome):
        parse(answer, NOW)
