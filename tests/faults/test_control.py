"""The harness itself, without faults: generated programs give their fault-free outputs and
every step body runs exactly as often as the program says (so the checker can tell)."""

from __future__ import annotations

from datetime import UTC, datetime
from types import SimpleNamespace

import pytest
from ezgh_engine.adapters import aws
from ezgh_engine.local.faults import FaultPlan
from ezgh_engine.local.pollers import Activity

from tests.faults import harness
from tests.faults.harness import dead_letters, run_batch

pytestmark = [pytest.mark.faults, pytest.mark.e2e]

PROGRAMS = [
    [{"op": "run", "name": "s0", "fail": 0, "retries": 0}],
    [
        {"op": "run", "name": "s0", "fail": 1, "retries": 2},
        {"op": "value", "name": "s1"},
        {"op": "sleep", "name": "s2", "seconds": 600},
        {"op": "fail", "name": "s3"},
    ],
    [
        {"op": "callback", "name": "s0"},
        {
            "op": "parallel",
            "name": "s1",
            "branches": [{"fail": 0, "retries": 0}, {"fail": 1, "retries": 1}],
        },
        {"op": "sleep", "name": "s2", "seconds": 2 * 86400},
    ],
    [
        {
            "op": "child",
            "name": "s0",
            "program": [
                {"op": "run", "name": "s0", "fail": 0, "retries": 0},
                {
                    "op": "child",
                    "name": "s1",
                    "program": [{"op": "sleep", "name": "s0", "seconds": 3}],
                },
            ],
        }
    ],
]


def test_without_faults_every_run_gives_its_fault_free_output(runtime):
    figures = run_batch(runtime, PROGRAMS, FaultPlan(seed=1), label="control", restart=False)
    assert not figures.problems, "\n".join(figures.problems)
    assert figures.runs == 6 and figures.completed == 6
    assert figures.re_executions == 0 and figures.lost == figures.duplicated == 0


def test_a_restart_mid_run_loses_nothing(runtime):
    figures = run_batch(runtime, PROGRAMS, FaultPlan(seed=2), label="restart", restart=True)
    assert figures.restarts == 1
    assert not figures.problems, "\n".join(figures.problems)
    assert figures.completed == 6


def test_a_dead_lettered_message_is_named(engine):
    """A message the queue gave up on is visible in its dead-letter queue, where nothing
    consumes it and `next_due` sees no due time: the harness judged the engine quiet and
    the run waiting for it lost, without saying where its message went. It now lists each
    one as a problem of the batch (`dead_lettered`)."""
    body = '{"type":"invoke","runId":"r-1","seq":5}'
    sqs = aws.client("sqs")
    sqs.send_message(QueueUrl=engine.provisioned.dlq_urls["invocations"], MessageBody=body)
    assert dead_letters(engine) == [f"invocations-dlq: received 0 time(s): {body}"]


def test_what_moves_while_the_harness_looks_is_not_judged_still(monkeypatch):
    """`settle` saw the engine quiet; reading what is due came after, and took long enough
    for a delayed message (a retry's timer) to come due and be handled meanwhile, its
    consequence (the owed invocation) not yet sent: "nothing due" then, and the harness
    stopped driving and judged the run lost while its invocation was on its way (seed 8,
    b1 r2). A look during which the engine moved says so, and the harness looks again."""
    activity = Activity()
    engine = SimpleNamespace(activity=activity, scheduler=None, pollers=[])

    def timer_handled_meanwhile(plan: FaultPlan) -> None:
        with activity.track():  # the timer's handler ran; its invocation not sent yet
            pass

    monkeypatch.setattr(harness, "_visible_messages", lambda engine: 0)
    monkeypatch.setattr(harness, "next_due", timer_handled_meanwhile)
    assert harness.next_due_if_still(engine, FaultPlan(seed=3)) == (False, None)
    monkeypatch.setattr(harness, "next_due", lambda plan: None)
    assert harness.next_due_if_still(engine, FaultPlan(seed=3)) == (True, None)


def test_the_clock_is_not_skipped_over_what_moved_while_the_harness_looked(monkeypatch):
    """The same look with something due: the harness skipped the engine clock to it (up to
    two days) although the engine had moved meanwhile, over whatever had started. An
    invocation in flight then finds its lease and token run out under it, which real time
    never does to one its invoker still waits for (a branch invocation so skipped answered
    `aborted`, and its step failed as `BranchNotRun`: tests/faults/test_branch_lease.py,
    lost17). A look during which the engine moved skips nothing; the harness settles and
    looks again."""
    activity = Activity()
    engine = SimpleNamespace(activity=activity, scheduler=None, pollers=[])
    due = datetime(2026, 12, 6, tzinfo=UTC)

    def retry_handled_meanwhile(plan: FaultPlan) -> datetime:
        with activity.track():  # a retry came due during the look; its branch started
            pass
        return due

    monkeypatch.setattr(harness, "_visible_messages", lambda engine: 0)
    monkeypatch.setattr(harness, "next_due", retry_handled_meanwhile)
    assert harness.next_due_if_still(engine, FaultPlan(seed=4)) == (False, due)
    monkeypatch.setattr(harness, "next_due", lambda plan: due)
    assert harness.next_due_if_still(engine, FaultPlan(seed=4)) == (True, due)
