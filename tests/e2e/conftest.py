"""One local runtime (moto server, pollers, API, the test app) per session, reset per test.

The runtime's clock is a `SkipClock` that moto's SQS timers follow too, and while a test
runs, `IdleSkipper` skips it over the short waits (a retry's backoff, a short sleep's queue
delay, a visibility timeout) whenever nothing else can happen first: those tests used to wait
for them in real time.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator
from datetime import timedelta

import pytest
from ezgh_engine import config
from ezgh_engine.adapters import aws
from ezgh_engine.clock import SkipClock
from ezgh_engine.local import call_log
from ezgh_engine.local.emulator import (
    ENV_DYNAMODB_URL,
    sqs_clock_ms,
    sqs_next_due_ms,
    sqs_on_engine_clock,
)
from ezgh_engine.local.runtime import LocalRuntime
from ezgh_workflows import WorkflowsClient

from tests.clients import workflows_client
from tests.ddblocal import BACKENDS
from tests.e2e import workflows_app

# Skip at most this far (engine time) at once: every retry backoff, queue delay and
# visibility timeout the tests wait on is shorter, and the waits a test skips itself (a
# ten-minute backoff, a day-long sleep, a wait's timeout) are longer, so they stay the test's.
SKIP_HORIZON = timedelta(seconds=60)


class IdleSkipper:
    """A thread that, whenever the engine is quiet (no handler or API call running, every
    poller caught up, no message visible) and the next thing due is an SQS message (delayed
    or invisible) within `SKIP_HORIZON`, moves the clock to it: nothing could happen before
    it, so this is what waiting would do, without the wait. Quiet must hold before and after
    a short settle, and the skip goes to the next due time read after it (a message sent
    meanwhile may be due sooner)."""

    def __init__(self, runtime: LocalRuntime, clock: SkipClock) -> None:
        self.runtime = runtime
        self.clock = clock
        self.skipped = timedelta()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="idle-skipper", daemon=True)

    def __enter__(self) -> IdleSkipper:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)

    def _loop(self) -> None:
        while not self._stop.wait(0.05):
            with contextlib.suppress(Exception):  # (a reset or teardown under it)
                self._skip_once()

    def _quiet(self) -> bool:
        """Nothing running (a handler or an API call), every poller caught up, nothing
        visible. (A test's own API reads may come and go: a write among them shows as a
        poller behind or a message visible at the second look.)"""
        busy, _ = self.runtime.activity.snapshot()
        if busy or any(not p.idle for p in self.runtime.pollers):
            return False
        sqs = aws.client("sqs")
        urls = list(self.runtime.provisioned.queue_urls.values())
        urls += [p.queue_url for p in self.runtime.subscriptions.pollers.values()]
        for url in urls:
            attrs = sqs.get_queue_attributes(
                QueueUrl=url, AttributeNames=["ApproximateNumberOfMessages"]
            )["Attributes"]
            if int(attrs.get("ApproximateNumberOfMessages", 0)):
                return False
        return True

    def _gap(self) -> timedelta | None:
        """How far ahead the next SQS message is due, if within the horizon."""
        due = sqs_next_due_ms()
        if due is None:
            return None
        gap = timedelta(milliseconds=due - sqs_clock_ms())
        return gap if timedelta() < gap <= SKIP_HORIZON else None

    def _skip_once(self) -> None:
        if self._gap() is None or not self._quiet() or self._stop.wait(0.05):
            return
        if not self._quiet():
            return
        gap = self._gap()  # again: a message sent meanwhile may be due sooner
        if gap is None:
            return
        step = gap + timedelta(milliseconds=5)
        self.clock.advance(step)
        self.skipped += step
        _wake_receivers()


def _wake_receivers() -> None:
    """Long polls re-check their queue at once (instead of within a second)."""
    from ezgh_engine.local.account import ACCOUNT_ID, REGION
    from moto.sqs.models import sqs_backends

    for queue in list(sqs_backends[ACCOUNT_ID][REGION].queues.values()):
        with queue._messages_lock:
            queue._messages_lock.notify_all()


# Package scope: moto keeps its state in process globals, so this runtime must be gone
# before another suite (tests/local) starts an emulator of its own. Every test runs on
# moto's DynamoDB and (marker `ddblocal`) on AWS's DynamoDB Local, SQS, S3 and Scheduler
# staying on moto.
@pytest.fixture(scope="package", params=BACKENDS)
def runtime(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LocalRuntime]:
    saved = os.environ.pop(ENV_DYNAMODB_URL, None)
    if request.param == "ddblocal":
        os.environ[ENV_DYNAMODB_URL] = request.getfixturevalue("dynamodb_local").url
    # Record every function's AWS requests for tests/infra/test_iam_calls.py (tests/conftest.py).
    recording = os.environ.get("EZGH_E2E_CALL_LOG") and not os.environ.get(call_log.ENV_CALL_LOG)
    if recording:
        os.environ[call_log.ENV_CALL_LOG] = os.environ["EZGH_E2E_CALL_LOG"]
    rt = LocalRuntime(
        port=0,
        state_dir=tmp_path_factory.mktemp("ezgh"),
        apps=[("e2e", workflows_app.served)],
        clock=SkipClock(),
    )
    try:
        rt.start()
        yield rt
    finally:
        rt.stop()
        os.environ.pop(ENV_DYNAMODB_URL, None)
        if saved is not None:
            os.environ[ENV_DYNAMODB_URL] = saved
        if recording:
            os.environ.pop(call_log.ENV_CALL_LOG, None)


@pytest.fixture()
def engine(request: pytest.FixtureRequest, runtime: LocalRuntime) -> Iterator[LocalRuntime]:
    runtime.reset()
    workflows_app.reset()
    assert isinstance(runtime.clock, SkipClock)
    # `real_time`: something outside the engine works in real time meanwhile (a pull worker
    # heartbeating its lease, the canary timing a sleep): skipping would not be waiting.
    # Their SQS timers stay on the wall clock too: a skip of the engine clock past a lease
    # must not also end the visibility timeouts of the messages the workers hold.
    skipping = request.node.get_closest_marker("real_time") is None
    sqs_on_engine_clock(skipping)
    try:
        with IdleSkipper(runtime, runtime.clock) if skipping else contextlib.nullcontext():
            yield runtime
    finally:
        sqs_on_engine_clock(False)
    # Let the handlers the test left running finish before the next test resets the state
    # under them; runs left sleeping, waiting or held back are dropped with the state.
    workflows_app.served.failures_left = 0
    for event in workflows_app.GATES.values():
        event.set()
    with contextlib.suppress(TimeoutError):
        runtime.wait_for(lambda: runtime.activity.snapshot()[0] == 0, timeout=15)
    for name in (config.ENV_INVOKE_ATTEMPTS, config.ENV_SQS_MAX_DELAY):
        os.environ.pop(name, None)
    config.reset_settings()


@pytest.fixture()
def client(engine: LocalRuntime) -> WorkflowsClient:
    return workflows_client(engine)


@pytest.fixture()
def app_id(engine: LocalRuntime) -> str:
    return str(engine.apps["e2e"].record["id"])
