"""The fault suite's push app: `interp` runs a DSL program (tests/faults/dsl.py) and logs
every step body it runs, every value it sees and every callback URL it publishes."""

from __future__ import annotations

import asyncio
import threading
from collections import defaultdict
from typing import Any

from ezgh_engine import clock
from ezgh_engine.local.faults import FaultPlan, FaultyApp
from ezgh_workflows import Context, NonRetryableError, PushApp, StepError, step_context, workflow
from ezgh_workflows._internal.transport import (
    RETRY_FOR_SECONDS,
    HttpStepTransport,
    http_transport_factory,
)

_lock = threading.Lock()
# (run, step) -> engine times (ms) at which its body began, one per execution
EXECUTIONS: dict[tuple[str, str], list[int]] = defaultdict(list)
# (run, step) -> every value the workflow saw for a value step, one per replay
VALUES: dict[tuple[str, str], list[str]] = defaultdict(list)
# (run, callback name) -> URL
CALLBACKS: dict[tuple[str, str], str] = {}
# (run, message wait's name) -> the messageId that resumed it (tests/faults/controls.py)
MESSAGES: dict[tuple[str, str], str] = {}
# (run, send step's name) -> the messageId its recorded result names, one per replay
SENT: dict[tuple[str, str], list[str]] = defaultdict(list)
# The QueuesClient `send` steps use (set per batch by tests/faults/controls.py)
QUEUES: list[Any] = []


def reset() -> None:
    with _lock:
        EXECUTIONS.clear()
        VALUES.clear()
        CALLBACKS.clear()
        MESSAGES.clear()
        SENT.clear()


def _body(run_id: str, step_id: str, fail: int, result: Any) -> Any:
    with _lock:
        EXECUTIONS[(run_id, step_id)].append(clock.now_ms())
    attempt = step_context().attempt
    if attempt <= fail:
        raise RuntimeError(f"attempt {attempt} of {step_id} fails")
    return result


def _publish(run_id: str, name: str, url: str) -> str:
    with _lock:
        CALLBACKS[(run_id, name)] = url
    return "published"


@workflow("interp")
async def interp(ctx: Context) -> Any:
    out: list[Any] = []
    run_id = ctx.run_id
    for op in ctx.input["program"]:
        kind, name = op["op"], op["name"]
        step_id = f"{name}#1"
        if kind == "run":
            out.append(
                await ctx.step.run(
                    name,
                    lambda s=step_id, f=op["fail"], n=name: _body(run_id, s, f, n),
                    retries=op["retries"],
                )
            )
        elif kind == "fail":

            def give_up(s: str = step_id) -> None:
                _body(run_id, s, 0, None)
                raise NonRetryableError("no")

            try:
                await ctx.step.run(name, give_up, retries=2)
                out.append({"caught": None})
            except StepError as exc:
                out.append({"caught": exc.code})
        elif kind == "value":
            value = await ctx.step.uuid(name)
            with _lock:
                VALUES[(run_id, step_id)].append(value)
            out.append("uuid")
        elif kind == "sleep":
            await ctx.step.sleep(name, op["seconds"])
            out.append("slept")
        elif kind == "callback":
            cb = await ctx.step.create_callback(name)
            await ctx.step.run(f"{name}-publish", lambda u=cb.url, n=name: _publish(run_id, n, u))
            out.append(await cb.wait())
        elif kind == "child":
            out.append(
                await ctx.step.invoke(name, workflow="interp", input={"program": op["program"]})
            )
        elif kind == "parallel":
            calls = []
            for i, branch in enumerate(op["branches"]):
                bname = f"{name}-{i}"
                calls.append(
                    ctx.step.run(
                        bname,
                        lambda s=f"{bname}#1", f=branch["fail"], n=bname: _body(run_id, s, f, n),
                        retries=branch["retries"],
                    )
                )
            out.append(list(await asyncio.gather(*calls)))
        elif kind in CONTROL_OPS:  # tests/faults/controls.py
            out.append(await CONTROL_OPS[kind](ctx, op, step_id))
        else:
            raise ValueError(kind)
    return out


async def _crash(ctx: Context, op: dict[str, Any], step_id: str) -> Any:
    """`crash`: fails the run (uncaught) on its first attempt; a RetryRun then completes it."""

    def body(run_id: str = ctx.run_id, attempt: int = ctx.attempt) -> str:
        _body(run_id, step_id, 0, None)
        if attempt == 1:
            raise NonRetryableError("crash on the run's first attempt")
        return str(op["name"])

    return await ctx.step.run(op["name"], body, retries=0)


# How long a `long` step's body runs (real time): past the suite's invoke timeout
# (tests/faults/conftest.py, 6 s).
LONG_STEP_SECONDS = 8.0


async def _long(ctx: Context, op: dict[str, Any], step_id: str) -> Any:
    """`long`: a step whose body outlasts the invoke timeout: it must fail once, naming the
    limit (caught here), and never run again."""

    def body(run_id: str = ctx.run_id) -> str:
        _body(run_id, step_id, 0, None)
        threading.Event().wait(LONG_STEP_SECONDS)
        return "finished"

    try:
        return await ctx.step.run(op["name"], body, retries=2)
    except StepError as exc:
        return {"caught": exc.code}


async def _msg2(ctx: Context, op: dict[str, Any], step_id: str) -> Any:
    """`msg2`: two waits in a row on one queue and key (the harness sends one message to
    each, named after its wait): a message delivered twice must resume one wait only."""
    key = f"{ctx.run_id}-{op['name']}"
    got = []
    for part in ("a", "b"):
        message = await ctx.step.wait_for_message(
            f"{op['name']}-{part}", queue_id=ctx.input["queue"], key=key, timeout_seconds=86_400
        )
        if isinstance(message, dict):
            with _lock:
                MESSAGES[(ctx.run_id, f"{op['name']}-{part}")] = str(message.get("messageId"))
        got.append(message["body"] if isinstance(message, dict) else message)
    return got


async def _send(ctx: Context, op: dict[str, Any], step_id: str) -> Any:
    """`send`: `send_to_queue` of one message to the batch's sink queue, while the API may
    fail its Idempotency-Key record or die between SQS and the answer: the step must end
    (sent once, or, when the API's recovery outlasted the suite's invoke timeout,
    failed naming the limit), and every stored copy must be the one message recorded."""
    try:
        sent = await ctx.step.send_to_queue(
            op["name"], QUEUES[0], ctx.input["sink"], [{"body": f"{ctx.run_id}:{op['name']}"}]
        )
    except StepError as exc:
        return {"caught": exc.code}
    with _lock:
        SENT[(ctx.run_id, op["name"])].append(str(sent[0]["messageId"]))
    return "sent"


CONTROL_OPS = {"crash": _crash, "long": _long, "msg2": _msg2, "send": _send}


class CountingApp(FaultyApp):
    """`FaultyApp` that also counts requests in flight (the suite waits for them)."""

    def __init__(self, inner: Any, plan: FaultPlan) -> None:
        super().__init__(inner, plan)
        self._count_lock = threading.Lock()
        self.in_flight = 0

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":  # lifespan lasts as long as the app
            await super().__call__(scope, receive, send)
            return
        with self._count_lock:
            self.in_flight += 1
        try:
            await super().__call__(scope, receive, send)
        finally:
            with self._count_lock:
                self.in_flight -= 1


# The plan is swapped per batch (`served.plan = ...`); the transport reads it through `served`.
_plan_box: list[FaultPlan] = [FaultPlan()]


def _transport(api: Any, deployment_id: str | None) -> Any:
    return _plan_box[0].wrap_transport(_scaled_transport)(api, deployment_id)


class _ScaledTransport(HttpStepTransport):
    """The SDK's step transport with every wait scaled, the engine's `Retry-After` too: its
    1 s against a retry time scaled to 0.6 s made the SDK give up a throttled step call at
    its first 503, where a deployed SDK (1 s against 30 s) tries it about thirty times."""

    def __init__(self, api: Any, deployment_id: str | None, scale: float) -> None:
        super().__init__(
            api,
            deployment_id,
            backoff=tuple(wait * scale for wait in (0.1, 0.4, 1.2)),
            retry_for_seconds=RETRY_FOR_SECONDS * scale,
        )
        self._scale = scale

    def _wait(self, tried: int, busy: bool, retry_after: float | None) -> float | None:
        scaled = retry_after * self._scale if retry_after is not None else None
        return super()._wait(tried, busy, scaled)


def _scaled_transport(api: Any, deployment_id: str | None) -> Any:
    """The SDK's step transport, its retry waits and time scaled as the engine's clients'
    backoff is (`FaultPlan.backoff_scale`: the campaign's invoke timeout is 6 s, not 300)."""
    scale = _plan_box[0].backoff_scale
    if scale == 1:
        return http_transport_factory(api, deployment_id)
    return _ScaledTransport(api, deployment_id, scale)


app = PushApp([interp], transport_factory=_transport)
served = CountingApp(app, _plan_box[0])


def use_plan(plan: FaultPlan) -> None:
    _plan_box[0] = plan
    served.plan = plan
