"""Reconciliation: re-arm what the runs table says is owed and nothing will deliver.

The engine's moving parts are messages (the invocations queue) and timers (SQS delays, and
EventBridge Scheduler schedules for long ones). If one is lost (a purged queue, a deleted
schedule, a crash of `ezgh dev` between a write and its stream reaction), the tables still
say what should happen next. For each run that is `running` or `cancelling` with no live
invocation lease (quiet for `older_than_seconds`):

- an invocation owed (`invokeSeq > handledSeq`): send it again;
- a parallel step (`branch`) `waiting` or `running` with no live branch lease (its
  `branchLeaseUntil` quiet for `older_than_seconds` too): send its branch message again (the
  stream sends one only as the step becomes `waiting`, so nothing else would);
- a sleep woken whose ask never reached the run item (the timer's handler died between its
  two writes, and the timer was lost too): send its timer message again;
- a step sleeping, retrying or waiting past its wake time, the run's own time limit past
  its `deadlineAt`, and its one-year limit (`timers.year_limit`) past due: send its timer
  message now;
- a wake time far enough ahead that its timer must be a Scheduler schedule, and neither of
  that timer's schedule names exists: create it;
- a run whose one-year limit is ahead and whose year-limit bucket is missing (the hourly
  sweep would not see it, `service.year_limits`): write the bucket;
- the launch its last suspend committed with some of its waits never made (the stream gave
  up on that batch): make it again (`service.launches`: only what is missing).

Every action is idempotent in the engine (a duplicate invocation answers nothing new, a
duplicate branch message finds the step leased, and is held back, or ended, and dropped; a
timer acts only if the step or run still holds that wake time), so repairing a healthy run
does no harm. `ezgh ops repair` lists (and with `--yes` applies) these; `ezgh dev` applies
them on every start from a kept state (`after_restart`), after it released the leases its
dead process held (`held_leases`, `release_dead_leases`). Cost: what
`service.ops.find_stuck_runs` reads (a Scan of the runs table without `project_id`), one
query per quiet active run, one `GetItem` per parallel step not ended, one `GetSchedule`
per far wake time, and one `GetItem` per year-limit bucket (creation hour and project) of the
quiet active runs.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from botocore.exceptions import ClientError

from ezgh_engine import clock
from ezgh_engine.adapters import (
    messages,
    queues_store,
    registry_store,
    runs_store,
    sqs_queues,
    steps_store,
    year_limit_store,
)
from ezgh_engine.adapters import run_items as items
from ezgh_engine.adapters.aws import client
from ezgh_engine.config import settings
from ezgh_engine.core import leases
from ezgh_engine.core.models import App, Run
from ezgh_engine.core.queues import QueueRecord
from ezgh_engine.service import launches, year_limits
from ezgh_engine.service.ops import ACTIVE_STATUSES, _active_run_items
from ezgh_engine.service.timers import DEADLINE_STEP, YEAR_LIMIT, year_limit

log = logging.getLogger(__name__)

TIMED_STEP_STATUSES = ("sleeping", "retrying", "waiting")
# A parallel step a branch invocation may take (`branches._take_lease`'s condition).
BRANCH_OWED_STATUSES = ("waiting", "running")


@dataclass(frozen=True)
class RepairAction:
    """One thing to re-arm: `kind` is `invocation`, `branch` (a parallel step's branch
    invocation), `timer` (send now), `schedule`, `year-limit` (the run's year-limit bucket)
    or `launch` (`step_id`: the launch's ID); `lease` is a dead process's lease released
    (`release_dead_leases`)."""

    run_id: str
    project_id: str
    kind: str
    why: str
    seq: int = 0
    step_id: str = ""
    wake_at: str = ""
    # A launch's parallel steps that no branch message claimed: their messages go again.
    branches: frozenset[str] = frozenset()

    def summary(self) -> str:
        what = f"{self.kind} {self.step_id}".rstrip()
        return f"{what} of run {self.run_id}: {self.why}"

    def to_json(self) -> dict[str, object]:
        return {
            "runId": self.run_id,
            "projectId": self.project_id,
            "kind": self.kind,
            "stepId": self.step_id or None,
            "wakeAt": self.wake_at or None,
            "seq": self.seq or None,
            "why": self.why,
        }


def plan(
    run: Run,
    *,
    now_ms: int,
    older_than_seconds: float,
    schedule_exists: Callable[[str, str, str], bool],
    schedule_after_seconds: float,
    branch_lease_until: Callable[[str, str], int] = lambda run_id, step_id: 0,
    bucket_exists: Callable[[Run], bool] = lambda run: True,
    launch_missing: Callable[[Run], tuple[str, frozenset[str]] | None] = lambda run: None,
) -> list[RepairAction]:
    """What to re-arm for `run` (see the module's doc); `schedule_exists(run, step, wake)`,
    `branch_lease_until(run, step)` a parallel step's `branchLeaseUntil` (ms),
    `bucket_exists(run)` whether the run's year-limit bucket is written,
    `launch_missing(run)` the launch to make again (None: nothing missing)."""
    if run.status not in ACTIVE_STATUSES:
        return []
    quiet_since_ms = now_ms - int(older_than_seconds * 1000)
    if run.lease_until_ms > quiet_since_ms:
        return []  # a live lease: its holder, or its message coming back, moves the run
    out: list[RepairAction] = []
    if run.invoke_seq > run.handled_seq:
        why = f"invokeSeq {run.invoke_seq} > handledSeq {run.handled_seq}, no live lease"
        out.append(RepairAction(run.id, run.project_id, "invocation", why, seq=run.invoke_seq))
    else:
        out.extend(_wake_not_asked(run))
        launch = launch_missing(run)
        if launch:
            launch_id, branches = launch
            why = "its last suspend's waits were not all made"
            if branches:
                why = f"{len(branches)} parallel step(s) of its last suspend never claimed"
            out.append(
                RepairAction(
                    run.id, run.project_id, "launch", why, step_id=launch_id, branches=branches
                )
            )
    out.extend(_branches_owed(run, quiet_since_ms, branch_lease_until))
    timed: list[tuple[str, str, str | None]] = [
        (s.id, s.status, s.wake_at) for s in run.steps if s.status in TIMED_STEP_STATUSES
    ]
    if run.deadline_at:
        timed.append((DEADLINE_STEP, "time limit", run.deadline_at))
    out.extend(_year_limit(run, quiet_since_ms, bucket_exists))
    for step_id, status, wake_at in timed:
        if not wake_at:
            continue
        due_ms = int(clock.parse_iso(wake_at).timestamp() * 1000)
        if due_ms <= quiet_since_ms:
            why = f"{status} past its wake time {wake_at}"
            out.append(RepairAction(run.id, run.project_id, "timer", why, 0, step_id, wake_at))
        elif due_ms - now_ms > schedule_after_seconds * 1000 and not schedule_exists(
            run.id, step_id, wake_at
        ):
            why = f"{status} until {wake_at} and its timer schedule is missing"
            out.append(RepairAction(run.id, run.project_id, "schedule", why, 0, step_id, wake_at))
    return out


def _year_limit(
    run: Run, quiet_since_ms: int, bucket_exists: Callable[[Run], bool]
) -> list[RepairAction]:
    """Past its one-year limit: its timer now (the sweep missed it, or it has not come by
    yet). Before it: its bucket, if missing, so that the sweep will see it."""
    if not run.created_at:
        return []
    limit = year_limit(run.created_at)
    if int(clock.parse_iso(limit).timestamp() * 1000) <= quiet_since_ms:
        why = f"one-year limit past its wake time {limit}"
        return [RepairAction(run.id, run.project_id, "timer", why, 0, DEADLINE_STEP, limit)]
    if bucket_exists(run):
        return []
    why = f"one-year limit {limit} and its year-limit bucket is missing"
    return [RepairAction(run.id, run.project_id, "year-limit", why, 0, DEADLINE_STEP, limit)]


def _wake_not_asked(run: Run) -> list[RepairAction]:
    """The last sleep woken (by two writes) whose ask, the run item's second write, never
    came: its mark is not the run's and nothing is owed (a later sleep's wake-up is the only
    other writer of the mark, and this is the last). Its timer again asks
    (`timers.fire_timer`)."""
    woken = [s for s in run.steps if s.kind == "sleep" and s.status == "completed" and s.woke]
    if not woken:
        return []
    last = max(woken, key=lambda s: (s.ended_at or "", s.order))
    if last.woke == run.woke or not last.wake_at:
        return []
    why = f"sleep woken at {last.ended_at}, its run write missing"
    return [RepairAction(run.id, run.project_id, "timer", why, 0, last.id, last.wake_at)]


def _branches_owed(
    run: Run, quiet_since_ms: int, branch_lease_until: Callable[[str, str], int]
) -> list[RepairAction]:
    """The run's parallel steps owed a branch invocation that no live branch lease covers:
    its message was lost, or its invocation died and its lease ended long enough ago that
    its own message, had it survived, would have come back."""
    out: list[RepairAction] = []
    for step in run.steps:
        if not step.branch or step.status not in BRANCH_OWED_STATUSES or step.launched:
            # (one with no item yet, `launched`, is its launch's to start again: `launch`)
            continue
        until = branch_lease_until(run.id, step.id)
        if until > quiet_since_ms:
            continue  # a live branch invocation (or its backoff) holds the step
        why = f"parallel step {step.status}, no live branch lease"
        out.append(RepairAction(run.id, run.project_id, "branch", why, step_id=step.id))
    return out


def _branch_lease_until(run_id: str, step_id: str) -> int:
    return steps_store.branch_lease(run_id, step_id)[1]


def _schedule_exists(run_id: str, step_id: str, wake_at: str) -> bool:
    scheduler = client("scheduler")
    for name in messages.timer_schedule_names(run_id, step_id, wake_at):
        try:
            scheduler.get_schedule(Name=name, GroupName=settings().scheduler_group)
            return True
        except ClientError as error:
            if error.response.get("Error", {}).get("Code") != "ResourceNotFoundException":
                raise
    return False


def apply_action(action: RepairAction) -> None:
    """Re-arm one action (idempotent)."""
    if action.kind == "invocation":
        messages.send_invocation(action.run_id, action.seq)
    elif action.kind == "branch":
        messages.send_branch(action.run_id, action.step_id)
    elif action.kind == "launch":
        launches.launch(action.run_id, action.step_id, only=action.branches or None)
    elif action.kind in ("timer", "schedule"):
        # Past due: a message now; ahead: the same schedule the stream would have made.
        messages.schedule_timer(action.run_id, action.step_id, clock.parse_iso(action.wake_at))
    elif action.kind == "year-limit":
        created = clock.parse_iso(action.wake_at) - YEAR_LIMIT
        year_limits.write_bucket(year_limit_store.hour_of(created), action.project_id)
    else:
        raise ValueError(f"unknown repair kind {action.kind!r}")


def _created(run: Run) -> str:
    return run.created_at


class _Buckets:
    """Whether a run's year-limit bucket exists, read once per bucket in a repair."""

    def __init__(self) -> None:
        self._known: dict[tuple[str, str], bool] = {}

    def exists(self, run: Run) -> bool:
        key = (year_limit_store.hour_of(clock.parse_iso(run.created_at)), run.project_id)
        if key not in self._known:
            self._known[key] = year_limit_store.bucket_exists(*key)
        return self._known[key]


def active_runs(project_id: str | None = None) -> list[Run]:
    """The heads of the runs `running` or `cancelling`: one read (without `project_id`, a
    Scan of the runs table), which a start of `ezgh dev` makes once for `held_leases` and
    `after_restart`."""
    return [items.run_from(v) for v in _active_run_items(project_id)]


def repair(
    project_id: str | None = None,
    *,
    apply: bool = False,
    older_than_seconds: float = 300,
    branches_sent: Collection[tuple[str, str]] = (),
    heads: Sequence[Run] | None = None,
) -> list[RepairAction]:
    """Find (and with `apply`, re-arm) what active runs are owed; oldest runs first.
    `branches_sent`: (run, step) pairs whose branch message the caller has just sent.
    `heads`: the active runs as the caller read them (`active_runs`) instead of a read now;
    their leases may have changed since (released), so each run's own is checked."""
    now = clock.now_ms()
    # Waits further ahead than this are Scheduler schedules (SQS delays carry the rest,
    # and a schedule fires `SCHEDULER_LEAD` early).
    lead = messages.SCHEDULER_LEAD + timedelta(seconds=settings().sqs_max_delay_seconds)
    actions: list[RepairAction] = []
    read_now = heads is None
    buckets = _Buckets()
    for head in sorted(active_runs(project_id) if heads is None else heads, key=_created):
        if read_now and head.lease_until_ms > now - int(older_than_seconds * 1000):
            continue  # a live lease: its holder, or its message coming back, moves the run
        run = runs_store.get_run(head.id, with_steps=True)
        if run is None:
            continue
        found = plan(
            run,
            now_ms=now,
            older_than_seconds=older_than_seconds,
            schedule_exists=_schedule_exists,
            schedule_after_seconds=lead.total_seconds(),
            branch_lease_until=_branch_lease_until,
            bucket_exists=buckets.exists,
            launch_missing=launches.missing,
        )
        found = [
            a for a in found if a.kind != "branch" or (a.run_id, a.step_id) not in branches_sent
        ]
        if apply:
            for action in found:
                apply_action(action)
        actions.extend(found)
    return actions


@dataclass(frozen=True)
class QueueUpgrade:
    """An EZGH queue made before the settled attributes (14 days' retention, a FIFO queue's
    high-throughput mode: `sqs_queues.settled_attributes`), and what it lacks per SQS URL."""

    queue: QueueRecord
    changes: dict[str, dict[str, str]]
    kind: str = "queue"

    def summary(self) -> str:
        wanted = sorted({f"{k}={v}" for attrs in self.changes.values() for k, v in attrs.items()})
        return f"queue {self.queue.name} ({self.queue.id}): {', '.join(wanted)}"

    def to_json(self) -> dict[str, object]:
        return {
            "kind": self.kind,
            "queueId": self.queue.id,
            "projectId": self.queue.project_id,
            "why": "made before: " + self.summary().split(": ", 1)[1],
        }


def queue_upgrades(project_id: str | None = None, *, apply: bool = False) -> list[QueueUpgrade]:
    """The EZGH queues (of `project_id`, or all) lacking the settled attributes; with
    `apply`, set them. Cost: a registry query (or Scan) and a `GetQueueAttributes` per
    queue and DLQ."""
    queues = queues_store.list_queues(project_id) if project_id else queues_store.all_queues()
    found: list[QueueUpgrade] = []
    for queue in sorted(queues, key=lambda q: q.created_at):
        changes = sqs_queues.outdated(queue)
        if not changes:
            continue
        if apply:
            sqs_queues.apply_attributes(changes)
        found.append(QueueUpgrade(queue, changes))
    return found


@dataclass(frozen=True)
class HeldLease:
    """A live invocation lease as read: the run's (`step_id` ""), or a parallel step's
    branch lease (`step_id`, that step's `step_status`); `epoch` holds it until `until_ms`."""

    run_id: str
    project_id: str
    app_id: str
    epoch: int
    until_ms: int
    step_id: str = ""
    step_status: str = ""

    def summary(self) -> str:
        until = clock.iso(datetime.fromtimestamp(self.until_ms / 1000, UTC))
        whose = f"branch {self.step_id}'s" if self.step_id else "the run's"
        return f"{whose} lease of epoch {self.epoch} (until {until})"


def held_leases(
    project_id: str | None = None, *, active: Sequence[Run] | None = None
) -> list[HeldLease]:
    """Every active run's live invocation lease (a delivery's backoff included) and its
    parallel steps' live branch leases, now (`active`: the active runs as just read).

    Read by `ezgh dev` on a start from kept state before it serves or polls anything: each
    lease then belongs to an invocation of the process that died (`release_dead_leases`).
    Cost: the Scan `repair` makes (none with `active`), and one more for the branch leases."""
    now = clock.now_ms()
    heads = {run.id: run for run in (active_runs(project_id) if active is None else active)}
    out: list[HeldLease] = []
    for run in heads.values():
        if run.lease_until_ms != leases.NO_LEASE and not leases.lease_free(run.lease_until_ms, now):
            out.append(HeldLease(run.id, run.project_id, run.app_id, run.epoch, run.lease_until_ms))
    for branch in runs_store.branch_leases(now):
        head = heads.get(branch.run_id)
        if head is not None:  # an ended run's steps are ended too
            out.append(
                HeldLease(
                    head.id,
                    head.project_id,
                    head.app_id,
                    branch.epoch,
                    branch.until_ms,
                    branch.step_id,
                    branch.status,
                )
            )
    return out


def _kept_because(lease: HeldLease, in_process: Callable[[App], bool]) -> str:
    """Why the dead process's lease must run out by itself ("" to release it now)."""
    app = registry_store.get_app(lease.project_id, lease.app_id)
    if app is None or in_process(app):
        # Its invocations ran in the dead process (or its app is gone, which the next
        # invocation ends the run for): nothing of them still runs.
        return ""
    if app.kind == "pull":
        return "a pull worker may still run its task: the lease is the task's, renewed by it"
    if lease.step_id:
        running = lease.step_status == "running"
    else:
        run = runs_store.get_run(lease.run_id, with_steps=True)
        running = run is not None and any(s.status == "running" for s in run.steps)
    if running:
        # The app's own process may still run that step's body: as after an invoke timeout,
        # the step keeps the run until the lease ends, so it is not started beside itself.
        return f"a step may still run in app {app.name}'s own process"
    return ""


def _release(lease: HeldLease) -> bool:
    """Release `lease` if it is still exactly as read; a branch's is then asked for again
    (nothing else would: the stream sends a branch message only as its step becomes
    `waiting`), a run's by the stream (its `leaseUntil` 0) and `repair`."""
    if not lease.step_id:
        return runs_store.release_lease(
            lease.run_id, epoch=lease.epoch, lease_until_ms=lease.until_ms
        )
    branch = runs_store.BranchLease(
        lease.run_id, lease.step_id, lease.step_status, lease.epoch, lease.until_ms
    )
    if not runs_store.release_branch_lease(branch):
        return False
    messages.send_branch(lease.run_id, lease.step_id)
    return True


def release_dead_leases(
    held: Sequence[HeldLease], *, in_process: Callable[[App], bool]
) -> list[RepairAction]:
    """Release the leases of `held` (read before this process took any) whose invocation
    died with its process, each only if it is still exactly as read (a lease taken or
    moved on meanwhile is another invocation's, and kept), so the runs move now rather
    than when the invoke timeout runs out.

    `in_process(app)`: the app ran inside the dead process (`ezgh dev --app` apps, the
    hosted flows interpreter), so none of its step bodies can still be running. A push
    app served by a process of its own with a step `running` under the lease, and a pull
    app, keep their lease (see `_kept_because`). The invocation owed is then sent again;
    the dead process's own message, restored visible, finds the run (or step) leased by
    the new invocation, or answered, and is held back or dropped as any duplicate is."""
    released: list[RepairAction] = []
    for lease in held:
        kept = _kept_because(lease, in_process)
        if kept:
            log.info("run %s: %s kept: %s", lease.run_id, lease.summary(), kept)
            continue
        if _release(lease):
            why = f"{lease.summary()} died with the last process"
            released.append(
                RepairAction(lease.run_id, lease.project_id, "lease", why, step_id=lease.step_id)
            )
    return released


def after_restart(
    held: Sequence[HeldLease],
    *,
    in_process: Callable[[App], bool],
    active: Sequence[Run] | None = None,
) -> list[RepairAction]:
    """`ezgh dev`'s reconciliation on a start from kept state: release the dead process's
    leases (`release_dead_leases`), then re-arm whatever is owed (`repair`, applied, with
    no quiet time: nothing of the dead process will deliver it). `active`: the active runs
    `held` was read from (`active_runs`), read again otherwise; a run started since is
    owed nothing yet (its first invocation is the stream's)."""
    released = release_dead_leases(held, in_process=in_process)
    sent = {(a.run_id, a.step_id) for a in released if a.step_id}  # their branches went out
    owed = repair(apply=True, older_than_seconds=0, branches_sent=sent, heads=active)
    return [*released, *owed]
