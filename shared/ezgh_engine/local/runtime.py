"""The local engine: moto on loopback, the topology's resources, pollers, and the HTTP API.

`ezgh dev` runs one `LocalRuntime` until a signal; tests start one per session and
`reset()` it per test (see `tests/local/conftest.py`).
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from ezgh_engine import clock as clock_module
from ezgh_engine import ids
from ezgh_engine.adapters import aws
from ezgh_engine.local import apps as local_apps
from ezgh_engine.local import events, forkserver, incarnation, loopback, resources
from ezgh_engine.local.emulator import Emulator
from ezgh_engine.local.environments import Environments, start_forkserver
from ezgh_engine.local.handlers import Handler, resolve_all
from ezgh_engine.local.http_bridge import ServedHttp, serve_api
from ezgh_engine.local.lambda_async import AsyncInvokes, function_arn
from ezgh_engine.local.persistence import DevState, write_atomically
from ezgh_engine.local.pollers import Activity, Poller, SqsPoller, StreamPoller
from ezgh_engine.local.resources import SCHEDULER_GROUP, Provisioned, create_recurring, provision
from ezgh_engine.local.scheduler import Scheduler
from ezgh_engine.local.subscriptions import SubscriptionSources
from ezgh_engine.topology import (
    API_FUNCTION,
    FLOWS_FUNCTION,
    TOPOLOGY,
    SqsSource,
    StreamSource,
    Topology,
)

if TYPE_CHECKING:
    from ezgh_engine.local.faults import FaultPlan

log = logging.getLogger("ezgh.local.runtime")

HEALTH_PATH = "/v1/health"
PROVISIONED = "provisioned"  # what the emulator keeps of `provision`'s answers
STARTUP_HEADER = "x-ezgh-startup-check"
Bootstrap = Callable[[], tuple[str, str, str]]
AppSpec = str | tuple[str, Any]  # "MODULE:ATTR", or (name, PushApp)


def stream_poller_name(source: StreamSource) -> str:
    """A stream reader's name (its checkpoints are journaled under it): the outbox's is the
    table's, `stream:<table>`; another reader of the same stream adds its function."""
    if source.function == "stream":
        return f"stream:{source.table}"
    return f"stream:{source.table}:{source.function}"


def _not_ready() -> dict[str, Any]:
    body = {"error": {"code": "starting", "message": "ezgh dev is starting; dev.env is not ready"}}
    return {
        "statusCode": 503,
        "headers": {"content-type": "application/json", "retry-after": "1"},
        "body": json.dumps(body),
    }


def _default_bootstrap() -> tuple[str, str, str]:
    from ezgh_engine.service.auth import bootstrap_admin

    return bootstrap_admin()


class LocalRuntime:
    """The whole engine in this process. `start()`, `reset()`, `wait_idle()`, `stop()`.

    `port=0` picks a free port (tests). `handler_overrides` (function key -> handler) and
    `bootstrap` replace the real handlers and `bootstrap_admin` (the runtime's own tests).

    Each topology function runs in execution environments of its own (`local.environments`:
    child processes, one call each at a time, as Lambda runs them). Overrides are plain
    callables and run in the caller's thread instead. `isolation="thread"` runs every
    handler in-thread (only to compare: concurrent calls then share per-request state).
    """

    def __init__(
        self,
        port: int = 8288,
        state_dir: str | Path = ".ezgh",
        apps: Iterable[AppSpec] = (),
        clock: clock_module.Clock | None = None,
        *,
        handler_overrides: Mapping[str, Handler] | None = None,
        bootstrap: Bootstrap | None = None,
        echo: Callable[[str], None] | None = None,
        sqs_concurrency: int | None = None,
        topology: Topology = TOPOLOGY,
        isolation: Literal["process", "thread"] | None = None,
        persist: bool = False,
    ) -> None:
        self.port = port
        self.state_dir = Path(state_dir)
        self.app_specs = list(apps)
        self.clock = clock
        self.topology = topology
        self._overrides = dict(handler_overrides or {})
        self._bootstrap = bootstrap or _default_bootstrap
        self._echo = echo or (lambda line: log.info("%s", line))
        self._sqs_concurrency = sqs_concurrency
        self._previous_clock: clock_module.Clock | None = None
        self._token_secret = ids.secret_token()
        self.activity = Activity()
        # `persist`: everything in `state_dir` survives a restart or a crash (`ezgh dev`).
        self.persist = persist
        self.dev_state = DevState(self.state_dir)
        self.emulator = Emulator(state_dir=self.state_dir / "aws" if persist else None)
        # `GET /v1/health` answers 200 only once dev.env holds a key that works, so a
        # script that waits for health can use dev.env at once.
        self.ready = False
        self._startup_check = ids.secret_token()
        self._stopping = False
        self._shards: dict[str, str] = {}  # stream reader -> its shard (moto: one)
        self.repaired: list[Any] = []  # what the start's reconciliation re-armed
        self._dead_leases: list[Any] = []  # the leases found on a restore, before any poll
        self._restored_runs: list[Any] | None = None  # the active runs they were read from
        self.provisioned = Provisioned()
        # `EZGH_LOCAL_ISOLATION=thread` picks the old in-thread mode (to compare, bench/).
        self.isolation = isolation or ("process" if forkserver.isolated() else "thread")
        self.environments: Environments | None = None
        self.invokers: dict[str, Callable[[dict[str, Any]], Any]] = {}
        self.pollers: list[Poller] = []
        # Queue subscriptions' pollers, made at run time through the API.
        self.subscriptions = SubscriptionSources(self)
        self.scheduler: Scheduler | None = None
        # Lambda's asynchronous invocations: the invoker's starts and timers.
        self.async_invokes = AsyncInvokes(topology)
        self.api_server: ServedHttp | None = None
        # The functions served at a function URL of their own (the steps function).
        self.url_servers: dict[str, ServedHttp] = {}
        self.apps: dict[str, local_apps.ServedApp] = {}
        self.org_id = self.project_id = self.api_key = ""
        self.api_url = ""
        self._idle_wait = threading.Event()  # never set: an interruptible sleep
        self.started = False
        self.faults: FaultPlan | None = None  # fault injection (tests): see `set_faults`
        self.restarts = 0

    # --- lifecycle ------------------------------------------------------------------------

    def start(self) -> LocalRuntime:
        """Start everything; return once `GET /v1/health` answers and apps are synced."""
        try:
            self._start()
        except BaseException:
            self.stop()
            raise
        return self

    def _start(self) -> None:
        began = clock_module.monotonic()
        self._stopping = False
        self._start_forkserver()  # (`ezgh dev` started it already, first thing)
        if self.clock is not None:
            self._previous_clock = clock_module.get_clock()
            clock_module.set_clock(self.clock)
        # Bound first (a port in use fails the start before the state is read), served once
        # the handlers' environment is in place: the URL is in it.
        self.api_server = serve_api(self._invoke_api, port=self.port, track=self.activity.track)
        self.api_url = self.api_server.url
        self.emulator.start()
        restored = not self.emulator.restored.empty
        if self.persist:
            saved = self.dev_state.load() if restored else {}
            self._token_secret = str(saved.get("tokenSecret") or self._token_secret)
            self.dev_state.save(tokenSecret=self._token_secret)
        for function in self.topology.functions:
            if function.url_env_var:
                self.url_servers[function.key] = serve_api(
                    self._invoker_of(function.key), track=self.activity.track
                )
        self.async_invokes.serve()
        self._provision()
        self.subscriptions.install()  # before the environments copy the handlers' variables
        self._resolve()
        if self.environments is not None:  # the start's own requests need one of the API's:
            self.environments.prewarm([API_FUNCTION.key], count=1)  # it forks meanwhile
        self._build_pollers()
        if restored:
            self._resume_streams(self.emulator.restored.checkpoints)
            self._dead_leases = self._held_leases()  # read before this process takes any
        if restored and self.emulator.restored.mappings:
            self.subscriptions.restore(self.emulator.restored.mappings)
        self.api_server.serve()
        for url_server in self.url_servers.values():
            url_server.serve()
        self.started = True
        self._check_health()
        self._after_reset(restore=restored, verify=True)
        saved_apps = self.dev_state.values.get("apps", {}) if restored else {}
        for spec in self.app_specs:
            name, app = local_apps.load_app(spec) if isinstance(spec, str) else spec
            self.apps[name] = local_apps.serve_app(name, app)
            if isinstance(saved_apps.get(name), dict):
                self.apps[name].record = dict(saved_apps[name])
        self._register_apps()
        if restored:
            self._reconcile()
        # The event sources last: their first polls would take CPU from the start's own
        # requests (what they deliver waits in its queue or stream meanwhile, as it would
        # for a busy Lambda), and they run before health answers 200.
        for poller in self.pollers:
            poller.start()
        self.ready = True
        if self.environments is not None:  # the others once ready, as they compete for CPU
            self.environments.prewarm()  # (a call before they are up starts its own)
        self.emulator.restore_later()  # X-Ray's traces: a request for them waits meanwhile
        log.debug("local runtime up in %.2fs", clock_module.monotonic() - began)

    def stop(self) -> None:
        """Stop pollers, servers and moto; give back the environment and the clock."""
        self._stopping = True  # the mappings dropped now stay in the journal
        self.subscriptions.uninstall()
        for poller in self.pollers:
            poller.stop(timeout=0)  # signal every one first, then wait for each
        for poller in self.pollers:
            poller.stop()
        self.pollers = []
        for served in self.apps.values():
            served.server.shutdown()
        self.apps = {}
        if self.api_server is not None:
            self.api_server.shutdown()
            self.api_server = None
        for url_server in self.url_servers.values():
            url_server.shutdown()
        self.url_servers = {}
        self.async_invokes.shutdown()
        if self.environments is not None:
            self.environments.kill()
            self.environments = None
        self.ready = False
        self.emulator.stop()
        if self._previous_clock is not None:
            clock_module.set_clock(self._previous_clock)
            self._previous_clock = None
        self.started = False

    def reset(self) -> None:
        """Empty every table, queue, bucket and schedule; bootstrap and register apps again.

        Fast (tens of milliseconds) and for tests: pollers pause, in-flight handlers get a
        few seconds to finish, moto resets, resources come back under the same names.
        """
        self.ready = False
        self.subscriptions.clear()  # their queues go with the state
        for poller in self.pollers:
            poller.pause()
        for poller in self.pollers:
            if isinstance(poller, SqsPoller):
                poller.interrupt()
        parked = self._wait(
            lambda: (
                self.activity.snapshot()[0] == 0 and all(p.parked.is_set() for p in self.pollers)
            ),
            10.0,
        )
        if not parked:
            log.warning("reset: handlers still running after 10s; resetting anyway")
        self.emulator.reset()
        self._provision()
        for poller in self.pollers:
            if isinstance(poller, StreamPoller):
                poller.set_stream(self._stream_arn(poller.name))
            poller.resume()
        for served in self.apps.values():
            served.record = {}  # the old record is gone with the state
        self._after_reset()
        self._register_apps()
        self.ready = True

    def set_faults(self, plan: FaultPlan | None) -> None:
        """Inject `plan`'s faults into every poller, the scheduler and DynamoDB calls (None:
        stop). Push app faults come from wrapping the app (`local.faults.FaultyApp`)."""
        if self.faults is not None:
            self.faults.uninstall()
        self.faults = plan
        for poller in [*self.pollers, *self.subscriptions.pollers.values()]:
            poller.faults = plan
        if plan is not None:
            plan.install()

    def restart_engine(self) -> None:
        """Kill the engine abruptly mid-run and start a fresh one on the same emulator state,
        as when `ezgh dev` (or a Lambda) dies while DynamoDB, SQS, S3 and Scheduler keep
        their state.

        The pollers, the scheduler, queue subscriptions and the HTTP bridge stop taking work
        at once. Handlers still running in their threads belong to a dead engine: their next
        AWS call raises `incarnation.EngineRestarted`, so what they had not written is lost
        and their messages come back after the visibility timeout. New pollers, handlers and
        bridge (same port, so URLs and tokens stay valid) take over; execution environments
        are killed mid-call (their processes, as a crash would) and new ones start on
        demand; stream readers resume
        from the old ones' checkpoint, as an event source mapping keeps its position. Apps
        keep running: they are the user's processes. Fault injection carries over.
        """
        if not self.started or self.api_server is None:
            raise RuntimeError("the runtime is not started")
        incarnation.bump()
        if self.environments is not None:
            self.environments.kill()  # every handler in flight dies now, mid-write
        old = self.pollers
        for poller in old:
            poller.stop(timeout=0)
        self.subscriptions.clear_pollers()
        checkpoints: dict[str, dict[str, str]] = {}
        for poller in old:
            if isinstance(poller, StreamPoller):
                poller.stop(timeout=5)  # its handler dies at its next AWS call
                checkpoints[poller.name] = poller.checkpoint()
        port = self.api_server.port
        self.api_server.shutdown()
        self.api_server = serve_api(self._invoke_api, port=port, track=self.activity.track)
        self._resolve()
        if self.environments is not None:
            self.environments.prewarm()
        self._build_pollers()
        for poller in self.pollers:
            if isinstance(poller, StreamPoller) and poller.name in checkpoints:
                poller.resume_from(checkpoints[poller.name])
            poller.start()
        self.subscriptions.restart()
        self.api_server.serve()
        self.restarts += 1
        log.info("engine restarted (life %d)", incarnation.current())

    def __enter__(self) -> LocalRuntime:
        return self.start() if not self.started else self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- waiting --------------------------------------------------------------------------

    def wait_for(
        self, predicate: Callable[[], Any], timeout: float = 30.0, interval: float = 0.05
    ) -> Any:
        """Poll `predicate` until it answers something truthy; return that, or TimeoutError."""
        deadline = clock_module.monotonic() + timeout
        while True:
            value = predicate()
            if value:
                return value
            if clock_module.monotonic() > deadline:
                raise TimeoutError(f"condition not met within {timeout}s")
            self._idle_wait.wait(interval)

    def wait_idle(
        self, timeout: float = 30.0, *, include_delayed: bool = True, settle: float = 0.1
    ) -> None:
        """Return once nothing is running or pending: no handler or API call in flight, the
        stream read to its end, no due schedule, and every topology queue empty (visible,
        in flight and, unless `include_delayed=False`, delayed). Idle must hold for `settle`
        seconds. TimeoutError (saying what is busy) otherwise.
        """
        deadline = clock_module.monotonic() + timeout
        idle_since: float | None = None
        while True:
            busy = self._busy(include_delayed)
            now = clock_module.monotonic()
            if busy:
                idle_since = None
            elif idle_since is None:
                idle_since = now
            elif now - idle_since >= settle:
                return
            if now > deadline:
                raise TimeoutError(f"not idle after {timeout}s: {', '.join(busy)}")
            self._idle_wait.wait(0.02)

    def _busy(self, include_delayed: bool) -> list[str]:
        """What is busy now (empty: idle). Reads activity before and after the queues so a
        handler that ran in between cannot slip through."""
        if self.scheduler is not None:
            self.scheduler.scan()
        busy_before, started_before = self.activity.snapshot()
        if busy_before:
            return [f"{busy_before} handler(s) running"]
        reasons = [f"{p.name} not caught up" for p in self.pollers if not p.idle]
        if reasons:
            return reasons
        names = ["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"]
        if include_delayed:
            names.append("ApproximateNumberOfMessagesDelayed")
        sqs = aws.client("sqs")
        for key, url in self.provisioned.queue_urls.items():
            counts = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=names)["Attributes"]
            pending = {n: int(counts.get(n, 0)) for n in names if int(counts.get(n, 0))}
            if pending:
                reasons.append(f"queue {key}: {pending}")
        busy_after, started_after = self.activity.snapshot()
        if busy_after or started_after != started_before:
            reasons.append("handlers ran while checking")
        reasons.extend(f"{p.name} not caught up" for p in self.pollers if not p.idle)
        return reasons

    def _wait(self, predicate: Callable[[], bool], timeout: float) -> bool:
        try:
            self.wait_for(predicate, timeout, interval=0.02)
            return True
        except TimeoutError:
            return False

    # --- internals ------------------------------------------------------------------------

    @property
    def env(self) -> dict[str, str]:
        """The SDK's environment for this engine (also written to `<state-dir>/dev.env`)."""
        return {
            "EZGH_API_URL": self.api_url,
            "EZGH_API_KEY": self.api_key,
            "EZGH_ORG_ID": self.org_id,
            "EZGH_PROJECT_ID": self.project_id,
        }

    @property
    def api_prefix(self) -> str:
        """`<api_url>/v1/organizations/<org>/projects/<project>`."""
        return f"{self.api_url}/v1/organizations/{self.org_id}/projects/{self.project_id}"

    def _invoke_api(self, event: dict[str, Any]) -> Any:
        # Until dev.env holds a key that works; the start's own check gets through.
        checking = event.get("headers", {}).get(STARTUP_HEADER) == self._startup_check
        if not self.ready and event.get("rawPath") == HEALTH_PATH and not checking:
            return _not_ready()
        return self.invokers[API_FUNCTION.key](event)

    def _invoker_of(self, key: str) -> Callable[[dict[str, Any]], Any]:
        return lambda event: self.invokers[key](event)

    def _start_forkserver(self) -> None:
        """The execution environments' forkserver imports the handlers (a second of CPU)
        while the emulator starts, the state is restored and the resources provisioned, not
        after them: the first request would wait for it."""
        if self.isolation == "process":
            functions = [f for f in self.topology.functions if f.key not in self._overrides]
            start_forkserver(functions)

    def _resolve(self) -> None:
        """New execution environments (none run until called) and an invoker per function."""
        self.environments = None
        if self.isolation == "process":
            self.environments = Environments(
                [f for f in self.topology.functions if f.key not in self._overrides],
                clock_path=self._shared_clock(),
                faults=lambda: self.faults,
            )
        self.invokers = resolve_all(self._overrides, self.topology, self.environments)

    def _shared_clock(self) -> str | None:
        """The file through which environments read a `SkipClock`'s offset (None: they use
        the machine's clock)."""
        engine_clock = clock_module.get_clock()
        if isinstance(engine_clock, clock_module.SkipClock):
            return engine_clock.share()
        if isinstance(engine_clock, clock_module.SharedOffsetClock):
            return engine_clock.path  # `ezgh dev --clock-file`: another process skips time
        if not isinstance(engine_clock, clock_module.SystemClock):
            log.warning(
                "%s cannot be shared with execution environments; they use the system clock",
                type(engine_clock).__name__,
            )
        return None

    def _provision(self) -> None:
        """Make the topology's resources in the emulator (kept if they exist), or adopt
        those the image just loaded says its life made; keep what they are with this
        life's image; point the process at them."""
        function_urls = {
            str(spec.url_env_var): self.url_servers[spec.key].url
            for spec in self.topology.functions
            if spec.url_env_var
        }
        if not self._adopt_provisioned(function_urls):
            self.provisioned = provision(
                api_url=self.api_url,
                token_secret=self._token_secret,
                topology=self.topology,
                function_urls=function_urls,
            )
            event_queues = self.async_invokes.provision(self.provisioned.queue_urls)
            self.provisioned.env.update(event_queues)
            create_recurring(self.topology, lambda key: function_arn(self.topology.function(key)))
        kept = resources.record(
            self.provisioned,
            endpoint=self.emulator.endpoint_url,
            topology=self.topology,
            event_queue_urls=dict(self.async_invokes.queue_urls),
        )
        self.emulator.keep(PROVISIONED, kept)
        self.emulator.apply_env(dict(self.provisioned.env))

    def _adopt_provisioned(self, function_urls: dict[str, str]) -> bool:
        """After loading an image: take the resources its life provisioned (the same
        topology's: tables, queues, the bucket, the schedule group and the recurring
        schedules are in the image) from what it kept, instead of about 25 requests to
        find them there. False: provision."""
        kept = self.emulator.adoptable.get(PROVISIONED)
        endpoint = self.emulator.endpoint_url
        adopted = resources.adopt(kept, endpoint=endpoint, topology=self.topology) if kept else None
        if adopted is None:
            return False
        done, more = adopted
        event_queues = self.async_invokes.adopt(more.get("event_queue_urls") or {}, done.queue_urls)
        if event_queues is None:
            return False
        done.env = resources.handler_env(
            done, self.api_url, self._token_secret, self.topology, function_urls
        )
        done.env.update(event_queues)
        self.provisioned = done
        return True

    def _stream_arn(self, poller_name: str) -> str:
        table = poller_name.split(":")[1]
        return self.provisioned.stream_arns[table]

    def _build_pollers(self) -> None:
        self.pollers = []
        for source in self.topology.sources:
            invoke = self.invokers[source.function]
            if isinstance(source, SqsSource):
                self.pollers.append(
                    SqsPoller(
                        name=f"sqs:{source.queue}",
                        queue_url=self.provisioned.queue_urls[source.queue],
                        queue_arn=self.provisioned.queue_arns[source.queue],
                        invoke=invoke,
                        activity=self.activity,
                        batch_size=source.batch_size,
                        max_concurrency=self._sqs_concurrency
                        or self.topology.function(source.function).local_concurrency,
                    )
                )
            elif isinstance(source, StreamSource):
                name = stream_poller_name(source)
                self.pollers.append(
                    StreamPoller(
                        name=name,
                        stream_arn=self.provisioned.stream_arns[source.table],
                        invoke=self._checkpointing(name, invoke),
                        activity=self.activity,
                        batch_size=source.batch_size,
                        accepts=source.matches,
                    )
                )
        self.pollers.extend(self.async_invokes.pollers(self.invokers, self.activity))
        self.scheduler = Scheduler(group=SCHEDULER_GROUP, activity=self.activity)
        self.pollers.append(self.scheduler)
        for poller in self.pollers:
            poller.faults = self.faults

    def _check_health(self) -> None:
        answer = loopback.request(
            "GET", f"{self.api_url}{HEALTH_PATH}", headers={STARTUP_HEADER: self._startup_check}
        )
        if answer.status != 200 or answer.json() != {"status": "ok"}:
            raise RuntimeError(f"GET /v1/health answered {answer.status}: {answer.text[:500]}")

    def _after_reset(self, *, restore: bool = False, verify: bool = False) -> None:
        """Bootstrap the admin credentials (`restore`: keep the saved ones if their key still
        works), export them, write `dev.env`, and (`verify`, on start) check its key through
        the API, so health answers 200 only with a dev.env that works."""
        saved = self.dev_state.values if restore else {}
        credentials = (saved.get("orgId"), saved.get("projectId"), saved.get("apiKey"))
        if all(credentials) and self._key_works(*map(str, credentials)):
            self.org_id, self.project_id, self.api_key = map(str, credentials)
            verify = False  # just used
        else:
            self.org_id, self.project_id, self.api_key = self._bootstrap()
        if self.persist:
            self.dev_state.save(orgId=self.org_id, projectId=self.project_id, apiKey=self.api_key)
        self.emulator.apply_env(dict(self.env))
        lines = [f"{name}={value}" for name, value in self.env.items()]
        write_atomically(self.state_dir / "dev.env", "\n".join(lines) + "\n")
        if verify and not self._key_works(self.org_id, self.project_id, self.api_key):
            raise RuntimeError("the admin key written to dev.env does not work")

    def _key_works(self, org_id: str, project_id: str, api_key: str) -> bool:
        """Does the API accept this key for this project (an authenticated read)?"""
        answer = loopback.request(
            "GET",
            f"{self.api_url}/v1/organizations/{org_id}/projects/{project_id}/apps",
            headers={"Authorization": f"Bearer {api_key}"},
        )
        return answer.status == 200

    def _resume_streams(self, checkpoints: Mapping[str, Mapping[str, str]]) -> None:
        """After a restore: each stream reader resumes after the last sequence number its
        handler acknowledged (the replay made the same records with the same numbers)."""
        for poller in self.pollers:
            if isinstance(poller, StreamPoller) and poller.name in checkpoints:
                poller.resume_from(dict(checkpoints[poller.name]))

    def _checkpointing(self, name: str, invoke: Callable[[dict[str, Any]], Any]) -> Any:
        """`invoke` for a stream reader, journaling (unsynced: a lost one only means records
        read again) the last sequence number of each batch its handler acknowledged."""
        journaling = self.emulator.journaling
        if journaling is None:
            return invoke

        def checkpointed(event: dict[str, Any]) -> Any:
            answer = invoke(event)
            records = event.get("Records") or []
            if records and not events.failed_ids(answer):
                last = records[-1]
                sequence = last.get("dynamodb", {}).get("SequenceNumber")
                source = str(last.get("eventSourceARN", ""))
                shard_id = self._shard(name, source)
                if sequence and shard_id:
                    # The table, for a compaction: it keeps its stream's records after the
                    # last one every reader of that table acknowledged.
                    table = source.split(":table/", 1)[-1].split("/", 1)[0]
                    record = {"t": "checkpoint", "poller": name, "shard": shard_id}
                    journaling.note({**record, "seq": sequence, "table": table})
            return answer

        return checkpointed

    def mappings_changed(self) -> None:
        """Journal the queue subscriptions' event source mappings (they live in this
        process, not in moto), so a restart makes their pollers again."""
        journaling = self.emulator.journaling
        if journaling is None or self._stopping:
            return
        from dataclasses import asdict

        from ezgh_engine.adapters import event_sources

        mappings = [asdict(m) for m in list(event_sources.LOCAL.mappings.values())]
        journaling.note({"t": "mappings", "mappings": mappings}, sync=True)

    def _shard(self, name: str, stream_arn: str) -> str:
        """The shard a stream's records come from: moto gives a table's stream one shard,
        with a fixed ID (the event names the stream, not the shard)."""
        if name not in self._shards:
            description = aws.client("dynamodbstreams").describe_stream(StreamArn=stream_arn)
            shards = description["StreamDescription"].get("Shards", [])
            if not shards:
                return ""
            self._shards[name] = str(shards[-1]["ShardId"])
        return self._shards[name]

    def _held_leases(self) -> list[Any]:
        """The runs' live invocation leases as restored: nothing of this process has polled
        or served yet, so each is held by an invocation of the process that died."""
        from ezgh_engine.service.repair import active_runs, held_leases

        try:
            # Read once: `_reconcile` re-arms what these runs are owed.
            self._restored_runs = active_runs()
            return held_leases(active=self._restored_runs)
        except Exception:  # best effort, as `_reconcile`: those runs wait out their leases
            log.exception("reading the restored invocation leases failed")
            return []

    def _reconcile(self) -> None:
        """After a restore: release the leases the dead process held, then re-arm what the
        tables say is owed and nothing will deliver (`service.repair.after_restart`): the
        reconciliation `ezgh ops repair` runs on AWS, plus the leases only a restart knows
        are dead."""
        from ezgh_engine.core.models import App
        from ezgh_engine.service.flow_hosting import is_hosted
        from ezgh_engine.service.repair import after_restart

        # The `--app` apps any start served (state.json keeps each one's ID) and the hosted
        # flows interpreter ran in the dead process: none of their step bodies still runs.
        saved = self.dev_state.values.get("apps", {})
        served = {str(a.get("id")) for a in saved.values() if isinstance(a, dict)}

        def in_process(app: App) -> bool:
            return app.id in served or is_hosted(app)

        try:
            self.repaired = after_restart(
                self._dead_leases, in_process=in_process, active=self._restored_runs
            )
        except Exception:  # a best-effort safety net: the journal already restored the state
            log.exception("reconciliation after restore failed")
            return
        for action in self.repaired:
            done = "released" if action.kind == "lease" else "re-armed"
            self._echo(f"ezgh dev: {done} {action.summary()}")

    def _register_apps(self) -> None:
        if not self.apps:
            return
        api = local_apps.EngineApi(self.api_url, self.api_key, self.org_id, self.project_id)
        try:
            for served in self.apps.values():
                record = api.register(served)
                self._echo(
                    f"app {served.name}: id={record.get('id')} url={served.url} "
                    f"status={record.get('status')} workflows={record.get('workflows')}"
                )
        finally:
            api.close()
        if self.persist:  # a restart keeps the apps (their runs) and their signing keys
            kept = {
                name: {"id": served.record.get("id"), "signingKey": served.record.get("signingKey")}
                for name, served in self.apps.items()
                if served.record
            }
            self.dev_state.save(apps={**self.dev_state.values.get("apps", {}), **kept})

    def host_flows(self) -> None:
        """Register EzFlow's interpreter (the topology's `flows` function) in the project now,
        as the engine does by itself at a project's first flow or job (`ezgh dev` calls this
        so the app is listed, and schedulable, from the start)."""
        if FLOWS_FUNCTION.key not in {f.key for f in self.topology.functions}:
            return
        from ezgh_engine.core.models import Principal
        from ezgh_engine.service.flow_hosting import interpreter_app

        principal = Principal(self.org_id, self.project_id, "ezgh-dev", (("*", None),))
        app = interpreter_app(principal)
        self._echo(
            f"app {app.name}: id={app.id} url={app.url} status={app.status} "
            f"workflows={list(app.workflows)} (the topology's {FLOWS_FUNCTION.key} function)"
        )
