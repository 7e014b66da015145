"""Every function's IAM policy allows every AWS request it makes, and grants nothing it never
uses: a deployed function must never be refused a call the local runtime allowed.

The end-to-end suite runs in a child process with `EZGH_AWS_CALL_LOG` set, so
`ezgh_engine.local.call_log` records each request per function (the local runtime's `Invoker`
marks whose invocation a thread serves). Each request is then checked against the policies of
that function's role in the synthesized template, with the template's references resolved to
the names the local runtime gives the same resources (tests/infra/iam_eval.py).

moto checks no IAM, so before this test a missing grant (the `stream` role could not touch the
`runs` table) only showed on AWS, as AccessDenied.

`EZGH_IAM_CALL_LOG_REUSE=<dir>` checks an existing recording instead of running the suite
(for iterating on grants; CI always records afresh).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("aws_cdk")
pytest.importorskip("cdk_nag")

pytestmark = [pytest.mark.infra, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # `infra` is not an installed package
    sys.path.insert(0, str(ROOT))

from aws_cdk import App  # noqa: E402
from aws_cdk.assertions import Template  # noqa: E402
from ezgh_engine.local import call_log, resources  # noqa: E402
from ezgh_engine.local.emulator import ACCOUNT_ID, REGION  # noqa: E402
from ezgh_engine.local.handlers import LambdaContext  # noqa: E402
from ezgh_engine.topology import TOPOLOGY  # noqa: E402

from infra.app import build_app  # noqa: E402
from infra.stack import EzghStack  # noqa: E402
from tests.conftest import E2E_CALL_LOG, ran_all_of_e2e  # noqa: E402
from tests.infra import iam_eval  # noqa: E402
from tests.infra.iam_eval import Need, Resolver  # noqa: E402

# Synthesized under the name whose derived names (schedule group `<stack>-timers`, runtime
# queue prefixes `<stack>-q-`, `<stack>-tasks-`) are the local runtime's defaults.
STACK_NAME = "ezgh"

# Grants no local request can exercise, each with why the function needs it on AWS.
AWS_ONLY: dict[str, str] = {
    # The engine sends a run's own segments too (observability/traces.py: the invoker's and
    # observe's requests are checked above); the other functions' are the runtime's.
    "xray:PutTraceSegments": "active tracing: the Lambda runtime sends the segments",
    "xray:PutTelemetryRecords": "active tracing: the Lambda runtime sends the segments",
    "logs:CreateLogStream": "the Lambda runtime writes the function's logs",
    "logs:PutLogEvents": "the Lambda runtime writes the function's logs",
    "secretsmanager:GetSecretValue": "the token secret: locally it is in EZGH_TOKEN_SECRET",
    "secretsmanager:DescribeSecret": "granted with GetSecretValue by Secret.grant_read",
    # Lambda's own pollers use the function's role for its event source mappings; locally
    # the runtime's pollers read the queues and the stream.
    "sqs:ReceiveMessage@source": "event source mapping (Lambda polls with the role)",
    "sqs:DeleteMessage@source": "event source mapping (Lambda polls with the role)",
    "sqs:ChangeMessageVisibility@source": "event source mapping (Lambda polls with the role)",
    "sqs:GetQueueAttributes@source": "event source mapping (Lambda polls with the role)",
    "sqs:GetQueueUrl@source": "event source mapping (Lambda polls with the role)",
    "dynamodb:DescribeStream": "stream event source mapping (Lambda polls with the role)",
    "dynamodb:GetRecords": "stream event source mapping (Lambda polls with the role)",
    "dynamodb:GetShardIterator": "stream event source mapping (Lambda polls with the role)",
    "dynamodb:ListStreams": "stream event source mapping (Lambda polls with the role)",
    "sqs:SendMessage@stream-dlq": "stream mapping's on-failure destination (Lambda sends)",
    "sqs:GetQueueAttributes@stream-dlq": "stream mapping's on-failure destination",
    "sqs:GetQueueUrl@stream-dlq": "stream mapping's on-failure destination",
    # Subscriptions' mappings: locally `adapters.event_sources` runs them in process.
    "lambda:CreateEventSourceMapping": "subscriptions (locally in-process event sources)",
    "lambda:UpdateEventSourceMapping": "subscriptions (locally in-process event sources)",
    "lambda:DeleteEventSourceMapping": "subscriptions (locally in-process event sources)",
    "lambda:GetEventSourceMapping": "subscriptions (locally in-process event sources)",
}


def _record(log_dir: Path) -> None:
    """Run the end-to-end suite with the call log on (its own process: moto's state is
    global, and tests/e2e starts its own runtime)."""
    env = {**os.environ, call_log.ENV_CALL_LOG: str(log_dir)}
    env.pop(E2E_CALL_LOG, None)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "tests/e2e", "-q", "-p", "no:cacheprovider",
         "-o", "addopts="],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=1800,
    )  # fmt: skip
    # The suite's own failures are its own report; this test needs its requests.
    if done.returncode not in (0, 1):
        pytest.fail(f"tests/e2e did not run: {done.stdout[-2000:]}{done.stderr[-2000:]}")


@pytest.fixture(scope="module")
def calls(
    tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> dict[str, list[dict[str, Any]]]:
    reuse = os.environ.get("EZGH_IAM_CALL_LOG_REUSE")
    session = os.environ.get(E2E_CALL_LOG)
    if reuse:
        log_dir = Path(reuse)
    elif session and ran_all_of_e2e(request.session) and any(Path(session).glob("*.jsonl")):
        log_dir = Path(session)  # this session's own e2e run recorded it (tests/conftest.py)
    else:
        log_dir = tmp_path_factory.mktemp("calls")
        _record(log_dir)
    by_function: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for path in sorted(log_dir.glob("*.jsonl")):
        for line in path.open():
            call = json.loads(line)
            by_function[call["function"]].append(call)
    return dict(by_function)


@pytest.fixture(scope="module")
def synth() -> tuple[EzghStack, dict[str, Any]]:
    app = App(context={"ezgh:stackName": STACK_NAME})
    code = ROOT / "build" / "iam-test-placeholder"
    code.mkdir(parents=True, exist_ok=True)
    (code / "README").write_text("placeholder asset for synth tests\n")
    _, stack = build_app(code_dir=str(code), app=app)
    return stack, Template.from_stack(stack).to_json()


def _lid(stack: EzghStack, construct: Any) -> str:
    return stack.get_logical_id(construct.node.default_child)


def local_resolver(stack: EzghStack) -> Resolver:
    """The template's resources named as the local runtime names them in moto."""
    r = Resolver(region=REGION, account=ACCOUNT_ID, stack_name=stack.stack_name)
    for spec in TOPOLOGY.tables:
        lid, name = _lid(stack, stack.tables.by_key[spec.key]), resources.table_name(spec)
        arn = f"arn:aws:dynamodb:{REGION}:{ACCOUNT_ID}:table/{name}"
        r.refs[lid], r.attrs[(lid, "Arn")] = name, arn
        r.attrs[(lid, "StreamArn")] = f"{arn}/stream/local"
    for spec in TOPOLOGY.queues:
        for construct, name in (
            (stack.queues.by_key[spec.key], resources.queue_name(spec)),
            (stack.queues.dlq_by_key[spec.key], f"{resources.queue_name(spec)}-dlq"),
        ):
            lid = _lid(stack, construct)
            r.refs[lid] = f"http://127.0.0.1/{ACCOUNT_ID}/{name}"
            r.attrs[(lid, "Arn")] = f"arn:aws:sqs:{REGION}:{ACCOUNT_ID}:{name}"
            r.attrs[(lid, "QueueName")] = name
    bucket = _lid(stack, stack.payloads.bucket)
    r.refs[bucket] = resources.BUCKET_NAME
    r.attrs[(bucket, "Arn")] = f"arn:aws:s3:::{resources.BUCKET_NAME}"
    r.attrs[(_lid(stack, stack.scheduler.role), "Arn")] = resources.SCHEDULER_ROLE_ARN
    r.attrs[(_lid(stack, stack.task_worker_role), "Arn")] = resources.TASK_WORKER_ROLE_ARN
    for spec in TOPOLOGY.functions:
        context = LambdaContext(spec)
        lid = _lid(stack, stack.functions.by_key[spec.key])
        r.refs[lid], r.attrs[(lid, "Arn")] = context.function_name, context.invoked_function_arn
    return r


def role_statements(template: dict[str, Any], role_lid: str, r: Resolver) -> list[dict[str, Any]]:
    role = template["Resources"][role_lid]["Properties"]
    assert "Policies" not in role and "ManagedPolicyArns" not in role, role
    found = []
    for policy in template["Resources"].values():
        if (
            policy["Type"] == "AWS::IAM::Policy"
            and {"Ref": role_lid} in policy["Properties"]["Roles"]
        ):
            found += r.resolve(policy["Properties"]["PolicyDocument"]["Statement"])
    return found


def function_needs(calls: list[dict[str, Any]]) -> dict[Need, str]:
    """Each distinct authorization the calls need, with one call that needed it."""
    found: dict[Need, str] = {}
    for call in calls:
        for need in iam_eval.needs(call, REGION, ACCOUNT_ID):
            found.setdefault(need, f"{call['service']}:{call['operation']} {call['params']}")
    return found


def test_local_names_follow_the_stack_name(synth: tuple[EzghStack, dict[str, Any]]) -> None:
    """The resolver's premise: the stack's literal names are the local runtime's."""
    stack, _ = synth
    assert stack.scheduler.group_name == resources.SCHEDULER_GROUP


def test_the_recording_covers_every_function_that_calls_aws(
    calls: dict[str, list[dict[str, Any]]],
) -> None:
    # deliver: the e2e suite's subscriptions deliver through it (runs started by messages).
    assert {"api", "steps", "stream", "invoker", "notify"} <= set(calls), sorted(calls)
    assert set(calls) <= {f.key for f in TOPOLOGY.functions}


@pytest.mark.parametrize("key", [f.key for f in TOPOLOGY.functions])
def test_every_request_is_allowed_by_the_functions_policy(
    synth: tuple[EzghStack, dict[str, Any]], calls: dict[str, list[dict[str, Any]]], key: str
) -> None:
    stack, template = synth
    r = local_resolver(stack)
    role = stack.functions.by_key[key].role
    assert role is not None
    statements = role_statements(template, _lid(stack, role), r)
    denied = [
        f"{need}  (from {example})"
        for need, example in function_needs(calls.get(key, [])).items()
        if not iam_eval.allows(statements, need)
    ]
    assert denied == [], f"{key} would get AccessDenied on AWS:\n" + "\n".join(denied)


def _kind(stack: EzghStack, key: str, resource: str, r: Resolver) -> str:
    """What a granted resource is, for the AWS_ONLY reasons keyed `<action>@<kind>`."""
    sources = {
        r.attrs[(_lid(stack, stack.queues.by_key[s.queue]), "Arn")]
        for s in TOPOLOGY.sources
        if s.kind == "sqs" and s.function == key
    }
    if resource in sources:
        return "source"
    stream_dlqs = {r.resolve({"Fn::GetAtt": [_lid(stack, q), "Arn"]}) for q in
                   stack.sources.stream_dlqs.values()}  # fmt: skip
    if resource in stream_dlqs:
        return "stream-dlq"
    return ""


# Granted, used by the code, but not reached by tests/e2e: each a reviewed decision, so a new
# grant nobody exercises fails this test until it is used or listed here (and an entry that
# the suite does exercise is reported as a warning: some paths run only on some timings).
_LEVEL = "part of the table's read_write level (infra/permissions.TABLE_ACTIONS)"
_LARGE = "large values (adapters/payloads.py) on paths tests/e2e does not take here"
_CHAIN = "a key minted through the API, read with its creators in one batch (api_keys_store)"
UNEXERCISED: dict[str, dict[str, str]] = {
    "api": {
        "dynamodb:ConditionCheckItem": _LEVEL,
        "s3:PutObject": "a run started with a large input through the API",
        "s3:DeleteObject": "DELETE of a run with payloads (payloads.delete_run_payloads)",
        "sqs:DeleteMessage": "EZGH queues' receive-and-delete (routes_queues) ",
        "sqs:GetQueueUrl": "EZGH queues (sqs_queues) / pull apps' task queues",
        "sqs:DeleteQueue": "deleting a pull app deletes its task queue (task_queues.delete_queue)",
        "sqs:SendMessage": "waking a run (messages.send_invocation); tasks for pull apps",
        "dynamodb:Query": "queries on the registry table itself (its GSI is queried)",
    },
    "steps": {
        "dynamodb:Query": "part of the runs table's read level",
        "s3:GetObject": _LARGE,
        "s3:PutObject": _LARGE + " (a large step output)",
        "s3:DeleteObject": _LARGE,
        "s3:ListBucket": _LARGE,
    },
    "stream": {
        "dynamodb:GetItem": "a cancelled or failed run cancels its children (waits.on_run_ended)",
        "dynamodb:DeleteItem": _LEVEL,
        "dynamodb:ConditionCheckItem": _LEVEL,
        "dynamodb:Query": "part of the runs table's read level (its GSI)",
        "s3:GetObject": "a child's large output handed to its parent (waits._end_parent_step)",
        "s3:ListBucket": "with GetObject: a missing key answers NoSuchKey, not AccessDenied",
        "s3:DeleteObject": "retention of a run with large values (service/retention)",
        "dynamodb:BatchWriteItem": "retention deletes the rest of a run (service/retention)",
        "scheduler:DeleteSchedule": "granted with CreateSchedule (Scheduler.grant_manage_schedules)",
        "scheduler:UpdateSchedule": "granted with CreateSchedule (Scheduler.grant_manage_schedules)",
    },
    "invoker": {
        # An outcome is no transaction any more (adapters/run_writes): the lease's
        # ConditionCheck is the steps function's (`run_writes.write_leased`).
        "dynamodb:ConditionCheckItem": _LEVEL,
        "dynamodb:Query": "queries of the registry and of the runs table's GSI (read level)",
        "iam:PassRole": "a timer longer than SQS's 15 minutes (messages.resend_timer)",
        "scheduler:CreateSchedule": "a timer longer than SQS's 15 minutes (messages.resend_timer)",
        "scheduler:DeleteSchedule": "granted with CreateSchedule (Scheduler.grant_manage_schedules)",
        "scheduler:UpdateSchedule": "granted with CreateSchedule (Scheduler.grant_manage_schedules)",
        "s3:GetObject": _LARGE,
        "s3:DeleteObject": _LARGE,
        "s3:ListBucket": _LARGE,
        "sqs:GetQueueUrl": "a pull app's task queue that SQS reports missing (task_queues)",
        "dynamodb:BatchGetItem": _CHAIN + ": a flow schedule's or an app's invoke's key",
    },
    "deliver": {
        "dynamodb:GetItem": "resuming a waiting run with a message (runs table)",
        "dynamodb:PutItem": "a subscription's last failure (registry)",
        "dynamodb:UpdateItem": "resuming a waiting run with a message (runs table)",
        "dynamodb:DeleteItem": _LEVEL,
        "dynamodb:ConditionCheckItem": _LEVEL,
        "dynamodb:Query": "part of the tables' read level",
        "s3:GetObject": _LARGE + " (a message starting a run with a large input)",
        "s3:PutObject": _LARGE + " (a message starting a run with a large input)",
        "s3:DeleteObject": _LARGE,
        "s3:ListBucket": _LARGE,
        "sqs:SendMessage": "a run started by a message is invoked (messages.send_invocation)",
        # The consumer actions on EZGH queues: the subscriptions' mappings poll with this role.
        "sqs:ReceiveMessage": "subscriptions' event source mappings (Lambda polls with the role)",
        "sqs:DeleteMessage": "subscriptions' event source mappings (Lambda polls with the role)",
        "sqs:GetQueueAttributes": "subscriptions' event source mappings",
        "dynamodb:BatchGetItem": _CHAIN + ": the key a flow subscription acts for",
    },
    "flows": {
        "dynamodb:DeleteItem": _LEVEL,
        "dynamodb:ConditionCheckItem": _LEVEL,
        "dynamodb:Query": "part of the tables' read level (the interpreter reads items by key)",
        # It writes the job index and failed items (PutItem) on the runs table and
        # `queue.send`'s idempotency records (PutItem, UpdateItem) on the registry.
        "dynamodb:UpdateItem": _LEVEL + " (used on the registry, not on the runs table)",
    },
    "observe": {
        "dynamodb:Query": "part of the runs table's read level (it reads a run item by key)",
    },
    "notify": {
        "dynamodb:DeleteItem": _LEVEL,
        "dynamodb:ConditionCheckItem": _LEVEL,
        "dynamodb:Query": "part of the registry's read level",
        "sqs:GetQueueAttributes": "an app's notification queue checked before sending",
        "sqs:GetQueueUrl": "an app's notification queue looked up by name",
    },
}


def unused_grants(
    stack: EzghStack, template: dict[str, Any], calls: list[dict[str, Any]], key: str
) -> dict[str, list[str]]:
    """Granted (action → resources) that no recorded request of `key` needs, but for
    AWS_ONLY."""
    r = local_resolver(stack)
    role = stack.functions.by_key[key].role
    assert role is not None
    needed = function_needs(calls)
    unused: dict[str, list[str]] = defaultdict(list)
    for statement in role_statements(template, _lid(stack, role), r):
        for action in iam_eval._as_list(statement["Action"]):
            for resource in iam_eval._as_list(statement["Resource"]):
                kind = _kind(stack, key, str(resource), r)
                if action in AWS_ONLY or f"{action}@{kind}" in AWS_ONLY:
                    continue
                probe = {**statement, "Action": action, "Resource": resource}
                probe.pop("Condition", None)
                if not any(iam_eval.statement_allows(probe, n) for n in needed):
                    unused[action].append(str(resource))
    return dict(unused)


@pytest.mark.parametrize("key", [f.key for f in TOPOLOGY.functions])
def test_every_grant_is_used(
    synth: tuple[EzghStack, dict[str, Any]], calls: dict[str, list[dict[str, Any]]], key: str
) -> None:
    """Least privilege: each granted action on each resource is needed by some request of
    this function, or is exercised only on AWS (`AWS_ONLY`) or only by code paths the suite
    does not reach (`UNEXERCISED`), each with its reason."""
    stack, template = synth
    unused = unused_grants(stack, template, calls.get(key, []), key)
    listed = UNEXERCISED.get(key, {})
    unexplained = {a: r for a, r in unused.items() if a not in listed}
    assert unexplained == {}, f"{key} is granted what it never uses: {unexplained}"
    stale = sorted(set(listed) - set(unused))
    if stale:  # a path the suite takes only sometimes (timing) must not fail the build
        warnings.warn(
            f"{key}: this recording exercised {stale}, listed in UNEXERCISED", stacklevel=1
        )
