"""Provision every resource of `TOPOLOGY` in the emulator and say where handlers find them."""

from __future__ import annotations

import contextlib
import hashlib
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ezgh_engine import config
from ezgh_engine.adapters import aws
from ezgh_engine.local.account import ACCOUNT_ID, NAME_PREFIX
from ezgh_engine.service.pull import ENV_TASK_WORKER_ROLE
from ezgh_engine.topology import TOPOLOGY, Index, Queue, Table, Topology

BUCKET_NAME = f"{NAME_PREFIX}-payloads"
SCHEDULER_GROUP = "ezgh-timers"
# moto does not check IAM; any well-formed role ARN will do.
SCHEDULER_ROLE_ARN = f"arn:aws:iam::{ACCOUNT_ID}:role/{NAME_PREFIX}-scheduler"
# The role pull workers' queue credentials are sessions of (moto's STS assumes any ARN).
TASK_WORKER_ROLE_ARN = f"arn:aws:iam::{ACCOUNT_ID}:role/{NAME_PREFIX}-task-worker"


def table_name(table: Table) -> str:
    return f"{NAME_PREFIX}-{table.key}"


def queue_name(queue: Queue) -> str:
    return f"{NAME_PREFIX}-{queue.key}"


@dataclass
class Provisioned:
    """What `provision()` made: physical names, URLs, ARNs, and the environment for handlers."""

    tables: dict[str, str] = field(default_factory=dict)  # topology key -> table name
    stream_arns: dict[str, str] = field(default_factory=dict)  # topology key -> stream ARN
    queue_urls: dict[str, str] = field(default_factory=dict)  # topology key -> queue URL
    queue_arns: dict[str, str] = field(default_factory=dict)
    dlq_urls: dict[str, str] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)


def index_params(index: Index) -> dict[str, Any]:
    """A `topology.Index` as CreateTable/UpdateTable declare it."""
    projection: dict[str, Any] = {"ProjectionType": "ALL"}
    if index.projection == "INCLUDE":
        projection = {
            "ProjectionType": "INCLUDE",
            "NonKeyAttributes": list(index.non_key_attributes),
        }
    return {
        "IndexName": index.name,
        "KeySchema": [
            {"AttributeName": index.partition_key, "KeyType": "HASH"},
            {"AttributeName": index.sort_key, "KeyType": "RANGE"},
        ],
        "Projection": projection,
    }


def table_params(table: Table, name: str) -> dict[str, Any]:
    """CreateTable's parameters for a topology table (on demand), without its stream."""
    attributes = {"pk", "sk"}
    for index in table.indexes:
        attributes.update((index.partition_key, index.sort_key))
    params: dict[str, Any] = {
        "TableName": name,
        "BillingMode": "PAY_PER_REQUEST",
        "AttributeDefinitions": [
            {"AttributeName": name, "AttributeType": "S"} for name in sorted(attributes)
        ],
        "KeySchema": [
            {"AttributeName": "pk", "KeyType": "HASH"},
            {"AttributeName": "sk", "KeyType": "RANGE"},
        ],
    }
    if table.indexes:
        params["GlobalSecondaryIndexes"] = [index_params(i) for i in table.indexes]
    return params


def _add_missing_indexes(ddb: Any, table: Table) -> None:
    """A table kept from an older version's state gets the indexes it lacks (moto answers
    from the items at once: no backfill to wait for)."""
    described = ddb.describe_table(TableName=table_name(table))["Table"]
    have = {i["IndexName"] for i in described.get("GlobalSecondaryIndexes") or []}
    for index in table.indexes:
        if index.name in have:
            continue
        ddb.update_table(
            TableName=table_name(table),
            AttributeDefinitions=[
                {"AttributeName": a, "AttributeType": "S"}
                for a in (index.partition_key, index.sort_key)
            ],
            GlobalSecondaryIndexUpdates=[{"Create": index_params(index)}],
        )


def _create_table(table: Table) -> str:
    ddb = aws.client("dynamodb")
    params = table_params(table, table_name(table))
    if table.stream:
        params["StreamSpecification"] = {
            "StreamEnabled": True,
            "StreamViewType": "NEW_AND_OLD_IMAGES",
        }
    try:
        answer = ddb.create_table(**params)
    except ddb.exceptions.ResourceInUseException:  # restored from the state dir: keep it
        _add_missing_indexes(ddb, table)
        described = ddb.describe_table(TableName=table_name(table))["Table"]
        return str(described.get("LatestStreamArn", ""))
    if table.ttl_attribute:
        # moto stores the TTL setting but never expires items; set it so describe matches AWS.
        ddb.update_time_to_live(
            TableName=table_name(table),
            TimeToLiveSpecification={"Enabled": True, "AttributeName": table.ttl_attribute},
        )
    return str(answer["TableDescription"].get("LatestStreamArn", ""))


def _create_queue(queue: Queue) -> tuple[str, str, str]:
    """Create the queue and its dead-letter queue; return (url, arn, dlq url)."""
    sqs = aws.client("sqs")
    retention = {"MessageRetentionPeriod": str(queue.retention_seconds)}
    dlq_url = sqs.create_queue(QueueName=f"{queue_name(queue)}-dlq", Attributes=retention)[
        "QueueUrl"
    ]
    dlq_arn = sqs.get_queue_attributes(QueueUrl=dlq_url, AttributeNames=["QueueArn"])["Attributes"][
        "QueueArn"
    ]
    redrive = {"deadLetterTargetArn": dlq_arn, "maxReceiveCount": str(queue.max_receive_count)}
    url = sqs.create_queue(
        QueueName=queue_name(queue),
        Attributes={
            "VisibilityTimeout": str(queue.visibility_timeout_seconds),
            "RedrivePolicy": json.dumps(redrive),
            **retention,
        },
    )["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"][
        "QueueArn"
    ]
    return url, arn, dlq_url


def _create_bucket_and_group() -> None:
    """The payload bucket and the timers' schedule group (kept if restored)."""
    s3 = aws.client("s3")
    with contextlib.suppress(
        s3.exceptions.BucketAlreadyOwnedByYou, s3.exceptions.BucketAlreadyExists
    ):
        s3.create_bucket(Bucket=BUCKET_NAME)
    scheduler = aws.client("scheduler")
    try:  # moto's CreateScheduleGroup replaces a group that exists, schedules and all
        scheduler.get_schedule_group(Name=SCHEDULER_GROUP)
    except scheduler.exceptions.ResourceNotFoundException:
        with contextlib.suppress(scheduler.exceptions.ConflictException):
            scheduler.create_schedule_group(Name=SCHEDULER_GROUP)


def create_recurring(topology: Topology, function_arn: Callable[[str], str]) -> None:
    """The stack's own recurring schedules (topology `Recurring`, the hourly year-limit
    sweep) in the timers' group, as infra makes them; kept if restored. `function_arn(key)`:
    a topology function's ARN in the local Lambda API."""
    scheduler = aws.client("scheduler")
    for spec in topology.recurring:
        with contextlib.suppress(scheduler.exceptions.ConflictException):
            scheduler.create_schedule(
                Name=spec.name,
                GroupName=SCHEDULER_GROUP,
                ScheduleExpression=spec.expression,
                ScheduleExpressionTimezone="UTC",
                FlexibleTimeWindow={"Mode": "OFF"},
                Target={
                    "Arn": function_arn(spec.function),
                    "RoleArn": SCHEDULER_ROLE_ARN,
                    "Input": spec.message,
                },
            )


def provision(
    *,
    api_url: str,
    token_secret: str,
    topology: Topology = TOPOLOGY,
    function_urls: dict[str, str] | None = None,
) -> Provisioned:
    """Create tables, queues, the bucket and the schedule group; return names and handler env.

    Resources that exist already (restored from a state dir) are kept as they are.
    The caller applies `Provisioned.env` to the process (see `Emulator.apply_env`).
    """
    done = Provisioned()
    for table in topology.tables:
        done.tables[table.key] = table_name(table)
        stream_arn = _create_table(table)
        if table.stream:
            done.stream_arns[table.key] = stream_arn
    for queue in topology.queues:
        url, arn, dlq_url = _create_queue(queue)
        done.queue_urls[queue.key] = url
        done.queue_arns[queue.key] = arn
        done.dlq_urls[queue.key] = dlq_url
    _create_bucket_and_group()
    done.env = handler_env(done, api_url, token_secret, topology, function_urls)
    return done


def handler_env(
    done: Provisioned,
    api_url: str,
    token_secret: str,
    topology: Topology = TOPOLOGY,
    function_urls: dict[str, str] | None = None,
) -> dict[str, str]:
    """The handlers' environment for the resources `done` names."""
    env = {table.env_var: done.tables[table.key] for table in topology.tables}
    env.update({queue.env_var: done.queue_urls[queue.key] for queue in topology.queues})
    env.update(
        {
            config.ENV_INVOCATIONS_QUEUE_ARN: done.queue_arns.get("invocations", ""),
            topology.bucket_env_var: BUCKET_NAME,
            topology.scheduler_group_env_var: SCHEDULER_GROUP,
            topology.scheduler_role_env_var: SCHEDULER_ROLE_ARN,
            config.ENV_API_URL: api_url,
            **(function_urls or {}),
            config.ENV_TOKEN_SECRET: token_secret,
            ENV_TASK_WORKER_ROLE: TASK_WORKER_ROLE_ARN,
            config.ENV_ALLOW_LOOPBACK: "1",
        }
    )
    return env


def topology_digest(topology: Topology) -> str:
    """What a record of provisioned resources was made for: the whole topology, and the
    names given here (any change provisions again)."""
    made = (topology, NAME_PREFIX, BUCKET_NAME, SCHEDULER_GROUP, SCHEDULER_ROLE_ARN)
    return hashlib.sha256(repr(made).encode()).hexdigest()


def record(done: Provisioned, *, endpoint: str, topology: Topology, **more: Any) -> dict[str, Any]:
    """What an image of the state keeps of `done` (the answers of `provision` for the
    emulator at `endpoint`), for the next start to adopt instead of provisioning again
    (`adopt`); `more`: other such answers (URLs of `endpoint` too)."""
    kept = {name: dict(getattr(done, name)) for name in _KEPT}
    return {"digest": topology_digest(topology), "endpoint": endpoint, **kept, **more}


def adopt(
    kept: Mapping[str, Any], *, endpoint: str, topology: Topology
) -> tuple[Provisioned, dict[str, Any]] | None:
    """The resources a `record` names, for the emulator now at `endpoint` (its queue URLs
    moved from the recorded endpoint to this one), and the record's other answers moved
    the same way; None (provision them) if it is of another topology or any URL is not of
    the recorded endpoint.

    Only for the state a record was kept with (an image of a clean stop: the resources are
    in it, made by `provision` in the life the image is of, and nothing of the engine
    deletes them)."""
    if kept.get("digest") != topology_digest(topology) or not kept.get("endpoint"):
        return None
    old = f"{kept['endpoint']}/"

    def moved(value: Any) -> Any:
        if isinstance(value, dict):
            return {key: moved(inner) for key, inner in value.items()}
        if isinstance(value, str) and value.startswith(old):
            return f"{endpoint}/{value.removeprefix(old)}"
        raise ValueError(f"not a URL of {old}: {value!r}")

    try:
        done = Provisioned(**{name: dict(kept[name]) for name in _KEPT})
        done.queue_urls, done.dlq_urls = moved(done.queue_urls), moved(done.dlq_urls)
        more = {k: moved(v) for k, v in kept.items() if k not in (*_KEPT, "digest", "endpoint")}
    except (KeyError, TypeError, ValueError):
        return None
    if set(done.tables) != {t.key for t in topology.tables} or set(done.queue_urls) != {
        q.key for q in topology.queues
    }:
        return None
    return done, more


# The answers of `provision` a record keeps (the handlers' environment is made anew).
_KEPT = ("tables", "stream_arns", "queue_urls", "queue_arns", "dlq_urls")
