"""The real engine for SDK tests, in process on moto (it replaced a fake that re-implemented
the step ops and could drift from them), its tables on moto or on AWS's DynamoDB Local (the
`BACKENDS` of tests/ddblocal.py, as tests/api's `aws_env`: the rest stays on moto).

`Plant` is one module's engine: the tables, moto's queue and bucket, a project and one push app
registered through the API handler. `Engine` is one test's view of it. Nothing here decides
what an op means: every step call the SDK makes goes through the SDK's own HTTP transport
to the steps Lambda's handler (`functions.steps.handler`), every invoke request is built and
signed by the invoker and delivered by the real push adapter, and every answer is written by
the invoker. What the harness stands in for is AWS's delivery only:

- the network: `push.network_transport` hands the engine's request to the `PushApp` through
  ASGI, and the SDK's step calls reach the steps handler through an httpx transport;
- Lambda's event source mappings: the runs table's stream (`_MotoStream`, `_StreamReader`)
  is read and given to `service.stream`; the messages the engine sends (SQS, Scheduler) are
  kept in an outbox, each due at its delay on the engine's skip clock, and handed to
  `invocation_queue` when due.

`invoke` pumps until the app has answered the next invocation of the run (skipping the clock
to the next due message when nothing else is left: a sleep's or a retry's timer). A state a
test needs is reached the engine's way, never written as the test would like it: an
invocation that made some step calls and died (`crashed_invocation`), a newer invocation
taking the run over (`take_over`), the invoker failing steps that overran the invoke timeout
(`overrun`), another handler at work meanwhile (`meanwhile`), CancelRun, RetryRun, a
callback's POST. `invoke_body` takes a request off the wire for a test to deliver itself;
`replay_body` is the request the invoker builds for a run as stored (an ended run's replay).
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import heapq
import itertools
import json
import math
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

import boto3
import httpx
import pytest
from botocore.exceptions import ClientError
from ezgh_engine import clock, config
from ezgh_engine.adapters import aws, messages, push, registry_store, runs_store
from ezgh_engine.core import messages as wire
from ezgh_engine.local import emulator, events
from ezgh_engine.protocol import PROTOCOL_VERSION
from ezgh_engine.service import invocation_queue, invoker, stream
from ezgh_engine.service.wire import step_body
from ezgh_engine.topology import TOPOLOGY
from ezgh_workflows import PushApp, Workflow
from ezgh_workflows._internal import signing
from ezgh_workflows._internal.protocol import ApiInfo
from ezgh_workflows._internal.transport import (
    HISTORY_PATH,
    PAYLOAD_PATH,
    STEPS_PATH,
    HttpStepTransport,
    StepTransport,
)
from moto import mock_aws

from tests.api.conftest import (
    DYNAMODB_ENDPOINT_ENV,
    ENV,
    LambdaContext,
    Project,
    _create_table,
    call,
    make_event,
)
from tests.ddblocal import DynamoDBLocal

KEY = "test-signing-key"
APP_URL = "http://127.0.0.1:9/"  # never connected to: `_AppTransport` answers in process
ENGINE_URL = "http://127.0.0.1:8"  # the API's and the steps URL: `StepsTransport` answers
# Timers further away than this are not the test's (a run's one-year limit).
HORIZON = timedelta(days=40)
ACCOUNT = "123456789012"  # moto's


# --- the module's engine --------------------------------------------------------------------


@dataclass
class _Due:
    """A message in the outbox: due at `due_ms` on the engine's clock."""

    due_ms: int
    order: int
    body: str

    def __lt__(self, other: _Due) -> bool:
        return (self.due_ms, self.order) < (other.due_ms, other.order)


@dataclass
class _Side:
    """A handler `Engine.meanwhile` started: its request is `built`, delivered on `release`."""

    thread: threading.Thread
    built: threading.Event = field(default_factory=threading.Event)
    release: threading.Event = field(default_factory=threading.Event)


class _MotoStream:
    """The runs table's stream on moto, from its latest record on. moto's in-process mock
    does not route DynamoDB Streams requests, so its backend is read as its `GetRecords`
    reads it (fetched anew each time: a refused transaction restores a copy of the table)."""

    def __init__(self) -> None:
        shard = self._shard()
        self._next_seq = int(shard.starting_sequence_number) + len(shard.items)

    @staticmethod
    def _shard() -> Any:
        from moto.dynamodb.models import dynamodb_backends

        backend = dynamodb_backends[ACCOUNT]["us-east-1"]
        return backend.get_table(ENV["EZGH_RUNS_TABLE"]).stream_shard

    def read(self) -> list[dict[str, Any]]:
        """The records written since the last read (a copy: the handler may change them)."""
        records = self._shard().get(self._next_seq, 1000)
        if records:
            self._next_seq = max(int(r["dynamodb"]["SequenceNumber"]) for r in records) + 1
        return copy.deepcopy(records)


class _StreamReader:
    """The runs table's stream on DynamoDB Local, through the DynamoDB Streams API (as an
    event source mapping reads it): every shard from its start, a shard's children after it,
    the records shaped as Lambda's event carries them."""

    def __init__(self) -> None:
        ddb, self._streams = aws.client("dynamodb"), aws.client("dynamodbstreams")
        table = ddb.describe_table(TableName=ENV["EZGH_RUNS_TABLE"])["Table"]
        self._arn = str(table["LatestStreamArn"])
        self._iterators: dict[str, str] = {}
        self._done: set[str] = set()
        self._discover()

    def _discover(self) -> None:
        """Start reading the shards not seen before, from their oldest record."""
        shards = self._streams.describe_stream(StreamArn=self._arn)["StreamDescription"]
        for shard in shards.get("Shards", []):
            shard_id = shard["ShardId"]
            if shard_id not in self._iterators and shard_id not in self._done:
                self._iterators[shard_id] = self._oldest(shard_id)

    def _oldest(self, shard_id: str) -> str:
        return str(
            self._streams.get_shard_iterator(
                StreamArn=self._arn, ShardId=shard_id, ShardIteratorType="TRIM_HORIZON"
            )["ShardIterator"]
        )

    def _get(self, shard_id: str) -> dict[str, Any]:
        """GetRecords; past the shard's trim point (DynamoDB Local trims the sequence numbers
        a cancelled transaction used) from its oldest record, as pollers.StreamPoller does."""
        try:
            return dict(self._streams.get_records(ShardIterator=self._iterators[shard_id]))
        except ClientError as error:
            if error.response.get("Error", {}).get("Code") != "TrimmedDataAccessException":
                raise
        self._iterators[shard_id] = self._oldest(shard_id)
        return dict(self._streams.get_records(ShardIterator=self._iterators[shard_id]))

    def read(self) -> list[dict[str, Any]]:
        """The records written since the last read. A shard's children appear once it has
        closed, so the shards are listed again only when one was read to its end (not at
        every read: a drain follows every handler)."""
        records: list[dict[str, Any]] = []
        for shard_id in list(self._iterators):
            while True:
                answer = self._get(shard_id)
                got = answer.get("Records", [])
                records.extend(events.stream_record(r, self._arn) for r in got)
                following = answer.get("NextShardIterator")
                if not following:  # closed and read to its end: its children follow it
                    del self._iterators[shard_id]
                    self._done.add(shard_id)
                    self._discover()
                    return records + self.read()
                self._iterators[shard_id] = str(following)
                if not got:
                    break
        return records


class Plant:
    """The topology's resources (the tables on `backend`), a project and its push app `sdk`
    (whose signing key is the tests' `KEY`), the stream read from its latest record on."""

    def __init__(self, backend: str = "moto") -> None:
        self.backend = backend
        ddb = boto3.client("dynamodb", region_name="us-east-1")
        for table in TOPOLOGY.tables:
            _create_table(ddb, table, ENV[table.env_var])
        boto3.client("sqs", region_name="us-east-1").create_queue(QueueName="ezgh-invocations")
        boto3.client("s3", region_name="us-east-1").create_bucket(Bucket=ENV["EZGH_PAYLOAD_BUCKET"])
        from ezgh_engine.service.auth import bootstrap_admin

        self.project = Project(*bootstrap_admin())
        body = {"name": "sdk", "kind": "push", "url": APP_URL}
        created = self.project.call("POST", "/apps", body=body)
        assert created.status == 201, created.body
        self.app_id = str(created.body["id"])
        app = registry_store.get_app(self.project.project_id, self.app_id)
        assert app is not None
        registry_store.save_app(replace(app, signing_key=KEY))
        self.engine: Engine | None = None
        self.synced: tuple[str, ...] = ()  # the workflows the app was last synced with
        # The records so far are the setup's (read and dropped: no run is concerned).
        self._stream = _MotoStream() if backend == "moto" else _StreamReader()
        self._stream.read()

    def drain_stream(self) -> None:
        """Give the stream's new records to `service.stream`, in order (Lambda's mapping)."""
        while True:
            records = self._stream.read()
            if not records:
                return
            assert stream.handle_batch(records) == [], "a stream record failed"

    # what AWS would deliver ------------------------------------------------------------------
    def send(self, message: wire.Message, delay_seconds: float = 0) -> None:
        if self.engine is not None:
            self.engine.outbox_add(wire.dumps(message), delay_seconds)

    def send_each(self, many: Sequence[wire.Message], delay_seconds: float = 0) -> None:
        """A stream batch's starts sent together (`messages.send_each`): one message each."""
        for message in many:
            self.send(message, delay_seconds)

    def schedule(self, timer: wire.Timer, fire_at: datetime, run_id: str, step_id: str) -> None:
        if self.engine is not None:
            self.engine.outbox_add(wire.dumps(timer), (fire_at - clock.now()).total_seconds())

    def deliver(self, request: httpx.Request) -> httpx.Response:
        """The network between the engine and the app: the request, to the app, in process."""
        assert self.engine is not None, "no test is running"
        return self.engine.deliver(request)


class _AppTransport(httpx.BaseTransport):
    def __init__(self, plant: Plant) -> None:
        self.plant = plant

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        return self.plant.deliver(request)


@contextlib.contextmanager
def plant(server: DynamoDBLocal | None = None) -> Iterator[Plant]:
    """The engine on in-process moto for one module (see `Plant`), its tables in `server`
    (DynamoDB Local; emptied at the end) when one is given."""
    with pytest.MonkeyPatch.context() as patch:
        for name, value in ENV.items():
            patch.setenv(name, value)
        patch.setenv(config.ENV_ALLOW_LOOPBACK, "1")  # the app's URL is a loopback one
        patch.setenv(config.ENV_API_URL, ENGINE_URL)
        patch.delenv("AWS_ENDPOINT_URL", raising=False)
        for name in DYNAMODB_ENDPOINT_ENV:
            if server is None:
                patch.delenv(name, raising=False)
            else:
                patch.setenv(name, server.url)
        # `ezgh dev`'s moto, linear in what it holds: a transaction would otherwise deep-copy
        # every item the module's tests wrote (process-wide, as any local runtime leaves it).
        emulator.lighten_dynamodb()
        with mock_aws():
            config.reset_settings()
            aws.reset_clients()
            try:
                made = Plant("moto" if server is None else "ddblocal")
                patch.setattr(push, "network_transport", lambda: _AppTransport(made))
                patch.setattr(messages, "send", made.send)
                patch.setattr(messages, "send_each", made.send_each)
                patch.setattr(messages, "_create_schedule", made.schedule)
                patch.setattr(messages, "drop_timer", lambda *args: None)
                yield made
            finally:
                if server is not None:
                    server.wipe()
                config.reset_settings()
                aws.reset_clients()


# --- one test's engine ----------------------------------------------------------------------


@dataclass
class Delivery:
    """One request the engine sent the app and what the app answered."""

    request: dict[str, Any]
    status: int
    answer: Any


class Engine:
    """The real engine, seen from one test: the runs it started, the step calls the app made
    (`calls`, the answer's step ends counted as one call, as before), the deliveries."""

    def __init__(self, plant: Plant) -> None:
        self.plant = plant
        self.clock = clock.SkipClock()
        self.calls: list[list[dict[str, Any]]] = []
        self.results: list[list[dict[str, Any]]] = []  # the step calls' answered results
        # The history and payload reads the SDK made (protocol 1.5): (what, body).
        self.reads: list[tuple[str, dict[str, Any]]] = []
        self.deployment_ids: list[str | None] = []
        self.deliveries: list[Delivery] = []
        self.conflict = False  # a newer invocation takes the run over before each step call
        self.before_call: Callable[[list[dict[str, Any]]], None] | None = None
        self.capture = False  # deliveries answer 503 unseen by the app (`invoke_body`)
        self.app: PushApp | None = None
        self.runs: dict[str, str] = {}  # workflow -> its run's ID
        self.run_id: str | None = None  # the run last started or invoked
        self._outbox: list[_Due] = []
        self._order = itertools.count()
        self.app_asgi: Any = None  # an ASGI app other than a PushApp to deliver to
        self.before_delivery: Callable[[dict[str, Any]], None] | None = None
        # Called with a request and the app's answer before the invoker reads the answer.
        self.after_answer: Callable[[dict[str, Any], Any], None] | None = None
        self._sides: dict[threading.Thread, _Side] = {}  # `meanwhile`'s handlers
        self._owed: dict[threading.Thread, list[_Side]] = {}  # by the handler they wait for
        self._handling: list[threading.Thread] = []  # handlers delivering, innermost last

    # the app -----------------------------------------------------------------------------------
    def serve(self, app: PushApp) -> PushApp:
        """The app the engine's app `sdk` is (a new deployment: synced before the next run)."""
        self.app = app
        return app

    def transport(self, api: ApiInfo, deployment_id: str | None) -> StepTransport:
        """The SDK's own HTTP step transport, its requests answered by the steps handler."""
        client = httpx.AsyncClient(transport=StepsTransport(self, deployment_id))
        return HttpStepTransport(api, deployment_id, backoff=(), client=client)

    def step_call(self, body: dict[str, Any], token: str, path: str = STEPS_PATH) -> httpx.Response:
        """One step call (or, at `path`, a history or payload read) as the steps Lambda
        answers it."""
        from functions.steps.handler import handler

        ops = body.get("ops") if path == STEPS_PATH else None
        if path != STEPS_PATH:
            self.reads.append((path.rsplit("/", 1)[-1], copy.deepcopy(body)))
        if isinstance(ops, list):
            self.calls.append(copy.deepcopy(ops))
            self.deployment_ids.append(body.get("deploymentId"))
            if self.conflict:
                self.take_over()
            if self.before_call is not None:
                self.before_call(ops)
        event = make_event(
            "POST", path, raw_body=json.dumps(body), headers={"authorization": token}
        )
        answer = handler(event, LambdaContext())
        if isinstance(ops, list) and answer["statusCode"] == 200:
            self.results.append(json.loads(answer["body"]).get("results") or [])
        return httpx.Response(answer["statusCode"], content=answer["body"].encode())

    def deliver(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        if self.capture or (self.app is None and self.app_asgi is None):
            self.deliveries.append(Delivery(body, 503, None))
            return httpx.Response(503)
        if self.before_delivery is not None:
            self.before_delivery(body)
        side = self._sides.get(threading.current_thread())
        if side is not None and not side.release.is_set():  # built now, delivered after
            side.built.set()
            assert side.release.wait(60), "the invocation going on did not end"
        target = self.app_asgi or self.app
        self._handling.append(threading.current_thread())
        try:
            answer = asyncio.run(_post(target, request.content, dict(request.headers), "/"))
        finally:
            self._handling.pop()
        try:
            decoded = answer.json()
        except ValueError:
            decoded = answer.text
        if isinstance(decoded, dict) and isinstance(decoded.get("ops"), list):
            self.calls.append(copy.deepcopy(decoded["ops"]))  # the ends the answer carries
        if self.after_answer is not None:
            self.after_answer(body, decoded)
        self.deliveries.append(Delivery(body, answer.status_code, decoded))
        return httpx.Response(answer.status_code, content=answer.content)

    def _sync(self) -> None:
        assert self.app is not None, "make_app(engine, ...) first"
        names = tuple(sorted(w.name for w in self.app.workflows))
        if names != self.plant.synced:
            synced = self.plant.project.call("POST", f"/apps/{self.plant.app_id}/sync")
            assert synced.status == 200, synced.body
            self.plant.synced = names

    # runs --------------------------------------------------------------------------------------
    def start(self, workflow: str, input: Any = None) -> str:
        """StartRun through the API handler; the run's ID."""
        self._sync()
        body = {"appId": self.plant.app_id, "workflow": workflow, "input": input}
        started = self.plant.project.call("POST", "/runs", body=body)
        assert started.status == 201, started.body
        run_id = str(started.body["id"])
        self.runs[workflow] = self.run_id = run_id
        return run_id

    def run_of(self, workflow: str, input: Any = None) -> str:
        """The run of `workflow` this test started, started now if none."""
        run_id = self.runs.get(workflow) or self.start(workflow, input)
        self.run_id = run_id
        return run_id

    def run(self, run_id: str | None = None) -> Any:
        found = runs_store.get_run(run_id or self._current())
        assert found is not None
        return found

    def ended(self, run_id: str) -> bool:
        found = runs_store.get_run(run_id, with_steps=False)
        return found is not None and found.ended

    def _current(self) -> str:
        assert self.run_id is not None, "no run yet"
        return self.run_id

    @property
    def steps(self) -> dict[str, dict[str, Any]]:
        """The current run's recorded steps, as an invoke request shows them."""
        run = self.run()
        return {s.id: step_body(run.project_id, run.id, s) for s in run.steps}

    @property
    def status(self) -> str:
        return str(self.run().status)

    @property
    def project_id(self) -> str:
        return self.plant.project.project_id

    def ops(self, kind: str) -> list[dict[str, Any]]:
        return [op for call in self.calls for op in call if op["op"] == kind]

    def api(self, method: str, subpath: str, **kwargs: Any) -> Any:
        """A request to the engine's API as the project's admin."""
        return self.plant.project.call(method, subpath, **kwargs)

    def cancel(self) -> None:
        """CancelRun of the current run."""
        answer = self.api("POST", f"/runs/{self._current()}/cancel")
        assert answer.status == 202, answer.body

    def retry(self) -> None:
        """RetryRun of the current run."""
        answer = self.api("POST", f"/runs/{self._current()}/retry")
        assert answer.status in (200, 202), answer.body

    def complete_callback(self, step_id: str, body: Any) -> None:
        """POST the callback step's URL, as whoever was given it would."""
        url = self.steps[step_id]["url"]
        path = "/v1/callbacks/" + url.rsplit("/v1/callbacks/", 1)[1]
        answer = call("POST", path, body=body)
        assert answer.status == 200, answer.body

    def crashed_invocation(self, workflow: str, *calls: list[dict[str, Any]]) -> None:
        """An invocation of `workflow`'s run that made these step calls (answered by the
        steps handler) and died: its lease runs out and the run is owed an invocation."""
        from tests.api.steps_helpers import free_lease, lease_token

        run = self.run(self.run_of(workflow))
        token = lease_token(run, run.invoke_seq)
        for ops in calls:
            event = make_event(
                "POST",
                STEPS_PATH,
                body={"deploymentId": None, "ops": ops},
                headers={"authorization": f"Bearer {token}"},
            )
            from functions.steps.handler import handler

            assert handler(event, LambdaContext())["statusCode"] == 200
        free_lease(run)

    def take_over(self) -> None:
        """A newer invocation takes the current run over (its lease ran out meanwhile)."""
        from tests.api.steps_helpers import free_lease, lease_token

        run = self.run()
        free_lease(run)
        lease_token(self.run(), run.invoke_seq + 1)

    def overrun(self) -> None:
        """The current invocation runs past the invoke timeout: the invoker fails its steps
        that have run for half of it (`invoker.fail_overrunning_steps`)."""
        timeout = config.settings().invoke_timeout_seconds
        # The invocation began no later than the first step it has running (the invoker
        # fails only the steps an invocation started itself).
        running = [
            clock.parse_iso(s.started_at)
            for s in self.run().steps
            if s.status == "running" and s.started_at
        ]
        began_ms = int(min(running).timestamp() * 1000) if running else clock.now_ms()
        self.clock.advance(timedelta(seconds=timeout * 0.6))
        lease_ms = int(timeout * 1000)
        failed, _ = invoker.fail_overrunning_steps(self.run(), began_ms, lease_ms)
        assert failed, "no step had overrun"

    # the outbox and the pump -------------------------------------------------------------------
    def outbox_add(self, body: str, delay_seconds: float) -> None:
        due = clock.now_ms() + max(0, math.ceil(delay_seconds)) * 1000
        heapq.heappush(self._outbox, _Due(due, next(self._order), body))

    def _next(self) -> _Due | None:
        """The next message due now, or (skipping the clock to it) the next one within the
        horizon; None when nothing is owed."""
        self.plant.drain_stream()
        if not self._outbox:
            return None
        first = self._outbox[0]
        if first.due_ms > clock.now_ms():
            if first.due_ms > clock.now_ms() + HORIZON.total_seconds() * 1000:
                return None
            self.clock.advance(timedelta(milliseconds=first.due_ms - clock.now_ms()))
        return heapq.heappop(self._outbox)

    def pump(self, until: Callable[[], bool], limit: int = 200) -> None:
        """Hand due messages to the invoker's consumer until `until()` holds."""
        for _ in range(limit):
            if until():
                return
            due = self._next()
            if due is None:
                raise AssertionError(f"nothing more is owed to the runs; deliveries: {self.log()}")
            retry = invocation_queue.handle_message(due.body)
            self._handled()
            if retry is not None:
                self.outbox_add(due.body, retry.after_seconds)
        raise AssertionError("the engine kept working: no end in sight")

    def meanwhile(self) -> None:
        """While the invocation going on waits (in a step call), another invoker hands over
        the messages due now: an invocation they make is built now, from the steps as they
        are, and delivered once the one going on has ended. (On AWS two handlers run side
        by side; here the interleaving is one, chosen by the test: deterministic.)"""
        side = _Side(threading.Thread(target=self._settle_side, name="meanwhile"))
        self._sides[side.thread] = side
        # Owed to the handler whose invocation goes on (a step call runs in its own thread).
        owner = self._handling[-1] if self._handling else threading.current_thread()
        self._owed.setdefault(owner, []).append(side)
        side.thread.start()
        assert side.built.wait(60), "the other handler built no request"

    def _settle_side(self) -> None:
        try:
            self.settle()
        finally:
            self._sides[threading.current_thread()].built.set()

    def _handled(self) -> None:
        """The message this thread handled is done: deliver what `meanwhile` built."""
        for side in self._owed.pop(threading.current_thread(), []):
            side.release.set()
            side.thread.join(60)

    def settle(self) -> None:
        """Hand over every message due now (not skipping the clock)."""
        self.plant.drain_stream()
        while self._outbox and self._outbox[0].due_ms <= clock.now_ms():
            due = heapq.heappop(self._outbox)
            retry = invocation_queue.handle_message(due.body)
            self._handled()
            if retry is not None:
                self.outbox_add(due.body, retry.after_seconds)
            self.plant.drain_stream()

    def next_delivery(self, run_id: str, branch: str | None = None) -> Delivery:
        """Pump until the app has answered the next invocation of the run (of its parallel
        step `branch`); that delivery."""
        seen = len(self.deliveries)

        def wanted(d: Delivery) -> bool:
            of_branch = (d.request.get("branch") or {}).get("stepId")
            return d.request.get("run", {}).get("id") == run_id and of_branch == branch

        self.pump(lambda: any(wanted(d) for d in self.deliveries[seen:]))
        self.plant.drain_stream()
        return next(d for d in self.deliveries[seen:] if wanted(d))

    def log(self) -> list[Any]:
        return [
            (d.request.get("branch"), d.status, d.answer and d.answer.get("outcome"))
            for d in self.deliveries
            if isinstance(d.answer, dict) or d.answer is None
        ]

    # requests the engine builds ----------------------------------------------------------------
    def invoke_body(self, workflow: str, input: Any = None) -> dict[str, Any]:
        """The invoke request the engine sends for a new run of `workflow`, taken off the
        wire (the app never sees it: the delivery fails, the engine backs off), for a test
        to deliver itself. Its token stays good: the invocation still holds the run."""
        run_id = self.start(workflow, input)
        self.capture = True
        try:
            self.pump(lambda: any(_run_of(d) == run_id for d in self.deliveries))
        finally:
            self.capture = False
        return next(d.request for d in self.deliveries if _run_of(d) == run_id)

    def replay_body(self, run_id: str | None = None) -> dict[str, Any]:
        """The invoke request the invoker builds for the run as it is stored now, as if it
        were invoked again (a full replay of an ended run)."""
        from ezgh_engine import ids
        from ezgh_engine.service.wire import invoke_request

        run = self.run(run_id)
        app = registry_store.get_app(self.plant.project.project_id, self.plant.app_id)
        protocol = app.protocol if app is not None else None
        return invoke_request(
            run, ids.time_ordered_id(), 600_000, clock.now_ms(), app_protocol=protocol
        )


class StepsTransport(httpx.AsyncBaseTransport):
    """The network between the SDK and the steps Lambda."""

    def __init__(self, engine: Engine, deployment_id: str | None) -> None:
        self.engine = engine

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        assert request.url.path in (STEPS_PATH, HISTORY_PATH, PAYLOAD_PATH), request.url
        body = json.loads(await request.aread())
        # In a thread, as a network call would be: the SDK's loop goes on meanwhile.
        return await asyncio.to_thread(
            self.engine.step_call, body, request.headers["authorization"], request.url.path
        )


@contextlib.contextmanager
def engine_of(made: Plant) -> Iterator[Engine]:
    """One test's engine on the module's plant, with its skip clock."""
    made.drain_stream()  # what earlier tests left is not this one's
    engine = Engine(made)
    previous = clock.get_clock()
    clock.set_clock(engine.clock)
    made.engine = engine
    try:
        yield engine
    finally:
        made.engine = None
        clock.set_clock(previous)


# --- the app side ---------------------------------------------------------------------------


def signed_headers(
    body: bytes, key: str = KEY, timestamp: int | None = None, path: str = "/"
) -> dict[str, str]:
    """The headers the engine sends (protocol 1.4: both signature forms, and the invocation
    an invoke body delivers, at epoch 1)."""
    ts = str(int(time.time()) if timestamp is None else timestamp)
    try:
        payload = json.loads(body)
    except ValueError:
        payload = None
    invocation = ""
    if isinstance(payload, dict) and payload.get("type") == "invoke":
        invocation = push.invocation_of(payload)
    headers = signing.signed_headers(key, ts, body, path=path, invocation=invocation)
    return {"content-type": "application/json", **headers}


async def _post(app: Any, body: bytes, headers: dict[str, str], path: str) -> httpx.Response:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://app") as client:
        return await client.post(path, content=body, headers=headers)


def post(app: PushApp, payload: Any, headers: dict[str, str] | None = None) -> httpx.Response:
    """POST a JSON payload to the app through ASGI, signed unless headers are given."""
    body = json.dumps(payload).encode()
    return asyncio.run(_post(app, body, signed_headers(body) if headers is None else headers, "/"))


def make_app(engine: Engine, *workflows: Workflow) -> PushApp:
    """A `PushApp` of `workflows` whose step calls go to the engine; the engine's app."""
    app = PushApp(list(workflows), signing_key=KEY, transport_factory=engine.transport)
    return engine.serve(app)


def invoke(
    app: PushApp, engine: Engine, workflow: str, input: Any = None, branch: str | None = None
) -> dict[str, Any]:
    """The app's answer to the next invocation of `workflow`'s run (started now if this test
    has none; its parallel step `branch`'s with `branch`). An ended run is not invoked
    again: the app gets the request the engine would build for it (a full replay)."""
    engine.serve(app)
    run_id = engine.run_of(workflow, input)
    if branch is None and engine.ended(run_id):
        answer = post(app, engine.replay_body(run_id))
        assert answer.status_code == 200, answer.text
        return dict(answer.json())
    delivery = engine.next_delivery(run_id, branch)
    assert delivery.status == 200, delivery.answer
    outcome: dict[str, Any] = delivery.answer
    assert outcome["protocol"] == PROTOCOL_VERSION  # the SDK speaks the engine's version
    return outcome


def run_to_end(
    app: PushApp, engine: Engine, workflow: str, input: Any = None, limit: int = 20
) -> tuple[dict[str, Any], int]:
    """Let the engine run `workflow`'s run to its end; (the last answer of an invocation of
    the run, not of a branch; how many such invocations there were)."""
    engine.serve(app)
    run_id = engine.run_of(workflow, input)
    seen = len(engine.deliveries)
    engine.pump(lambda: engine.ended(run_id), limit=limit * 10)
    engine.settle()
    mains = [
        d for d in engine.deliveries[seen:] if _run_of(d) == run_id and "branch" not in d.request
    ]
    assert mains, "the run ended without an invocation"
    return dict(mains[-1].answer), len(mains)


def branches(engine: Engine) -> list[str]:
    """The current run's parallel steps waiting for their invocation."""
    return [i for i, s in engine.steps.items() if s.get("branch") and s["status"] == "waiting"]


def _run_of(delivery: Delivery) -> str | None:
    """The run an invoke request is of (None for a sync)."""
    run = delivery.request.get("run")
    return str(run["id"]) if isinstance(run, dict) else None
