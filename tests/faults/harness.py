"""Drive generated runs through a faulty local runtime, then check what the engine promises.

`run_batch` starts a batch of programs (each twice with one run key), skips the engine clock
from one due thing to the next (a timer, a held or redelivered message, a late fault) while
completing callbacks, restarts the engine once mid-run, and answers its `Figures`: what was
lost, duplicated or stuck, and why.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
from ezgh_engine import clock
from ezgh_engine.adapters import aws, ddb, runs_store
from ezgh_engine.adapters import run_items as items
from ezgh_engine.config import settings
from ezgh_engine.core.models import Run
from ezgh_engine.local.emulator import sqs_next_due_ms
from ezgh_engine.local.faults import FaultPlan
from ezgh_engine.local.resources import SCHEDULER_GROUP
from ezgh_engine.local.runtime import LocalRuntime
from ezgh_engine.service.ops import find_stuck_runs, stuck_reason
from ezgh_workflows import WorkflowsClient
from ezgh_workflows._internal.api import ApiError

from tests.clients import workflows_client
from tests.faults import app as fault_app
from tests.faults import dsl, history

ENDED = ("completed", "failed", "cancelled", "timedOut")
_AT = re.compile(r"^at\((\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2})\)$")
MAX_ROUNDS = 400
# Real seconds a batch may be driven. A run still moving when that runs out (or the rounds do)
# is `unfinished`, not lost: a slow machine must not turn into a false loss. A run with nothing
# pending is `stuck` (and lost) whenever it is judged.
BATCH_SECONDS = float(os.environ.get("EZGH_FAULTS_BATCH_SECONDS", "240"))
VERBOSE = bool(os.environ.get("EZGH_FAULTS_VERBOSE"))


@dataclass
class Figures:
    runs: int = 0  # runs the batch made (top-level and children)
    completed: int = 0
    lost: int = 0  # a run missing, not ended, or ended with another output than fault-free
    duplicated: int = 0  # a second run for a key or child step, a recorded step run again
    stuck: int = 0  # running with nothing pending (find_stuck_runs)
    dead_lettered: int = 0  # messages in a dead-letter queue: owed, and delivered never again
    unfinished: int = 0  # still moving when the batch ran out of time or rounds: not judged
    out_of_time: bool = False  # the batch ran out of its time or round budget
    busy_when_judged: bool = False  # out of time and not quiet even after the last settle
    step_executions: int = 0
    re_executions: int = 0  # body runs beyond the fault-free count (at least once: allowed)
    restarts: int = 0
    rounds: int = 0
    faults: Counter[str] = field(default_factory=Counter)
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # what was left unfinished, and why

    def add(self, other: Figures) -> None:
        for name in (
            "runs",
            "completed",
            "lost",
            "duplicated",
            "stuck",
            "dead_lettered",
            "unfinished",
            "step_executions",
            "re_executions",
            "restarts",
            "rounds",
        ):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.faults.update(other.faults)
        self.problems.extend(other.problems)
        self.notes.extend(other.notes)
        self.out_of_time = self.out_of_time or other.out_of_time
        self.busy_when_judged = self.busy_when_judged or other.busy_when_judged


def _fraction(seed: int, what: str) -> float:
    digest = hashlib.sha256(f"{seed}|{what}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


# --- reading the engine's state (faults paused) ------------------------------------------


def all_runs() -> list[Run]:
    kwargs: dict[str, Any] = {
        "TableName": settings().runs_table,
        "FilterExpression": "sk = :run",
        "ExpressionAttributeValues": {":run": {"S": items.RUN_SK}},
    }
    out = []
    while True:
        answer = aws.client("dynamodb").scan(**kwargs)
        out.extend(items.run_from(ddb.from_item(i)) for i in answer.get("Items", []))
        if "LastEvaluatedKey" not in answer:
            return out
        kwargs["ExclusiveStartKey"] = answer["LastEvaluatedKey"]


def _schedule_times() -> list[datetime]:
    scheduler = aws.client("scheduler")
    times = []
    token = None
    while True:
        params: dict[str, Any] = {"GroupName": SCHEDULER_GROUP, "MaxResults": 100}
        if token:
            params["NextToken"] = token
        answer = scheduler.list_schedules(**params)
        for summary in answer.get("Schedules", []):
            try:
                got = scheduler.get_schedule(GroupName=SCHEDULER_GROUP, Name=summary["Name"])
            except Exception:
                continue
            match = _AT.match(got.get("ScheduleExpression", ""))
            if match and not _year_limit_timer(got):
                times.append(datetime.fromisoformat(match.group(1)).replace(tzinfo=UTC))
        token = answer.get("NextToken")
        if not token:
            return times


def _year_limit_timer(schedule: dict[str, Any]) -> bool:
    """A run's one-year-limit timer (armed for every run): not a thing the campaign waits
    for, or skipping to it would time out every run still owed a callback."""
    try:
        body = json.loads(schedule.get("Target", {}).get("Input", "{}"))
        deadline = body.get("stepId") == "$deadline"
        return bool(
            deadline and clock.parse_iso(body["wakeAt"]) - clock.now() > timedelta(days=300)
        )
    except (ValueError, KeyError, TypeError):
        return False


def next_due(plan: FaultPlan) -> datetime | None:
    """The earliest engine time at which something held back becomes due."""
    times = list(plan.pending_due()) + _schedule_times()
    ms = sqs_next_due_ms()
    if ms is not None:
        times.append(datetime.fromtimestamp(ms / 1000, UTC))
    return min(times) if times else None


def next_due_if_still(engine: LocalRuntime, plan: FaultPlan) -> tuple[bool, datetime | None]:
    """`next_due`, and whether the engine stood still while it was read. `settle` saw the
    engine quiet, but reading what is due takes a Scan and the Scheduler's schedules, on a
    loaded machine a second or more: meanwhile a delayed message may come due and be
    handled, and what it causes may not be sent yet (between a timer's delete and the
    invocation its write asks for, nothing is in any queue). Read then, "nothing due" is
    not "nothing will ever move": the harness judged such a run lost (seed 8, b1 r2, its
    retry's Invoke(5) sent and held after the harness had stopped driving). Nor may the
    clock skip to what is due over what started meanwhile: an invocation in flight would
    find its lease and token run out under it, which real time never does to one its
    invoker still waits for (a branch's step call refused, lost17). Not still: settle and
    look again."""
    seen = engine.activity.snapshot()
    due = next_due(plan)
    return _stood_still(engine, plan, seen), due


def _stood_still(engine: LocalRuntime, plan: FaultPlan, seen: tuple[int, int]) -> bool:
    """Nothing began or ended since `seen` and nothing waits to be handed on (a visible
    message, an unread stream record, an app request). A due schedule needs no check:
    `next_due` counts it. No side effect (`_quiet_now` fires due schedules), so it may run
    while faults are paused without firing a schedule past its faults."""
    if engine.activity.snapshot() != seen or fault_app.served.in_flight:
        return False
    if any(not p.idle for p in engine.pollers):
        return False
    with plan.paused():
        return not _visible_messages(engine)


# --- driving ----------------------------------------------------------------------------


def _visible_messages(engine: LocalRuntime) -> int:
    sqs = aws.client("sqs")
    urls = list(engine.provisioned.queue_urls.values())
    urls += [p.queue_url for p in engine.subscriptions.pollers.values()]
    total = 0
    for url in urls:
        attrs = sqs.get_queue_attributes(
            QueueUrl=url, AttributeNames=["ApproximateNumberOfMessages"]
        )
        total += int(attrs["Attributes"].get("ApproximateNumberOfMessages", 0))
    return total


def _quiet_now(engine: LocalRuntime, plan: FaultPlan) -> bool:
    busy, started = engine.activity.snapshot()
    if busy or fault_app.served.in_flight:
        return False
    if engine.scheduler is not None and engine.scheduler.scan():
        return False
    if any(not p.idle for p in engine.pollers):
        return False
    with plan.paused():
        if _visible_messages(engine):
            return False
    return engine.activity.snapshot() == (0, started) and not fault_app.served.in_flight


def dead_letters(engine: LocalRuntime) -> list[str]:
    """The messages in the engine's dead-letter queues, one line each (queue, receive count,
    body). Each is something owed that no handler will see again: `next_due` cannot see it
    (a dead-lettered message is visible, with no due time) and `settle` does not wait for it
    (nothing consumes a dead-letter queue), so without this a run left waiting for it is
    reported lost with no word of where its message went."""
    sqs = aws.client("sqs")
    found = []
    for key, url in sorted(engine.provisioned.dlq_urls.items()):
        attrs = sqs.get_queue_attributes(
            QueueUrl=url, AttributeNames=["ApproximateNumberOfMessages"]
        )["Attributes"]
        count = int(attrs.get("ApproximateNumberOfMessages", 0))
        if not count:
            continue
        shown = sqs.receive_message(
            QueueUrl=url,
            MaxNumberOfMessages=10,
            VisibilityTimeout=0,
            AttributeNames=["ApproximateReceiveCount"],
        ).get("Messages", [])
        found += [  # (this receive counted too)
            f"{key}-dlq: received {int(m['Attributes']['ApproximateReceiveCount']) - 1} "
            f"time(s): {m['Body'][:300]}"
            for m in shown
        ]
        found += [f"{key}-dlq: {count - len(shown)} more"] if count > len(shown) else []
    return found


def busy(engine: LocalRuntime, plan: FaultPlan) -> str:
    """What keeps the engine from being quiet (for messages)."""
    reasons = []
    handlers, _ = engine.activity.snapshot()
    if handlers:
        reasons.append(f"{handlers} handler(s) running")
    if fault_app.served.in_flight:
        reasons.append(f"{fault_app.served.in_flight} app request(s) in flight")
    reasons += [f"{p.name} not idle" for p in engine.pollers if not p.idle]
    with plan.paused():
        visible = _visible_messages(engine)
    if visible:
        reasons.append(f"{visible} visible message(s)")
    return ", ".join(reasons) or "quiet"


def settle(engine: LocalRuntime, plan: FaultPlan, timeout: float = 60.0) -> bool:
    """Wait until nothing runs and nothing is visible for a moment; False on timeout."""
    deadline = clock.monotonic() + timeout
    quiet_since: float | None = None
    while clock.monotonic() < deadline:
        if _quiet_now(engine, plan):
            quiet_since = quiet_since or clock.monotonic()
            if clock.monotonic() - quiet_since >= 0.15:
                return True
        else:
            quiet_since = None
        engine._idle_wait.wait(0.03)
    return False


def _start(client: WorkflowsClient, app_id: str, program: list[Any], key: str) -> str:
    """Start a run, retrying a throttled (429 or 5xx) answer with the same run key."""
    for _ in range(20):
        try:
            return str(client.start_run(app_id, "interp", {"program": program}, run_key=key)["id"])
        except ApiError as exc:
            if exc.status < 500 and exc.status != 429:
                raise
        except httpx.HTTPError:
            pass
    raise AssertionError(f"could not start run {key}")


# What the last POST of each published callback URL answered (a loss report names it).
CALLBACK_ANSWERS: dict[tuple[str, str], str] = {}


def _post_callbacks(posted: set[tuple[str, str]]) -> int:
    sent = 0
    for (run_id, name), url in sorted(fault_app.CALLBACKS.items()):
        if (run_id, name) in posted:
            continue
        try:
            answer = httpx.post(url, json={"cb": name}, timeout=30)
        except httpx.HTTPError as exc:
            CALLBACK_ANSWERS[(run_id, name)] = f"{type(exc).__name__}"
            continue
        CALLBACK_ANSWERS[(run_id, name)] = f"{answer.status_code} {answer.text[:120]}"
        if answer.status_code in (200, 409):  # 409: an earlier post of ours completed it
            posted.add((run_id, name))
            sent += 1
            again = httpx.post(url, json={"cb": "again"}, timeout=30)  # completes once only
            assert again.status_code in (409, 429) or again.status_code >= 500, again.text
    return sent


def run_batch(
    engine: LocalRuntime,
    programs: list[list[dict[str, Any]]],
    plan: FaultPlan,
    *,
    label: str,
    restart: bool = True,
) -> Figures:
    engine.set_faults(None)
    engine.reset()  # a new project, key and app record per batch
    history.install()
    history.clear()
    fault_app.reset()
    fault_app.use_plan(plan)
    client = workflows_client(engine)
    app_id = str(engine.apps["faults"].record["id"])
    engine.set_faults(plan)
    figures = Figures()
    began = clock.monotonic()
    top: list[str] = []
    for i, program in enumerate(programs):
        key = f"{label}-r{i}"
        run_id = _start(client, app_id, program, key)
        plan.alias(run_id, f"r{i}")
        if _fraction(plan.seed, f"twice|{i}") < 0.5:  # the same start again: the same run
            assert _start(client, app_id, program, key) == run_id
        top.append(run_id)
    restart_round = 1 + int(_fraction(plan.seed, "restart") * 6) if restart else -1
    posted: set[tuple[str, str]] = set()
    CALLBACK_ANSWERS.clear()
    retries_left = 20  # rounds that may retry refused callback POSTs before judging
    for round_ in range(MAX_ROUNDS):
        figures.rounds = round_ + 1
        if clock.monotonic() - began > BATCH_SECONDS:
            figures.out_of_time = True
            figures.notes.append(
                f"{label}: out of time after {BATCH_SECONDS:g}s of driving: {busy(engine, plan)}"
            )
            break
        if round_ == restart_round:
            engine._idle_wait.wait(0.1 + _fraction(plan.seed, "restart-at") * 0.3)  # mid-run
            engine.restart_engine()
            figures.restarts += 1
        settled = settle(engine, plan)
        if VERBOSE:
            print(
                f"{label} round {round_}: settled={settled} {busy(engine, plan)} now={clock.now()}"
            )
        if _post_callbacks(posted):
            continue
        if not settled:
            continue
        unposted = [key for key in fault_app.CALLBACKS if key not in posted]
        if unposted and retries_left > 0:  # a URL published before its wait was recorded
            retries_left -= 1
            engine._idle_wait.wait(0.2)
            continue
        with plan.paused():
            runs = all_runs()
            if runs and all(r.status in ENDED for r in runs) and not plan.pending_due():
                break
            still, due = next_due_if_still(engine, plan)
        if not still:
            continue  # it moved while we looked: settle and look again
        if due is None:
            break  # nothing will ever move: judged below
        step = max(due - clock.now(), timedelta()) + timedelta(seconds=1)
        assert engine.clock is not None
        engine.clock.advance(step)  # type: ignore[attr-defined]
        if engine.scheduler is not None:
            engine.scheduler.kick()
    else:
        figures.out_of_time = True
        figures.notes.append(f"{label}: out of rounds after {MAX_ROUNDS}: {busy(engine, plan)}")
    quiet = settle(engine, plan, timeout=30)
    if figures.out_of_time and not quiet:
        # A slow machine: what looks stuck now (a parent whose child just ended, its stream
        # record not yet read) may still move. Judged on a quiet engine only.
        figures.busy_when_judged = True
        figures.notes.append(f"{label}: still busy when judged: {busy(engine, plan)}")
    engine.set_faults(None)
    figures.faults.update({k: v for k, v in plan.report().items() if v})
    dead = dead_letters(engine)
    figures.dead_lettered += len(dead)
    figures.problems += [f"{label}: a message in a dead-letter queue: {line}" for line in dead]
    check(figures, programs, top, label)
    if os.environ.get("EZGH_FAULTS_HISTORY"):
        history.dump_all(os.environ["EZGH_FAULTS_HISTORY"], label)
    return figures


# --- checking ---------------------------------------------------------------------------


def _run_steps(program: list[dict[str, Any]]) -> dict[str, int]:
    """Step ID -> fault-free body executions, for the program's own step bodies."""
    out: dict[str, int] = {}
    for op in program:
        if op["op"] == "run":
            out[f"{op['name']}#1"] = op["fail"] + 1
        elif op["op"] == "fail":
            out[f"{op['name']}#1"] = 1
        elif op["op"] == "parallel":
            for i, branch in enumerate(op["branches"]):
                out[f"{op['name']}-{i}#1"] = branch["fail"] + 1
    return out


def _partition(run_id: str) -> str:
    """Every item of the run's partition (run item, steps, events), compact: what a loss
    report needs to tell which write or message went missing."""
    kwargs: dict[str, Any] = {
        "TableName": settings().runs_table,
        "KeyConditionExpression": "pk = :pk",
        "ExpressionAttributeValues": {":pk": items.run_key(run_id)["pk"]},
        "ConsistentRead": True,
    }
    found: list[dict[str, Any]] = []
    while True:
        answer = aws.client("dynamodb").query(**kwargs)
        found.extend(ddb.from_item(i) for i in answer.get("Items", []))
        if "LastEvaluatedKey" not in answer:
            return json.dumps(found, default=_printable, separators=(",", ":"))
        kwargs["ExclusiveStartKey"] = answer["LastEvaluatedKey"]


def _printable(value: Any) -> str:
    """A value `json` cannot write, as text (a binary attribute's bytes among them)."""
    if isinstance(value, bytes | bytearray):
        return value.hex()
    raw = getattr(value, "value", None)  # boto3's `Binary`, whose __str__ answers bytes
    if isinstance(raw, bytes | bytearray):
        return raw.hex()
    return repr(value)


def check(
    figures: Figures, programs: list[list[dict[str, Any]]], top: list[str], label: str
) -> None:
    runs = {r.id: r for r in all_runs()}
    full = {run_id: runs_store.get_run(run_id) for run_id in runs}
    figures.runs += len(runs)
    figures.completed += sum(1 for r in runs.values() if r.status == "completed")
    problems = figures.problems

    # One run per run key, one child per invoke step, and exactly the runs the programs make.
    keys = Counter(r.run_key for r in runs.values() if r.run_key)
    for key, n in keys.items():
        if n > 1:
            figures.duplicated += n - 1
            problems.append(f"{label}: {n} runs for run key {key}")
    children = Counter(
        (r.parent_run_id, r.parent_step_id) for r in runs.values() if r.parent_run_id
    )
    for (parent, step), n in children.items():
        if n > 1:
            figures.duplicated += n - 1
            problems.append(f"{label}: {n} child runs for {parent} step {step}")
    wanted = len(programs) + sum(dsl.children(p) for p in programs)
    if len(runs) > wanted:
        figures.duplicated += len(runs) - wanted
        problems.append(f"{label}: {len(runs)} runs, the programs make {wanted}")

    stuck = {s.run_id: s.why for s in find_stuck_runs(older_than_seconds=0)}
    now_ms = clock.now_ms()

    def judge(run_id: str, program: list[dict[str, Any]], where: str) -> None:
        run = full.get(run_id)
        if run is None:
            figures.lost += 1
            problems.append(f"{label}: {where}: run {run_id} missing")
            return
        if run.status != "completed":
            why = stuck.get(run_id) or stuck_reason(run, now_ms=now_ms)
            unjudged = figures.out_of_time and (not why or figures.busy_when_judged)
            if unjudged and run.status not in ENDED:
                figures.unfinished += 1  # still moving: the budget ran out, not the engine
                figures.notes.append(f"{label}: {where}: run {run_id} unfinished ({run.status})")
                return
            if why:
                figures.stuck += 1
            figures.lost += 1
            pending = [
                (s.id, s.status, s.wake_at, s.child_run_id)
                for s in run.steps
                if s.status not in ENDED
            ]
            answers = {n: a for (r, n), a in CALLBACK_ANSWERS.items() if r == run_id}
            problems.append(
                f"{label}: {where}: run {run_id} is {run.status} (invokeSeq {run.invoke_seq}, "
                f"handledSeq {run.handled_seq}, lease {run.lease_until_ms}, error {run.error}); "
                f"pending steps {pending}; stuck: {why}; callback POSTs answered {answers}; "
                f"engine now {clock.iso(clock.now())}; its items: {_partition(run_id)}; "
                f"its history:\n{history.of(run_id)}"
            )
            return
        if run.output != dsl.expected(program):
            figures.lost += 1
            problems.append(
                f"{label}: {where}: run {run_id} answered {run.output!r}, "
                f"fault-free {dsl.expected(program)!r}"
            )
        steps = {s.id: s for s in run.steps}
        for step_id, fault_free in _run_steps(program).items():
            executions = fault_app.EXECUTIONS.get((run_id, step_id), [])
            figures.step_executions += len(executions)
            figures.re_executions += max(0, len(executions) - fault_free)
            step = steps.get(step_id)
            if step is None or step.ended_at is None:
                problems.append(f"{label}: {where}: step {step_id} of {run_id} not recorded ended")
                figures.lost += 1
                continue
            ended = int(clock.parse_iso(step.ended_at).timestamp() * 1000)
            after = [t for t in executions if t > ended]
            if after:
                figures.duplicated += len(after)
                problems.append(
                    f"{label}: {where}: step {step_id} of {run_id} ran {len(after)} time(s) after "
                    f"its end was recorded at {step.ended_at}"
                )
            if not executions:
                problems.append(f"{label}: {where}: step {step_id} of {run_id} recorded, never ran")
                figures.lost += 1
        for op in program:
            if op["op"] == "value":
                seen = set(fault_app.VALUES.get((run_id, f"{op['name']}#1"), []))
                recorded = steps.get(f"{op['name']}#1")
                if len(seen) != 1 or recorded is None or recorded.output not in seen:
                    figures.duplicated += 1
                    problems.append(f"{label}: {where}: value {op['name']} of {run_id} saw {seen}")
            if op["op"] == "child":
                step = steps.get(f"{op['name']}#1")
                child = step.child_run_id if step else None
                if child is None:
                    figures.lost += 1
                    problems.append(f"{label}: {where}: child step {op['name']} has no child")
                else:
                    judge(child, op["program"], f"{where}/{op['name']}")

    for i, (run_id, program) in enumerate(zip(top, programs, strict=True)):
        judge(run_id, program, f"r{i}")
    for run in full.values():  # children of runs that did not end are judged here
        reported = any(f"run {run.id} is" in p for p in problems) if run is not None else True
        if run is not None and run.status != "completed" and not reported:
            unjudged = figures.out_of_time and run.status not in ENDED
            why = stuck.get(run.id) or stuck_reason(run, now_ms=now_ms)
            if unjudged and (not why or figures.busy_when_judged):
                if not any(f"run {run.id} unfinished" in n for n in figures.notes):
                    figures.unfinished += 1
                    figures.notes.append(f"{label}: run {run.id} unfinished ({run.status})")
                continue
            figures.lost += 1
            problems.append(
                f"{label}: run {run.id} (parent {run.parent_run_id} step {run.parent_step_id}) "
                f"is {run.status}: invokeSeq {run.invoke_seq}, handledSeq {run.handled_seq}, "
                f"lease {run.lease_until_ms}, steps {[(s.id, s.status, s.wake_at) for s in run.steps]}; "
                f"stuck: {stuck.get(run.id)}; callback POSTs answered "
                f"{ {n: a for (r, n), a in CALLBACK_ANSWERS.items() if r == run.id} }; "
                f"its history:\n{history.of(run.id)}"
            )
