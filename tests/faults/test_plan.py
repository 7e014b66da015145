"""`FaultPlan` decisions are reproducible: a pure function of seed, fault, event and count."""

from __future__ import annotations

import pytest
from botocore.exceptions import ClientError
from ezgh_engine.local.faults import KINDS, FaultPlan

pytestmark = pytest.mark.faults


def _decisions(plan: FaultPlan) -> list[bool]:
    return [plan.decide(kind, f"event-{i % 7}") for i in range(200) for kind in KINDS]


def test_the_same_seed_gives_the_same_faults_to_the_same_events():
    assert _decisions(FaultPlan.everything(3, 0.2)) == _decisions(FaultPlan.everything(3, 0.2))
    assert _decisions(FaultPlan.everything(3, 0.2)) != _decisions(FaultPlan.everything(4, 0.2))


def test_ids_minted_at_random_do_not_change_decisions():
    a, b = FaultPlan.everything(5, 0.3), FaultPlan.everything(5, 0.3)
    run_a, run_b = "0b7c4e1a-0000-4000-8000-00000000000a", "9f3d2c1b-0000-4000-8000-00000000000b"
    a.alias(run_a, "r0")
    b.alias(run_b, "r0")
    body = '{"type":"invoke","runId":"%s","seq":1}'
    assert [a.decide("sqs_duplicate", body % run_a) for _ in range(50)] == [
        b.decide("sqs_duplicate", body % run_b) for _ in range(50)
    ]


def test_off_means_never_and_paused_means_never():
    plan = FaultPlan(seed=1)
    assert not any(_decisions(plan))
    plan = FaultPlan.everything(1, 1.0)
    with plan.paused():
        assert not any(_decisions(plan))
    assert all(_decisions(plan))
    assert set(plan.report()) == set(KINDS)


def test_throttling_raises_a_throttling_client_error_for_dynamodb_only():
    plan = FaultPlan(seed=1, throttle=1.0)
    plan._maybe_throttle("sqs", "SendMessage", {})
    with pytest.raises(ClientError) as raised:
        plan._maybe_throttle("dynamodb", "TransactWriteItems", {"TableName": "runs"})
    assert raised.value.response["Error"]["Code"] in (
        "ProvisionedThroughputExceededException",
        "ThrottlingException",
    )
    assert plan.report()["throttle"] == 1
