"""`ezgh ops verify`: run a canary workflow through a deployed engine and report each check.

    ezgh ops verify [--stack EzghWorkflows] [--timeout 180] [--keep] [--json] [connection flags]

After a deploy, this proves the stack works end to end in the operator's own account, the way
a user's workflow would use it: the API answers and the key works; a pull app (served by a
worker inside this command, so nothing needs deploying) syncs; then one run of the canary
workflow takes a `run` step, a short `sleep` (SQS delay), a child run (`invoke`: the stream
function resumes the parent), a callback completed through its URL, a `send_to_queue` and a
`wait_for_message` resumed by a resume-mode subscription (an event source mapping the API
makes at run time, and the deliver function). Each check prints its time; the first that
fails stops the canary with what it saw. With `--stack`, a failure also names the functions
that logged errors since the canary started, with the AWS error (read from their CloudWatch
log groups with the operator's credentials), e.g. `stream: AccessDeniedException ...`.

The canary makes its own app and queue, named `ezgh-canary-<128 random bits>`: a name no one
holds before it runs and no one can guess to take first, so it never runs through (or hands
its tasks to) an app someone else made. They are deleted afterwards with its subscription,
whether the checks passed or not (`--keep` leaves them, to look at). Connection settings are those of every API command (flags, `EZGH_*`, `.ezgh/dev.env`), so
the same command checks `ezgh dev`. Exit code: 0 every check passed, 1 a check failed, 2 could
not start.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import httpx

from ezgh_engine import clock, ids
from ezgh_engine.cli.common import CliError, settings_from

CANARY_PREFIX = "ezgh-canary-"  # and 32 hex digits of a random UUID: see `canary_name`
CANARY_WORKFLOW = "ezgh-canary"
CHILD_WORKFLOW = "ezgh-canary-child"
CORRELATION_ATTRIBUTE = "canaryKey"
SLEEP_SECONDS = 2
WORKER_POLL_SECONDS = 1  # the canary worker's long poll (see `Canary._worker`)
# The order of the canary's steps, each a check of its own: (step name, what it proves).
STEP_CHECKS = (
    ("step", "a run step recorded (steps function)"),
    ("sleep", f"a {SLEEP_SECONDS} s sleep woke (invocations queue delay, invoker)"),
    ("child", "a child run ended and resumed its parent (stream function)"),
    ("callback", "a callback completed through its URL (api)"),
    ("send", "a message sent to a queue (api, SQS)"),
    ("receive", "the message resumed the run (subscription mapping, deliver function)"),
)


@dataclass
class Check:
    """One check's outcome: its name, whether it passed, how long it took, and what it saw."""

    name: str
    passed: bool
    seconds: float
    detail: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "check": self.name,
            "passed": self.passed,
            "seconds": round(self.seconds, 3),
            "detail": self.detail,
        }


@dataclass
class Report:
    """Every check in order, and what the stack's function logs said when one failed."""

    checks: list[Check] = field(default_factory=list)
    diagnosis: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return bool(self.checks) and all(c.passed for c in self.checks)


class CheckFailed(Exception):
    """A check did not pass; its message says what was seen."""


def canary_name() -> str:
    """A name for one canary's app and queue that nobody holds: `ezgh-canary-` and a random
    UUID's 32 hex digits (122 random bits), drawn when the canary starts. No user can have
    made it first, so the canary's app is its own (never one a user made to receive its
    tasks), and removing it removes nothing of anyone else's."""
    return CANARY_PREFIX + ids.new_id().replace("-", "")


# --- the canary workflows -----------------------------------------------------------------


def canary_workflows(queues: Any) -> list[Any]:
    """The canary and its child, as SDK workflows (`queues`: a `QueuesClient` for the send)."""
    from ezgh_workflows import Context, workflow

    @workflow(CHILD_WORKFLOW)
    async def child(ctx: Context[Any]) -> Any:
        return {"child": ctx.input}

    @workflow(CANARY_WORKFLOW)
    async def canary(ctx: Context[Any]) -> Any:
        queue_id, key = ctx.input["queueId"], ctx.input["key"]
        await ctx.step.run("step", lambda: {"ok": True})
        await ctx.step.sleep("sleep", SLEEP_SECONDS)
        child_out = await ctx.step.invoke("child", workflow=CHILD_WORKFLOW, input={"n": 1})
        callback = await ctx.step.create_callback("callback", timeout_seconds=600)
        await ctx.step.run("complete-callback", lambda: _complete(callback.url))
        called = await callback.wait()
        message = {"body": json.dumps({"canary": key}), "attributes": {CORRELATION_ATTRIBUTE: key}}
        await ctx.step.send_to_queue("send", queues, queue_id, [message])
        received = await ctx.step.wait_for_message(
            "receive", queue_id=queue_id, key=key, timeout_seconds=600
        )
        return {"child": child_out, "callback": called, "received": bool(received)}

    return [canary, child]


def _complete(url: str) -> int:
    answer = httpx.post(url, json={"canary": "called back"}, timeout=30)
    if answer.status_code != 200:
        raise RuntimeError(f"the callback URL answered {answer.status_code}: {answer.text[:200]}")
    return answer.status_code


# --- the checks ---------------------------------------------------------------------------


class Canary:
    """Runs the checks against one engine (`settings`: api_url, api_key, org_id, project_id)."""

    def __init__(
        self,
        settings: dict[str, str],
        *,
        timeout: float = 180.0,
        keep: bool = False,
        echo: Callable[[Check], None] | None = None,
    ) -> None:
        from ezgh_workflows import QueuesClient, WorkflowsClient

        self.settings = settings
        self.timeout = timeout
        self.keep = keep
        self.echo = echo or (lambda check: None)
        self.workflows = WorkflowsClient(**self.credentials)
        self.queues = QueuesClient(**self.credentials)
        self.report = Report()
        self.name = canary_name()  # its app's and its queue's
        self._cleanup: list[Callable[[], Any]] = []

    @property
    def credentials(self) -> dict[str, Any]:
        """The SDK clients' and the worker's connection arguments."""
        return {
            "api_key": self.settings["api_key"],
            "organization_id": self.settings["org_id"],
            "project_id": self.settings["project_id"],
            "base_url": self.settings["api_url"],
        }

    def run(self) -> Report:
        """Every check in order, stopping at the first failure; resources cleaned up after."""
        try:
            self._checks()
        except CheckFailed:
            pass
        finally:
            if not self.keep:
                for undo in reversed(self._cleanup):
                    with contextlib.suppress(Exception):  # best effort; the report stands
                        undo()
        return self.report

    @contextmanager
    def check(self, name: str) -> Iterator[list[str]]:
        """Time one check; an exception inside fails it (and stops the canary)."""
        detail: list[str] = []
        began = time.monotonic()
        try:
            yield detail
        except Exception as exc:
            outcome = Check(name, False, time.monotonic() - began, _describe(exc))
            self._record(outcome)
            raise CheckFailed(outcome.detail) from exc
        self._record(Check(name, True, time.monotonic() - began, "; ".join(detail)))

    def _record(self, outcome: Check) -> None:
        self.report.checks.append(outcome)
        self.echo(outcome)

    def _checks(self) -> None:
        with self.check("api health"):
            url = self.settings["api_url"].rstrip("/") + "/v1/health"
            answer = httpx.get(url, timeout=30)
            if answer.status_code != 200:
                raise CheckFailed(f"GET /v1/health answered {answer.status_code}")
        with self.check("api key"):
            self.workflows.list_apps()
        app = self._app()
        queue_id = self._queue(app)
        with self._worker(app):
            self._run(app, queue_id)

    def _app(self) -> dict[str, Any]:
        with self.check("pull app synced") as detail:
            # Made here, never found: an app of this name that exists is someone else's.
            app = self.workflows.create_app(self.name, "pull")
            self._cleanup.append(lambda: self.workflows.delete_app(app["id"]))
            detail.append(f"app {app['name']} ({app['id']})")
            return dict(app)
        raise AssertionError("unreachable")

    def _queue(self, app: dict[str, Any]) -> str:
        with self.check("queue and subscription") as detail:
            queue = self.queues.request(
                "POST", "/queues", json={"name": self.name, "visibilityTimeoutSeconds": 5}
            )
            self._cleanup.append(lambda: self.queues.request("DELETE", f"/queues/{queue['id']}"))
            target = {
                "kind": "workflow",
                "mode": "resume",
                "appId": app["id"],
                "workflow": CANARY_WORKFLOW,
                "correlationAttribute": CORRELATION_ATTRIBUTE,
            }
            sub = self.queues.request(
                "POST", "/subscriptions", json={"queueId": queue["id"], "target": target}
            )
            self._cleanup.append(
                lambda: self.queues.request("DELETE", f"/subscriptions/{sub['id']}")
            )
            detail.append(f"queue {queue['id']}, subscription {sub['id']}")
            return str(queue["id"])
        raise AssertionError("unreachable")

    @contextmanager
    def _worker(self, app: dict[str, Any]) -> Iterator[None]:
        from ezgh_workflows import Worker

        # Short polls: `stop()` does not interrupt a receive in progress, so at the default 20 s
        # the canary waited out its idle worker's last poll (about 20 s) after every check.
        worker = Worker(
            app["id"],
            canary_workflows(self.queues),
            concurrency=2,
            poll_wait_seconds=WORKER_POLL_SECONDS,
            **self.credentials,
        )
        thread = threading.Thread(target=worker.run, name="ezgh-canary-worker", daemon=True)
        thread.start()
        try:
            with self.check("worker announced"):
                self._until(lambda: self.workflows.get_app(app["id"]).get("status") == "synced")
            yield
        finally:
            worker.stop()
            thread.join(timeout=30)

    def _run(self, app: dict[str, Any], queue_id: str) -> None:
        key = f"canary:{ids.new_id()[:12]}"
        with self.check("run started") as detail:
            run = self.workflows.start_run(
                app["id"], CANARY_WORKFLOW, {"queueId": queue_id, "key": key}
            )
            detail.append(f"run {run['id']}")
        for step, proves in STEP_CHECKS:
            with self.check(f"{step}: {proves}"):
                self._until(functools.partial(self._step_done, run["id"], step))
        with self.check("run completed") as detail:
            ended = self._until(lambda: self._ended(run["id"]))
            if ended["status"] != "completed":
                raise CheckFailed(f"the run ended {ended['status']}: {ended.get('error')}")
            detail.append(f"{len(self.workflows.list_run_events(run['id'])['events'])} events")

    def _step_done(self, run_id: str, name: str) -> bool:
        run = self.workflows.get_run(run_id)
        if run["status"] not in ("running", "cancelling"):
            steps = [s for s in run["steps"] if s["name"] == name]
            if not steps or steps[-1]["status"] != "completed":
                raise CheckFailed(f"the run ended {run['status']}: {run.get('error')}")
        return any(s["name"] == name and s["status"] == "completed" for s in run["steps"])

    def _ended(self, run_id: str) -> dict[str, Any] | None:
        run = self.workflows.get_run(run_id)
        return None if run["status"] in ("running", "cancelling") else dict(run)

    def _until(self, predicate: Callable[[], Any]) -> Any:
        deadline = time.monotonic() + self.timeout
        while True:
            value = predicate()
            if value:
                return value
            if time.monotonic() > deadline:
                raise CheckFailed(f"not done within {self.timeout:g} s")
            time.sleep(0.25)


def _describe(exc: BaseException) -> str:
    if isinstance(exc, CheckFailed):
        return str(exc)
    status = getattr(exc, "status", None)
    if status is not None:
        return f"the API answered {status} {getattr(exc, 'code', '')}: {exc}"
    return f"{type(exc).__name__}: {exc}"


# --- diagnosis from the stack's function logs ----------------------------------------------

# What marks a log line as an error: Powertools' JSON level, the Python runtime's
# `[ERROR]` for an unhandled exception, Lambda's own timeout line, an AWS refusal.
ERROR_MARKS = ('"level":"ERROR"', '"level": "ERROR"', "[ERROR]", "Task timed out", "AccessDenied")
MAX_EVENTS_READ = 2000  # per function: the canary's window is minutes long


def is_error_line(message: str) -> bool:
    """Whether a function's log line reports an error."""
    return any(mark in message for mark in ERROR_MARKS)


def stack_functions(stack: str) -> dict[str, str]:
    """The stack's Lambda functions: physical name -> logical ID (names the function)."""
    from ezgh_engine.adapters import aws

    paginator = aws.client("cloudformation").get_paginator("list_stack_resources")
    found: dict[str, str] = {}
    for page in paginator.paginate(StackName=stack):
        for resource in page.get("StackResourceSummaries", []):
            if resource.get("ResourceType") == "AWS::Lambda::Function":
                found[resource["PhysicalResourceId"]] = resource["LogicalResourceId"]
    return found


def function_errors(functions: dict[str, str], since_ms: int, limit: int = 3) -> list[str]:
    """What each function logged as an error since `since_ms`: `logical id: message` lines,
    at most `limit` a function."""
    lines: list[str] = []
    for physical, logical in sorted(functions.items(), key=lambda kv: kv[1]):
        try:
            errors = [m for m in _log_lines(physical, since_ms) if is_error_line(m)]
        except Exception as exc:  # a missing log group means the function never ran
            code = getattr(exc, "response", {}).get("Error", {}).get("Code", type(exc).__name__)
            if code != "ResourceNotFoundException":
                lines.append(f"{logical}: could not read its logs ({code})")
            continue
        lines.extend(f"{logical}: {_one_line(m)}" for m in errors[:limit])
    return lines


def _log_lines(function: str, since_ms: int) -> Iterator[str]:
    from ezgh_engine.adapters import aws

    paginator = aws.client("logs").get_paginator("filter_log_events")
    pages = paginator.paginate(
        logGroupName=f"/aws/lambda/{function}",
        startTime=since_ms,
        PaginationConfig={"MaxItems": MAX_EVENTS_READ},
    )
    for page in pages:
        for event in page.get("events", []):
            yield str(event.get("message", ""))


def _one_line(message: str, width: int = 400) -> str:
    text = " ".join(str(message).split())
    try:  # Powertools logs JSON: show the message and the exception, not the whole record
        record = json.loads(message)
        text = " ".join(str(record.get(k, "")) for k in ("message", "exception") if record.get(k))
    except (ValueError, AttributeError):
        pass
    return text[:width]


# --- the command --------------------------------------------------------------------------


def _print_check(check: Check) -> None:
    mark = "ok  " if check.passed else "FAIL"
    detail = f"  ({check.detail})" if check.detail else ""
    print(f"{mark} {check.seconds:7.2f}s  {check.name}{detail}", flush=True)


def verify(args: argparse.Namespace) -> int:
    """The `ezgh ops verify` command."""
    try:
        settings = settings_from(args)
    except CliError as exc:
        print(f"ezgh ops verify: {exc.message}", file=sys.stderr)
        return 2
    since_ms = clock.wall_seconds() * 1000  # CloudWatch's clock, not a skipped one
    echo = None if args.json else _print_check
    report = Canary(settings, timeout=args.timeout, keep=args.keep, echo=echo).run()
    if not report.passed and args.stack:
        try:
            report.diagnosis = function_errors(stack_functions(args.stack), since_ms)
        except Exception as exc:
            report.diagnosis = [f"could not read the stack's function logs: {exc}"]
    if args.json:
        body = {
            "passed": report.passed,
            "checks": [c.to_json() for c in report.checks],
            "diagnosis": report.diagnosis,
        }
        print(json.dumps(body, indent=2))
    else:
        _print_diagnosis(report, args.stack)
    return 0 if report.passed else 1


def _print_diagnosis(report: Report, stack: str | None) -> None:
    if report.passed:
        print(f"all {len(report.checks)} checks passed")
        return
    if not stack:
        print("(pass --stack NAME to read the stack's function logs for the cause)")
    elif report.diagnosis:
        print("errors the stack's functions logged since the canary started:")
        for line in report.diagnosis:
            print(f"  {line}")
    else:
        print("no function logged an error since the canary started")


def register(commands: Any, connection: argparse.ArgumentParser) -> None:
    """Add `verify` to the `ezgh ops` subcommands."""
    parser = commands.add_parser(
        "verify",
        parents=[connection],
        help="run a canary workflow end to end and report each check with its time",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--stack", help="on failure, read this stack's function logs")
    parser.add_argument(
        "--timeout", type=float, default=180.0, metavar="SECONDS", help="per check (default 180)"
    )
    parser.add_argument(
        "--keep", action="store_true", help="keep the canary's app, queue and subscription"
    )
    parser.set_defaults(func=verify)
