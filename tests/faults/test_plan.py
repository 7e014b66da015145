"""`FaultPlan` decisions are reproducible: a pure function of seed, fault, event and count."""

from __future__ import annotations

import pytest
from botocore.exceptions import ClientError
from ezgh_engine.local.faults import KINDS, FaultPlan, FunctionDied

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
    assert set(KINDS) <= set(plan.report())


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


_SEND = "IDEM#p#k#POST /queues/q/messages#abc"


def _finish(token: str) -> dict[str, object]:
    return {
        "TableName": "registry",
        "Key": {"pk": {"S": _SEND}, "sk": {"S": "IDEM"}},
        "UpdateExpression": "SET #st = :s, answer = :a",
        "ExpressionAttributeValues": {":t": {"S": token}},
    }


def test_idempotency_faults_strike_the_claim_the_answer_and_the_process():
    claim = {"TableName": "registry", "Item": {"pk": {"S": _SEND}}}
    plan = FaultPlan(seed=1, idem_claim_fail=1.0)
    with pytest.raises(ClientError):
        plan._maybe_throttle("dynamodb", "PutItem", claim)
    # Another operation's records (a named create) are not struck.
    plan._maybe_throttle("dynamodb", "PutItem", {"Item": {"pk": {"S": "IDEM#p#k#POST /apps#x"}}})

    plan = FaultPlan(seed=1, idem_answer_fail=1.0)
    with pytest.raises(ClientError):
        plan._maybe_throttle("dynamodb", "UpdateItem", _finish("t1"))
    plan.idem_answer_fail = 0.0  # every retry of that answer still fails, others do not
    with pytest.raises(ClientError):
        plan._maybe_throttle("dynamodb", "UpdateItem", _finish("t1"))
    plan._maybe_throttle("dynamodb", "UpdateItem", _finish("t2"))
    release = {**_finish("t3"), "UpdateExpression": "SET claimedAt = :zero"}
    FaultPlan(seed=1, idem_answer_fail=1.0)._maybe_throttle("dynamodb", "UpdateItem", release)

    plan = FaultPlan(seed=1, idem_crash=1.0)
    with pytest.raises(FunctionDied):  # outside an execution environment: a BaseException
        plan._maybe_throttle("dynamodb", "UpdateItem", _finish("t4"))
    assert plan.report()["idem_crash"] == 1
    assert plan.child_state() == {
        "throttle": 0.0,
        "throttle_burst": 0.0,
        "idem_claim_fail": 0.0,
        "idem_answer_fail": 0.0,
        "idem_crash": 1.0,
    }


def test_idempotency_faults_strike_each_claim_afresh():
    """A function's process that died is replaced by a fresh one whose counts start again:
    a decision keyed by the record alone would strike every resend (a new claim, a new
    random token) the same way, and a send would never be answered."""
    died = 0
    for i in range(40):
        fresh = FaultPlan(seed=1, idem_crash=0.5)  # each resend in a new process
        try:
            fresh._maybe_throttle(
                "dynamodb", "UpdateItem", _finish(f"{i:08x}-0000-4000-8000-{i:012x}")
            )
        except FunctionDied:
            died += 1
    assert 5 < died < 35


def test_throttle_bursts_strike_one_service_at_20_to_50_percent_in_a_slot():
    """A burst is a pure function of the seed and the engine time (every process sees the
    same); in one, about its share of one service's requests is answered throttled, as AWS
    answers, in a function's process only."""
    from datetime import UTC, datetime, timedelta

    from botocore.awsrequest import AWSResponse
    from ezgh_engine import clock
    from ezgh_engine.local import faults

    plan = faults.FaultPlan(seed=7, throttle_burst=0.5)
    start = datetime(2026, 1, 1, tzinfo=UTC)
    slots = [start + timedelta(seconds=faults.BURST_SLOT_SECONDS * i) for i in range(200)]
    bursts = [plan.burst_at(t) for t in slots]
    assert bursts == [faults.FaultPlan(seed=7, throttle_burst=0.5).burst_at(t) for t in slots]
    found = [b for b in bursts if b is not None]
    assert 60 < len(found) < 140
    assert {service for service, _ in found} == set(faults.BURST_SERVICES)
    assert all(0.2 <= rate <= 0.5 for _, rate in found)
    assert faults.FaultPlan(seed=7).burst_at(start) is None

    moment = next(t for t, b in zip(slots, bursts, strict=True) if b and b[0] == "dynamodb")
    _, rate = plan.burst_at(moment) or ("", 0.0)

    class Fixed:
        def now(self) -> datetime:
            return moment

    request = type("Request", (), {"url": "http://x.invalid/", "body": b"{}"})()
    previous = clock.get_clock()
    clock.set_clock(Fixed())
    try:
        assert plan._maybe_throttle_burst("dynamodb", "GetItem", request) is None  # runtime
        plan.may_exit = True  # a function's process
        answers = [plan._maybe_throttle_burst("dynamodb", "GetItem", request) for _ in range(400)]
        others = [plan._maybe_throttle_burst("sqs", "SendMessage", request) for _ in range(50)]
    finally:
        clock.set_clock(previous)
    throttled = [a for a in answers if a is not None]
    assert all(isinstance(a, AWSResponse) and a.status_code == 400 for a in throttled)
    assert abs(len(throttled) / len(answers) - rate) < 0.1
    assert others == [None] * 50
    assert (
        plan.report()["throttle_burst:dynamodb"]
        == len(throttled)
        == plan.report()["throttle_burst"]
    )


def test_bursts_count_from_the_plan_s_start_not_the_wall_clock():
    """Slots of absolute time drew other bursts on every run of one seed (a campaign starts
    at another moment each time): slots now count from when the plan was installed, which
    the functions' processes get with the plan."""
    from datetime import UTC, datetime, timedelta

    from ezgh_engine.local import faults

    starts = [datetime(2026, 1, 1, tzinfo=UTC), datetime(2027, 6, 3, 4, 5, 7, tzinfo=UTC)]
    drawn = []
    for start in starts:
        plan = faults.FaultPlan(seed=7, throttle_burst=0.5, burst_origin=start.timestamp())
        offsets = [timedelta(seconds=faults.BURST_SLOT_SECONDS * i + 1) for i in range(40)]
        drawn.append([plan.burst_at(start + offset) for offset in offsets])
    assert drawn[0] == drawn[1] and any(drawn[0])
    child = faults.FaultPlan(seed=7, **(plan.child_state() or {}))
    assert child.burst_origin == plan.burst_origin


def test_app_faults_are_keyed_by_the_invocation_not_its_token():
    """A token carries a signature and an expiry: another on every run of one seed. The
    app's faults are keyed by its run (labelled), epoch, attempt and step instead."""
    from ezgh_engine.core import tokens
    from ezgh_engine.local.faults import invocation_key

    run = "0b7c4e1a-0000-4000-8000-00000000000a"
    one = tokens.mint("s1", tokens.InvocationClaims(run, "p", 3, 1, 1000))
    two = tokens.mint("s2", tokens.InvocationClaims(run, "p", 3, 1, 99999))
    assert one != two and invocation_key(one) == invocation_key(two) == f"{run}|e3|a1|"
    plan = FaultPlan.everything(9, 0.5)
    plan.alias(run, "r0")
    assert plan.label(invocation_key(one)) == "r0|e3|a1|"
