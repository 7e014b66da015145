"""Replay, identity and step outcomes, through a PushApp and a fake engine."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any
from unittest.mock import ANY

from ezgh_workflows import Context, StepError, workflow
from sdk_engine import Engine, invoke, make_app, post, run_to_end


class CardDeclinedError(Exception):
    pass


def test_repeated_names_get_counted_ids(engine: Engine) -> None:
    @workflow("loop")
    async def loop(ctx: Context) -> list[int]:
        return [await ctx.step.run("send", lambda i=i: i) for i in range(3)]

    outcome = invoke(make_app(engine, loop), engine, "loop")
    inline = outcome["ops"][0]["inline"]  # made by the engine: the recorded step's own
    assert engine.steps["send#3"]["startedAt"] == inline["startedAt"]
    assert outcome == {
        "protocol": "1.5",
        "deploymentId": None,
        "outcome": "completed",
        "output": [0, 1, 2],
        "ops": [
            {
                "op": "complete",
                "stepId": "send#3",
                "output": 2,
                # send#3 started right after send#2's end: inline, as the engine answers it
                "inline": {"name": "send", "order": inline["order"], "startedAt": ANY},
            }
        ],
    }
    assert [op["stepId"] for op in engine.ops("start")] == ["send#1", "send#2", "send#3"]
    assert [op["output"] for op in engine.ops("complete")] == [0, 1, 2]


def test_ops_follow_the_protocol(engine: Engine) -> None:
    @workflow("one")
    async def one(ctx: Context) -> str:
        return await ctx.step.run("load", lambda: "x")

    invoke(make_app(engine, one), engine, "one")
    assert engine.calls == [
        [{"op": "start", "stepId": "load#1", "name": "load", "kind": "run", "attempt": 1}],
        [{"op": "complete", "stepId": "load#1", "output": "x"}],  # carried by the answer
    ]


def test_a_step_end_rides_the_next_start_one_call_per_step(engine: Engine) -> None:
    @workflow("three")
    async def three(ctx: Context) -> list[str]:
        a = await ctx.step.run("a", lambda: "A")
        b = await ctx.step.run("b", lambda: a + "B")
        now = await ctx.step.now("t")
        c = await ctx.step.run("c", lambda: b + "C")
        return [a, b, c, type(now).__name__]

    outcome = invoke(make_app(engine, three), engine, "three")
    assert outcome["output"] == ["A", "AB", "ABC", "datetime"]
    shapes = [[(op["op"], op["stepId"]) for op in call] for call in engine.calls]
    assert shapes == [
        [("start", "a#1")],
        [("complete", "a#1"), ("start", "b#1")],
        [("complete", "b#1"), ("record", "t#1")],  # a value is recorded before it is seen
        [("start", "c#1")],
        [("complete", "c#1")],  # the answer's ops
    ]
    assert outcome["ops"] == [{"op": "complete", "stepId": "c#1", "output": "ABC"}]


def test_an_engine_speaking_1_2_gets_every_end_at_once(engine: Engine) -> None:
    @workflow("two")
    async def two(ctx: Context) -> str:
        a = await ctx.step.run("a", lambda: "A")
        return await ctx.step.run("b", lambda: a + "B")

    app = make_app(engine, two)
    body = engine.invoke_body("two")
    body["protocol"] = "1.2"  # the engine's request as an engine before 1.3 sent it
    answer = post(app, body)
    assert "ops" not in answer.json()
    shapes = [[(op["op"], op["stepId"]) for op in call] for call in engine.calls]
    assert shapes == [
        [("start", "a#1")],
        [("complete", "a#1")],
        [("start", "b#1")],
        [("complete", "b#1")],
    ]


def test_a_held_end_recorded_otherwise_aborts_the_invocation(engine: Engine) -> None:
    """While the SDK held step a's end, the engine failed the step: its invocation had run
    past the invoke timeout (`invoker.fail_overrunning_steps`, under the same lease)."""
    ran: list[str] = []

    @workflow("raced")
    async def raced(ctx: Context) -> str:
        a = await ctx.step.run("a", lambda: "mine")
        return await ctx.step.run("b", lambda: ran.append(a) or a)

    def engine_failed_it_first(ops: list[dict[str, Any]]) -> None:
        if any(op["op"] == "complete" and op["stepId"] == "a#1" for op in ops):
            engine.overrun()

    engine.before_call = engine_failed_it_first
    outcome = invoke(make_app(engine, raced), engine, "raced")
    assert outcome["outcome"] == "aborted"
    assert "another outcome" in outcome["reason"]
    assert engine.steps["a#1"]["error"]["code"] == "workflows.step_timed_out"
    assert ran == []  # step b never ran on a value the run does not hold


def test_replay_returns_recorded_values_without_running(engine: Engine) -> None:
    runs: list[str] = []

    @workflow("replay")
    async def replay(ctx: Context) -> Any:
        a = await ctx.step.run("a", lambda: runs.append("a") or {"n": 1})
        await ctx.step.sleep("nap", "1h")
        b = await ctx.step.run("b", lambda: runs.append("b") or a["n"] + 1)
        return [a, b]

    outcome, invocations = run_to_end(make_app(engine, replay), engine, "replay")
    assert outcome["output"] == [{"n": 1}, 2]
    assert invocations == 2
    assert runs == ["a", "b"]  # each step ran exactly once over two invocations
    assert len(engine.ops("start")) == 2


def test_running_step_runs_again_with_next_attempt(engine: Engine) -> None:
    from ezgh_workflows import step_context

    @workflow("crash")
    async def crash(ctx: Context) -> Any:
        return await ctx.step.run("charge", lambda: step_context().attempt)

    app = make_app(engine, crash)
    start = {"op": "start", "stepId": "charge#1", "name": "charge", "kind": "run", "attempt": 1}
    engine.crashed_invocation("crash", [start])
    assert engine.steps["charge#1"]["status"] == "running"
    outcome = invoke(app, engine, "crash")
    assert outcome["output"] == 2


def test_kind_mismatch_is_nondeterminism(engine: Engine) -> None:
    """The code deployed mid-run calls a step by the name a recorded sleep has."""

    @workflow("changed")
    async def before(ctx: Context) -> Any:
        await ctx.step.sleep("x", 1)

    assert invoke(make_app(engine, before), engine, "changed")["outcome"] == "suspended"

    @workflow("changed")
    async def changed(ctx: Context) -> Any:
        try:
            return await ctx.step.run("x", lambda: 1)
        except Exception:  # cannot swallow a rule violation
            return "swallowed"

    outcome = invoke(make_app(engine, changed), engine, "changed")  # after the sleep
    assert engine.steps["x#1"]["status"] == "completed"
    assert outcome["outcome"] == "failed"
    error = outcome["error"]
    assert error["code"] == "workflows.nondeterminism"
    assert error["name"] == "NondeterminismError"
    assert "'x#1'" in error["message"] and "'sleep'" in error["message"]
    assert "'run'" in error["message"]


def test_step_error_is_the_same_on_first_run_and_replay(engine: Engine) -> None:
    seen: list[tuple[str, str, str, str]] = []

    def decline() -> None:
        raise CardDeclinedError("Card declined")

    @workflow("pay")
    async def pay(ctx: Context) -> None:
        try:
            await ctx.step.run("charge", decline, retries=0)
        except StepError as exc:
            seen.append((exc.code, exc.error_name, exc.message, exc.step_id))
        await ctx.step.sleep("wait", 5)
        await ctx.step.run("charge-again", decline, retries=0)

    outcome, _ = run_to_end(make_app(engine, pay), engine, "pay")
    assert seen == [("user", "CardDeclinedError", "Card declined", "charge#1")] * 2
    assert engine.ops("fail")[0]["error"] == {
        "code": "user",
        "name": "CardDeclinedError",
        "message": "Card declined",
    }
    assert outcome["outcome"] == "failed"
    assert outcome["error"] == {
        "code": "user",
        "name": "CardDeclinedError",
        "message": "Card declined",
    }


def test_workflow_exception_is_a_user_error(engine: Engine) -> None:
    @workflow("boom")
    def boom(ctx: Context) -> None:
        raise KeyError("missing")

    outcome = invoke(make_app(engine, boom), engine, "boom")
    assert outcome["error"] == {"code": "user", "name": "KeyError", "message": "'missing'"}


def test_step_in_step_fails_the_run(engine: Engine) -> None:
    @workflow("nested")
    async def nested(ctx: Context) -> Any:
        async def outer() -> Any:
            return await ctx.step.run("inner", lambda: 1)

        try:
            return await ctx.step.run("outer", outer)
        except BaseException:
            return "swallowed"

    outcome = invoke(make_app(engine, nested), engine, "nested")
    assert outcome["outcome"] == "failed"
    assert outcome["error"]["code"] == "workflows.step_in_step"


def test_step_in_step_from_a_sync_function(engine: Engine) -> None:
    @workflow("nested-sync")
    def nested(ctx: Context) -> Any:
        return ctx.step.run("outer", lambda: ctx.step.run("inner", lambda: 1))

    outcome = invoke(make_app(engine, nested), engine, "nested-sync")
    assert outcome["error"]["code"] == "workflows.step_in_step"


def test_step_context_gives_attempt_and_stable_key(engine: Engine) -> None:
    from ezgh_workflows import step_context

    @workflow("ctx")
    async def ctx_wf(ctx: Context) -> Any:
        first = await ctx.step.run("a", lambda: step_context().idempotency_key)
        second = await ctx.step.run("a", lambda: step_context().idempotency_key)
        attempt = await ctx.step.run("b", lambda: step_context().attempt)
        return [first, second, attempt]

    outcome = invoke(make_app(engine, ctx_wf), engine, "ctx")
    import hashlib

    first, second, attempt = outcome["output"]
    assert first == hashlib.sha256(f"{engine.run_id}:a#1".encode()).hexdigest()
    assert second == hashlib.sha256(f"{engine.run_id}:a#2".encode()).hexdigest()
    assert attempt == 1


def test_now_and_uuid_are_recorded_and_replayed(engine: Engine) -> None:
    seen: list[Any] = []

    @workflow("values")
    async def values_wf(ctx: Context) -> Any:
        now = await ctx.step.now("now")
        ident = await ctx.step.uuid("id")
        seen.append((now, ident))
        await ctx.step.sleep("nap", "1s")
        return [now, ident]

    outcome, _ = run_to_end(make_app(engine, values_wf), engine, "values")
    (now1, id1), (now2, id2) = seen
    assert now1 == now2 and id1 == id2
    assert isinstance(now1, datetime) and now1.tzinfo is not None
    assert now1.utcoffset() == UTC.utcoffset(None)
    records = engine.ops("record")
    assert [(r["stepId"], r["kind"]) for r in records] == [("now#1", "value"), ("id#1", "value")]
    assert records[0]["output"].endswith("Z")
    assert outcome["output"] == [now1.isoformat(), id1]


def test_recorded_value_wins_over_a_fresh_one(engine: Engine) -> None:
    @workflow("uuid")
    async def uuid_wf(ctx: Context) -> str:
        return await ctx.step.uuid("id")

    app = make_app(engine, uuid_wf)
    record = {"op": "record", "stepId": "id#1", "name": "id", "kind": "value"}
    engine.crashed_invocation("uuid", [{**record, "output": "recorded-uuid"}])
    assert invoke(app, engine, "uuid")["output"] == "recorded-uuid"
    assert engine.calls == []


def test_sync_def_workflow_blocks_on_steps(engine: Engine) -> None:
    @workflow("plain")
    def plain(ctx: Context) -> Any:
        a = ctx.step.run("a", lambda: ctx.input["x"] * 2)
        ctx.step.sleep("nap", "2m")
        b = ctx.step.run("b", lambda: a + 1)
        when = ctx.step.now("when")
        return {"a": a, "b": b, "aware": when.tzinfo is not None}

    outcome, invocations = run_to_end(make_app(engine, plain), engine, "plain", {"x": 5})
    assert outcome["output"] == {"a": 10, "b": 11, "aware": True}
    assert invocations == 2


def test_async_step_functions_and_awaitables(engine: Engine) -> None:
    async def fetch() -> int:
        await asyncio.sleep(0)
        return 7

    @workflow("async-fns")
    async def wf(ctx: Context) -> Any:
        a = await ctx.step.run("a", fetch)
        b = await ctx.step.run("b", lambda: fetch())
        return a + b

    assert invoke(make_app(engine, wf), engine, "async-fns")["output"] == 14


def test_gather_with_distinct_names_runs_both(engine: Engine) -> None:
    @workflow("pair")
    async def pair(ctx: Context) -> Any:
        return await asyncio.gather(ctx.step.run("a", lambda: 1), ctx.step.run("b", lambda: 2))

    outcome, _ = run_to_end(make_app(engine, pair), engine, "pair")
    assert outcome["output"] == [1, 2]
    # Each branch's lease take started its step: no `start`; each answer carried its end.
    assert engine.ops("start") == []
    assert sorted(op["stepId"] for op in engine.ops("complete")) == ["a#1", "b#1"]


def test_full_replay_sends_no_ops_and_gives_the_same_output(engine: Engine) -> None:
    @workflow("full")
    async def full(ctx: Context) -> Any:
        a = await ctx.step.run("a", lambda: {"t": (1, 2)})
        b, c = await asyncio.gather(ctx.step.uuid("u"), ctx.step.run("c", lambda: ctx.attempt))
        await ctx.step.sleep("nap", 1)
        return [a, b, c, ctx.run_id]

    app = make_app(engine, full)
    first, _ = run_to_end(app, engine, "full")
    calls = len(engine.calls)
    again = invoke(app, engine, "full")
    assert again == first
    assert len(engine.calls) == calls
    assert first["output"][0] == {"t": [1, 2]} and first["output"][2:] == [1, engine.run_id]


def test_workflow_sees_the_run_attempt(engine: Engine) -> None:
    @workflow("attempt")
    def attempt(ctx: Context) -> Any:
        if ctx.attempt < 3:
            raise RuntimeError(f"attempt {ctx.attempt}")
        return ctx.attempt

    app = make_app(engine, attempt)
    for _ in range(2):
        assert run_to_end(app, engine, "attempt")[0]["outcome"] == "failed"
        engine.retry()  # RetryRun: the next attempt of the same run
    assert run_to_end(app, engine, "attempt")[0]["output"] == 3


def test_in_a_round_of_several_steps_each_end_is_sent_when_its_step_ends(
    engine: Engine,
) -> None:
    """A race orders its steps by when their ends were recorded: an end held until the next
    call would be recorded late, and replay could pick another winner."""

    @workflow("racer")
    async def racer(ctx: Context) -> Any:
        callback = await ctx.step.create_callback("approve")
        return await asyncio.gather(ctx.step.run("a", lambda: "A"), callback.wait())

    outcome = invoke(make_app(engine, racer), engine, "racer")
    assert outcome["outcome"] == "suspended" and "ops" not in outcome
    shapes = [[(op["op"], op["stepId"]) for op in call] for call in engine.calls]
    assert shapes == [
        [("callback", "approve#1")],
        [("start", "a#1")],
        [("complete", "a#1")],  # at once, not held for a later call
    ]


def test_name_mismatch_under_an_explicit_id_is_nondeterminism(engine: Engine) -> None:
    # Recorded as "charge-card" with id="pay"; the code now calls the step "refund" with the
    # same id: replaying the charge's result as the refund's would be a silent wrong value.
    @workflow("renamed")
    async def renamed(ctx: Context) -> Any:
        return await ctx.step.run("refund", lambda: "refunded", id="pay")

    app = make_app(engine, renamed)
    start = {"op": "start", "stepId": "pay", "name": "charge-card", "kind": "run", "attempt": 1}
    engine.crashed_invocation(
        "renamed", [start], [{"op": "complete", "stepId": "pay", "output": "charged"}]
    )
    outcome = invoke(app, engine, "renamed")
    assert outcome["outcome"] == "failed"
    error = outcome["error"]
    assert error["code"] == "workflows.nondeterminism"
    assert "'charge-card'" in error["message"] and "'refund'" in error["message"]


class _ThrottledOnce:
    """The engine's step transport, except that one call (the `nth`) stays throttled past
    the SDK's resends, as the transport raises it (`EngineBusy`)."""

    def __init__(self, inner: Any, nth: int, state: dict[str, int]) -> None:
        self._inner, self._nth, self._state = inner, nth, state

    async def send(self, ops: Any) -> Any:
        self._state["calls"] += 1
        if self._state["calls"] == self._nth:
            from ezgh_workflows._internal.transport import EngineBusy

            raise EngineBusy("step call stayed throttled: HTTP 503", 1.0)
        return await self._inner.send(ops)

    def __getattr__(self, name: str) -> Any:  # the history and payload reads, aclose
        return getattr(self._inner, name)


def test_a_throttled_answer_carries_the_held_end_and_its_step_runs_once(
    engine: Engine,
) -> None:
    """Step a ran and its end was held for the next call, which stayed throttled: the
    `throttled` answer carries a's end, the engine records it, and the next delivery replays
    a instead of running it again (before, the end was dropped and a ran twice)."""
    ran: list[str] = []

    @workflow("pair")
    async def pair(ctx: Context) -> str:
        a = await ctx.step.run("a", lambda: ran.append("a") or "A")
        return await ctx.step.run("b", lambda: ran.append("b") or a + "B")

    state = {"calls": 0}
    app = make_app(engine, pair)
    plain = app._transport_factory  # type: ignore[attr-defined]
    app._transport_factory = lambda api, dep: _ThrottledOnce(  # type: ignore[attr-defined]
        plain(api, dep), 2, state
    )
    outcome, invocations = run_to_end(app, engine, "pair")
    assert outcome["outcome"] == "completed" and outcome["output"] == "AB"
    assert ran == ["a", "b"]  # a ran once
    assert invocations == 2
    first = next(d.answer for d in engine.deliveries if "run" in d.request)
    assert first["outcome"] == "throttled" and first["retryAfter"] == 1.0
    assert first["ops"] == [{"op": "complete", "stepId": "a#1", "output": "A"}]
    assert engine.steps["a#1"]["status"] == "completed"
    assert int(engine.steps["a#1"]["attempt"]) == 1
