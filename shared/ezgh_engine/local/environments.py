"""Lambda execution environments for the local runtime: one child process per concurrent call.

Lambda runs one request at a time in an execution environment: a process that imported the
handler once (the cold start) and then serves event after event (warm). Handlers rely on it:
Powertools' resolver keeps the current event in a class attribute, its logger keeps keys,
modules keep globals. So the local runtime runs each topology function in a pool of child
processes (`Pool`), made on demand up to the function's `local_concurrency`, each serving one
event at a time; an idle environment is reused, the warmest first.

Children come from a `forkserver` (a fresh interpreter that preloads the handlers once, so a
cold start is a fork, not an import of boto3 and Powertools; never a fork of this threaded
process). What the children must share with the runtime travels with each call or through a
file:

- the handlers' environment (`AWS_*`, `EZGH_*`, `POWERTOOLS_*`): sent with every call, applied
  (and settings reset) in the child when it changed, so a test's `monkeypatch.setenv` holds;
- the engine clock: a `SkipClock` shares its offset through a memory-mapped file
  (`SkipClock.share`), which the child's `SharedOffsetClock` reads;
- fault injection: a `FaultPlan`'s DynamoDB throttle and Idempotency-Key faults (seed,
  probabilities, paused or not) are sent with each call; the child installs the same hook
  and reports what it injected (an `idem_crash` ends the child, as a crash would);
- request observers (`adapters.aws.observe`, tests): while the runtime's process observes,
  the child collects its requests and sends them back with the answer;
- queue subscriptions: the api's `event_sources.LOCAL` calls are forwarded to the runtime,
  which runs their pollers.

Each call is bounded by the function's `timeout_seconds`: past it the environment is killed,
as Lambda does, and the caller gets `FunctionTimedOut` (a poller then treats the batch as
failed; the HTTP bridge answers 504). `Pool.kill` kills every environment at once (an engine
restart: a faithful crash).
"""

from __future__ import annotations

import contextlib
import gc
import io
import logging
import multiprocessing
import multiprocessing.context
import os
import pickle
import signal
import threading
import traceback
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from multiprocessing import forkserver, popen_forkserver, reduction, spawn, util
from multiprocessing.connection import Connection
from multiprocessing.context import set_spawning_popen
from typing import TYPE_CHECKING, Any

from ezgh_engine import clock, config
from ezgh_engine.adapters import aws, event_sources
from ezgh_engine.local import forkserver as forkserver_
from ezgh_engine.topology import SANDBOX_ENV, Function

if TYPE_CHECKING:
    from ezgh_engine.local.faults import FaultPlan

log = logging.getLogger("ezgh.local.environments")

# What the handlers read from the environment (Lambda sets the function's variables).
ENV_PREFIXES = ("AWS_", "EZGH_", "POWERTOOLS_")
# A cold start's own limit (Lambda's init phase has 10 s; a loaded CI machine needs more).
INIT_TIMEOUT_SECONDS = 60.0
# Environments started with the runtime, per function (others: one): the first requests,
# step calls and app invocations find them warm.
PREWARM = {"api": 2, "steps": 4, "invoker": 2}


class EnvironmentDied(Exception):
    """The execution environment ended mid-call (killed by a restart, or it crashed)."""


class FunctionTimedOut(EnvironmentDied):
    """The call ran past the function's timeout; its environment was killed, as Lambda does."""


class HandlerFailed(Exception):
    """The handler raised in its environment; the message holds the child's traceback."""


def handler_environment() -> dict[str, str]:
    """The variables of this process that the handlers read."""
    return {k: v for k, v in os.environ.items() if k.startswith(ENV_PREFIXES)}


# AWS credentials: the emulator's are the engine's own (they open every table).
_CREDENTIALS = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN")


def function_environment(function: Function, env: dict[str, str] | None = None) -> dict[str, str]:
    """The variables `function` gets of `env` (default: the handlers'): all of them, or
    for a sandboxed function none of the engine's but `SANDBOX_ENV`, and no credentials
    (deployed, its role's allow nothing; here they would be the emulator's)."""
    env = handler_environment() if env is None else env
    if not function.sandboxed:
        return env
    return {
        k: v
        for k, v in env.items()
        if (not k.startswith("EZGH_") or k in SANDBOX_ENV) and k not in _CREDENTIALS
    }


@dataclass(frozen=True)
class Setup:
    """What an environment starts with (picklable: it crosses into the child)."""

    clock_path: str | None = None  # a `SkipClock.share()` file, or None: the system clock
    env: dict[str, str] = field(default_factory=dict)


# --- the parent side ---------------------------------------------------------------------


class _Popen(popen_forkserver.Popen):
    """The forkserver's `Popen`, without the main module: a child runs `serve` from this
    module and must not run the runtime's `__main__` again (a script that starts a
    `LocalRuntime` at top level would start one per environment)."""

    def _launch(self, process_obj: Any) -> None:
        prep_data = spawn.get_preparation_data(process_obj._name)
        for key in ("init_main_from_path", "init_main_from_name"):
            prep_data.pop(key, None)
        buf = io.BytesIO()
        set_spawning_popen(self)
        try:
            reduction.dump(prep_data, buf)
            reduction.dump(process_obj, buf)
        finally:
            set_spawning_popen(None)
        self.sentinel, w = forkserver.connect_to_new_process(self._fds)  # type: ignore[attr-defined]
        parent_w = os.dup(w)  # the child's sentinel of this process, as the original keeps
        self.finalizer = util.Finalize(self, util.close_fds, (parent_w, self.sentinel))  # type: ignore[attr-defined]
        with open(w, "wb", closefd=True) as file:
            file.write(buf.getbuffer())
        self.pid = forkserver.read_signed(self.sentinel)


class _Process(multiprocessing.context.ForkServerProcess):
    @staticmethod
    def _Popen(process_obj: Any) -> Any:
        return _Popen(process_obj)


class Environment:
    """One execution environment: a child process serving one event at a time."""

    def __init__(self, context: Any, function: Function, setup: Setup) -> None:
        self.function = function
        parent, child = context.Pipe(duplex=True)
        self._conn: Connection = parent
        self.process = _Process(
            target=serve,
            args=(child, function, setup),
            name=f"ezgh-{function.key}",
            daemon=True,
        )
        self.process.start()
        child.close()
        self.calls = 0
        self._wait_ready()

    def _wait_ready(self) -> None:
        """Wait for the cold start (Lambda's init phase: not part of the call's timeout)."""
        try:
            if not self._conn.poll(INIT_TIMEOUT_SECONDS):
                raise EnvironmentDied(
                    f"{self.function.key}: no environment within {INIT_TIMEOUT_SECONDS}s"
                )
            kind, detail = self._conn.recv()
        except (EOFError, OSError) as error:
            self.close()
            raise EnvironmentDied(f"{self.function.key}'s environment died at start") from error
        except EnvironmentDied:
            self.close()
            raise
        if kind != "ready":
            self.close()
            raise EnvironmentDied(f"{self.function.key}'s environment failed to start:\n{detail}")

    @property
    def pid(self) -> int | None:
        return self.process.pid

    def call(
        self,
        request: dict[str, Any],
        deadline: float,
        on_call: Callable[[str, dict[str, Any]], Any],
    ) -> tuple[str, Any, dict[str, Any]]:
        """Send one event; answer the child's `(kind, value, meta)`. Serves the child's
        calls back (`on_call`) meanwhile; kills the child at `deadline` (monotonic)."""
        self.calls += 1
        try:
            self._conn.send(request)
            while True:
                remaining = deadline - clock.monotonic()
                if remaining <= 0 or not self._conn.poll(remaining):
                    self.kill()
                    raise FunctionTimedOut(
                        f"{self.function.key} timed out after "
                        f"{self.function.timeout_seconds}s (its environment was killed)"
                    )
                message = self._conn.recv()
                if message[0] != "call":
                    return message
                self._conn.send(_answer_call(on_call, message[1], message[2]))
        except (EOFError, OSError) as error:
            self.kill()
            raise EnvironmentDied(f"{self.function.key}'s environment died mid-call") from error

    def alive(self) -> bool:
        return bool(self.process.is_alive())

    def kill(self) -> None:
        """End the process at once (SIGKILL), as a crash or a Lambda timeout does."""
        with contextlib.suppress(Exception):
            self.process.kill()

    def close(self) -> None:
        self.kill()
        with contextlib.suppress(Exception):
            self.process.join(1)
            self._conn.close()
            self.process.close()


def _answer_call(
    on_call: Callable[[str, dict[str, Any]], Any], name: str, kwargs: dict[str, Any]
) -> tuple[str, Any]:
    try:
        return ("ok", on_call(name, kwargs))
    except Exception as error:
        return ("error", f"{type(error).__name__}: {error}")


class Pool:
    """A function's environments: made on demand up to `function.local_concurrency`, each
    lent to one caller at a time; callers beyond the cap wait for one to be free."""

    def __init__(self, function: Function, setup: Callable[[], Setup], context: Any) -> None:
        self.function = function
        self._setup = setup
        self._context = context
        self._cond = threading.Condition()
        self._idle: list[Environment] = []
        self._all: set[Environment] = set()
        self._making = 0
        self._prewarming = 0  # of `_making`: started by `prewarm`, for whoever asks first
        self._awaiting = 0  # callers waiting for one of those
        self._closed = False
        self.cold_starts = 0

    @property
    def size(self) -> int:
        with self._cond:
            return len(self._all) + self._making

    def pids(self) -> list[int]:
        with self._cond:
            return [e.pid for e in self._all if e.pid is not None]

    def acquire(self) -> Environment:
        """A free environment: a warm one if any, else one being prewarmed, else a new one,
        else wait for one."""
        with self._cond:
            while True:
                if self._closed:
                    raise EnvironmentDied(f"{self.function.key}: the engine was restarted")
                while self._idle:
                    environment = self._idle.pop()  # the warmest
                    if environment.alive():
                        return environment
                    self._all.discard(environment)
                if self._prewarming > self._awaiting:
                    # It is ready sooner than a new one, which would start after it (one
                    # process is made at a time).
                    self._awaiting += 1
                    try:
                        self._cond.wait(0.5)
                    finally:
                        self._awaiting -= 1
                    continue
                if self._room() > 0:
                    self._making += 1
                    break
                self._cond.wait(0.5)
        try:
            with forkserver_.spawn_lock:
                environment = Environment(self._context, self.function, self._setup())
        except BaseException:
            with self._cond:
                self._making -= 1
                self._cond.notify()
            raise
        with self._cond:
            self._making -= 1
            self.cold_starts += 1
            if self._closed:
                environment.close()
                raise EnvironmentDied(f"{self.function.key}: the engine was restarted")
            self._all.add(environment)
        # Demand outgrew the pool: have the next one ready before it is asked for.
        self.prewarm(1)
        return environment

    def prewarm(self, count: int) -> None:
        """Start environments in the background until `count` are idle (capped), so that
        the first calls, and a burst after them, find warm ones instead of a cold start."""

        # Counted now, not in the thread: a call right after this waits for them (they are
        # ready before a new one would be) instead of racing the thread to a cold start.
        with self._cond:
            wanted = max(0, min(count - len(self._idle) - self._making, self._room()))
            self._making += wanted
            self._prewarming += wanted
        if not wanted:
            return

        def warm() -> None:
            for _ in range(wanted):
                try:
                    with forkserver_.spawn_lock:
                        environment = Environment(self._context, self.function, self._setup())
                except Exception as error:
                    with self._cond:
                        self._making -= 1
                        self._prewarming -= 1
                        self._cond.notify_all()  # whoever waited for it makes its own
                        closed = self._closed
                    if not closed:  # else killed on purpose, by a stop or restart
                        log.warning("%s: could not prewarm: %s", self.function.key, error)
                    continue
                with self._cond:
                    self._making -= 1
                    self._prewarming -= 1
                    self._cond.notify_all()
                    if self._closed:
                        environment.close()
                        continue
                    self._all.add(environment)
                    self._idle.insert(0, environment)  # the coolest: used after warm ones

        threading.Thread(target=warm, name=f"prewarm-{self.function.key}", daemon=True).start()

    def _room(self) -> int:
        return max(1, self.function.local_concurrency) - len(self._all) - self._making

    def release(self, environment: Environment, healthy: bool) -> None:
        """Give an environment back: kept warm if `healthy`, else killed."""
        with self._cond:
            keep = healthy and not self._closed and environment in self._all
            if keep:
                self._idle.append(environment)
            else:
                self._all.discard(environment)
            self._cond.notify()
        if not keep:
            environment.close()

    def kill(self) -> None:
        """Kill every environment, busy or idle, at once; the pool takes no more calls."""
        with self._cond:
            self._closed = True
            everyone = list(self._all)
            self._idle.clear()
            self._cond.notify_all()
        for environment in everyone:
            environment.kill()
        for environment in everyone:
            with contextlib.suppress(Exception):
                environment.process.join(2)


class ProcessInvoker:
    """Calls a function in one of its execution environments, as Lambda does."""

    def __init__(self, pool: Pool, faults: Callable[[], FaultPlan | None]) -> None:
        self.function = pool.function
        self.pool = pool
        self._faults = faults

    def __call__(self, event: dict[str, Any]) -> Any:
        plan = self._faults()
        request: dict[str, Any] = {
            "event": event,
            "env": function_environment(self.function),
            "faults": _plan_state(plan),
            "observe": aws.observing(),
        }
        environment = self.pool.acquire()  # waiting and a cold start are not the call's time
        healthy = False
        try:
            request["deadline"] = deadline = clock.monotonic() + self.function.timeout_seconds
            kind, value, meta = environment.call(request, deadline, _serve_call)
            healthy = True
        except EnvironmentDied:
            _count_a_crash(environment, plan)
            raise
        finally:
            self.pool.release(environment, healthy)
        _take_meta(meta, plan)
        if kind == "raised":
            raise HandlerFailed(f"{self.function.key} raised in its environment:\n{value}")
        return value


def _plan_state(plan: FaultPlan | None) -> dict[str, Any] | None:
    kinds = plan.child_state() if plan is not None else None
    if plan is None or kinds is None:
        return None
    return {
        "id": id(plan),
        "seed": plan.seed,
        "kinds": kinds,  # throttles and Idempotency-Key faults (`faults.CHILD_KINDS`)
        "active": plan._active,  # paused while a test reads what it checks
    }


def _count_a_crash(environment: Any, plan: FaultPlan | None) -> None:
    """An environment that ended itself for `idem_crash` (its exit code says so) could not
    report it: count it here."""
    from ezgh_engine.local.faults import CRASH_EXIT_CODE

    if plan is None:
        return
    with contextlib.suppress(Exception):
        environment.process.join(1)
        if environment.process.exitcode == CRASH_EXIT_CODE:
            with plan._lock:
                plan.injected["idem_crash"] += 1


def _take_meta(meta: dict[str, Any], plan: FaultPlan | None) -> None:
    for record in meta.get("observed") or ():
        aws.report(record)
    injected = meta.get("injected") or {}
    if plan is not None and injected:
        with plan._lock:
            plan.injected.update(injected)


def _serve_call(name: str, kwargs: dict[str, Any]) -> Any:
    """What a child asks of the runtime mid-call: queue subscriptions' event sources."""
    methods: dict[str, Callable[..., Any]] = {
        "event_sources.create": event_sources.LOCAL.create,
        "event_sources.update": event_sources.LOCAL.update,
        "event_sources.delete": event_sources.LOCAL.delete,
    }
    return methods[name](**kwargs)


def start_forkserver(functions: Iterable[Function]) -> None:
    """Start the forkserver for `functions` now, if it is not running (`ezgh dev` starts
    it first thing): it imports their handlers, about a second of CPU, while the caller
    does other work, instead of when the first environment is needed."""
    forkserver_.start(_handler_modules(functions))


def _handler_modules(functions: Iterable[Function]) -> list[str]:
    return sorted({f.handler.partition(":")[0] for f in functions})


class Environments:
    """Every topology function's pool, for one life of the engine (a restart kills it)."""

    def __init__(
        self,
        functions: Iterable[Function],
        *,
        clock_path: str | None,
        faults: Callable[[], FaultPlan | None],
    ) -> None:
        functions = list(functions)
        self._clock_path = clock_path
        self._faults = faults
        context = forkserver_.context(_handler_modules(functions))
        self.pools = {f.key: Pool(f, self._setup, context) for f in functions}

    def _setup(self) -> Setup:
        return Setup(clock_path=self._clock_path, env=handler_environment())

    def prewarm(self, keys: Iterable[str] | None = None, count: int | None = None) -> None:
        """Start a few environments of each function (of `keys`: only those functions') in
        the background: `count` each, or as `PREWARM` says."""
        wanted = set(self.pools) if keys is None else set(keys)
        for key, pool in self.pools.items():
            if key in wanted:
                pool.prewarm(count or PREWARM.get(key, 1))

    def invoker(self, key: str) -> ProcessInvoker:
        return ProcessInvoker(self.pools[key], self._faults)

    def kill(self) -> None:
        """Kill every environment of every function at once."""
        for pool in self.pools.values():
            pool.kill()


# --- the child side ----------------------------------------------------------------------


class _RemoteEventSources:
    """`event_sources.LOCAL` in a child: every call goes to the runtime, which runs the
    subscriptions' pollers."""

    def __init__(self, conn: Connection) -> None:
        self._conn = conn
        self._lock = threading.Lock()

    def _ask(self, name: str, **kwargs: Any) -> Any:
        with self._lock:
            self._conn.send(("call", name, kwargs))
            kind, value = self._conn.recv()
        if kind != "ok":
            raise RuntimeError(f"the local runtime refused {name}: {value}")
        return value

    def create(self, *, queue_arn: str, queue_url: str, max_concurrency: int, enabled: bool) -> str:
        return str(
            self._ask(
                "event_sources.create",
                queue_arn=queue_arn,
                queue_url=queue_url,
                max_concurrency=max_concurrency,
                enabled=enabled,
            )
        )

    def update(
        self, mapping_id: str, *, enabled: bool | None = None, max_concurrency: int | None = None
    ) -> None:
        self._ask(
            "event_sources.update",
            mapping_id=mapping_id,
            enabled=enabled,
            max_concurrency=max_concurrency,
        )

    def delete(self, mapping_id: str) -> None:
        self._ask("event_sources.delete", mapping_id=mapping_id)


class _ChildState:
    """What a child keeps between calls: the environment it applied, its fault plan, and
    the requests it collects for the runtime's observers."""

    def __init__(self, env: dict[str, str]) -> None:
        self.env = dict(env)
        self.plan: Any = None
        self.plan_id: Any = None
        self.reported: Counter[str] = Counter()
        self.observed: list[dict[str, Any]] | None = None
        self._observing = False

    def apply_env(self, env: dict[str, str]) -> None:
        """Make this process's handler variables exactly `env` (settings follow)."""
        if env == self.env:
            return
        _set_env(self.env, env)
        self.env = dict(env)

    def apply_faults(self, state: dict[str, Any] | None) -> None:
        from ezgh_engine.local.faults import FaultPlan

        if state is None or state["id"] != self.plan_id:
            if self.plan is not None:
                self.plan.uninstall()
            self.plan = self.plan_id = None
            self.reported = Counter()
        if state is None:
            return
        if self.plan is None:
            self.plan = FaultPlan(seed=state["seed"], **state["kinds"])
            self.plan.may_exit = True  # `idem_crash` ends this process, as a crash would
            self.plan_id = state["id"]
            self.plan.install()
        self.plan._active = bool(state["active"])

    def start_observing(self, wanted: bool) -> None:
        self.observed = [] if wanted else None
        if wanted and not self._observing:
            aws.observe(self._keep)
            self._observing = True

    def _keep(self, record: dict[str, Any]) -> None:
        if self.observed is not None:
            self.observed.append(record)

    def meta(self) -> dict[str, Any]:
        meta: dict[str, Any] = {}
        if self.observed:
            meta["observed"] = [_picklable(r) for r in self.observed]
        self.observed = None
        if self.plan is not None:
            now = Counter(self.plan.report())
            delta = {k: n - self.reported[k] for k, n in now.items() if n > self.reported[k]}
            self.reported = now
            if delta:
                meta["injected"] = delta
        return meta


def _set_env(old: dict[str, str], new: dict[str, str]) -> None:
    aws_changed = False
    for name in set(old) - set(new):
        os.environ.pop(name, None)
        aws_changed |= name.startswith("AWS_")
    for name, value in new.items():
        if os.environ.get(name) != value:
            os.environ[name] = value
            aws_changed |= name.startswith("AWS_")
    if aws_changed:
        aws.reset_clients()
    config.reset_settings()


def _picklable(record: dict[str, Any]) -> dict[str, Any]:
    try:
        pickle.dumps(record)
        return record
    except Exception:  # a streamed body in `parsed` (S3 GetObject)
        return {**record, "parsed": None}


def serve(conn: Connection, function: Function, setup: Setup) -> None:
    """An execution environment's life: start (cold), then one event at a time (warm)."""
    from ezgh_engine.local import call_log
    from ezgh_engine.local.handlers import LambdaContext, import_handler

    gc.enable()  # off in the forkserver while it imported (`local._prefork`)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the runtime's; it kills us
    # From the forkserver's variables to the function's: clients are made for these, from
    # the models the forkserver read (`_warm`).
    state = _ChildState(handler_environment())
    state.apply_env(function_environment(function, setup.env))
    if setup.clock_path:
        clock.set_clock(clock.SharedOffsetClock(setup.clock_path))
    event_sources.LOCAL = _RemoteEventSources(conn)  # type: ignore[assignment]
    try:
        call_log.install(function.key)
        handler = import_handler(function.handler)
    except BaseException:
        with contextlib.suppress(OSError):  # (the runtime gone meanwhile: nobody to tell)
            conn.send(("failed", traceback.format_exc()))
        return
    try:
        conn.send(("ready", None))
    except OSError:  # the runtime stopped while this environment started: end quietly
        return
    while True:
        try:
            request = conn.recv()
        except (EOFError, OSError):
            return  # the runtime is gone
        state.apply_env(request["env"])
        state.apply_faults(request["faults"])
        state.start_observing(request["observe"])
        context = LambdaContext(function, deadline=request["deadline"])
        try:
            reply: tuple[str, Any, dict[str, Any]] = (
                "result",
                handler(request["event"], context),
                {},
            )
        except Exception:
            reply = ("raised", traceback.format_exc(), {})
        reply = (reply[0], reply[1], state.meta())
        try:
            conn.send(reply)
        except (pickle.PicklingError, TypeError, AttributeError) as error:
            conn.send(("raised", f"the handler's answer cannot leave its process: {error}", {}))
        except (EOFError, OSError):
            return
