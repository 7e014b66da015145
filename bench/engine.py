"""Drive bench workflows on a `LocalRuntime` and record what each run costs."""

from __future__ import annotations

import logging
import tempfile
import time
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

from ezgh_engine.adapters import aws
from ezgh_engine.clock import SkipClock
from ezgh_engine.local.handlers import import_handler
from ezgh_engine.local.runtime import LocalRuntime
from ezgh_engine.topology import TOPOLOGY
from ezgh_workflows import WorkflowsClient

from bench import workflows
from bench.cost import Bill, bill
from bench.instrument import CountingApp, Recorder, origin
from bench.telemetry import TelemetryMeter

LONG_SLEEP = "1h"  # past SQS's 15-minute delay: an EventBridge Scheduler at() schedule
SHORT_SLEEP = "2s"  # any sleep up to 15 minutes: one SQS message with DelaySeconds


@dataclass
class RunResult:
    run_id: str
    steps: int
    total: Bill
    phases: dict[str, Bill]
    stamps: list[float]
    seconds: float
    sleep_index: int | None  # the step after which the sleep came (for latency gaps)


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
        )

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
