"""`service.repair` over stored run shapes, on moto and on DynamoDB Local: what the
tables say is owed is listed, re-armed with `apply`, and a healthy run is left alone."""

from __future__ import annotations

import json
from datetime import timedelta

import boto3
import pytest
from ezgh_engine import clock, config
from ezgh_engine.adapters import invocations_store, messages, runs_store, year_limit_store
from ezgh_engine.adapters import run_items as items
from ezgh_engine.config import settings
from ezgh_engine.core.models import App, Run
from ezgh_engine.service import branches, year_limits
from ezgh_engine.service.repair import (
    active_runs,
    after_restart,
    held_leases,
    release_dead_leases,
    repair,
)
from ezgh_engine.service.timers import DEADLINE_STEP, year_limit
from ezgh_engine.topology import TOPOLOGY

from tests.api.conftest import ENV
from tests.api.test_ops_stuck_runs import PROJECT, _put, _run, _step

QUEUE_ARN = "arn:aws:sqs:us-east-1:123456789012:ezgh-invocations"
SCHEDULER_ROLE_ARN = "arn:aws:iam::123456789012:role/ezgh-scheduler"


@pytest.fixture(autouse=True)
def _scheduler_target(monkeypatch: pytest.MonkeyPatch) -> None:
    # Long timers are Scheduler schedules targeting the invocations queue (as deployed).
    monkeypatch.setenv(config.ENV_INVOCATIONS_QUEUE_ARN, QUEUE_ARN)
    monkeypatch.setenv(TOPOLOGY.scheduler_role_env_var, SCHEDULER_ROLE_ARN)
    config.reset_settings()


def _live(run: Run) -> Run:
    """Store a live run as its start leaves it: counted in its year-limit bucket (the
    stream's `year_limits.arm`, which these tests do not run)."""
    _put(items.run_values(run))
    year_limits.write_bucket(*_bucket(run))
    return run


def _bucket(run: Run) -> tuple[str, str]:
    return year_limit_store.hour_of(clock.parse_iso(run.created_at)), run.project_id


def _timed_step(run: Run, step_id: str, status: str, wake_at: str) -> None:
    _step(run, step_id, "sleep", status, wakeAt=wake_at)


def _invocation_messages() -> list[dict[str, object]]:
    sqs = boto3.client("sqs", region_name="us-east-1")
    got = sqs.receive_message(
        QueueUrl=ENV["EZGH_INVOCATIONS_QUEUE_URL"], MaxNumberOfMessages=10, WaitTimeSeconds=0
    )
    return [json.loads(m["Body"]) for m in got.get("Messages", [])]


@pytest.fixture
def shapes(aws_env: None) -> dict[str, Run]:
    past = clock.iso(clock.now() - timedelta(hours=1))
    far = clock.iso(clock.now() + timedelta(days=3))
    owed = _run(invoke_seq=3)  # an invocation owed and no lease: its message was lost
    overslept = _run()  # a sleep past its wake time: its timer was lost
    far_off = _run()  # a three-day sleep whose schedule is gone
    healthy = _run(lease_until_ms=clock.now_ms() + 3_600_000)  # being invoked now
    ended = _run(status="completed", invoke_seq=5)  # ended: owed nothing
    for run in (owed, overslept, far_off, healthy):
        _live(run)
    _put(items.run_values(ended))
    _timed_step(overslept, "nap", "sleeping", past)
    _timed_step(far_off, "wait-3d", "sleeping", far)
    _timed_step(healthy, "nap", "sleeping", past)
    return {"owed": owed, "overslept": overslept, "far_off": far_off}


def test_a_dry_run_lists_what_is_owed_and_sends_nothing(shapes: dict[str, Run]) -> None:
    found = repair(PROJECT, older_than_seconds=60)
    assert sorted((a.run_id, a.kind, a.step_id) for a in found) == sorted(
        [
            (shapes["owed"].id, "invocation", ""),
            (shapes["overslept"].id, "timer", "nap"),
            (shapes["far_off"].id, "schedule", "wait-3d"),
        ]
    )
    assert _invocation_messages() == []


def test_apply_re_arms_each_and_a_second_repair_finds_only_what_is_still_due(
    shapes: dict[str, Run],
) -> None:
    repair(PROJECT, apply=True, older_than_seconds=60)
    sent = {(m["type"], m["runId"]) for m in _invocation_messages()}
    assert sent == {("invoke", shapes["owed"].id), ("timer", shapes["overslept"].id)}
    far = shapes["far_off"]
    [step] = [s for s in _steps(far) if s[0] == "wait-3d"]
    names = messages.timer_schedule_names(far.id, "wait-3d", step[1])
    scheduler = boto3.client("scheduler", region_name="us-east-1")
    found = scheduler.get_schedule(Name=names[0], GroupName=settings().scheduler_group)
    assert json.loads(found["Target"]["Input"])["stepId"] == "wait-3d"
    # The schedule now exists; the invocation and the timer stay owed until they are handled.
    again = repair(PROJECT, older_than_seconds=60)
    assert {a.kind for a in again} == {"invocation", "timer"}


def _steps(run: Run) -> list[tuple[str, str]]:
    got = runs_store.get_run(run.id, with_steps=True)
    assert got is not None
    return [(s.id, s.wake_at or "") for s in got.steps]


# --- a start from kept state: the dead process's leases (`ezgh dev`) -------------------------

SERVED, OWN, PULLED = "app-served", "app-own-process", "app-pull"


@pytest.fixture
def apps(aws_env: None) -> None:
    """An app `ezgh dev` served itself, a push app served by a process of its own, a pull app."""
    from ezgh_engine.adapters import registry_store
    from ezgh_engine.core.models import App

    now = clock.iso(clock.now())
    for app_id, kind in ((SERVED, "push"), (OWN, "push"), (PULLED, "pull")):
        registry_store.create_app(
            App(app_id, "wfa_" + app_id, "o", PROJECT, app_id, kind, None, "synced", (), "k", now)
        )


def _in_process(app: App) -> bool:
    return app.id == SERVED


def _leased(app_id: str, *, for_ms: int = 3_600_000) -> Run:
    """A run an invocation of the dead process held: epoch 4 answering seq 3, leased ahead."""
    return _live(_run(app_id=app_id, invoke_seq=3, epoch=4, lease_until_ms=clock.now_ms() + for_ms))


def _lease(run: Run) -> tuple[int, int]:
    stored = runs_store.get_run(run.id, with_steps=False)
    assert stored is not None
    return stored.epoch, stored.lease_until_ms


def test_a_dead_process_lease_is_released_and_its_owed_invocation_sent(apps: None) -> None:
    leased = _leased(SERVED)
    free = _live(_run(invoke_seq=3))  # no lease at all: repair's own case
    ended = _run(status="completed", lease_until_ms=clock.now_ms() + 3_600_000)
    _put(items.run_values(ended))
    held = held_leases(PROJECT)
    assert [(h.run_id, h.epoch, h.until_ms) for h in held] == [
        (leased.id, 4, leased.lease_until_ms)
    ]
    done = after_restart(held, in_process=_in_process)
    assert sorted((a.kind, a.run_id) for a in done) == sorted(
        [("lease", leased.id), ("invocation", leased.id), ("invocation", free.id)]
    )
    # Released with a takeover's fence: the dead invocation's epoch writes nothing more.
    assert _lease(leased) == (5, 0)
    sent = [(m["type"], m["runId"], m["seq"]) for m in _invocation_messages()]
    assert ("invoke", leased.id, 3) in sent
    # The same (now old) reading releases nothing a second time.
    assert release_dead_leases(held, in_process=_in_process) == []
    assert _lease(leased) == (5, 0)


def test_one_read_of_the_active_runs_serves_the_leases_and_the_repair(apps: None) -> None:
    """`ezgh dev` reads the active runs once, before it releases their dead leases: the
    repair after the releases re-arms what a read of its own would (a released run's lease
    is its run's as read again, a kept one is left alone), and a run started after the read
    is owed nothing by it (its first invocation is the stream's)."""
    leased = _leased(SERVED)
    kept = _leased(PULLED)  # a pull worker may still run its task: its lease stays
    free = _live(_run(invoke_seq=3))
    active = active_runs(PROJECT)
    held = held_leases(PROJECT, active=active)
    assert sorted(h.run_id for h in held) == sorted([leased.id, kept.id])
    _live(_run(invoke_seq=1))  # started since
    done = after_restart(held, in_process=_in_process, active=active)
    assert sorted((a.kind, a.run_id) for a in done) == sorted(
        [("lease", leased.id), ("invocation", leased.id), ("invocation", free.id)]
    )
    assert _lease(kept) == (4, kept.lease_until_ms)


@pytest.mark.parametrize("meanwhile", ["taken over", "backed off"])
def test_a_lease_changed_between_the_read_and_the_release_is_kept(
    apps: None, meanwhile: str
) -> None:
    leased = _leased(SERVED, for_ms=1000)
    held = held_leases(PROJECT)
    if meanwhile == "taken over":  # the lease ran out and a new invocation took the run
        later = leased.lease_until_ms + 1
        taken = invocations_store.take_lease(leased.id, 3, now_ms=later, lease_ms=360_000)
        assert taken is not None
        expected = (taken.epoch, taken.lease_until_ms)
    else:  # the same epoch's lease moved on: a backoff written after the read
        retry_at = leased.lease_until_ms + 60_000
        invocations_store.back_off(leased, failures=1, retry_at_ms=retry_at)
        expected = (4, retry_at)
    assert release_dead_leases(held, in_process=_in_process) == []
    assert _lease(leased) == expected


def test_leases_that_may_still_be_in_use_are_kept(apps: None) -> None:
    """A push app's own process may still run a step of the dead invocation, and a pull
    worker its task: those leases run out by themselves. Without a step running, or for an
    app the dead process served, nothing can still be running."""
    busy = _leased(OWN)
    _step(busy, "charge", "run", "running")
    idle = _leased(OWN)
    pulled = _leased(PULLED)
    served_busy = _leased(SERVED)
    _step(served_busy, "charge", "run", "running")
    released = release_dead_leases(held_leases(PROJECT), in_process=_in_process)
    assert sorted(a.run_id for a in released) == sorted([idle.id, served_busy.id])
    for run in (busy, pulled):
        assert _lease(run) == (4, run.lease_until_ms)
    for run in (idle, served_busy):
        assert _lease(run) == (5, 0)


def _branch(run: Run, step_id: str, status: str, *, epoch: int = 2) -> int:
    """A parallel step of `run` whose branch invocation (epoch `epoch`) holds it; its end."""
    until = clock.now_ms() + 3_600_000
    _step(run, step_id, "run", status, branch=True, branchEpoch=epoch, branchLeaseUntil=until)
    return until


def _branch_lease(run: Run, step_id: str) -> tuple[int, int]:
    from ezgh_engine.adapters import steps_store

    return steps_store.branch_lease(run.id, step_id)


def test_a_dead_branch_lease_is_released_and_its_branch_sent_again(apps: None) -> None:
    """A parallel step's branch invocation died with the process: its lease is released
    (the branch epoch moves on) and its branch message is sent, as nothing else would."""
    suspended = _live(_run(app_id=SERVED))  # the main invocation answered: it waits on them
    until = _branch(suspended, "a", "running")
    own = _live(_run(app_id=OWN))
    _branch(own, "busy", "running")  # its body may still run in the app's own process
    _branch(own, "queued", "waiting")  # its body never began
    held = held_leases(PROJECT)
    assert sorted((h.run_id, h.step_id, h.epoch) for h in held) == sorted(
        [(suspended.id, "a", 2), (own.id, "busy", 2), (own.id, "queued", 2)]
    )
    assert (suspended.id, "a", until) in {(h.run_id, h.step_id, h.until_ms) for h in held}
    released = release_dead_leases(held, in_process=_in_process)
    assert sorted((a.run_id, a.step_id) for a in released) == sorted(
        [(suspended.id, "a"), (own.id, "queued")]
    )
    assert _branch_lease(suspended, "a") == (3, 0)
    assert _branch_lease(own, "queued") == (3, 0)
    assert _branch_lease(own, "busy")[0] == 2
    sent = sorted((m["type"], m["runId"], m["stepId"]) for m in _invocation_messages())
    assert sent == sorted([("branch", suspended.id, "a"), ("branch", own.id, "queued")])


def test_a_branch_lease_taken_between_the_read_and_the_release_is_kept(apps: None) -> None:
    run = _live(_run(app_id=SERVED))
    _branch(run, "a", "waiting")
    held = held_leases(PROJECT)
    # Meanwhile the lease moved on: a new branch invocation holds the step (epoch 3).
    _branch(run, "a", "running", epoch=3)
    taken = _branch_lease(run, "a")
    assert release_dead_leases(held, in_process=_in_process) == []
    assert _branch_lease(run, "a") == taken
    assert _invocation_messages() == []


def test_ops_repair_leaves_a_lease_alone_until_it_ended_older_than_asked(aws_env: None) -> None:
    """On AWS a lease's holder may be alive (a Lambda still waiting for the app), so `ezgh ops
    repair` never ends a live lease: it re-sends a leased run's invocation only once its lease
    has been over for `older_than_seconds` (the dead invocation's message comes back by
    itself when the lease ends; the wait keeps repair from racing it)."""
    ended_30s_ago = _run(invoke_seq=3, lease_until_ms=clock.now_ms() - 30_000)
    live = _run(invoke_seq=3, lease_until_ms=clock.now_ms() + 3_600_000)
    for run in (ended_30s_ago, live):
        _live(run)
    assert repair(PROJECT, older_than_seconds=60) == []
    assert [(a.run_id, a.kind) for a in repair(PROJECT, older_than_seconds=10)] == [
        (ended_30s_ago.id, "invocation")
    ]
    assert [a.run_id for a in repair(PROJECT, older_than_seconds=0)] == [ended_30s_ago.id]


# --- a parallel step's lost branch message, and the one-year limit's lost timer -------------


def _suspended_with_branches() -> Run:
    """A run whose main invocation answered (no lease, nothing owed) while its parallel
    steps run: `lost` waits for a branch message that never came (purged, or lost between
    the write and the stream's send), `leased` is being run by a live branch invocation,
    `ended_30s_ago`'s branch invocation backed off until 30 s ago (its message comes back by
    itself), `done` ended."""
    run = _live(_run(app_id=SERVED))
    _step(run, "lost", "run", "waiting", branch=True, branchEpoch=0, branchLeaseUntil=0)
    _branch(run, "leased", "running")
    ended = clock.now_ms() - 30_000
    _step(
        run, "ended_30s_ago", "run", "waiting", branch=True, branchEpoch=1, branchLeaseUntil=ended
    )
    _step(run, "done", "run", "completed", branch=True, branchEpoch=1, branchLeaseUntil=0)
    return run


def test_a_lost_branch_message_is_re_sent_once_and_a_live_branch_left_alone(aws_env: None) -> None:
    run = _suspended_with_branches()
    found = repair(PROJECT, older_than_seconds=60)
    assert [(a.run_id, a.kind, a.step_id) for a in found] == [(run.id, "branch", "lost")]
    assert _invocation_messages() == []  # a dry run sends nothing
    quiet = repair(PROJECT, older_than_seconds=10)
    assert sorted(a.step_id for a in quiet) == ["ended_30s_ago", "lost"]
    applied = repair(PROJECT, apply=True, older_than_seconds=60)
    assert [(a.kind, a.step_id) for a in applied] == [("branch", "lost")]
    sent = [(m["type"], m["runId"], m["stepId"]) for m in _invocation_messages()]
    assert sent == [("branch", run.id, "lost")]  # one message, for that step only
    assert _branch_lease(run, "leased")[0] == 2  # the live branch invocation keeps its lease


def test_a_repaired_branch_message_delivered_twice_runs_its_step_once(
    apps: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Repair may send a branch message the stream's also delivers (it was only late): the
    second delivery finds the step ended and invokes nothing, changes nothing."""
    run = _suspended_with_branches()
    calls: list[str] = []

    def invoke_app(app: App, request: dict[str, object]) -> dict[str, object]:
        calls.append(str(request["branch"]["stepId"]))  # type: ignore[index]
        _step(run, "lost", "run", "completed", branch=True, branchEpoch=1, branchLeaseUntil=1)
        return {"protocol": "1.2", "deploymentId": None, "outcome": "branch", "stepId": "lost"}

    monkeypatch.setattr(branches, "invoke_app", invoke_app)
    repair(PROJECT, apply=True, older_than_seconds=60)
    assert branches.invoke_branch(run.id, "lost") is None
    after_first = runs_store.get_run(run.id, with_steps=True)
    assert branches.invoke_branch(run.id, "lost") is None  # the duplicate
    assert calls == ["lost"]
    assert runs_store.get_run(run.id, with_steps=True) == after_first
    assert repair(PROJECT, older_than_seconds=60) == []  # owed nothing more


def test_a_lost_year_limit_bucket_is_written_again(aws_env: None) -> None:
    """Every live run is counted in its creation hour's year-limit bucket, which the hourly
    sweep reads; a missing one is listed, written again, and then found healthy. No
    Scheduler schedule is made for it."""
    run = _run()
    _put(items.run_values(run))  # its bucket was never written
    limit = year_limit(run.created_at)
    found = repair(PROJECT, older_than_seconds=60)
    assert [(a.kind, a.step_id, a.wake_at) for a in found] == [("year-limit", DEADLINE_STEP, limit)]
    assert "one-year limit" in found[0].why
    assert not year_limit_store.bucket_exists(*_bucket(run))
    repair(PROJECT, apply=True, older_than_seconds=60)
    assert year_limit_store.bucket_exists(*_bucket(run))
    assert repair(PROJECT, older_than_seconds=60) == []
    scheduler = boto3.client("scheduler", region_name="us-east-1")
    assert scheduler.list_schedules(GroupName=settings().scheduler_group)["Schedules"] == []


def test_a_year_limit_past_due_is_sent_now(aws_env: None) -> None:
    """A live run older than its year limit (its timer lost) gets the limit's timer now."""
    run = _run(created_at=clock.iso(clock.now() - timedelta(days=367)))
    _put(items.run_values(run))
    limit = year_limit(run.created_at)
    found = repair(PROJECT, apply=True, older_than_seconds=60)
    assert [(a.kind, a.step_id, a.wake_at) for a in found] == [("timer", DEADLINE_STEP, limit)]
    sent = [(m["type"], m["stepId"], m["wakeAt"]) for m in _invocation_messages()]
    assert sent == [("timer", DEADLINE_STEP, limit)]


def test_a_sleep_woken_without_its_run_write_is_timed_again(aws_env: None) -> None:
    """The sleep completed by the first of its wake-up's two writes, the run item's ask
    never written and the timer lost too: its timer is sent again (the last woken sleep's
    mark is not the run's). A run whose last wake-up asked, and sleeps woken before the
    two writes (no mark), are left alone."""
    past = clock.iso(clock.now() - timedelta(hours=1))
    mark = invocations_store.wake_mark("nap", past)
    lost, asked, before = _run(), _run(), _run()
    for run in (lost, asked, before):  # no year-limit buckets: only timers are looked at
        _put({**items.run_values(run), "wk": mark if run is asked else None})
    for run in (lost, asked):
        _step(run, "nap", "sleep", "completed", wakeAt=past, endedAt=past, wk=mark)
    _step(before, "nap", "sleep", "completed", wakeAt=past, endedAt=past)
    found = [a for a in repair(PROJECT, older_than_seconds=60) if a.kind == "timer"]
    assert [(a.run_id, a.step_id, a.wake_at) for a in found] == [(lost.id, "nap", past)]
