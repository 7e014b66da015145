"""The harness itself, without faults: generated programs give their fault-free outputs and
every step body runs exactly as often as the program says (so the checker can tell)."""

from __future__ import annotations

import pytest
from ezgh_engine.adapters import aws
from ezgh_engine.local.faults import FaultPlan

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
