"""What each function may touch: the one place least privilege is decided.

Keys are topology keys (functions, tables, queues), checked against the topology when the
stack is built, so a renamed or new function fails synth instead of running without grants.
Consuming a queue through its event source mapping grants receive, delete and
change-visibility on that queue by itself; this table lists what the handler code calls.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

Level = Literal["read", "read_update", "read_write"]
# On the payload bucket: read, read and delete (retention), or read, write and delete.
PayloadLevel = Literal["read", "read_delete", "read_write"]

# The DynamoDB actions each level allows on a table: the operations the engine's adapters
# make, nothing more (CDK's grant_read_write_data adds Scan, BatchGetItem, DescribeTable, the
# stream reads and every action on every index). TransactWriteItems is authorized per item
# (Put/Update/Delete/ConditionCheck). BatchWriteItem, which deletes a run's items
# (runs_store.delete_run), is `Access.deletes_runs` only.
TABLE_ACTIONS: dict[Level, tuple[str, ...]] = {
    "read": ("dynamodb:GetItem", "dynamodb:Query"),
    # Reads, and changes to items that exist (no put, no delete).
    "read_update": ("dynamodb:GetItem", "dynamodb:Query", "dynamodb:UpdateItem"),
    "read_write": (
        "dynamodb:GetItem",
        "dynamodb:Query",
        "dynamodb:PutItem",
        "dynamodb:UpdateItem",
        "dynamodb:DeleteItem",
        "dynamodb:ConditionCheckItem",
    ),
}
# On a table's indexes (GSIs answer queries only).
INDEX_ACTIONS = ("dynamodb:Query",)


@dataclass(frozen=True)
class Access:
    tables: dict[str, Level] = field(default_factory=dict)
    payloads: PayloadLevel | None = None
    send_to: tuple[str, ...] = ()  # queue keys the function sends messages to
    schedules: bool = False  # create/delete timer schedules (and pass the scheduler role)
    token_secret: bool = False  # read the invocation-token HMAC key
    # SQS actions on the EZGH queues users create at run time (`ezgh-q-*`).
    user_queues: tuple[str, ...] = ()
    # Create, change and delete the `deliver` function's event source mappings (subscriptions).
    event_source_mappings: bool = False
    # SQS actions on pull apps' task queues (`ezgh-tasks-<appId>`).
    task_queues: tuple[str, ...] = ()
    # BatchWriteItem on the runs table: `DELETE .../runs/{id}` deletes a run's items.
    deletes_runs: bool = False
    # BatchGetItem on these tables: `GET /jobs` reads a page of jobs' run items at once; an
    # API key is live while every key of its chain of creators exists, read in one batch
    # (`api_keys_store`), wherever a key is looked up.
    batch_reads: tuple[str, ...] = ()


ACCESS: dict[str, Access] = {
    # Public API: runs, apps, keys and idempotency records; large values; wakes runs up.
    "api": Access(
        tables={"runs": "read_write", "registry": "read_write"},
        deletes_runs=True,
        batch_reads=("runs", "registry"),
        payloads="read_write",
        send_to=("invocations",),
        token_secret=True,  # verifies the invocation tokens on step calls
        # Queues: create and delete them (with their DLQs), send, redrive.
        user_queues=(
            "sqs:CreateQueue",
            "sqs:DeleteQueue",
            "sqs:GetQueueAttributes",
            "sqs:GetQueueUrl",
            "sqs:SendMessage",
            "sqs:ReceiveMessage",
            "sqs:DeleteMessage",
        ),
        event_source_mappings=True,  # a subscription is a mapping to `deliver`
        # Cron schedules: create, update (pause/resume) and delete them.
        schedules=True,
        # Pull apps: a task queue per app, long-polled by its workers through the API.
        task_queues=(
            "sqs:CreateQueue",
            "sqs:DeleteQueue",
            "sqs:GetQueueUrl",
            "sqs:ReceiveMessage",
            "sqs:DeleteMessage",
            "sqs:SendMessage",
        ),
    ),
    # Step calls of invocations at its function URL: writes steps under the run's lease,
    # large step outputs to S3, and verifies the invocation tokens.
    "steps": Access(
        tables={"runs": "read_write"},
        payloads="read_write",
        token_secret=True,
    ),
    # The outbox: turns committed changes into invocation messages and timers (the stream is
    # granted by its event source). A run's end also resumes its parent and cancels its
    # children (service/waits.on_run_ended): it reads and writes runs, and reads a child's
    # large output from S3 to hand it to the parent.
    # A run item's removal (TTL, DeleteRun) deletes the rest of the run (service/retention):
    # BatchWriteItem on runs and its S3 payloads.
    "stream": Access(
        tables={"runs": "read_write"},
        deletes_runs=True,
        payloads="read_delete",
        send_to=("invocations", "notifications"),
        schedules=True,
    ),
    # Calls the app: reads apps, leases and updates runs, re-sends early timers.
    # A schedule's fire and an app's invoke of another app's workflow read the key they act
    # for; a fire that starts nothing records why on its schedule (`lastError`, UpdateItem).
    "invoker": Access(
        tables={"runs": "read_write", "registry": "read_update"},
        batch_reads=("registry", "runs"),
        payloads="read_write",
        send_to=("invocations",),
        schedules=True,
        token_secret=True,  # mints the invocation token it hands the app
        # Pull apps: queues a task on the app's task queue (created if missing).
        task_queues=("sqs:CreateQueue", "sqs:GetQueueUrl", "sqs:SendMessage"),
    ),
    # Subscriptions: polls the EZGH queues through its run-time mappings (so it needs the
    # consumer actions itself), starts runs (large inputs in S3), resumes waiting runs, and
    # records a subscription's last failure in the registry.
    "deliver": Access(
        tables={"runs": "read_write", "registry": "read_write"},
        batch_reads=("registry",),  # a flow subscription's delivery reads the key it acts for
        payloads="read_write",
        send_to=("invocations",),
        user_queues=(
            "sqs:ReceiveMessage",
            "sqs:DeleteMessage",
            "sqs:ChangeMessageVisibility",
            "sqs:GetQueueAttributes",
            "sqs:GetQueueUrl",
        ),
    ),
    # Run-ended notifications: reads apps and queues, keeps idempotency records (sealed with
    # the token secret), sends to the app's EZGH queue.
    "notify": Access(
        tables={"registry": "read_write"},
        user_queues=("sqs:SendMessage", "sqs:GetQueueAttributes", "sqs:GetQueueUrl"),
        token_secret=True,
    ),
    # EzFlow's interpreter (the engine's own push app): reads its job's run and steps, the
    # flows, commits, apps, queues and API keys of the job's project (a node acts for the
    # key that started its job, read again at each node); writes the job index and failed
    # items (runs table, in the job's partition) and `queue.send`'s idempotency records
    # (registry); derives its signing key from the token secret; sends `queue.send`'s
    # messages; invokes the sandbox (topology `SyncInvoke`, granted by the stack). Steps,
    # child runs and jobs, waits go through its step calls, as any app's.
    "flows": Access(
        tables={"runs": "read_write", "registry": "read_write"},
        batch_reads=("registry",),  # the key a node acts for
        token_secret=True,
        user_queues=("sqs:SendMessage",),
    ),
    # A flow's user-directed code (JMESPath, HTTP requests): nothing at all but its logs.
    "sandbox": Access(),
    # What runs do (service/observe.py): reads a run item for its trace's ID (its creation
    # time) when a batch has a recorded run's steps and not the run. Its stream is granted by
    # its event source, X-Ray's PutTraceSegments by the functions' active tracing.
    "observe": Access(tables={"runs": "read"}),
}
