"""Every run ends by its one-year limit (`timers.YEAR_LIMIT`): an hourly sweep, nothing per run.

**Arming.** The stream calls `arm` with each live run it sees: the run's creation hour and
project are noted in a bucket item (`adapters.year_limit_store`) once per stream environment
(a set in memory), so a burst of a thousand starts a second costs one DynamoDB write per
hour and project per environment, where a schedule per run cost a `CreateSchedule` at every
start and a `DeleteSchedule` at every end (throttled at EventBridge Scheduler's request
quota, and holding the stream's shard while it was).

**Sweeping.** EventBridge Scheduler fires the invoker every hour (topology
`YEAR_LIMIT_SWEEP`, message `YearLimitSweep`). `sweep` ends `timedOut` every live run
created at least `YEAR_LIMIT` ago: it reads the buckets of the cutoff's day and the day
before (so a sweep that failed or fired late is made up by the next), and for each one the
project's live runs created in that hour up to the cutoff, from the project's runs index;
a bucket whose hour lies wholly before the cutoff is deleted once its runs are ended. A run
therefore ends within an hour (and Scheduler's delay) after its limit. Cost: an idle stack
pays 720 fires a month and 18 empty queries each (two days, each day key's 8 shards and its
unsharded key of older stacks); a sweep with work reads the buckets of the day and each
bucket's runs still stored (live ones, and ended ones kept 30 days).

Backstops: the invoker ends a run past its limit whenever it is invoked
(`invoker._past_deadline`), and `ezgh ops repair` sends the limit's timer for a quiet run
past it and writes a missing bucket (`service.repair`).
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from datetime import datetime, timedelta
from typing import Any

from ezgh_engine import clock
from ezgh_engine.adapters import run_items as items
from ezgh_engine.adapters import runs_store
from ezgh_engine.adapters import year_limit_store as store
from ezgh_engine.errors import TransientError
from ezgh_engine.service import timers
from ezgh_engine.service.timers import YEAR_LIMIT

log = logging.getLogger(__name__)

# Buckets this environment has written (hour, project): at most this many remembered.
_ARMED_MAX = 10_000
_armed: OrderedDict[tuple[str, str], None] = OrderedDict()
# How long one sweep works before it leaves the rest to the next (the invoker's timeout
# is 900 s).
SWEEP_BUDGET_SECONDS = 600.0


def bucket_of(run: dict[str, Any]) -> tuple[str, str] | None:
    """(creation hour, project) of a run item's plain values, or None when it has neither."""
    created, project = run.get("createdAt"), run.get("projectId")
    if not created or not project:
        return None
    return store.hour_of(clock.parse_iso(str(created))), str(project)


def arm(run: dict[str, Any]) -> None:
    """Make sure the sweep will look at this live run when it reaches its limit."""
    bucket = bucket_of(run)
    if bucket is None or bucket in _armed:
        return
    write_bucket(*bucket)
    _armed[bucket] = None
    while len(_armed) > _ARMED_MAX:
        _armed.popitem(last=False)


def write_bucket(hour: str, project_id: str) -> None:
    """Write the bucket of (`hour`, `project_id`), kept until its runs are past their limit
    and the retention of ended runs (idempotent)."""
    expires = store.next_hour(hour) + YEAR_LIMIT + timedelta(seconds=runs_store.RETENTION_SECONDS)
    store.put_bucket(hour, project_id, expires)


def forget_armed() -> None:
    """Forget which buckets this environment wrote (tests, after the tables are emptied)."""
    _armed.clear()


def sweep(now: datetime | None = None) -> int:
    """End every live run created at least `YEAR_LIMIT` before `now`; answer how many."""
    now = now or clock.now()
    cutoff = now - YEAR_LIMIT
    last_hour = store.hour_of(cutoff)
    began = clock.monotonic()
    ended = 0
    for day in (cutoff - timedelta(days=1), cutoff):
        for hour, project in list(store.buckets_up_to(day, last_hour)):
            if clock.monotonic() - began > SWEEP_BUDGET_SECONDS:
                log.warning("year-limit sweep out of time; the next one goes on")
                return ended
            ended += _sweep_bucket(hour, project, cutoff, now)
    if ended:
        log.info("year-limit sweep ended %d run(s) created before %s", ended, clock.iso(cutoff))
    return ended


def _sweep_bucket(hour: str, project: str, cutoff: datetime, now: datetime) -> int:
    start, end = clock.parse_iso(hour + ":00:00Z"), min(store.next_hour(hour), cutoff)
    ended = 0
    for item in store.live_runs_created(project, start, end):
        run = items.run_from(item)
        if clock.parse_iso(timers.year_limit(run.created_at)) > now:
            continue
        try:
            timers.end_at_year_limit(run)
        except TransientError as error:  # it kept changing, or DynamoDB is busy
            log.warning("run %s not ended at its year limit yet: %s", run.id, error)
            return ended  # its bucket stays: the next sweep tries again
        ended += 1
    if store.next_hour(hour) <= cutoff:
        store.delete_bucket(hour, project)  # every run of its hour is past its limit
    return ended
