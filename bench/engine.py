"""Drive bench workflows on a `LocalRuntime` and record what each run costs."""

from __future__ import annotations

import json
import logging
import re
import tempfile
import time
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

from ezgh_engine.adapters import aws
from ezgh_engine.clock import SkipClock
from ezgh_engine.local import emulator
from ezgh_engine.local.account import ACCOUNT_ID, REGION
from ezgh_engine.local.handlers import import_handler
from ezgh_engine.local.runtime import LocalRuntime
from ezgh_engine.topology import TOPOLOGY
from ezgh_workflows import WorkflowsClient

from bench import workflows
from bench.cost import Bill, bill
from bench.instrument import AwsCall, CountingApp, Invocation, Recorder, item_size, origin
from bench.keys import projected, table_of
from bench.telemetry import TelemetryMeter

LONG_SLEEP = "1h"  # past SQS's 15-minute delay: an EventBridge Scheduler at() schedule
SHORT_SLEEP = "2s"  # any sleep up to 15 minutes: one SQS message with DelaySeconds

# A seeded step's result: `{"i": k, "pad": "x..."}` of about this many bytes of JSON (a
# realistic small step result: an ID, a few fields), as the `bench` workflow's steps return
# `{"i": k}` padded.
SEEDED_VALUE_BYTES = 256


# DynamoDB bills each stored item (and each index copy) 100 bytes over its own size.
ITEM_OVERHEAD_BYTES = 100


@dataclass
class Stored:
    """What one run keeps while it is retained (`Engine.stored`)."""

    items: int = 0
    table_bytes: int = 0
    index_bytes: int = 0
    s3_bytes: int = 0


@dataclass
class RunResult:
    run_id: str
    steps: int
    total: Bill
    phases: dict[str, Bill]
    stamps: list[float]
    seconds: float
    sleep_index: int | None  # the step after which the sleep came (for latency gaps)
    # What was recorded, as seen (bench/scale.py attributes it to keys and functions).
    calls: list[AwsCall] = field(default_factory=list)
    invocations: list[Invocation] = field(default_factory=list)
    sizes: dict[tuple[str, str, str], int] = field(default_factory=dict)
    # The ids of what existed before the run began (its project, app, API key...).
    identities: set[str] = field(default_factory=set)


@dataclass
class FanResult:
    """A gather of `width` parallel steps: whether the run completed, what it cost."""

    run_id: str
    width: int
    completed: bool
    status: str
    steps_recorded: int
    total: Bill
    seconds: float
    main_invocations: int
    branch_invocations: int
    error: str | None = None


@dataclass
class EventPages:
    """ListRunEvents over a whole run, page after page: each page's bill."""

    run_id: str
    events: int
    limit: int
    pages: list[Bill]


class Engine:
    """One local runtime with the bench app, every handler timed, every request observed."""

    def __init__(self) -> None:
        self.recorder = Recorder()
        self.clock = SkipClock()
        overrides = {
            f.key: self.recorder.wrap_handler(f.key, import_handler(f.handler))
            for f in TOPOLOGY.functions
        }
        self._state = tempfile.TemporaryDirectory(prefix="ezgh-bench-")
        self.runtime = LocalRuntime(
            port=0,
            state_dir=self._state.name,
            apps=[("bench", CountingApp(workflows.app, self.recorder))],
            clock=self.clock,
            handler_overrides=overrides,
            echo=lambda line: None,
        )
        self._stop_observing = lambda: None
        self.telemetry = TelemetryMeter(Path(self._state.name) / "telemetry")

    def __enter__(self) -> Engine:
        for noisy in ("ezgh", "aws_lambda_powertools", "botocore", "werkzeug"):
            logging.getLogger(noisy).setLevel(logging.ERROR)
        self.telemetry.__enter__()
        self.runtime.start()
        scheduler = self.runtime.scheduler
        assert scheduler is not None
        fire = scheduler._fire

        def counted_fire(schedule: dict[str, Any], planned: Any = None) -> None:
            with origin("scheduler"):
                self.recorder.fired(schedule.get("Name", ""))
                fire(schedule, planned)

        scheduler._fire = counted_fire  # type: ignore[method-assign]
        self._stop_observing = aws.observe(self.recorder.on_aws)
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop_observing()
        self.runtime.stop()
        self.telemetry.__exit__()
        self._state.cleanup()

    def client(self) -> WorkflowsClient:
        rt = self.runtime
        return WorkflowsClient(
            api_key=rt.api_key,
            organization_id=rt.org_id,
            project_id=rt.project_id,
            base_url=rt.api_url,
            timeout=900.0,  # a page of a long run's events, read whole before, takes long
        )

    def _count(self, service: str, operation: str) -> int:
        return sum(
            1
            for c in self.recorder.snapshot()[0]
            if c.service == service and c.operation == operation
        )

    def _invokes(self) -> int:
        return sum(1 for r in self.recorder.snapshot()[2] if r.kind == "invoke")

    def run(
        self,
        steps: int,
        sleep: str | None = LONG_SLEEP,
        sleep_after: int | None = None,
        timeout: float = 300.0,
        step_ms: int = 0,
    ) -> RunResult:
        """Start one `bench` run on a fresh state and follow it to its end."""
        rt, rec = self.runtime, self.recorder
        rt.reset()
        client = self.client()
        app_id = str(rt.apps["bench"].record["id"])
        after = steps // 2 if sleep_after is None else sleep_after
        payload: dict[str, Any] = {"n": steps}
        if sleep:
            payload.update(sleep=sleep, sleepAfter=after)
        if step_ms:
            payload["stepMs"] = step_ms
        identities = self._identities()
        rec.clear()
        rec.phase = "start"
        rec.active = True
        self.telemetry.take()
        began = time.perf_counter()
        try:
            run_id = str(client.start_run(app_id, "bench", payload)["id"])
            if sleep == LONG_SLEEP:
                # One schedule: the 1h sleep's (a run's year limit is the hourly sweep's).
                rt.wait_for(lambda: self._count("scheduler", "CreateSchedule") >= 1, timeout)
                rt.wait_idle(timeout)
                rec.phase = "resume"
                self.clock.advance(timedelta(hours=1, minutes=5))
                if rt.scheduler is not None:
                    rt.scheduler.kick()
            invokes = 2 if sleep else 1
            rt.wait_for(lambda: self._invokes() >= invokes, timeout)
            rt.wait_idle(timeout)
            seconds = time.perf_counter() - began
        finally:
            rec.active = False
        logged = self.telemetry.take()
        run = client.get_run(run_id)
        if run.get("status") != "completed" or run.get("output", {}).get("steps") != steps:
            raise RuntimeError(f"bench run {run_id} ended {run.get('status')}: {run}")
        self._learn_sizes()
        calls, invocations, apps, fires = rec.snapshot()
        phases = {}
        for phase in sorted({c.phase for c in calls} | {i.phase for i in invocations}):
            phases[phase] = bill(
                [c for c in calls if c.phase == phase],
                [i for i in invocations if i.phase == phase],
                [a for a in apps if a.phase == phase],
                fires[phase],
                rec.sizes,
            )
        total = bill(calls, invocations, apps, sum(fires.values()), rec.sizes, logged)
        return RunResult(
            run_id,
            steps,
            total,
            phases,
            list(workflows.STAMPS.pop(run_id, [])),
            seconds,
            after if sleep else None,
            calls,
            invocations,
            dict(rec.sizes),
            identities,
        )

    def run_seeded(
        self, history: int, value_bytes: int = SEEDED_VALUE_BYTES, timeout: float = 1800.0
    ) -> RunResult:
        """The invocation after a sleep with `history` completed steps recorded before it,
        without running them: a `history` run sleeps first, the bench writes the steps'
        items as the engine writes a completed step (`seed_steps`), the run replays them
        and sleeps again, and the invocation after that second sleep is what is measured
        (phase `resume`), as `run` measures a run of `history` real steps."""
        rt, rec = self.runtime, self.recorder
        rt.reset()
        client = self.client()
        app_id = str(rt.apps["bench"].record["id"])
        rec.clear()
        rec.phase = "seed"
        rec.active = True
        began = time.perf_counter()
        try:
            run_id = str(client.start_run(app_id, "history", {"n": history})["id"])
            rt.wait_for(lambda: self._count("scheduler", "CreateSchedule") >= 1, timeout)
            rt.wait_idle(timeout)
            seed_steps(rt.provisioned.tables["runs"], run_id, history, value_bytes)
            rec.phase = "replay"  # the invocation that replays the seeded steps, then sleeps
            self._wake()
            rt.wait_for(lambda: self._count("scheduler", "CreateSchedule") >= 2, timeout)
            rt.wait_idle(timeout)
            rec.clear(keep_sizes=True)
            rec.phase = "resume"
            self._wake()
            rt.wait_for(lambda: self._invokes() >= 1, timeout)
            rt.wait_idle(timeout)
            seconds = time.perf_counter() - began
        finally:
            rec.active = False
        run = client.get_run(run_id)
        if run.get("status") != "completed" or run.get("output", {}).get("steps") != history + 1:
            raise RuntimeError(f"seeded run {run_id} ended {run.get('status')}: {run}")
        self._learn_sizes()
        calls, invocations, apps, fires = rec.snapshot()
        resume = bill(calls, invocations, apps, sum(fires.values()), rec.sizes)
        return RunResult(
            run_id,
            history + 1,
            resume,
            {"resume": resume},
            [],
            seconds,
            history,
            calls,
            invocations,
            dict(rec.sizes),
        )

    def _wake(self) -> None:
        """Past a 1h sleep: the clock skips, the scheduler fires what is due."""
        self.clock.advance(timedelta(hours=1, minutes=5))
        if self.runtime.scheduler is not None:
            self.runtime.scheduler.kick()

    def run_fan(self, width: int, timeout: float = 600.0) -> FanResult:
        """Start one `fan` run (a gather of `width` parallel steps) on a fresh state and
        follow it until nothing is left to do. A run that never completes (it stays
        `running`, nothing owed) is answered as such, with what it cost until then."""
        rt, rec = self.runtime, self.recorder
        rt.reset()
        client = self.client()
        app_id = str(rt.apps["bench"].record["id"])
        rec.clear()
        rec.phase = "fan"
        rec.active = True
        began = time.perf_counter()
        error: str | None = None
        emulator.sqs_on_engine_clock(True)
        try:
            run_id = str(client.start_run(app_id, "fan", {"n": width})["id"])
            try:
                error = self._follow(run_id, timeout)
            except TimeoutError as exc:
                error = str(exc)
            seconds = time.perf_counter() - began
        finally:
            rec.active = False
            emulator.sqs_on_engine_clock(False)
        run = client.get_run(run_id)
        done = run.get("status") == "completed" and run.get("output", {}).get("steps") == width
        if not done and error is None:
            error = f"ended {run.get('status')}: {run.get('error')}"
        self._learn_sizes()
        calls, invocations, apps, fires = rec.snapshot()
        return FanResult(
            run_id,
            width,
            done,
            str(run.get("status")),
            len(run.get("steps") or []),
            bill(calls, invocations, apps, sum(fires.values()), rec.sizes),
            seconds,
            sum(1 for a in apps if a.kind == "invoke"),
            sum(1 for a in apps if a.kind == "branch"),
            error,
        )

    def _follow(self, run_id: str, timeout: float) -> str | None:
        """Wait until the run ends, skipping the clock to the next delayed SQS message
        whenever nothing else is going on (what waiting would do, without the wait); the
        reason when it never ends (nothing owed while it still runs)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self._quiet() or not self._quiet(settle=0.1):
                time.sleep(0.02)
                continue
            if self._status(run_id) != "running":
                return None
            due = emulator.sqs_next_due_ms()
            if due is None:
                return "still running with nothing owed (stuck)"
            self.clock.advance(timedelta(milliseconds=due - emulator.sqs_clock_ms() + 5))
            _wake_receivers()
        raise TimeoutError(f"run {run_id} did not end within {timeout:.0f} s")

    def _quiet(self, settle: float = 0.0) -> bool:
        """Nothing running (no handler, every poller caught up) and no message visible:
        only what is delayed or in flight is left (after `settle` seconds, again)."""
        if settle:
            time.sleep(settle)
        rt = self.runtime
        busy, _ = rt.activity.snapshot()
        if busy or any(not p.idle for p in rt.pollers):
            return False
        sqs = aws.client("sqs")
        for url in rt.provisioned.queue_urls.values():
            attrs = sqs.get_queue_attributes(
                QueueUrl=url, AttributeNames=["ApproximateNumberOfMessages"]
            )["Attributes"]
            if int(attrs.get("ApproximateNumberOfMessages", 0)):
                return False
        return True

    def _status(self, run_id: str) -> str:
        """The run's status, read by the bench itself (not billed: no handler's request)."""
        table = self.runtime.provisioned.tables["runs"]
        answer = aws.client("dynamodb").get_item(
            TableName=table, Key={"pk": {"S": f"RUN#{run_id}"}, "sk": {"S": "RUN"}}
        )
        return str(answer.get("Item", {}).get("status", {}).get("S", "gone"))

    def list_events(self, run_id: str, limit: int = 100) -> EventPages:
        """List every event of an ended run through the API, `limit` a page, each page
        billed on its own (the run's state is kept: call right after `run`)."""
        client, rec = self.client(), self.recorder
        pages: list[Bill] = []
        events = 0
        cursor: str | None = None
        self._learn_sizes()  # listing changes no item: learned once
        while True:
            rec.clear(keep_sizes=True)
            rec.phase = "events"
            rec.active = True
            try:
                page = client.list_run_events(run_id, cursor=cursor, limit=limit)
            finally:
                rec.active = False
            calls, invocations, apps, fires = rec.snapshot()
            pages.append(bill(calls, invocations, apps, sum(fires.values()), rec.sizes))
            events += len(page["events"])
            cursor = page.get("nextCursor")
            if not cursor:
                return EventPages(run_id, events, limit, pages)

    def stored(self, run_id: str) -> Stored:
        """What an ended run keeps while it is retained (harness reads, not billed): its
        items in the runs table (DynamoDB bills 100 bytes over each item's size), their copies
        in the table's indexes (the index keys and projected attributes, with the table's keys
        and the same 100 bytes), and its objects in the payload bucket."""
        ddb = aws.client("dynamodb")
        physical = self.runtime.provisioned.tables["runs"]
        table = table_of(physical)
        stored = Stored()
        pages = ddb.get_paginator("query").paginate(
            TableName=physical,
            KeyConditionExpression="pk = :pk",
            ExpressionAttributeValues={":pk": {"S": f"RUN#{run_id}"}},
        )
        for item in (i for page in pages for i in page.get("Items", [])):
            stored.items += 1
            stored.table_bytes += item_size(item) + ITEM_OVERHEAD_BYTES
            for index in table.indexes if table else ():
                if index.partition_key not in item:
                    continue
                names = projected(index)
                kept = item if names is None else {k: v for k, v in item.items() if k in names}
                stored.index_bytes += item_size(kept) + ITEM_OVERHEAD_BYTES
        s3 = aws.client("s3")
        bucket = self.runtime.provisioned.env[TOPOLOGY.bucket_env_var]
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket):
            for obj in page.get("Contents", []):
                if f"/{run_id}/" in str(obj["Key"]):
                    stored.s3_bytes += int(obj["Size"])
        return stored

    def retention(self, run_id: str, timeout: float = 120.0) -> Bill:
        """What deleting an ended run costs once DynamoDB's TTL removes its run item (30
        days after its end): the stream's REMOVE record makes the stream function purge the
        rest (`service/retention.py`). The TTL delete itself is free and is not counted
        (moto never expires items; the harness deletes the item as the TTL would)."""
        rt, rec = self.runtime, self.recorder
        rec.clear()
        rec.phase = "retention"
        rec.active = True
        ddb = aws.client("dynamodb")
        table = rt.provisioned.tables["runs"]
        try:
            # No origin: a harness request, not billed (as DynamoDB's TTL deletion is free).
            ddb.delete_item(TableName=table, Key={"pk": {"S": f"RUN#{run_id}"}, "sk": {"S": "RUN"}})

            def purged() -> bool:
                left = ddb.query(
                    TableName=table,
                    KeyConditionExpression="pk = :pk",
                    ExpressionAttributeValues={":pk": {"S": f"RUN#{run_id}"}},
                    Select="COUNT",
                )
                return int(left["Count"]) == 0

            rt.wait_for(purged, timeout)
            rt.wait_idle(timeout)
        finally:
            rec.active = False
        calls, invocations, apps, fires = rec.snapshot()
        return bill(calls, invocations, apps, sum(fires.values()), rec.sizes)

    def _identities(self) -> set[str]:
        """Every id in the keys of the items there are (harness reads, not counted)."""
        found: set[str] = set()
        ddb = aws.client("dynamodb")
        for table in self.runtime.provisioned.tables.values():
            for page in ddb.get_paginator("scan").paginate(TableName=table):
                for item in page.get("Items", []):
                    for value in item.values():
                        found.update(_UUID.findall(str(value.get("S", ""))))
        return found

    def _learn_sizes(self) -> None:
        """Read the final item sizes (harness requests, not counted): an UpdateItem's WRUs
        depend on the size of the item it updates, which the request does not carry."""
        ddb = aws.client("dynamodb")
        for table in self.runtime.provisioned.tables.values():
            try:
                pages = ddb.get_paginator("scan").paginate(TableName=table)
                items = [item for page in pages for item in page.get("Items", [])]
            except Exception:
                continue
            self.recorder.learn_table(table, items)


def seed_steps(table: str, run_id: str, history: int, value_bytes: int) -> None:
    """Write `history` completed `run` steps (`s#1`...) into a run, each item as the engine
    writes a completed step (its start and end, its result inline, its event's ID; the
    attributes of `adapters/run_writes` `_step_values` and a step end), ordered after what
    the run recorded so far. Harness writes: not counted."""
    from ezgh_engine import clock, ids
    from ezgh_engine.adapters import ddb

    client = aws.client("dynamodb")
    ttl = int(clock.now().timestamp()) + 365 * 24 * 3600
    at = clock.iso(clock.now())
    pad = max(0, value_bytes - len('{"i":0000,"pad":""}'))
    batch: list[dict[str, Any]] = []
    for k in range(history):
        item = {
            "pk": f"RUN#{run_id}",
            "sk": f"STEP#s#{k + 1}",
            "type": "step",
            "runId": run_id,
            "stepId": f"s#{k + 1}",
            "name": "s",
            "kind": "run",
            "status": "completed",
            "attempt": 1,
            "order": ids.time_ordered_id(),
            "startedAt": at,
            "startEpoch": 1,
            "ttl": ttl,
            "evtId": ids.time_ordered_id(),
            "evtAttempt": 1,
            "endedAt": at,
            "output": json.dumps({"i": k, "pad": "x" * pad}, separators=(",", ":")),
        }
        batch.append({"PutRequest": {"Item": ddb.to_item(item)}})
        if len(batch) == 25 or k == history - 1:
            left = {table: batch}
            while left:
                answer = client.batch_write_item(RequestItems=left)
                left = answer.get("UnprocessedItems") or {}
            batch = []


_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def _wake_receivers() -> None:
    """Long polls re-check their queue at once after a skip (instead of within a second)."""
    from moto.sqs.models import sqs_backends

    for queue in list(sqs_backends[ACCOUNT_ID][REGION].queues.values()):
        with queue._messages_lock:
            queue._messages_lock.notify_all()
