"""A run's time limit that comes due while the run item changes (an invocation's answer,
a sleep's wake-up) still ends the run.

`timers.end_now` writes conditional on the version it read. The `$deadline` timer's
handler ignored a refused write: the timer was consumed, and a run whose answer suspended
it on a wait without a timeout of its own (a callback, a message, a child run) at that
moment ran on past its time limit, nothing left to end it before its one-year limit.
"""

from __future__ import annotations

from typing import Any

from ezgh_engine import clock, config
from ezgh_engine.adapters import aws, runs_store
from ezgh_engine.adapters import run_items as items
from ezgh_engine.core.messages import Timer
from ezgh_engine.service import timers

from tests.api.steps_helpers import stored_run


def test_a_deadline_racing_a_suspend_still_times_the_run_out(
    aws_env: None, skip_clock: clock.SkipClock
) -> None:
    due = clock.iso(clock.now())
    run = stored_run(deadline_at=due)
    raced: list[str] = []

    def answer_commits_first(service: str, operation: str, params: dict[str, Any]) -> None:
        """The invocation holding the run answers `suspended` (on a callback wait) between
        the timer's read of the run and its write: the run item's version moves on."""
        if operation != "TransactWriteItems" or raced:
            return
        raced.append(operation)
        aws.client("dynamodb").update_item(
            TableName=config.settings().runs_table,
            Key=items.run_key(run.id),
            UpdateExpression="SET version = version + :one, handledSeq = invokeSeq",
            ExpressionAttributeValues={":one": {"N": "1"}},
        )

    stop = aws.intercept(answer_commits_first)
    try:
        timers.fire_timer(Timer(run.id, timers.DEADLINE_STEP, due))
    finally:
        stop()
    assert raced  # the race happened
    after = runs_store.get_run(run.id, with_steps=False)
    assert after is not None and after.status == "timedOut", after
    assert after.error is not None and after.error.code == "workflows.timed_out"
