"""The CDK stack, synthesized once offline (no Docker, no network, no AWS), checked by property.

Every expectation is derived from `ezgh_engine.topology`, so a topology change is checked
without editing this file. Needs the `infra` extra: skipped without aws-cdk-lib.
"""

from __future__ import annotations

import importlib
import json
import re
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("aws_cdk")
pytest.importorskip("cdk_nag")

pytestmark = pytest.mark.infra

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # `infra` is not an installed package
    sys.path.insert(0, str(ROOT))

from aws_cdk import App, Aspects, Stack  # noqa: E402
from aws_cdk import aws_sqs as sqs  # noqa: E402
from aws_cdk.assertions import Annotations, Match, Template  # noqa: E402
from cdk_nag import AwsSolutionsChecks  # noqa: E402
from ezgh_engine import config  # noqa: E402
from ezgh_engine.adapters import sqs_queues  # noqa: E402
from ezgh_engine.api.app import route_keys  # noqa: E402
from ezgh_engine.cli import teardown  # noqa: E402
from ezgh_engine.observability import names, traces  # noqa: E402
from ezgh_engine.topology import (  # noqa: E402
    API_FUNCTION,
    FLOWS_FUNCTION,
    INVOCATIONS_QUEUE,
    SANDBOX_FUNCTION,
    TOPOLOGY,
    SqsSource,
    StreamSource,
)

from infra import bundle  # noqa: E402
from infra.app import build_app  # noqa: E402
from infra.components.api import Throttle  # noqa: E402
from infra.components.functions import lambda_handler  # noqa: E402
from infra.components.sources import STREAM_RETRY_ATTEMPTS  # noqa: E402
from infra.permissions import ACCESS  # noqa: E402
from infra.stack import MAX_PREFIX, PUBLIC_CONCURRENCY, EzghStack, runtime_prefix  # noqa: E402
from tests.infra import iam_eval  # noqa: E402

# Actions that take no resource ARN in IAM, so "*" is their only possible resource.
STAR_ALLOWED = {
    "xray:PutTraceSegments",
    "xray:PutTelemetryRecords",
    "dynamodb:ListStreams",
    # Takes no resource ARN; the api's grant is conditioned on the deliver function's ARN.
    "lambda:CreateEventSourceMapping",
}


@pytest.fixture(scope="module")
def synth(tmp_path_factory: pytest.TempPathFactory) -> tuple[EzghStack, dict[str, Any]]:
    """One synth for the module, on a placeholder asset (bundling skipped)."""
    code = tmp_path_factory.mktemp("lambda-placeholder")
    (code / "README").write_text("placeholder asset for synth tests\n")
    _, stack = build_app(code_dir=str(code))
    return stack, Template.from_stack(stack).to_json()


@pytest.fixture(scope="module")
def stack(synth: tuple[EzghStack, dict[str, Any]]) -> EzghStack:
    return synth[0]


@pytest.fixture(scope="module")
def template(synth: tuple[EzghStack, dict[str, Any]]) -> dict[str, Any]:
    return synth[1]


# --- helpers ------------------------------------------------------------------------------


def logical_id(stack: Stack, construct: Any) -> str:
    return stack.get_logical_id(construct.node.default_child)


def resources(template: dict[str, Any], type_: str) -> dict[str, dict[str, Any]]:
    return {k: v for k, v in template["Resources"].items() if v["Type"] == type_}


def props(template: dict[str, Any], lid: str) -> dict[str, Any]:
    return template["Resources"][lid]["Properties"]


def getatt(lid: str, attr: str = "Arn") -> dict[str, Any]:
    return {"Fn::GetAtt": [lid, attr]}


def statements_of_role(template: dict[str, Any], role_lid: str) -> list[dict[str, Any]]:
    found = []
    for policy in resources(template, "AWS::IAM::Policy").values():
        if {"Ref": role_lid} in policy["Properties"]["Roles"]:
            found += policy["Properties"]["PolicyDocument"]["Statement"]
    return found


def as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def grants(template: dict[str, Any], role_lid: str) -> set[tuple[str, str]]:
    """(action, resource as JSON) pairs the role's policies allow."""
    return {
        (action, json.dumps(resource, sort_keys=True))
        for s in statements_of_role(template, role_lid)
        if s["Effect"] == "Allow"
        for action in as_list(s["Action"])
        for resource in as_list(s["Resource"])
    }


def function_role(stack: EzghStack, key: str) -> str:
    role = stack.functions.by_key[key].role
    assert role is not None
    return logical_id(stack, role)


def allowed(template: dict[str, Any], stack: EzghStack, key: str, action: str, arn: Any) -> bool:
    return (action, json.dumps(arn, sort_keys=True)) in grants(template, function_role(stack, key))


def actions_of(template: dict[str, Any], stack: EzghStack, key: str) -> set[str]:
    return {a for a, _ in grants(template, function_role(stack, key))}


# --- tables -------------------------------------------------------------------------------


@pytest.mark.parametrize("spec", TOPOLOGY.tables, ids=lambda t: t.key)
def test_table_matches_topology(stack: EzghStack, template: dict[str, Any], spec: Any) -> None:
    lid = logical_id(stack, stack.tables.by_key[spec.key])
    resource = template["Resources"][lid]
    p = resource["Properties"]
    assert resource["DeletionPolicy"] == "Retain" and resource["UpdateReplacePolicy"] == "Retain"
    assert p["BillingMode"] == "PAY_PER_REQUEST"
    assert p["KeySchema"] == [
        {"AttributeName": "pk", "KeyType": "HASH"},
        {"AttributeName": "sk", "KeyType": "RANGE"},
    ]
    assert p["PointInTimeRecoverySpecification"] == {"PointInTimeRecoveryEnabled": True}
    assert p["TimeToLiveSpecification"] == {"AttributeName": spec.ttl_attribute, "Enabled": True}
    indexes = {i["IndexName"]: i for i in p.get("GlobalSecondaryIndexes", [])}
    assert set(indexes) == {i.name for i in spec.indexes}
    for index in spec.indexes:
        assert indexes[index.name]["KeySchema"] == [
            {"AttributeName": index.partition_key, "KeyType": "HASH"},
            {"AttributeName": index.sort_key, "KeyType": "RANGE"},
        ]
        # Narrow indexes copy only what they list: a lease changes nothing they hold.
        projection = indexes[index.name]["Projection"]
        assert projection["ProjectionType"] == index.projection
        if index.projection == "INCLUDE":
            assert sorted(projection["NonKeyAttributes"]) == sorted(index.non_key_attributes)
    if spec.stream:
        assert p["StreamSpecification"] == {"StreamViewType": "NEW_AND_OLD_IMAGES"}
    else:
        assert "StreamSpecification" not in p


def test_runs_table_streams_both_images(stack: EzghStack, template: dict[str, Any]) -> None:
    p = props(template, logical_id(stack, stack.tables.by_key["runs"]))
    assert p["StreamSpecification"]["StreamViewType"] == "NEW_AND_OLD_IMAGES"


# --- queues -------------------------------------------------------------------------------


@pytest.mark.parametrize("spec", TOPOLOGY.queues, ids=lambda q: q.key)
def test_queue_has_its_own_dlq(stack: EzghStack, template: dict[str, Any], spec: Any) -> None:
    p = props(template, logical_id(stack, stack.queues.by_key[spec.key]))
    dlq = logical_id(stack, stack.queues.dlq_by_key[spec.key])
    assert p["RedrivePolicy"] == {
        "deadLetterTargetArn": getatt(dlq),
        "maxReceiveCount": spec.max_receive_count,
    }
    assert p["VisibilityTimeout"] == spec.visibility_timeout_seconds


def test_every_queue_keeps_messages_14_days(template: dict[str, Any]) -> None:
    """SQS's longest retention on every queue of the stack, the DLQs as the queues (its
    default, 4 days, would delete a backlog of an invoker outage unread)."""
    for queue in resources(template, "AWS::SQS::Queue").values():
        assert queue["Properties"]["MessageRetentionPeriod"] == 14 * 24 * 3600


def test_the_year_limit_sweep_is_an_hourly_schedule_of_the_invoker(
    stack: EzghStack, template: dict[str, Any]
) -> None:
    from ezgh_engine.topology import YEAR_LIMIT_SWEEP

    (schedule,) = resources(template, "AWS::Scheduler::Schedule").values()
    p = schedule["Properties"]
    assert p["ScheduleExpression"] == YEAR_LIMIT_SWEEP.expression
    assert p["Target"]["Input"] == YEAR_LIMIT_SWEEP.message
    invoker = logical_id(stack, stack.functions.by_key[YEAR_LIMIT_SWEEP.function])
    assert p["Target"]["Arn"] == getatt(invoker)
    assert p["FlexibleTimeWindow"] == {"Mode": "OFF"}


def test_every_queue_is_encrypted_and_tls_only(template: dict[str, Any]) -> None:
    queues = resources(template, "AWS::SQS::Queue")
    # topology queues + their DLQs + one failure queue per stream source
    streams = [s for s in TOPOLOGY.sources if isinstance(s, StreamSource) and s.keep_failed]
    assert len(queues) == 2 * len(TOPOLOGY.queues) + len(streams)
    tls_only = set()
    for policy in resources(template, "AWS::SQS::QueuePolicy").values():
        for s in policy["Properties"]["PolicyDocument"]["Statement"]:
            if s["Effect"] == "Deny" and s.get("Condition") == {
                "Bool": {"aws:SecureTransport": "false"}
            }:
                tls_only |= {q["Ref"] for q in policy["Properties"]["Queues"]}
    for lid, queue in queues.items():
        assert queue["Properties"]["SqsManagedSseEnabled"] is True, lid
        assert lid in tls_only, lid


# --- event sources ------------------------------------------------------------------------


def mapping_for(stack: EzghStack, template: dict[str, Any], function_key: str) -> dict[str, Any]:
    fn = logical_id(stack, stack.functions.by_key[function_key])
    found = [
        m["Properties"]
        for m in resources(template, "AWS::Lambda::EventSourceMapping").values()
        if m["Properties"]["FunctionName"] == {"Ref": fn}
    ]
    assert len(found) == 1, found
    return found[0]


@pytest.mark.parametrize("spec", TOPOLOGY.sources, ids=lambda s: f"{s.kind}-{s.function}")
def test_event_source_mapping(stack: EzghStack, template: dict[str, Any], spec: Any) -> None:
    m = mapping_for(stack, template, spec.function)
    assert m["FunctionResponseTypes"] == ["ReportBatchItemFailures"]
    assert m["BatchSize"] == spec.batch_size
    if isinstance(spec, SqsSource):
        assert m["EventSourceArn"] == getatt(logical_id(stack, stack.queues.by_key[spec.queue]))
    elif not spec.keep_failed:  # the observe function: shows the work, never retried
        table = logical_id(stack, stack.tables.by_key[spec.table])
        assert m["EventSourceArn"] == getatt(table, "StreamArn")
        assert m["StartingPosition"] == "LATEST"
        assert m["MaximumRetryAttempts"] == 0 and "DestinationConfig" not in m
        assert m["MaximumBatchingWindowInSeconds"] == spec.batching_window_seconds > 0
        filters = m["FilterCriteria"]["Filters"]
        assert [json.loads(f["Pattern"]) for f in filters] == spec.filter_patterns()
    else:
        table = logical_id(stack, stack.tables.by_key[spec.table])
        assert m["EventSourceArn"] == getatt(table, "StreamArn")
        assert m["StartingPosition"] == "TRIM_HORIZON"
        assert m["BisectBatchOnFunctionError"] is True
        assert m["MaximumRetryAttempts"] == STREAM_RETRY_ATTEMPTS
        assert 0 < m["MaximumRecordAgeInSeconds"] <= 7 * 24 * 3600
        dlq = logical_id(stack, stack.sources.stream_dlqs[spec.table])
        assert m["DestinationConfig"] == {"OnFailure": {"Destination": getatt(dlq)}}
        patterns = spec.filter_patterns()
        if not patterns:
            assert "FilterCriteria" not in m
        else:  # the same filters the local poller applies
            filters = m["FilterCriteria"]["Filters"]
            assert [json.loads(f["Pattern"]) for f in filters] == patterns


def test_every_mapping_comes_from_the_topology(template: dict[str, Any]) -> None:
    assert len(resources(template, "AWS::Lambda::EventSourceMapping")) == len(TOPOLOGY.sources)


# --- functions ----------------------------------------------------------------------------


@pytest.mark.parametrize("spec", TOPOLOGY.functions, ids=lambda f: f.key)
def test_function_matches_topology(stack: EzghStack, template: dict[str, Any], spec: Any) -> None:
    p = props(template, logical_id(stack, stack.functions.by_key[spec.key]))
    assert p["Architectures"] == ["arm64"]
    assert p["Runtime"] == "python3.12"
    assert "VpcConfig" not in p
    assert p["TracingConfig"] == {"Mode": "Active"}
    assert p["Timeout"] == spec.timeout_seconds
    assert p["MemorySize"] == spec.memory_mb
    assert p["Handler"] == lambda_handler(spec)
    env = p["Environment"]["Variables"]
    if spec.sandboxed:  # a flow's user-directed code: none of the engine's configuration
        assert {k for k in env if k.startswith("EZGH_")} == set(), env
        return
    needed = {t.env_var for t in TOPOLOGY.tables} | {q.env_var for q in TOPOLOGY.queues}
    needed |= {
        config.ENV_INVOCATIONS_QUEUE_ARN,
        config.ENV_API_URL,
        TOPOLOGY.bucket_env_var,
        TOPOLOGY.scheduler_group_env_var,
        TOPOLOGY.scheduler_role_env_var,
        config.ENV_TOKEN_SECRET_ARN,
        "POWERTOOLS_SERVICE_NAME",
        "LOG_LEVEL",
    }
    assert needed <= set(env)
    assert config.ENV_TOKEN_SECRET not in env  # the value never appears in the template
    assert env[config.ENV_API_URL] == getatt(logical_id(stack, stack.api.http_api), "ApiEndpoint")
    assert env[TOPOLOGY.scheduler_group_env_var] == stack.scheduler.group_name


def test_lambda_handler_name() -> None:
    assert lambda_handler(API_FUNCTION) == "functions.api.handler.handler"


@pytest.mark.parametrize("spec", TOPOLOGY.functions, ids=lambda f: f.key)
def test_topology_handler_imports(spec: Any) -> None:
    module, _, attr = spec.handler.partition(":")
    try:
        loaded = importlib.import_module(module)
    except ImportError as exc:  # handlers are written in parallel with this stack
        pytest.xfail(f"handler module {module} does not import yet: {exc}")
    assert callable(getattr(loaded, attr))


# --- API ----------------------------------------------------------------------------------


def test_every_route_goes_to_the_api_function(stack: EzghStack, template: dict[str, Any]) -> None:
    """`$default` and a route per route of the api function's resolver, all to one
    integration, whose one Lambda permission covers every route."""
    routes = resources(template, "AWS::ApiGatewayV2::Route")
    keys = [r["Properties"]["RouteKey"] for r in routes.values()]
    assert sorted(keys) == sorted(["$default", *route_keys()])
    (integration_lid, integration), *more = resources(
        template, "AWS::ApiGatewayV2::Integration"
    ).items()
    assert not more
    assert integration["Properties"]["PayloadFormatVersion"] == "2.0"
    api_fn = logical_id(stack, stack.functions.by_key[API_FUNCTION.key])
    assert integration["Properties"]["IntegrationUri"] == getatt(api_fn)
    for route in routes.values():
        target = route["Properties"]["Target"]
        assert target == {"Fn::Join": ["", ["integrations/", {"Ref": integration_lid}]]}
    (permission,) = [
        p["Properties"]
        for p in resources(template, "AWS::Lambda::Permission").values()
        if p["Properties"].get("Principal") == "apigateway.amazonaws.com"
    ]
    assert json.dumps(permission["SourceArn"]).endswith('"/*/*"]]}')
    (stage,) = resources(template, "AWS::ApiGatewayV2::Stage").values()
    assert "AccessLogSettings" in stage["Properties"]
    url = getatt(logical_id(stack, stack.api.http_api), "ApiEndpoint")
    assert template["Outputs"]["ApiUrl"]["Value"] == url


def test_route_keys_are_distinct_for_api_gateway() -> None:
    """API Gateway refuses two routes that differ only in their parameters' names (at
    deploy time: synth would not say)."""
    shapes = [re.sub(r"\{[^}]+\}", "{}", key) for key in route_keys()]
    assert len(shapes) == len(set(shapes))
    assert "POST /v1/callbacks/{token}" in route_keys()


# What each access-log variable logs for one request that carries every secret a request can:
# a callback's token in its path, an API key in its Authorization header, a query string.
# A variable not listed fails the test: say what it logs before using it.
_TOKEN = "cbTOKENsecret0123456789abcdefghijklmnopqrstu"
_API_KEY = "ezgh_KEYsecret0123456789"
_REQUEST = {
    "$context.requestId": "Abc123=",
    "$context.identity.sourceIp": "198.51.100.7",
    "$context.requestTime": "06/Dec/2026:10:00:00 +0000",
    "$context.httpMethod": "POST",
    "$context.routeKey": "POST /v1/callbacks/{token}",
    "$context.status": "200",
    "$context.responseLatency": "12",
    "$context.integrationErrorMessage": "-",
    # Never in the format: these hold the request's secrets.
    "$context.path": f"/v1/callbacks/{_TOKEN}",
    "$context.identity.userAgent": "curl/8",
    "$context.authorizer.error": "-",
}


def test_the_access_log_holds_no_secret(template: dict[str, Any]) -> None:
    """The access log names the route (`{token}`), never the path: a callback's path is its
    token, and the log group is readable by anyone who reads logs."""
    (stage,) = resources(template, "AWS::ApiGatewayV2::Stage").values()
    line = stage["Properties"]["AccessLogSettings"]["Format"]
    used = set(re.findall(r"\$context\.[A-Za-z.]+", line))
    assert used <= set(_REQUEST), f"say what {used - set(_REQUEST)} logs"
    for variable in sorted(used, key=len, reverse=True):
        line = line.replace(variable, _REQUEST[variable])
    record = json.loads(line)
    assert record["route"] == "POST /v1/callbacks/{token}"
    assert _TOKEN not in line and _API_KEY not in line and "?" not in line


def test_the_stage_throttles_every_route(template: dict[str, Any]) -> None:
    (stage,) = resources(template, "AWS::ApiGatewayV2::Stage").values()
    default = Throttle()
    assert stage["Properties"]["DefaultRouteSettings"] == {
        "ThrottlingBurstLimit": default.burst,
        "ThrottlingRateLimit": default.rate,
    }


def test_throttling_and_the_key_rate_limit_are_context_options(template: dict[str, Any]) -> None:
    named, options = _synth_named(
        "StackT",
        **{"ezgh:apiRateLimit": 50, "ezgh:apiBurstLimit": 80, "ezgh:keyRateLimit": 7},
    )
    (stage,) = resources(options, "AWS::ApiGatewayV2::Stage").values()
    assert stage["Properties"]["DefaultRouteSettings"] == {
        "ThrottlingBurstLimit": 80,
        "ThrottlingRateLimit": 50,
    }
    api = props(options, logical_id(named, named.functions.by_key[API_FUNCTION.key]))
    assert api["Environment"]["Variables"][config.ENV_KEY_RATE_LIMIT] == "7"
    # By default the function keeps the engine's own default (service/rate_limits.py).
    for function in resources(template, "AWS::Lambda::Function").values():
        assert config.ENV_KEY_RATE_LIMIT not in function["Properties"]["Environment"]["Variables"]


@pytest.mark.parametrize(
    "spec", [f for f in TOPOLOGY.functions if f.url_env_var], ids=lambda f: f.key
)
def test_function_url_serves_the_functions_that_declare_one(
    stack: EzghStack, template: dict[str, Any], spec: Any
) -> None:
    """The steps function answers at a function URL (no API Gateway fee per step call), and
    so does the flows function (EzFlow's interpreter, a push app); every other function
    finds that URL in the spec's variable, and the stack outputs it."""
    target = logical_id(stack, stack.functions.by_key[spec.key])
    urls = [
        r["Properties"]
        for r in resources(template, "AWS::Lambda::Url").values()
        if r["Properties"]["TargetFunctionArn"] == getatt(target)
    ]
    assert urls == [{"AuthType": "NONE", "TargetFunctionArn": getatt(target)}]
    url_lid = logical_id(stack, stack.function_urls[spec.key])
    for key, function in stack.functions.by_key.items():
        env = props(template, logical_id(stack, function))["Environment"]["Variables"]
        readers = spec.url_readers
        sandboxed = TOPOLOGY.function(key).sandboxed
        if key == spec.key or (readers is None and sandboxed) or (readers and key not in readers):
            assert spec.url_env_var not in env
        else:
            assert env[spec.url_env_var] == getatt(url_lid, "FunctionUrl")
    output = "StepsUrl" if spec.key == "steps" else f"{spec.key.capitalize()}Url"
    assert template["Outputs"][output]["Value"] == getatt(url_lid, "FunctionUrl")


def test_the_sandbox_is_invoked_by_the_flows_function_only_and_grants_nothing(
    stack: EzghStack, template: dict[str, Any]
) -> None:
    """A flow's user-directed code: no function URL, `lambda:InvokeFunction` on it for the
    flows function's role alone (its ARN in that function's environment), and a role that
    may write its logs and traces and nothing else."""
    sandbox = stack.functions.by_key[SANDBOX_FUNCTION.key]
    arn = getatt(logical_id(stack, sandbox))
    assert SANDBOX_FUNCTION.key not in stack.function_urls
    invokers = set()
    for key, function in stack.functions.by_key.items():
        role = logical_id(stack, function.role)
        for policy in resources(template, "AWS::IAM::Policy").values():
            if {"Ref": role} not in policy["Properties"]["Roles"]:
                continue
            for statement in policy["Properties"]["PolicyDocument"]["Statement"]:
                if "lambda:InvokeFunction" in statement["Action"] and arn in (
                    statement["Resource"] if isinstance(statement["Resource"], list)
                    else [statement["Resource"]]
                ):  # fmt: skip
                    invokers.add(key)
                if key == SANDBOX_FUNCTION.key:
                    actions = statement["Action"]
                    actions = actions if isinstance(actions, list) else [actions]
                    assert all(a.split(":")[0] in ("logs", "xray") for a in actions), actions
    assert invokers == {FLOWS_FUNCTION.key}
    env = props(template, logical_id(stack, stack.functions.by_key[FLOWS_FUNCTION.key]))
    assert SANDBOX_FUNCTION.sync_invoke is not None
    assert env["Environment"]["Variables"][SANDBOX_FUNCTION.sync_invoke.env_var] == arn


def test_a_function_that_invokes_another_is_updated_after_it(
    stack: EzghStack, template: dict[str, Any]
) -> None:
    """The stream's messages may be in a shape only the new invoker reads (a branch message
    that creates its step): CloudFormation updates the stream after the invoker, and rolls
    back in the reverse order, so an old invoker never gets one."""
    stream = logical_id(stack, stack.functions.by_key["stream"])
    invoker = logical_id(stack, stack.functions.by_key["invoker"])
    assert invoker in as_list(template["Resources"][stream].get("DependsOn", []))


def test_template_has_no_dependency_cycle(template: dict[str, Any]) -> None:
    """CloudFormation reports cycles only at deploy time; catch them at synth."""
    res = template["Resources"]

    def refs(node: Any) -> set[str]:
        if isinstance(node, dict):
            found = set()
            if "Ref" in node and node["Ref"] in res:
                found.add(node["Ref"])
            if "Fn::GetAtt" in node:
                found.add(node["Fn::GetAtt"][0])
            for value in node.values():
                found |= refs(value)
            return found
        if isinstance(node, list):
            return set().union(*(refs(v) for v in node)) if node else set()
        return set()

    graph = {
        k: refs(v.get("Properties", {})) | set(as_list(v.get("DependsOn", [])))
        for k, v in res.items()
    }
    state: dict[str, int] = {}

    def visit(node: str, path: list[str]) -> None:
        if state.get(node) == 2:
            return
        assert state.get(node) != 1, f"cycle: {' -> '.join([*path, node])}"
        state[node] = 1
        for dep in graph[node]:
            visit(dep, [*path, node])
        state[node] = 2

    for node in graph:
        visit(node, [])


# --- IAM ----------------------------------------------------------------------------------


def test_scheduler_role_only_sends_to_the_invocations_queue_or_invokes_the_invoker(
    stack: EzghStack, template: dict[str, Any]
) -> None:
    role_lid = logical_id(stack, stack.scheduler.role)
    queue = getatt(logical_id(stack, stack.queues.by_key[INVOCATIONS_QUEUE.key]))
    invoker = getatt(logical_id(stack, stack.functions.by_key["invoker"]))
    assert grants(template, role_lid) == {
        ("sqs:SendMessage", json.dumps(queue, sort_keys=True)),
        ("lambda:InvokeFunction", json.dumps(invoker, sort_keys=True)),
    }
    trust = props(template, role_lid)["AssumeRolePolicyDocument"]["Statement"]
    assert [s["Principal"] for s in trust] == [{"Service": "scheduler.amazonaws.com"}]
    group = resources(template, "AWS::Scheduler::ScheduleGroup")
    assert [g["Properties"]["Name"] for g in group.values()] == [stack.scheduler.group_name]


def test_access_table_names_exactly_the_topology() -> None:
    assert set(ACCESS) == {f.key for f in TOPOLOGY.functions}
    table_keys, queue_keys = {t.key for t in TOPOLOGY.tables}, {q.key for q in TOPOLOGY.queues}
    for access in ACCESS.values():
        assert set(access.tables) <= table_keys
        assert set(access.send_to) <= queue_keys


@pytest.mark.parametrize("key", [f.key for f in TOPOLOGY.functions])
def test_function_grants_follow_access_table(
    stack: EzghStack, template: dict[str, Any], key: str
) -> None:
    access = ACCESS[key]
    actions = actions_of(template, stack, key)
    for table_key, table in stack.tables.by_key.items():
        arn = getatt(logical_id(stack, table))
        level = access.tables.get(table_key)
        assert allowed(template, stack, key, "dynamodb:GetItem", arn) == (level is not None)
        assert allowed(template, stack, key, "dynamodb:PutItem", arn) == (level == "read_write")
        updates = level in ("read_update", "read_write")
        assert allowed(template, stack, key, "dynamodb:UpdateItem", arn) == updates
    bucket_objects = {"Fn::Join": ["", [getatt(logical_id(stack, stack.payloads.bucket)), "/*"]]}
    assert allowed(template, stack, key, "s3:GetObject", bucket_objects) == bool(access.payloads)
    assert allowed(template, stack, key, "s3:PutObject", bucket_objects) == (
        access.payloads == "read_write"
    )
    for queue_key, queue in stack.queues.by_key.items():
        arn = getatt(logical_id(stack, queue))
        sends = allowed(template, stack, key, "sqs:SendMessage", arn)
        assert sends == (queue_key in access.send_to)
    assert ("scheduler:CreateSchedule" in actions) == access.schedules
    assert ("scheduler:DeleteSchedule" in actions) == access.schedules
    role = getatt(logical_id(stack, stack.scheduler.role))
    assert allowed(template, stack, key, "iam:PassRole", role) == access.schedules
    assert ("iam:PassRole" in actions) == access.schedules  # on no other role
    secret = {"Ref": logical_id(stack, stack.token_secret.secret)}
    assert allowed(template, stack, key, "secretsmanager:GetSecretValue", secret) == (
        access.token_secret
    )
    assert not any(a.endswith(":*") or a == "*" for a in actions), actions


def test_schedules_are_scoped_to_the_group(stack: EzghStack, template: dict[str, Any]) -> None:
    for key in (k for k, a in ACCESS.items() if a.schedules):
        for action, resource in grants(template, function_role(stack, key)):
            if action.startswith("scheduler:"):
                assert f":schedule/{stack.scheduler.group_name}/*" in resource


def test_no_star_resource_but_for_actions_without_arns(template: dict[str, Any]) -> None:
    for lid, policy in resources(template, "AWS::IAM::Policy").items():
        for s in policy["Properties"]["PolicyDocument"]["Statement"]:
            if "*" in as_list(s["Resource"]):
                assert set(as_list(s["Action"])) <= STAR_ALLOWED, (lid, s)


# --- bucket, secret, alarms ---------------------------------------------------------------


def test_payload_bucket(stack: EzghStack, template: dict[str, Any]) -> None:
    lid = logical_id(stack, stack.payloads.bucket)
    resource = template["Resources"][lid]
    p = resource["Properties"]
    assert resource["DeletionPolicy"] == "Retain"
    assert p["BucketEncryption"]["ServerSideEncryptionConfiguration"][0][
        "ServerSideEncryptionByDefault"
    ] == {"SSEAlgorithm": "AES256"}
    assert all(p["PublicAccessBlockConfiguration"].values())
    assert "VersioningConfiguration" not in p
    (rule,) = p["LifecycleConfiguration"]["Rules"]
    assert rule["ExpirationInDays"] == 396
    (policy,) = resources(template, "AWS::S3::BucketPolicy").values()
    denies = [
        s for s in policy["Properties"]["PolicyDocument"]["Statement"] if s["Effect"] == "Deny"
    ]
    assert any(s["Condition"] == {"Bool": {"aws:SecureTransport": "false"}} for s in denies)


def test_token_secret_is_generated(template: dict[str, Any]) -> None:
    (secret,) = resources(template, "AWS::SecretsManager::Secret").values()
    assert "GenerateSecretString" in secret["Properties"]
    assert "SecretString" not in secret["Properties"]


def test_alarms_cover_every_dlq_and_function(stack: EzghStack, template: dict[str, Any]) -> None:
    alarms = resources(template, "AWS::CloudWatch::Alarm").values()
    watched = {
        (a["Properties"]["MetricName"], json.dumps(a["Properties"]["Dimensions"][0]["Value"]))
        for a in alarms
    }
    dlqs = [*stack.queues.dlq_by_key.values(), *stack.sources.stream_dlqs.values()]
    for dlq in dlqs:
        name = getatt(logical_id(stack, dlq), "QueueName")
        assert ("ApproximateNumberOfMessagesVisible", json.dumps(name)) in watched
    shows_only = {s.function for s in TOPOLOGY.sources if isinstance(s, StreamSource)}
    shows_only &= {s.function for s in TOPOLOGY.sources if not getattr(s, "keep_failed", True)}
    for key, fn in stack.functions.by_key.items():
        alarmed = ("Errors", json.dumps({"Ref": logical_id(stack, fn)})) in watched
        assert alarmed == (key not in shows_only), key  # the observe function: no alarm
    for a in alarms:
        assert a["Properties"]["Threshold"] == 0
        assert a["Properties"]["ComparisonOperator"] == "GreaterThanThreshold"


# --- cdk-nag ------------------------------------------------------------------------------


def test_cdk_nag_reports_no_unsuppressed_error(stack: EzghStack) -> None:
    errors = Annotations.from_stack(stack).find_error(
        "*", Match.string_like_regexp("AwsSolutions-.*")
    )
    assert errors == [], [e.entry.data for e in errors]


def test_cdk_nag_check_would_catch_a_finding() -> None:
    """The query above is not vacuous: a bare queue under the same checks is reported."""
    app = App()
    canary = Stack(app, "NagCanary")
    sqs.Queue(canary, "Bare")
    Aspects.of(app).add(AwsSolutionsChecks())
    errors = Annotations.from_stack(canary).find_error(
        "*", Match.string_like_regexp("AwsSolutions-.*")
    )
    assert errors


# --- bundling -----------------------------------------------------------------------------


def test_source_only_bundle_layout(tmp_path: Path) -> None:
    out = bundle.build(tmp_path / "asset", with_deps=False)
    for spec in TOPOLOGY.functions:
        module = spec.handler.partition(":")[0]
        assert (out / (module.replace(".", "/") + ".py")).is_file()
    assert (out / "ezgh_engine" / "topology.py").is_file()
    assert not list(out.rglob("__pycache__"))


def test_bundle_pins_runtime_dependencies() -> None:
    pins = bundle.pinned_requirements()
    names = {p.split("==")[0] for p in pins}
    assert {"aws-lambda-powertools", "pydantic", "httpx", "croniter", "boto3"} <= names


def test_scheduler_role_is_passed_to_scheduler_only(
    stack: EzghStack, template: dict[str, Any]
) -> None:
    for key in (k for k, a in ACCESS.items() if a.schedules):
        (statement,) = [
            s
            for s in statements_of_role(template, function_role(stack, key))
            if "iam:PassRole" in as_list(s["Action"])
        ]
        assert statement["Condition"] == {
            "StringEquals": {"iam:PassedToService": "scheduler.amazonaws.com"}
        }


# --- per-stack runtime resources, concurrency ---------------------------------------------


def _synth_named(name: str, **context: Any) -> tuple[EzghStack, dict[str, Any]]:
    code = ROOT / "build" / "stack-test-placeholder"
    code.mkdir(parents=True, exist_ok=True)
    (code / "README").write_text("placeholder asset for synth tests\n")
    _, named = build_app(code_dir=str(code), app=App(context={"ezgh:stackName": name, **context}))
    return named, Template.from_stack(named).to_json()


def _role_statements(stack: EzghStack, template: dict[str, Any], key: str) -> list[Any]:
    r = iam_eval.Resolver(region="us-east-1", account="123456789012", stack_name=stack.stack_name)
    return r.resolve(statements_of_role(template, function_role(stack, key)))


def test_runtime_queues_are_named_after_the_stack(
    stack: EzghStack, template: dict[str, Any]
) -> None:
    for key, fn in stack.functions.by_key.items():
        if TOPOLOGY.function(key).sandboxed:
            continue  # it makes no queue (nor anything else of the engine's)
        env = props(template, logical_id(stack, fn))["Environment"]["Variables"]
        assert env[config.ENV_STACK_PREFIX] == stack.stack_name
    assert template["Outputs"][teardown.PREFIX_OUTPUT]["Value"] == stack.stack_name
    deliver = logical_id(stack, stack.functions.by_key["deliver"])
    assert template["Outputs"][teardown.DELIVER_OUTPUT]["Value"] == {"Ref": deliver}


def test_two_stacks_in_one_account_cannot_touch_each_others_queues() -> None:
    """Each stack's grants on run-time queues cover its own names only."""
    a, b = _synth_named("StackA"), _synth_named("StackB")
    arn = "arn:aws:sqs:us-east-1:123456789012:{}"
    for (stack, template), other in ((a, "StackB"), (b, "StackA")):
        own = stack.stack_name
        checks = [
            ("api", "sqs:SendMessage", f"{own}-q-0000", f"{other}-q-0000"),
            ("api", "sqs:DeleteQueue", f"{own}-q-0000-dlq", f"{other}-q-0000-dlq"),
            ("api", "sqs:CreateQueue", f"{own}-tasks-app", f"{other}-tasks-app"),
            ("invoker", "sqs:SendMessage", f"{own}-tasks-app", f"{other}-tasks-app"),
            ("deliver", "sqs:ReceiveMessage", f"{own}-q-0000", f"{other}-q-0000"),
            ("notify", "sqs:SendMessage", f"{own}-q-0000", f"{other}-q-0000"),
        ]
        for key, action, mine, theirs in checks:
            statements = _role_statements(stack, template, key)
            assert iam_eval.allows(statements, iam_eval.Need(action, arn.format(mine)))
            assert not iam_eval.allows(statements, iam_eval.Need(action, arn.format(theirs))), (
                own,
                key,
                action,
            )
        # No grant on SQS names that is not this stack's own (or a declared queue).
        for key in ACCESS:
            for s in _role_statements(stack, template, key):
                for resource in as_list(s["Resource"]):
                    if ":sqs:" in str(resource) and "*" in str(resource):
                        assert str(resource).endswith((f":{own}-q-*", f":{own}-tasks-*"))


def test_runtime_prefix_must_fit_sqs_names() -> None:
    assert runtime_prefix("A" * MAX_PREFIX) == "A" * MAX_PREFIX
    longest = sqs_queues.name_prefix("A" * MAX_PREFIX) + "0" * 36 + "-dlq.fifo"
    assert len(longest) == 80  # SQS's limit
    with pytest.raises(ValueError, match="at most"):
        runtime_prefix("A" * (MAX_PREFIX + 1))


@pytest.mark.parametrize("key", sorted(PUBLIC_CONCURRENCY))
def test_public_functions_have_reserved_concurrency(
    stack: EzghStack, template: dict[str, Any], key: str
) -> None:
    """The steps function URL (auth NONE) and the api cannot take the account's whole
    concurrency: each is capped, and the rest stays for the functions that move runs."""
    p = props(template, logical_id(stack, stack.functions.by_key[key]))
    assert p["ReservedConcurrentExecutions"] == PUBLIC_CONCURRENCY[key] > 0
    # Lambda keeps 100 unreserved; the default account quota is 1000.
    assert sum(PUBLIC_CONCURRENCY.values()) <= 1000 - 100


def test_internal_functions_share_the_unreserved_pool(
    stack: EzghStack, template: dict[str, Any]
) -> None:
    for key, fn in stack.functions.by_key.items():
        if key not in PUBLIC_CONCURRENCY:
            assert "ReservedConcurrentExecutions" not in props(template, logical_id(stack, fn))


def test_reserved_concurrency_is_a_context_option() -> None:
    named, template = _synth_named("StackC", **{"ezgh:stepsConcurrency": 50})
    steps = props(template, logical_id(named, named.functions.by_key["steps"]))
    assert steps["ReservedConcurrentExecutions"] == 50
    named, template = _synth_named("StackD", **{"ezgh:stepsConcurrency": 0})
    steps = props(template, logical_id(named, named.functions.by_key["steps"]))
    assert "ReservedConcurrentExecutions" not in steps


def test_task_worker_role_receives_and_deletes_tasks_only(
    stack: EzghStack, template: dict[str, Any]
) -> None:
    """Workers' queue credentials are sessions of this role, which only the api
    function may assume, and which can do nothing but receive and delete on task queues."""
    from ezgh_engine.service import pull

    role_lid = logical_id(stack, stack.task_worker_role)
    r = iam_eval.Resolver(region="us-east-1", account="123456789012", stack_name="S")
    statements = r.resolve(statements_of_role(template, role_lid))
    actions = {a for s in statements for a in as_list(s["Action"])}
    assert actions == set(pull.WORKER_QUEUE_ACTIONS) == {"sqs:ReceiveMessage", "sqs:DeleteMessage"}
    prefix = f"arn:aws:sqs:us-east-1:123456789012:{stack.task_queue_prefix}"
    assert [s["Resource"] for s in statements] == [f"{prefix}*"]
    trust = props(template, role_lid)["AssumeRolePolicyDocument"]["Statement"]
    api_role = function_role(stack, API_FUNCTION.key)
    assert [s["Principal"] for s in trust] == [{"AWS": getatt(api_role)}]
    assert props(template, role_lid)["MaxSessionDuration"] == pull.ACCESS_SECONDS
    # Only the api may assume it, and it is told which role to assume.
    assume = getatt(role_lid)
    for spec in TOPOLOGY.functions:
        can = allowed(template, stack, spec.key, "sts:AssumeRole", assume)
        assert can == (spec.key == API_FUNCTION.key), spec.key
    api = props(template, logical_id(stack, stack.functions.by_key[API_FUNCTION.key]))
    assert api["Environment"]["Variables"][pull.ENV_TASK_WORKER_ROLE] == assume


def test_a_worker_session_is_narrowed_to_its_own_queue() -> None:
    """The session policy (service/pull.session_policy) names one queue ARN: an app's
    credentials cannot read another app's tasks even though the role allows `tasks-*`."""
    from ezgh_engine.service import pull

    mine = "arn:aws:sqs:us-east-1:123456789012:S-tasks-a"
    policy = json.loads(pull.session_policy(mine))["Statement"]
    for action in pull.WORKER_QUEUE_ACTIONS:
        assert iam_eval.allows(policy, iam_eval.Need(action, mine))
        assert not iam_eval.allows(policy, iam_eval.Need(action, mine + "b"))
        assert not iam_eval.allows(policy, iam_eval.Need(action, mine[:-1] + "b"))
    assert not iam_eval.allows(policy, iam_eval.Need("sqs:SendMessage", mine))


def test_alarms_are_a_context_option() -> None:
    """Alarms are most of the idle month ($0.10 each); `-c ezgh:alarms=false`
    leaves them out, and nothing else changes."""
    _, without = _synth_named("NoAlarms", **{"ezgh:alarms": "false"})
    _, default = _synth_named("NoAlarms")
    assert resources(without, "AWS::CloudWatch::Alarm") == {}
    assert len(resources(default, "AWS::CloudWatch::Alarm")) > 0
    rest = {k for k, v in default["Resources"].items() if v["Type"] != "AWS::CloudWatch::Alarm"}
    assert set(without["Resources"]) == rest


def test_the_dashboard_is_a_context_option_off_by_default() -> None:
    """Off, the stack has no dashboard (it costs nothing); on, one dashboard whose graphs
    read the engine's own metrics in its namespace, for this stack's `service`."""
    _, on = _synth_named("Dash", **{"ezgh:dashboard": "true"})
    _, default = _synth_named("Dash")
    assert resources(default, "AWS::CloudWatch::Dashboard") == {}
    (dashboard,) = resources(on, "AWS::CloudWatch::Dashboard").values()
    body = json.dumps(dashboard["Properties"]["DashboardBody"])
    for metric in names.ALL:
        assert f'\\"{metric.name}\\"' in body, metric.name
    assert f'\\"{names.NAMESPACE}\\"' in body and '\\"service\\",\\"Dash\\"' in body
    rest = {k for k, v in on["Resources"].items() if v["Type"] != "AWS::CloudWatch::Dashboard"}
    assert set(default["Resources"]) == rest


def test_the_log_level_is_a_context_option() -> None:
    """INFO by default (a run's start, end, invocations and failures); DEBUG adds a line per
    completed step and wait; a level Powertools does not know is refused at synth."""
    for chosen, expected in ((None, "INFO"), ("debug", "DEBUG")):
        context = {} if chosen is None else {"ezgh:logLevel": chosen}
        _, template = _synth_named("Lvl", **context)
        for function in resources(template, "AWS::Lambda::Function").values():
            env = function["Properties"]["Environment"]["Variables"]
            assert env["LOG_LEVEL"] == expected
    with pytest.raises(ValueError, match="ezgh:logLevel"):
        _synth_named("Lvl", **{"ezgh:logLevel": "chatty"})


def test_traces_and_metrics_are_context_options() -> None:
    """No function records traces unless `ezgh:traceSampleRate` says how many (X-Ray bills
    each); metrics are on unless `ezgh:metrics=false`."""
    _, default = _synth_named("Obs")
    _, chosen = _synth_named("Obs", **{"ezgh:traceSampleRate": "0.05", "ezgh:metrics": "false"})
    for template, rate, disabled in ((default, None, None), (chosen, "0.05", "true")):
        for function in resources(template, "AWS::Lambda::Function").values():
            env = function["Properties"].get("Environment", {}).get("Variables", {})
            if not any(k.startswith("EZGH_") for k in env):
                continue  # the sandbox
            assert env.get(traces.ENV_SAMPLE_RATE) == rate
            assert env.get("POWERTOOLS_METRICS_DISABLED") == disabled
    with pytest.raises(ValueError, match="traceSampleRate"):
        _synth_named("Obs", **{"ezgh:traceSampleRate": "2"})


def test_the_invoker_is_invoked_asynchronously_with_retries_and_the_queue_on_failure(
    stack: EzghStack, template: dict[str, Any]
) -> None:
    """The stream starts runs with an asynchronous invoke of the invoker. Lambda
    retries a failed invocation twice within six hours, then puts the event in the
    invocations queue; only the stream (and Scheduler) may invoke it."""
    (config,) = resources(template, "AWS::Lambda::EventInvokeConfig").values()
    invoker_lid = logical_id(stack, stack.functions.by_key["invoker"])
    queue = getatt(logical_id(stack, stack.queues.by_key[INVOCATIONS_QUEUE.key]))
    assert config["Properties"] == {
        "FunctionName": {"Ref": invoker_lid},
        "Qualifier": "$LATEST",
        "MaximumRetryAttempts": 2,
        "MaximumEventAgeInSeconds": 21600,
        "DestinationConfig": {"OnFailure": {"Destination": queue}},
    }
    invoker = json.dumps(getatt(invoker_lid), sort_keys=True)
    callers = {
        key
        for key, function in stack.functions.by_key.items()
        if function.role is not None
        and ("lambda:InvokeFunction", invoker) in grants(template, logical_id(stack, function.role))
    }
    assert callers == {"stream"}
    stream = props(template, logical_id(stack, stack.functions.by_key["stream"]))
    assert stream["Environment"]["Variables"]["EZGH_INVOKER_FUNCTION_ARN"] == getatt(invoker_lid)


def test_an_upgrading_stack_declares_the_narrow_runs_indexes_one_more_a_deploy() -> None:
    """CloudFormation adds at most one index per update (docs/deploy.md, "Upgrade")."""
    from ezgh_engine.topology import RUNS_LEGACY_INDEX, RUNS_NARROW_INDEXES, TOPOLOGY

    from infra.stack import declared_tables

    for count in range(len(RUNS_NARROW_INDEXES) + 1):
        runs = next(t for t in declared_tables(TOPOLOGY.tables, count) if t.key == "runs")
        assert runs.indexes == (RUNS_LEGACY_INDEX, *RUNS_NARROW_INDEXES[:count])
    registry = next(t for t in declared_tables(TOPOLOGY.tables, 0) if t.key == "registry")
    assert registry == TOPOLOGY.table("registry")


def test_a_stack_with_every_runs_index_lists_from_them(template: dict[str, Any]) -> None:
    for resource in template["Resources"].values():
        if resource["Type"] == "AWS::Lambda::Function":
            env = resource["Properties"].get("Environment", {}).get("Variables", {})
            assert config.ENV_LEGACY_RUNS_INDEX not in env
