"""What a deployment costs in a month in which it does nothing.

Read off the synthesized CloudFormation template (infra/, as `cdk synth` makes it): every
resource that bills while idle (SQS event source mappings and their pollers, alarms,
secrets, KMS keys, provisioned concurrency), plus N idle pull workers and M subscriptions,
which the template cannot show (they are made at run time). Each line carries its
assumption; the prices and AWS's documented behaviour are in bench/prices.py.
"""

from __future__ import annotations

import re
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ezgh_engine.adapters import year_limit_store
from ezgh_engine.service import pull
from ezgh_engine.topology import API_FUNCTION, INVOKER_FUNCTION

from bench import prices as p

ROOT = Path(__file__).resolve().parents[1]
# What the api function takes to vend a worker's queue credentials (one STS AssumeRole and
# one registry read): an assumption, generous against the ~20 ms measured locally.
ACCESS_CALL_SECONDS = 0.1
# SDK: a worker asks for fresh credentials this long before its current ones expire.
ACCESS_REFRESH_MARGIN_SECONDS = 300


@dataclass
class Line:
    """One idle cost: `count` things at `usd_low`..`usd_high` a month in all."""

    item: str
    count: int
    usd_low: float
    usd_high: float
    assumption: str


def _metric_series() -> int:
    from ezgh_engine.observability import names

    return names.SERIES


def synth_template(stack_name: str = "ezgh") -> dict[str, Any]:
    """The stack's template as `cdk synth` makes it (placeholder code: no bundle needed)."""
    if str(ROOT) not in sys.path:  # `infra` is not an installed package
        sys.path.insert(0, str(ROOT))
    from aws_cdk import App
    from aws_cdk.assertions import Template

    from infra.app import build_app

    code = ROOT / "build" / "bench-placeholder"
    code.mkdir(parents=True, exist_ok=True)
    (code / "README").write_text("placeholder asset for the idle-cost synth\n")
    _, stack = build_app(code_dir=str(code), app=App(context={"ezgh:stackName": stack_name}))
    return dict(Template.from_stack(stack).to_json())


def _polls_per_month(pollers: int) -> float:
    return pollers * p.SECONDS_PER_MONTH / p.SQS_LONG_POLL_SECONDS


def mapping_pollers(props: dict[str, Any]) -> tuple[int, int]:
    """The idle pollers of one SQS event source mapping (low, high)."""
    if props.get("Enabled") is False:
        return (0, 0)
    if (props.get("ScalingConfig") or {}).get("MaximumConcurrency"):
        return p.ESM_IDLE_POLLERS_WITH_MAX_CONCURRENCY
    return p.ESM_IDLE_POLLERS


def _sqs_source(template: dict[str, Any], props: dict[str, Any]) -> bool:
    arn = props.get("EventSourceArn")
    if isinstance(arn, dict) and "Fn::GetAtt" in arn:
        target = template["Resources"].get(arn["Fn::GetAtt"][0], {})
        return bool(target.get("Type") == "AWS::SQS::Queue")
    return isinstance(arn, str) and ":sqs:" in arn


def template_lines(template: dict[str, Any]) -> list[Line]:
    """The idle costs of the stack's own resources."""
    resources = template["Resources"]
    by_type: dict[str, list[tuple[str, dict[str, Any]]]] = {}
    for lid, res in resources.items():
        by_type.setdefault(res["Type"], []).append((lid, res.get("Properties") or {}))
    lines: list[Line] = []
    sqs_maps = [
        (lid, props)
        for lid, props in by_type.get("AWS::Lambda::EventSourceMapping", [])
        if _sqs_source(template, props)
    ]
    for lid, props in sqs_maps:
        low, high = mapping_pollers(props)
        lines.append(
            Line(
                f"SQS event source mapping {lid}",
                1,
                _polls_per_month(low) * p.SQS_USD_PER_REQUEST,
                _polls_per_month(high) * p.SQS_USD_PER_REQUEST,
                f"{low}-{high} idle pollers x one 20 s ReceiveMessage each "
                f"({_polls_per_month(low):,.0f}-{_polls_per_month(high):,.0f} requests/month)",
            )
        )
    streams = len(by_type.get("AWS::Lambda::EventSourceMapping", [])) - len(sqs_maps)
    if streams:
        lines.append(
            Line(
                "DynamoDB stream event source mappings",
                streams,
                0.0,
                0.0,
                "GetRecords by Lambda's stream mapping are free",
            )
        )
    alarms = len(by_type.get("AWS::CloudWatch::Alarm", []))
    if alarms:
        fee = alarms * p.CLOUDWATCH_ALARM_USD_PER_MONTH
        lines.append(
            Line(
                "CloudWatch alarms",
                alarms,
                fee,
                fee,
                f"${p.CLOUDWATCH_ALARM_USD_PER_MONTH:.2f} per standard alarm (one metric each)",
            )
        )
    dashboards = len(by_type.get("AWS::CloudWatch::Dashboard", []))
    if dashboards:  # -c ezgh:dashboard=true (infra/components/dashboard.py)
        fee = dashboards * p.CLOUDWATCH_DASHBOARD_USD_PER_MONTH
        lines.append(
            Line(
                "CloudWatch dashboards",
                dashboards,
                fee,
                fee,
                f"${p.CLOUDWATCH_DASHBOARD_USD_PER_MONTH:.2f} each past an account's first "
                "three (free, of up to 50 metrics each)",
            )
        )
    secrets = len(by_type.get("AWS::SecretsManager::Secret", []))
    if secrets:
        fee = secrets * p.SECRETS_MANAGER_USD_PER_SECRET_MONTH
        lines.append(
            Line(
                "Secrets Manager secrets",
                secrets,
                fee,
                fee,
                f"${p.SECRETS_MANAGER_USD_PER_SECRET_MONTH:.2f} per secret; read once per cold "
                "start (none while idle)",
            )
        )
    keys = len(by_type.get("AWS::KMS::Key", []))
    if keys:
        fee = keys * p.KMS_KEY_USD_PER_MONTH
        lines.append(Line("KMS keys", keys, fee, fee, "$1 per customer-managed key"))
    lines.extend(_recurring_lines(by_type.get("AWS::Scheduler::Schedule", [])))
    provisioned = [
        props
        for kind in ("AWS::Lambda::Alias", "AWS::Lambda::Version")
        for _, props in by_type.get(kind, [])
        if props.get("ProvisionedConcurrencyConfig")
    ]
    if provisioned:
        raise ValueError("provisioned concurrency bills while idle: price it before adding it")
    free = [
        ("AWS::Lambda::Function", "Lambda functions (no provisioned concurrency)"),
        ("AWS::Logs::LogGroup", "log groups (storage only: nothing is logged while idle)"),
        ("AWS::DynamoDB::Table", "DynamoDB on-demand tables (storage and PITR only, per GB)"),
        ("AWS::SQS::Queue", "SQS queues (requests only)"),
        ("AWS::S3::Bucket", "S3 buckets (storage only)"),
        ("AWS::ApiGatewayV2::Api", "HTTP APIs (requests only)"),
        ("AWS::Lambda::Url", "function URLs (Lambda bills the invocation)"),
        (
            "AWS::Lambda::EventInvokeConfig",
            "asynchronous invoke settings (retries, on-failure queue: billed per invocation)",
        ),
        ("AWS::Scheduler::ScheduleGroup", "schedule groups (fires only)"),
        ("AWS::IAM::Role", "IAM roles"),
    ]
    # The engine's EMF metrics are billed per hour in which they are sent: none while idle
    # (the year-limit sweep sends none). A busy month: observability.names.SERIES of them.
    lines.append(
        Line(
            "custom metrics (EMF, observability/names.py)",
            0,
            0.0,
            0.0,
            "billed only in the hours they are sent; at most "
            f"{_metric_series()} x ${p.CLOUDWATCH_CUSTOM_METRIC_USD_PER_MONTH:.2f} in a busy month",
        )
    )
    for kind, what in free:
        n = len(by_type.get(kind, []))
        if n:
            lines.append(Line(what, n, 0.0, 0.0, "no charge while nothing runs"))
    return lines


# The hourly year-limit sweep (service/year_limits.py) on an idle stack: an invocation of
# the invoker (assumed 0.2 s, generous against its empty queries) and, for each of two days,
# a consistent query of each bucket shard and of the unsharded key (one read unit each).
SWEEP_SECONDS = 0.2
SWEEP_READ_UNITS = 2 * (year_limit_store.SHARDS + 1)
_HOURLY = re.compile(r"^cron\(\d{1,2} \* \* \* \? \*\)$")


def _recurring_lines(schedules: list[tuple[str, dict[str, Any]]]) -> list[Line]:
    """The stack's own recurring schedules (topology `Recurring`): each fire bills the
    Scheduler invocation, the invoker's request and time, and the sweep's reads."""
    lines = []
    for lid, props in schedules:
        expression = str(props.get("ScheduleExpression", ""))
        if not _HOURLY.match(expression):
            raise ValueError(f"schedule {lid} ({expression}): price its fires before adding it")
        fires = p.SECONDS_PER_MONTH / 3600
        each = (
            p.SCHEDULER_USD_PER_INVOCATION
            + p.LAMBDA_USD_PER_REQUEST
            + SWEEP_SECONDS * INVOKER_FUNCTION.memory_mb / 1024 * p.LAMBDA_USD_PER_GB_SECOND_ARM64
            + SWEEP_READ_UNITS * p.DYNAMODB_USD_PER_RRU
        )
        lines.append(
            Line(
                f"recurring schedule {lid}",
                1,
                fires * each,
                fires * each,
                f"{fires:,.0f} fires/month ({expression}), each a Scheduler invocation, an "
                f"invoker request of ~{SWEEP_SECONDS} s and {SWEEP_READ_UNITS} read units",
            )
        )
    return lines


def worker_lines(workers: int) -> list[Line]:
    """N pull workers waiting for tasks, on the direct path and on the API's long poll."""
    if workers <= 0:
        return []
    polls = _polls_per_month(1)
    direct = polls * p.SQS_USD_PER_REQUEST
    refreshes = p.SECONDS_PER_MONTH / (pull.ACCESS_SECONDS - ACCESS_REFRESH_MARGIN_SECONDS)
    api_gb = API_FUNCTION.memory_mb / 1024
    per_call = (
        p.HTTP_API_USD_PER_REQUEST
        + p.LAMBDA_USD_PER_REQUEST
        + ACCESS_CALL_SECONDS * api_gb * p.LAMBDA_USD_PER_GB_SECOND_ARM64
        + p.STS_USD_PER_REQUEST
    )
    access = refreshes * per_call
    legacy = polls * (
        p.HTTP_API_USD_PER_REQUEST
        + p.LAMBDA_USD_PER_REQUEST
        + p.SQS_LONG_POLL_SECONDS * api_gb * p.LAMBDA_USD_PER_GB_SECOND_ARM64
        + p.SQS_USD_PER_REQUEST
    )
    each = direct + access
    return [
        Line(
            "idle pull workers (SDK default: the task queue, directly)",
            workers,
            workers * each,
            workers * each,
            f"each {polls:,.0f} ReceiveMessage/month (20 s long polls, ${direct:.4f}) + "
            f"{refreshes:,.0f} credential refreshes through the API (STS free, "
            f"${access:.4f}): ${each:.4f} per worker",
        ),
        Line(
            "  for comparison: the same workers on POST .../tasks/poll (before; the fallback)",
            workers,
            workers * legacy,
            workers * legacy,
            f"each {polls:,.0f} polls/month, each 20 s in the {API_FUNCTION.memory_mb} MB api "
            f"function + an HTTP API request + a ReceiveMessage: ${legacy:.2f} per worker",
        ),
    ]


def subscription_lines(subscriptions: int) -> list[Line]:
    """M subscriptions, each an SQS event source mapping with MaximumConcurrency."""
    if subscriptions <= 0:
        return []
    low, high = p.ESM_IDLE_POLLERS_WITH_MAX_CONCURRENCY
    each = _polls_per_month(high) * p.SQS_USD_PER_REQUEST
    return [
        Line(
            "subscriptions (active)",
            subscriptions,
            subscriptions * _polls_per_month(low) * p.SQS_USD_PER_REQUEST,
            subscriptions * each,
            f"a mapping with MaximumConcurrency each: {high} idle pollers, "
            f"{_polls_per_month(high):,.0f} ReceiveMessage/month, ${each:.3f} per "
            "subscription (a paused one is a disabled mapping: $0)",
        )
    ]


def idle_figures(template: dict[str, Any], workers: int, subscriptions: int) -> dict[str, Any]:
    """The idle month: the template's lines, the workers' and subscriptions', and totals."""
    stack = template_lines(template)
    extra = worker_lines(workers) + subscription_lines(subscriptions)
    counted = [line for line in stack + extra if not line.item.startswith("  for comparison")]
    return {
        "workers": workers,
        "subscriptions": subscriptions,
        "stack_usd_per_month": [
            sum(x.usd_low for x in stack),
            sum(x.usd_high for x in stack),
        ],
        "usd_per_month": [sum(x.usd_low for x in counted), sum(x.usd_high for x in counted)],
        # `cdk deploy -c ezgh:alarms=false` makes no alarms (infra/app.py).
        "stack_without_alarms_usd_per_month": [
            sum(x.usd_low for x in stack if x.item != "CloudWatch alarms"),
            sum(x.usd_high for x in stack if x.item != "CloudWatch alarms"),
        ],
        "lines": [asdict(x) for x in stack + extra],
    }


def print_idle(w: Any, idle: dict[str, Any]) -> None:
    """The idle month as a table, totals first."""
    lo, hi = idle["stack_usd_per_month"]
    tlo, thi = idle["usd_per_month"]
    w(
        f"Idle month (a deployment that does nothing; template from infra/ + "
        f"{idle['workers']} idle pull workers + {idle['subscriptions']} subscriptions):\n"
        f"  stack alone ${lo:.2f}-{hi:.2f}/month; with the workers and subscriptions "
        f"${tlo:.2f}-{thi:.2f}/month\n"
        "  stack without alarms (-c ezgh:alarms=false) "
        "${:.2f}-{:.2f}/month\n".format(*idle["stack_without_alarms_usd_per_month"])
    )
    w("| item | n | $/month | assumption |\n|---|---|---|---|\n")
    for line in idle["lines"]:
        money = (
            f"${line['usd_low']:.4f}"
            if line["usd_low"] == line["usd_high"]
            else f"${line['usd_low']:.4f}-{line['usd_high']:.4f}"
        )
        w(f"| {line['item']} | {line['count']} | {money} | {line['assumption']} |\n")
