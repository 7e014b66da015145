"""One owner per cross-boundary decision: the engine and the SDK decide the retry
budget, the ended statuses and "a held end recorded with another outcome" with the same code.

`ezgh_engine.core.protocol_rules` owns them; the SDK, distributed without the engine, ships a
byte-for-byte copy (docs/architecture.md, "Who owns which decision").
"""

from __future__ import annotations

from pathlib import Path

import pytest
from ezgh_engine.core import models, protocol_rules
from ezgh_workflows._internal import protocol_rules as sdk_rules

ROOT = Path(__file__).resolve().parents[2]
OWNER = ROOT / "shared" / "ezgh_engine" / "core" / "protocol_rules.py"
COPY = ROOT / "sdk" / "ezgh_workflows" / "_internal" / "protocol_rules.py"


def test_the_sdk_ships_the_engines_module_unchanged() -> None:
    assert COPY.read_bytes() == OWNER.read_bytes(), (
        f"{COPY.relative_to(ROOT)} must be a copy of {OWNER.relative_to(ROOT)}: "
        "edit the engine's and copy it over"
    )


def test_the_engine_and_the_sdk_use_the_one_module() -> None:
    from ezgh_workflows._internal import clients, pending, runner, step_calls

    assert models.ENDED_STATUSES is protocol_rules.RUN_ENDED_STATUSES
    assert models.LIVE_STATUSES is protocol_rules.RUN_LIVE_STATUSES
    assert clients.RUN_ENDED_STATUSES is sdk_rules.RUN_ENDED_STATUSES
    assert pending.STEP_ENDED_STATUSES is sdk_rules.STEP_ENDED_STATUSES
    assert runner.may_retry is sdk_rules.may_retry and runner.DEFAULT_RETRIES == 3
    assert step_calls.end_differs is sdk_rules.end_differs
    statuses = set(models.RunStatus.__args__)  # type: ignore[attr-defined]
    assert statuses == protocol_rules.RUN_ENDED_STATUSES | protocol_rules.RUN_LIVE_STATUSES


@pytest.mark.parametrize(
    ("attempt", "retries", "again"),
    [(1, 0, False), (1, 3, True), (3, 3, True), (4, 3, False), (100, 500, True), (101, 500, False)],
)
def test_the_retry_budget(attempt: int, retries: int, again: bool) -> None:
    assert protocol_rules.may_retry(attempt, retries) is again


@pytest.mark.parametrize(
    ("op", "step", "differs"),
    [
        ({"op": "complete", "output": 1}, {"status": "completed", "output": 1}, False),
        ({"op": "complete", "output": 1}, {"status": "completed", "output": 2}, True),
        ({"op": "complete", "output": 1}, {"status": "failed", "error": {}}, True),
        ({"op": "fail", "error": {"m": 1}}, {"status": "failed", "error": {"m": 1}}, False),
        ({"op": "fail", "error": {"m": 1}}, {"status": "failed", "error": {"m": 2}}, True),
        ({"op": "fail", "error": {"m": 1}}, {"status": "cancelled"}, True),
    ],
)
def test_a_held_end_recorded_with_another_outcome(op: dict, step: dict, differs: bool) -> None:
    recorded = {"result": "recorded", "step": step}
    assert protocol_rules.end_differs(op, recorded) is differs
    assert protocol_rules.end_differs(op, {"result": "ok"}) is False
