"""Two places to run one workflow behaviour: the SDK's test kit (`KitHarness`, on
`ezgh_workflows.testing.WorkflowEnvironment`) and the real engine in process (`EngineHarness`,
on tests/sdk/sdk_engine.py: the steps handler, the invoker, the stream and the timers on a
skip clock). `behaviours.py` is written against the `Harness` methods only, so a behaviour
that passes on both means the kit does what the engine does.

Runs are read as GetRun answers them (the kit's `RunHandle.to_api`, the engine's API).
"""

from __future__ import annotations

import math
import re
import uuid
from datetime import datetime, timedelta
from typing import Any, Protocol

from ezgh_engine import clock
from ezgh_engine.service import waits
from ezgh_workflows import Workflow
from ezgh_workflows.testing import InvalidState, WorkflowEnvironment
from sdk_engine import Engine, make_app

KIT_QUEUE = "0199a000-0000-7000-8000-000000000001"


class Harness(Protocol):
    name: str
    started: list[str]  # the runs the behaviour started, in order

    def serve(self, *workflows: Workflow) -> None: ...
    def start(
        self, workflow: str, input: Any = None, *, timeout_seconds: int | None = None
    ) -> str: ...
    def run(self, run_id: str) -> dict[str, Any]: ...
    def wait(self, run_id: str) -> dict[str, Any]: ...
    def skip(self, seconds: float) -> None: ...
    def now(self) -> datetime: ...
    def complete_callback(self, run_id: str, step_id: str, body: Any) -> int: ...
    def send_message(self, queue_id: str, key: str, body: str) -> int: ...
    def cancel(self, run_id: str) -> None: ...
    def retry(self, run_id: str) -> None: ...
    def queue_id(self) -> str: ...


class KitHarness:
    """The test kit."""

    name = "kit"

    def __init__(self) -> None:
        self.env = WorkflowEnvironment(seed=7)
        self.started: list[str] = []

    def serve(self, *workflows: Workflow) -> None:
        self.env.register(*workflows)

    def start(self, workflow: str, input: Any = None, *, timeout_seconds: int | None = None) -> str:
        run_id = self.env.start(workflow, input, timeout_seconds=timeout_seconds).id
        self.started.append(run_id)
        return run_id

    def run(self, run_id: str) -> dict[str, Any]:
        return self.env.run(run_id).to_api()

    def wait(self, run_id: str) -> dict[str, Any]:
        return self.env.run(run_id).wait().to_api()

    def skip(self, seconds: float) -> None:
        self.env.skip(seconds)

    def now(self) -> datetime:
        return self.env.now

    def complete_callback(self, run_id: str, step_id: str, body: Any) -> int:
        try:
            self.env.run(run_id).complete_callback(step_id, body)
        except InvalidState:
            return 409
        return 200

    def send_message(self, queue_id: str, key: str, body: str) -> int:
        return self.env.send_message(queue_id, key, body)

    def cancel(self, run_id: str) -> None:
        self.env.run(run_id).cancel()

    def retry(self, run_id: str) -> None:
        self.env.run(run_id).retry()

    def queue_id(self) -> str:
        return KIT_QUEUE


class EngineHarness:
    """The real engine, through its API and its handlers, on its skip clock."""

    name = "engine"

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.started: list[str] = []
        self.workflows: list[str] = []  # of the runs started, in order

    def serve(self, *workflows: Workflow) -> None:
        make_app(self.engine, *workflows)

    def start(self, workflow: str, input: Any = None, *, timeout_seconds: int | None = None) -> str:
        self.engine._sync()
        body: dict[str, Any] = {"appId": self.engine.plant.app_id, "workflow": workflow}
        body["input"] = input
        if timeout_seconds is not None:
            body["timeoutSeconds"] = timeout_seconds
        answer = self.engine.api("POST", "/runs", body=body)
        assert answer.status == 201, answer.body
        self.engine.run_id = str(answer.body["id"])
        self.started.append(self.engine.run_id)
        self.workflows.append(workflow)
        self._settle()
        return self.engine.run_id

    def run(self, run_id: str) -> dict[str, Any]:
        answer = self.engine.api("GET", f"/runs/{run_id}")
        assert answer.status == 200, answer.body
        return dict(answer.body)

    def wait(self, run_id: str) -> dict[str, Any]:
        self.engine.pump(lambda: self.engine.ended(run_id), limit=400)
        self._settle()
        return self.run(run_id)

    def skip(self, seconds: float) -> None:
        """Move the clock ``seconds`` on, handing over each message when it falls due."""
        target = clock.now_ms() + math.ceil(seconds * 1000)
        engine = self.engine
        while True:
            self._settle()
            outbox = engine._outbox
            if not outbox or outbox[0].due_ms > target:
                break
            engine.clock.advance(timedelta(milliseconds=max(0, outbox[0].due_ms - clock.now_ms())))
        engine.clock.advance(timedelta(milliseconds=max(0, target - clock.now_ms())))
        self._settle()

    def now(self) -> datetime:
        return clock.now()

    def complete_callback(self, run_id: str, step_id: str, body: Any) -> int:
        self.engine.run_id = run_id
        url = self.engine.steps[step_id]["url"]
        from tests.api.conftest import call

        answer = call("POST", "/v1/callbacks/" + url.rsplit("/v1/callbacks/", 1)[1], body=body)
        self._settle()
        return int(answer.status)

    def send_message(self, queue_id: str, key: str, body: str) -> int:
        message = {
            "messageId": str(uuid.uuid4()),
            "body": body,
            "attributes": {},
            "sentAt": clock.iso(clock.now()),
            "queueId": queue_id,
        }
        # As a resume subscription of each workflow started here (one targets one workflow).
        resumed = sum(
            waits.resume_message_waiters(
                self.engine.project_id,
                queue_id,
                key,
                message,
                app_id=self.engine.plant.app_id,
                workflow=workflow,
            )
            for workflow in dict.fromkeys(self.workflows)
        )
        self._settle()
        return resumed

    def cancel(self, run_id: str) -> None:
        answer = self.engine.api("POST", f"/runs/{run_id}/cancel")
        assert answer.status == 202, answer.body
        self._settle()

    def retry(self, run_id: str) -> None:
        answer = self.engine.api("POST", f"/runs/{run_id}/retry")
        assert answer.status in (200, 202), answer.body
        self._settle()

    def queue_id(self) -> str:
        answer = self.engine.api("POST", "/queues", body={"name": f"q{clock.now_ms()}"})
        assert answer.status == 201, answer.body
        return str(answer.body["id"])

    def _settle(self) -> None:
        """Everything due now, as the kit's `settle` does (the clock does not move)."""
        for _ in range(200):
            self.engine.settle()
            self.engine.plant.drain_stream()
            if not self.engine._outbox or self.engine._outbox[0].due_ms > clock.now_ms():
                return
        raise AssertionError("the engine kept working")


UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)")
# What differs between two engines by nature: when, and under which IDs.
VOLATILE = {"id", "appId", "createdAt", "startedAt", "endedAt", "wakeAt", "childRunId"}


def records(h: Harness) -> list[Any]:
    """Every run the behaviour started (and their children), as GetRun shows them, with
    times and IDs blanked: what two engines doing the same thing both record."""
    seen: list[str] = []
    queue = list(h.started)
    while queue:
        run_id = queue.pop(0)
        if run_id not in seen:
            seen.append(run_id)
            queue += [s["childRunId"] for s in h.run(run_id)["steps"] if s.get("childRunId")]
    return [_blank(h.run(run_id)) for run_id in seen]


def _blank(value: Any, within: str = "") -> Any:
    """``value`` without its volatile fields (a step keeps its ``id``: that is its identity),
    and with every UUID and time in its text blanked."""
    if isinstance(value, dict):
        keep = {"id"} if within == "steps" else set()
        return {k: _blank(v, k) for k, v in value.items() if k not in VOLATILE - keep}
    if isinstance(value, list):
        return [_blank(item, within) for item in value]
    if isinstance(value, str):
        return TIME.sub("<time>", UUID.sub("<id>", value))
    return value
