"""Races and retention gaps of run controls, as a class, generated: controls applied to runs
while faults are injected, and the checks of statuses and retention the plain campaign
(tests/faults/harness.py) does not make.

Each generated run gets a program (tests/faults/dsl.py, plus this module's ops) and one
control, drawn by hypothesis:

- `none`: nothing; the run must complete with its fault-free output.
- `cancel`: CancelRun at a drawn round. Accepted: the run must end `cancelled`, every
  descendant ended, no step left pending. Refused 409: it had ended; judged as `none`.
- `retry`: the program holds a `crash` op (fails the run's first attempt); once the run is
  `failed`, RetryRun: it must then complete with its fault-free output.
- `delete`: once ended, DeleteRun: every item of the run (its partition, run key, callback
  index) and every payload object must be gone.
- `expire`: once ended, the run item is deleted as its TTL would (30 days after its end):
  the stream's purge must leave nothing either.

Ops this module adds to the language: `crash` (above); `long`, a step whose body outlasts
the invoke timeout: its body must run exactly once, and the step either fail once with
`workflows.step_timed_out` (the program catches it) or, started late in its invocation and
given the rest of the lease, complete; `msg2`, two message waits in a row on one queue and
key, each sent one message (twice, with one Idempotency-Key: a resend must store no second
copy) once it waits: each wait must get its own message, whatever SQS redelivers.

Counted: *wrong status* (a run that ended otherwise than its control says), *stuck* (not
ended, or a step left pending, or `find_stuck_runs` names it), *left over* (retention),
*duplicated* (a step body run after its end was recorded; a `long` body run twice), and,
as in the plain campaign, runs still moving when the time budget ran out are *unfinished*,
never lost.
"""

from __future__ import annotations

import random
import threading
from collections import Counter
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import boto3
import httpx
from ezgh_engine import clock
from ezgh_engine.adapters import aws, runs_store
from ezgh_engine.adapters import run_items as items
from ezgh_engine.adapters import waits_store as ws
from ezgh_engine.config import settings
from ezgh_engine.core.models import Run
from ezgh_engine.local.faults import FaultPlan
from ezgh_engine.local.runtime import LocalRuntime
from ezgh_engine.service.ops import find_stuck_runs
from ezgh_workflows import QueuesClient, WorkflowsClient
from ezgh_workflows._internal.api import ApiError
from hypothesis import strategies as st

from tests.clients import workflows_client
from tests.faults import app as fault_app
from tests.faults import dsl
from tests.faults import harness as h

CONTROLS = ("none", "cancel", "retry", "delete", "expire")
PENDING = ("sleeping", "waiting", "retrying", "running")


def expected(program: list[dict[str, Any]]) -> list[Any]:
    """The fault-free output of a program with this module's ops (after any RetryRun)."""
    out: list[Any] = []
    for op in program:
        if op["op"] == "crash":
            out.append(op["name"])
        elif op["op"] == "long":
            out.append({"caught": "workflows.step_timed_out"})
        elif op["op"] == "msg2":
            out.append([f"{op['name']}-a", f"{op['name']}-b"])
        elif op["op"] == "send":
            out.append("sent")
        elif op["op"] == "child":
            out.append(expected(op["program"]))
        else:
            out.extend(dsl.expected([op]))
    return out


def _with_long(case: dict[str, Any]) -> dict[str, Any]:
    program = [*case["program"], {"op": "long", "name": f"s{len(case['program'])}"}]
    return {**case, "program": program}


def _random_op(rng: random.Random, depth: int = 0) -> dict[str, Any]:
    """One op of the language of tests/faults/dsl.py, drawn from `rng`."""
    kind = rng.choice(
        ["run", "run", "fail", "value", "sleep", "callback", "parallel", "child"]
        if depth < 1
        else ["run", "value", "sleep"]
    )
    if kind == "run":
        fail = rng.randint(0, 2)
        return {"op": "run", "fail": fail, "retries": fail + rng.randint(0, 1)}
    if kind == "sleep":
        return {"op": "sleep", "seconds": rng.choice(dsl.SLEEPS)}
    if kind == "parallel":
        branches = [{"fail": 0, "retries": 1} for _ in range(rng.randint(2, 3))]
        for branch in branches:
            branch["fail"] = rng.randint(0, 1)
        return {"op": "parallel", "branches": branches}
    if kind == "child":
        return {"op": "child", "program": [_random_op(rng, depth + 1) for _ in range(2)]}
    return {"op": kind}


def _drawn_case(seed_: int, i: int) -> dict[str, Any]:
    """Case `i` of a batch: its control in turn (every control in every batch), its program
    from a generator seeded by hypothesis' draw (its first draws are its simplest, 0: a seed
    still gives a program worth running), every fourth also with a long step."""
    rng = random.Random(seed_ * 131 + i)
    control = CONTROLS[i % len(CONTROLS)]
    ops = [_random_op(rng) for _ in range(rng.randint(1, 4))]
    if rng.random() < 0.4:  # two waits on one key (top level only: children get no queue)
        ops.insert(rng.randint(0, len(ops)), {"op": "msg2"})
    if rng.random() < 0.5:  # send_to_queue while the Idempotency-Key store may fail
        ops.insert(rng.randint(0, len(ops)), {"op": "send"})
    if control == "retry":
        ops.insert(rng.randint(0, len(ops)), {"op": "crash"})
    case = {"program": dsl.named(ops), "control": control, "round": rng.randint(0, 2)}
    return _with_long(case) if i % 4 == 3 else case


def batch(size: int) -> st.SearchStrategy[list[dict[str, Any]]]:
    """`size` cases (see `_drawn_case`)."""
    return st.integers(0, 2**31).map(lambda n: [_drawn_case(n, i) for i in range(size)])


@dataclass
class ControlFigures:
    """What a controlled batch found."""

    runs: int = 0
    controls: Counter[str] = field(default_factory=Counter)  # control -> runs given it
    cancels_refused: int = 0  # the run had ended already (409): judged as `none`
    completed: int = 0
    wrong_status: int = 0
    stuck: int = 0
    duplicated: int = 0
    left_over: int = 0  # items or objects of a deleted or expired run
    unfinished: int = 0
    long_steps: int = 0
    sends: int = 0  # send_to_queue steps and the harness' own sends (Idempotency-Key'd)
    app_deleted: bool = False  # this batch deleted its app midway
    faults: Counter[str] = field(default_factory=Counter)
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def add(self, other: ControlFigures) -> None:
        for name in (
            "runs",
            "cancels_refused",
            "completed",
            "wrong_status",
            "stuck",
            "duplicated",
            "left_over",
            "unfinished",
            "long_steps",
            "sends",
        ):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.controls.update(other.controls)
        self.faults.update(other.faults)
        self.problems += other.problems
        self.notes += other.notes


@dataclass
class _Case:
    run_id: str
    program: list[dict[str, Any]]
    control: str
    round: int
    cancel: str = ""  # "accepted", "refused" (409: it had ended), "late" (never sent)
    retried: bool = False
    removed: bool = False  # deleted or expired: judged by what is left
    run_key: str | None = None  # every other run is started by its Idempotency-Key alone
    app_id: str = ""  # the key is unique within the app's workflow (`run_items.run_key_scope`)


def _client(engine: LocalRuntime) -> WorkflowsClient:
    return workflows_client(engine)


def _call(action: Any, *args: Any) -> int:
    """An API control, retried while the API is throttled or busy: its final status."""
    for _ in range(20):
        try:
            action(*args)
            return 200
        except ApiError as exc:
            if exc.status == 429 or exc.status >= 500:
                continue
            return int(exc.status)
    return 599


def _apply_controls(client: WorkflowsClient, cases: list[_Case], round_: int) -> bool:
    """Apply the controls due at this round; True when one was applied."""
    acted = False
    for case in cases:
        run = runs_store.get_run(case.run_id, with_steps=False)
        # Later rounds: a cancel while the run waits (a sleep, callback, child or retry).
        waits = run is not None and not run.ended and _has_pending(case.run_id)
        if case.control == "cancel" and not case.cancel and run is not None and run.ended:
            case.cancel = "late"  # it ended before a wait to cancel it in: judged as `none`
        elif case.control == "cancel" and not case.cancel and round_ >= case.round and waits:
            status = _call(client.cancel_run, case.run_id)
            case.cancel = "accepted" if status == 200 else "refused"
            acted = True
        elif case.control == "retry" and not case.retried and run and run.status == "failed":
            case.retried = _call(client.retry_run, case.run_id) == 200
            acted = True
        elif case.control in ("delete", "expire") and not case.removed and run and run.ended:
            if case.control == "delete":
                case.removed = _call(client.delete_run, case.run_id) == 200
            else:  # DynamoDB's TTL, 30 days after the end: the stream sees the REMOVE
                aws.client("dynamodb").delete_item(
                    TableName=settings().runs_table, Key=items.run_key(case.run_id)
                )
                case.removed = True
            acted = True
    return acted


class _Api:
    """The few HTTP calls the controlled batch makes itself (a throttle, 429, or a 5xx is
    retried with the same Idempotency-Key: a resend must not store a second copy)."""

    def __init__(self, engine: LocalRuntime) -> None:
        self.prefix = engine.api_prefix
        self.clock = engine.clock
        self.headers = {"Authorization": f"Bearer {engine.api_key}"}
        self.sent: set[str] = set()  # "<runId>/<stepId>" of waits sent their message
        # (run, wait name) -> the messageIds both sends of its message answered
        self.answered: dict[tuple[str, str], list[str]] = {}

    def call(self, method: str, path: str, body: Any, key: str | None = None) -> Any:
        headers = {**self.headers, **({"Idempotency-Key": key} if key else {})}
        in_progress, seen = 0, []
        for _ in range(30):
            try:
                answer = httpx.request(
                    method, self.prefix + path, json=body, headers=headers, timeout=30
                )
            except httpx.HTTPError as exc:
                seen.append(type(exc).__name__)
                continue
            seen.append(f"{answer.status_code} {answer.text[:80]}")
            if answer.status_code == 429 or answer.status_code >= 500:
                continue
            if answer.status_code == 409 and "in progress" in answer.text:
                # A resend while the first is unfinished: wait, and after a few tries wait
                # as a patient client would, a minute (the engine clock), so a claim left by
                # a request that died is taken over.
                in_progress += 1
                if in_progress % 5 == 0 and isinstance(self.clock, clock.SkipClock):
                    self.clock.advance(timedelta(seconds=61))
                threading.Event().wait(0.2)
                continue
            assert answer.status_code < 300, (path, answer.status_code, answer.text)
            return answer.json()
        raise AssertionError(f"{method} {path}: no answer after 30 tries: {seen}")

    def waits_queue(self, app_id: str) -> str:
        queue = self.call("POST", "/queues", {"name": "waits"}, key="waits-queue")
        target = {
            "kind": "workflow",
            "mode": "resume",
            "appId": app_id,
            "workflow": "interp",
            "correlationAttribute": "k",
        }
        self.call("POST", "/subscriptions", {"queueId": queue["id"], "target": target}, "sub")
        return str(queue["id"])

    def sink_queue(self) -> str:
        """The queue `send` steps send to (no subscription: what it stores is counted)."""
        return str(self.call("POST", "/queues", {"name": "sink"}, key="sink-queue")["id"])

    def start(
        self, app_id: str, program: list[Any], queues: tuple[str, str], key: str, run_key: bool
    ) -> tuple[str, str]:
        """StartRun with an Idempotency-Key (and, when `run_key`, a run key), sent twice:
        both answers' run IDs (the API may die between the run's write and the answer's)."""
        body: dict[str, Any] = {
            "appId": app_id,
            "workflow": "interp",
            "input": {"program": program, "queue": queues[0], "sink": queues[1]},
        }
        if run_key:
            body["runKey"] = key
        first = str(self.call("POST", "/runs", body, key=f"start-{key}")["id"])
        return first, str(self.call("POST", "/runs", body, key=f"start-{key}")["id"])

    def send_for_waits(self, queue_id: str, cases: list[_Case], plan: FaultPlan) -> bool:
        """Send one message to each message wait now waiting (twice, with one
        Idempotency-Key: the resend must store nothing); True when one was sent."""
        sent = False
        for case in cases:
            with plan.paused():  # the harness' own read: no fault
                run = runs_store.get_run(case.run_id)
            if run is None or run.ended:
                continue
            for step in run.steps:
                sent_key = f"{run.id}/{step.id}"
                if step.kind != "message" or step.status != "waiting" or sent_key in self.sent:
                    continue
                op_name = step.name.rsplit("-", 1)[0]
                message = {"body": step.name, "attributes": {"k": f"{run.id}-{op_name}"}}
                key = f"{run.id}-{step.id}"
                path = f"/queues/{queue_id}/messages"
                self.answered[(run.id, step.name)] = [
                    self.call("POST", path, {"messages": [message]}, key)["messages"][0][
                        "messageId"
                    ]
                    for _ in range(2)
                ]
                self.sent.add(sent_key)
                sent = True
        return sent


def _has_pending(run_id: str) -> bool:
    run = runs_store.get_run(run_id)
    return run is not None and any(s.status in PENDING for s in run.steps)


def _all_ended(cases: list[_Case]) -> bool:
    for case in cases:
        run = runs_store.get_run(case.run_id, with_steps=False)
        if case.control == "retry" and not case.retried:
            return False
        if case.control == "cancel" and not case.cancel:
            return False
        if case.control in ("delete", "expire") and not case.removed:
            return False
        if run is not None and not run.ended:
            return False
    return all(r.ended for r in h.all_runs())


def run_controlled_batch(
    engine: LocalRuntime,
    drawn: list[dict[str, Any]],
    plan: FaultPlan,
    *,
    label: str,
    delete_app_round: int | None = None,
) -> ControlFigures:
    """Start the drawn runs under `plan`, apply their controls, drive time, then judge.
    With `delete_app_round`, DeleteApp at that settled round: every run still live must
    then end `failed` with `workflows.app_deleted`, promptly, none stuck."""
    engine.set_faults(None)
    engine.reset()
    fault_app.reset()
    fault_app.use_plan(plan)
    client = _client(engine)
    app_id = str(engine.apps["faults"].record["id"])
    engine.set_faults(plan)
    figures = ControlFigures()
    api = _Api(engine)
    queue_id = api.waits_queue(app_id)
    sink_id = api.sink_queue()
    fault_app.QUEUES[:] = [_queues_client(engine)]
    cases = []
    for i, case in enumerate(drawn):
        key = f"{label}-c{i}"
        run_id, again = api.start(app_id, case["program"], (queue_id, sink_id), key, i % 2 == 0)
        if again != run_id:
            figures.duplicated += 1
            figures.problems.append(
                f"{label}: StartRun {key} resent answered {again}, not {run_id}"
            )
        plan.alias(run_id, f"c{i}")
        one = _Case(run_id, case["program"], case["control"], case["round"])
        one.run_key = key if i % 2 == 0 else None
        one.app_id = app_id
        cases.append(one)
        figures.controls[case["control"]] += 1
    for one in cases:  # round 0: a cancel while the run's first invocation may be running
        if one.control == "cancel" and one.round == 0:
            status = _call(client.cancel_run, one.run_id)
            one.cancel = "accepted" if status == 200 else "refused"
    began, posted = clock.monotonic(), set[tuple[str, str]]()
    out_of_time, delete_tried = True, False
    for round_ in range(h.MAX_ROUNDS):
        if clock.monotonic() - began > h.BATCH_SECONDS:
            figures.notes.append(f"{label}: out of time: {h.busy(engine, plan)}")
            break
        settled = h.settle(engine, plan)
        if h._post_callbacks(posted) or not settled:
            continue
        if api.send_for_waits(queue_id, cases, plan):
            continue
        with plan.paused():
            # DeleteApp at the first settled round from the drawn one on (a round spent
            # settling does not skip it), and before the batch may end (runs that all ended
            # first are judged as their controls say).
            deleting = delete_app_round is not None and not delete_tried
            if deleting and round_ >= delete_app_round:
                delete_tried = _delete_app(client, app_id, figures)
                continue
            if _apply_controls(client, cases, round_):
                continue
            still, due = h.next_due_if_still(engine, plan)
            done = _all_ended(cases) and not plan.pending_due()
            if not still and not done:
                continue  # it moved while we looked: settle and look again
            if done or due is None:
                if deleting:
                    delete_tried = _delete_app(client, app_id, figures)
                    continue
                out_of_time = False
                break
        skipping = engine.clock
        assert isinstance(skipping, clock.SkipClock)
        skipping.advance(max(due - clock.now(), timedelta()) + timedelta(seconds=1))
        if engine.scheduler is not None:
            engine.scheduler.kick()
    h.settle(engine, plan, timeout=30)
    engine.set_faults(None)
    h.settle(engine, plan, timeout=30)  # the purges of removed runs, fault-free
    figures.faults.update({k: v for k, v in plan.report().items() if v})
    check_controlled(figures, cases, label, out_of_time=out_of_time, lost_ends=plan.lost_ends)
    check_sends(figures, cases, label, api, sink_id)
    return figures


def _queues_client(engine: LocalRuntime) -> QueuesClient:
    return QueuesClient(
        api_key=engine.api_key,
        organization_id=engine.org_id,
        project_id=engine.project_id,
        base_url=engine.api_url,
    )


def _delete_app(client: WorkflowsClient, app_id: str, figures: ControlFigures) -> bool:
    """DeleteApp (tried once); an answer other than 200 is a problem of the batch, not a
    silent skip. True: tried."""
    status = _call(client.delete_app, app_id)
    figures.app_deleted = status == 200
    if not figures.app_deleted:
        figures.problems.append(f"DeleteApp answered {status}")
    return True


# --- checking -------------------------------------------------------------------------------


def left_over(
    run: Run | None, run_id: str, project_id: str, run_key: str | None, app_id: str = ""
) -> list[str]:
    """What is left of a removed run: items of its partition, its run key, payloads."""
    left = [f"item {i['sk']}" for i in ws.query_pk(items.run_pk(run_id))]
    scope = items.run_key_scope(app_id, "interp")
    item = ws.get(items.run_key_pk(project_id, run_key, scope), "RUNKEY") if run_key else None
    if item and item.get("runId") == run_id:
        left.append("its RUNKEY# item")
    s3 = boto3.client(
        "s3", region_name="us-east-1", endpoint_url=aws.client("s3").meta.endpoint_url
    )
    listed = s3.list_objects_v2(Bucket=settings().payload_bucket, Prefix=f"{project_id}/{run_id}/")
    left += [f"object {o['Key']}" for o in listed.get("Contents", [])]
    return left


LONG_OUTCOMES = ({"caught": "workflows.step_timed_out"}, "finished")
# A send whose API recovery (a resend after the API died) outlasted the suite's invoke
# timeout fails once naming the limit; its message must still be stored once at most.
SEND_OUTCOMES = ("sent", {"caught": "workflows.step_timed_out"})


def _output_ok(output: Any, program: list[dict[str, Any]]) -> bool:
    """The fault-free output, where a `long` step either failed once naming the limit or,
    started late in its invocation and given the rest of the lease, completed."""
    want = expected(program)
    if not isinstance(output, list) or len(output) != len(want):
        return False
    for op, got, fault_free in zip(program, output, want, strict=True):
        if op["op"] == "long" and got in LONG_OUTCOMES:
            continue
        if op["op"] == "send" and got in SEND_OUTCOMES:
            continue
        if got != fault_free:
            return False
    return True


def _descendants(run_id: str, runs: dict[str, Run]) -> list[Run]:
    out = []
    for run in runs.values():
        if run.parent_run_id == run_id:
            out += [run, *_descendants(run.id, runs)]
    return out


def _executions_after_end(run: Run, figures: ControlFigures, label: str) -> None:
    for step in run.steps:
        if step.ended_at is None:
            continue
        ended = int(clock.parse_iso(step.ended_at).timestamp() * 1000)
        after = [t for t in fault_app.EXECUTIONS.get((run.id, step.id), []) if t > ended]
        if after:
            figures.duplicated += len(after)
            figures.problems.append(
                f"{label}: step {step.id} of {run.id} ran {len(after)} time(s) after its end"
            )


def check_controlled(
    figures: ControlFigures,
    cases: list[_Case],
    label: str,
    *,
    out_of_time: bool,
    lost_ends: Counter[tuple[str, str]] | None = None,
) -> None:
    runs = {r.id: runs_store.get_run(r.id) for r in h.all_runs()}
    full = {k: v for k, v in runs.items() if v is not None}
    figures.runs += len(full)
    figures.completed += sum(1 for r in full.values() if r.status == "completed")
    stuck = {s.run_id: s.why for s in find_stuck_runs(older_than_seconds=0)}
    project = next(iter(full.values())).project_id if full else ""
    figures.cancels_refused += sum(1 for c in cases if c.cancel in ("refused", "late"))
    for run_id, why in stuck.items():  # the detector's own verdict counts, whatever the rest
        figures.stuck += 1
        figures.problems.append(f"{label}: find_stuck_runs reports {run_id}: {why}")
    for case in cases:
        run = full.get(case.run_id)
        where = f"{label}: {case.control} run {case.run_id}"
        if case.removed:
            left = left_over(run, case.run_id, project, case.run_key, case.app_id)
            if left:
                figures.left_over += len(left)
                figures.problems.append(f"{where}: left after its removal: {left[:6]}")
            continue
        if run is None:
            figures.wrong_status += 1
            figures.problems.append(f"{where}: missing")
            continue
        if not run.ended and out_of_time and run.id not in stuck:
            figures.unfinished += 1
            figures.notes.append(f"{where}: unfinished ({run.status})")
            continue
        want = "cancelled" if case.cancel == "accepted" else "completed"
        if case.control in ("delete", "expire"):
            want = run.status if run.ended else "ended"  # its removal is what is judged
        app_gone = run.error is not None and run.error.code == "workflows.app_deleted"
        if figures.app_deleted and run.status == "failed" and app_gone:
            want = "failed"  # live when its app was deleted: ends failed, visibly
        if run.status != want:
            figures.wrong_status += 1
            figures.problems.append(
                f"{where}: ended {run.status} (error {run.error}), wanted {want}; "
                f"steps {[(s.id, s.status) for s in run.steps]}"
            )
        elif want == "completed" and not _output_ok(run.output, case.program):
            figures.wrong_status += 1
            figures.problems.append(
                f"{where}: answered {run.output!r}, fault-free {expected(case.program)!r}"
            )
        for one in [run, *_descendants(run.id, full)]:
            pending = [(s.id, s.status) for s in one.steps if s.status in PENDING]
            if one.ended and pending:
                figures.stuck += 1
                figures.problems.append(f"{where}: {one.id} ended with steps pending {pending}")
            if not one.ended and not out_of_time:
                figures.stuck += 1
                figures.problems.append(
                    f"{where}: {one.id} is {one.status}; stuck: {stuck.get(one.id)}"
                )
            _executions_after_end(one, figures, label)
        for op in case.program:
            if op["op"] == "long":
                figures.long_steps += 1
                step_id = f"{op['name']}#1"
                runs_of_body = fault_app.EXECUTIONS.get((run.id, step_id), [])
                # Once, or once more for each end an injected app death lost (at least once).
                allowed = 1 + (lost_ends or Counter())[(run.id, step_id)]
                if case.cancel != "accepted" and not 1 <= len(runs_of_body) <= allowed:
                    figures.duplicated += max(0, len(runs_of_body) - 1)
                    figures.problems.append(
                        f"{where}: long step {op['name']} ran {len(runs_of_body)} times"
                    )


def _stored_copies(queue_id: str) -> dict[str, list[str]]:
    """Every copy the queue stores: body -> the messageId each copy is delivered with."""
    from ezgh_engine.adapters import queues_store
    from ezgh_engine.core.queues import delivered_message

    queue = queues_store.get_queue_by_id(queue_id)
    assert queue is not None
    sqs = aws.client("sqs")
    copies: dict[str, list[str]] = {}
    for _ in range(100):
        got = sqs.receive_message(
            QueueUrl=queue.url,
            MaxNumberOfMessages=10,
            VisibilityTimeout=3600,
            MessageAttributeNames=["All"],
            AttributeNames=["All"],
        ).get("Messages", [])
        if not got:
            break
        for copy in got:
            record = {
                "messageId": copy["MessageId"],
                "body": copy["Body"],
                "attributes": copy.get("Attributes", {}),
                "messageAttributes": {
                    name: {"stringValue": value.get("StringValue"), "dataType": "String"}
                    for name, value in copy.get("MessageAttributes", {}).items()
                },
            }
            message = delivered_message(record, queue)
            copies.setdefault(message["body"], []).append(message["messageId"])
    return copies


def check_sends(
    figures: ControlFigures, cases: list[_Case], label: str, api: _Api, sink_id: str
) -> None:
    """Idempotency-Key'd effects, whatever the store and the API did: one run per start
    (checked at the start), every message wait resumed by the message its sends answered,
    and every `send` step's message stored as one message (copies SQS may hold after the
    API died all carry its one messageId, the one the step recorded)."""
    copies = _stored_copies(sink_id)
    mine = {case.run_id for case in cases}
    for run in h.all_runs():
        if run.parent_run_id is None and run.id not in mine:
            figures.duplicated += 1
            figures.problems.append(f"{label}: run {run.id} is no case's (a second start?)")
    for case in cases:
        where = f"{label}: run {case.run_id}"
        for op in case.program:
            if op["op"] == "msg2":
                for part in ("a", "b"):
                    wait = f"{op['name']}-{part}"
                    answered = api.answered.get((case.run_id, wait))
                    got = fault_app.MESSAGES.get((case.run_id, wait))
                    if answered is None:
                        continue
                    figures.sends += 1
                    if len(set(answered)) != 1 or (got is not None and got != answered[0]):
                        figures.duplicated += 1
                        figures.problems.append(
                            f"{where}: wait {wait} got {got}; its sends answered {answered}"
                        )
            if op["op"] != "send":
                continue
            figures.sends += 1
            stored = set(copies.get(f"{case.run_id}:{op['name']}", []))
            recorded = set(fault_app.SENT.get((case.run_id, op["name"]), []))
            if len(stored) > 1 or len(recorded) > 1 or (recorded and stored - recorded):
                figures.duplicated += 1
                figures.problems.append(
                    f"{where}: send {op['name']} stored {sorted(stored)}, recorded {recorded}"
                )
            elif recorded and not stored:
                figures.wrong_status += 1
                figures.problems.append(f"{where}: send {op['name']} recorded, nothing stored")
