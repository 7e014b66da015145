"""EventBridge Scheduler emulation: fire due schedules from moto, which only stores them.

A schedule's target is an SQS queue (its input sent as the message body) or a Lambda function
(invoked asynchronously with its input as the event).

Every half second (or when kicked) the scheduler lists the schedules in its group and fires
those due by `ezgh_engine.clock.now()`, so a test with a `SkipClock` skips the wait. The list
is read from moto's store in this process (`_moto_summaries`), not through `ListSchedules`:
under `ezgh dev` every long sleep or wait holds a schedule (and every live run did, for its
one-year limit, before the hourly sweep), and listing hundreds of them through HTTP twice a
second was a tenth of the runtime's CPU. A one-time schedule is
fetched (`GetSchedule`, once per version) only when it comes due.
`at(...)` one-time schedules and `cron(...)` schedules (each occurrence once, in its time zone,
with `<aws.scheduler.scheduled-time>` in the input replaced as Scheduler does) are handled; an
expression kind is handled by a function in `_DUE`.
"""

from __future__ import annotations

import json
import logging
import re
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any
from zoneinfo import ZoneInfo

from ezgh_engine import clock
from ezgh_engine.adapters import aws
from ezgh_engine.core import cron
from ezgh_engine.local.account import ACCOUNT_ID, REGION
from ezgh_engine.local.moto_internals import MotoInternalsMissing
from ezgh_engine.local.pollers import Activity, Poller

log = logging.getLogger("ezgh.local.scheduler")

_AT = re.compile(r"^at\((\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2})\)$")


def _at_time(schedule: dict[str, Any]) -> datetime | None:
    """An `at(...)` schedule's time (UTC), from its local time in its time zone."""
    match = _AT.match(str(schedule.get("ScheduleExpression", "")).strip())
    if not match:
        return None
    zone = ZoneInfo(schedule.get("ScheduleExpressionTimezone") or "UTC")
    return datetime.fromisoformat(match.group(1)).replace(tzinfo=zone).astimezone(UTC)


def _due_at(schedule: dict[str, Any], now: datetime) -> bool:
    """An `at(...)` schedule is due once its local time, in its time zone, has passed."""
    when = _at_time(schedule)
    return when is not None and when <= now


def _cron_occurrence(schedule: dict[str, Any], now: datetime) -> datetime | None:
    """A `cron(...)` schedule's latest planned time at or before `now` (UTC), in its zone."""
    expression = cron.from_aws(schedule["ScheduleExpression"])
    if expression is None:
        return None
    try:
        return cron.latest(expression, schedule.get("ScheduleExpressionTimezone") or "UTC", now)
    except Exception as error:
        log.debug("scheduler: cannot evaluate %s: %s", schedule.get("Name"), error)
        return None


def _due_cron(schedule: dict[str, Any], now: datetime) -> bool:
    return _cron_occurrence(schedule, now) is not None


# Expression kind ("at", "cron", "rate") -> is it due now. Kinds not here are ignored.
_DUE: dict[str, Callable[[dict[str, Any], datetime], bool]] = {"at": _due_at, "cron": _due_cron}
# Recurring kinds: their latest occurrence; each occurrence fires once, and only occurrences
# after the schedule (this version of it) was first seen, as EventBridge does not backfill.
_RECURRING: dict[str, Callable[[dict[str, Any], datetime], datetime | None]] = {
    "cron": _cron_occurrence
}
# The Scheduler context attribute replaced in a target's input when it fires.
_SCHEDULED_TIME = "<aws.scheduler.scheduled-time>"


def _kind(expression: str) -> str:
    return expression.strip().split("(", 1)[0]


class Scheduler(Poller):
    """Fires the due schedules of one schedule group by sending their input to their target."""

    def __init__(self, *, group: str, activity: Activity, interval_seconds: float = 0.5) -> None:
        super().__init__("scheduler", activity)
        self.group = group
        self.interval_seconds = interval_seconds
        self._kick = threading.Event()
        self._scan_lock = threading.Lock()  # the thread and `wait_idle()` both scan
        # name -> (LastModificationDate, schedule) so unchanged schedules are fetched once.
        self._cache: dict[str, tuple[Any, dict[str, Any]]] = {}
        # (name, LastModificationDate) -> an `at()` schedule's time, parsed once.
        self._at_times: dict[tuple[str, Any], datetime | None] = {}
        self._fired: set[tuple[str, Any]] = set()  # fire once even if the delete fails
        # (name, LastModificationDate) of a recurring schedule -> engine time first seen.
        self._seen: dict[tuple[str, Any], datetime] = {}
        self._queue_urls: dict[str, str] = {}
        self.fired_count = 0

    def pause(self) -> None:
        super().pause()
        with self._scan_lock:
            self._cache.clear()
            self._at_times.clear()
            self._fired.clear()
            self._seen.clear()
            self._queue_urls.clear()

    def _wake(self) -> None:
        self._kick.set()

    def kick(self) -> None:
        """Scan soon rather than at the next tick (after a test skips the clock)."""
        self._kick.set()

    def _loop(self) -> None:
        while self._gate():
            self.scan()
            self._kick.wait(self.interval_seconds)
            self._kick.clear()

    def scan(self) -> int:
        """Fire every due schedule now; return how many fired."""
        if not self._running.is_set():
            return 0
        with self._scan_lock:
            try:
                summaries = self._list()
            except MotoInternalsMissing:
                raise  # never a scheduler that silently fires nothing
            except Exception as error:
                log.debug("scheduler: list failed: %s", error)
                return 0
            now = clock.now()
            fired = 0
            names = set()
            for summary in summaries:
                name = summary["Name"]
                names.add(name)
                if summary.get("State", "ENABLED") != "ENABLED":
                    continue
                if self._not_yet(summary, now):
                    continue
                schedule = self._get(summary)
                if schedule is None:
                    continue
                kind = _kind(schedule.get("ScheduleExpression", ""))
                is_due = _DUE.get(kind)
                key: tuple[str, Any] = (name, summary.get("LastModificationDate"))
                planned: datetime | None = None
                if kind in _RECURRING:
                    start = schedule.get("StartDate")
                    if not isinstance(start, datetime):  # no StartDate: from first seen
                        start = self._seen.setdefault(key, now).replace(microsecond=0)
                    planned = _RECURRING[kind](schedule, now)
                    if planned is None or planned < start:
                        continue
                    key = (name, planned)
                if is_due is None or key in self._fired or not is_due(schedule, now):
                    continue
                if self.faults is not None and not self.faults.timer_may_fire(key, now):
                    continue  # fires late (fault injection)
                with self.activity.track():
                    self._fire(schedule, planned)
                    if self.faults is not None and self.faults.timer_fires_twice(key):
                        self._fire(schedule, planned)
                if planned is not None:  # keep only the latest occurrence per schedule
                    self._fired = {k for k in self._fired if k[0] != name}
                self._fired.add(key)
                fired += 1
            for name in set(self._cache) - names:  # forget deleted schedules
                self._cache.pop(name, None)
            self._at_times = {k: t for k, t in self._at_times.items() if k[0] in names}
            self._fired = {key for key in self._fired if key[0] in names}
            self._seen = {key: t for key, t in self._seen.items() if key[0] in names}
            self.fired_count += fired
            return fired

    def _list(self) -> list[dict[str, Any]]:
        return _moto_summaries(self.group)

    def _not_yet(self, summary: dict[str, Any], now: datetime) -> bool:
        """A one-time (`at()`) schedule whose time has not come: nothing to fetch yet."""
        if _kind(str(summary.get("ScheduleExpression", ""))) != "at":
            return False
        key = (summary["Name"], summary.get("LastModificationDate"))
        if key not in self._at_times:
            self._at_times[key] = _at_time(summary)
        when = self._at_times[key]
        return when is not None and when > now

    def _get(self, summary: dict[str, Any]) -> dict[str, Any] | None:
        name, modified = summary["Name"], summary.get("LastModificationDate")
        cached = self._cache.get(name)
        if cached is not None and cached[0] == modified:
            return cached[1]
        try:
            schedule = aws.client("scheduler").get_schedule(GroupName=self.group, Name=name)
        except Exception as error:  # deleted between list and get
            log.debug("scheduler: get %s failed: %s", name, error)
            return None
        self._cache[name] = (modified, schedule)
        return schedule

    def _fire(self, schedule: dict[str, Any], planned: datetime | None = None) -> None:
        name = schedule["Name"]
        target = dict(schedule.get("Target", {}))
        arn = str(target.get("Arn", ""))
        if isinstance(target.get("Input"), str) and _SCHEDULED_TIME in target["Input"]:
            when = (planned or clock.now()).astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
            target["Input"] = target["Input"].replace(_SCHEDULED_TIME, when)
        if arn.startswith("arn:aws:sqs:"):
            self._send_sqs(arn, target)
        elif arn.startswith("arn:aws:lambda:"):
            # Scheduler invokes a Lambda target asynchronously, with the input as its event
            # (`local.lambda_async` answers it as Lambda would).
            aws.client("lambda").invoke(
                FunctionName=arn,
                InvocationType="Event",
                Payload=(target.get("Input") or json.dumps({})).encode(),
            )
        else:
            log.warning(
                "scheduler: %s targets %s, which the local scheduler cannot call", name, arn
            )
        log.debug("scheduler: fired %s", name)
        # A recurring schedule completes only at its EndDate, never after one fire.
        if planned is None and schedule.get("ActionAfterCompletion") == "DELETE":
            try:
                aws.client("scheduler").delete_schedule(GroupName=self.group, Name=name)
            except Exception as error:  # already gone; `_fired` keeps it from firing again
                log.debug("scheduler: delete %s failed: %s", name, error)
            self._cache.pop(name, None)

    def _send_sqs(self, arn: str, target: dict[str, Any]) -> None:
        sqs = aws.client("sqs")
        url = self._queue_urls.get(arn)
        if url is None:
            _, _, _, _, account, queue = arn.split(":", 5)
            url = sqs.get_queue_url(QueueName=queue, QueueOwnerAWSAccountId=account)["QueueUrl"]
            self._queue_urls[arn] = url
        params: dict[str, Any] = {
            "QueueUrl": url,
            # Scheduler sends its target input verbatim; without one, an empty JSON object.
            "MessageBody": target.get("Input") or json.dumps({}),
        }
        group_id = target.get("SqsParameters", {}).get("MessageGroupId")
        if group_id:
            params["MessageGroupId"] = group_id
        sqs.send_message(**params)


def _moto_summaries(group: str) -> list[dict[str, Any]]:
    """The schedules of `group` in moto's store (this process's: the emulator's server
    runs here), each as `ListSchedules` names it (`Name`, `State`, `LastModificationDate`,
    moto's own value), with its expression and time zone: enough to know which are due
    without a request per scan, nor one per schedule until it is."""
    try:
        from moto.scheduler.models import scheduler_backends
    except ImportError as exc:  # moto's internals moved: see the pin in pyproject.toml
        raise MotoInternalsMissing("moto.scheduler.models.scheduler_backends") from exc
    found = scheduler_backends[ACCOUNT_ID][REGION].schedule_groups.get(group)
    if found is None:
        return []
    for _ in range(10):  # the server's threads may add or delete one meanwhile: read again
        try:
            schedules = list(found.schedules.values())
            break
        except RuntimeError:
            continue
    else:
        schedules = []
    return [
        {
            "Name": schedule.name,
            "State": schedule.state,
            "LastModificationDate": schedule.last_modified_date,
            "ScheduleExpression": schedule.schedule_expression,
            "ScheduleExpressionTimezone": schedule.schedule_expression_timezone,
        }
        for schedule in schedules
    ]
