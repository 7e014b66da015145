"""The one declaration of the engine's shape.

Tables, queues, the payload bucket, the scheduler group, the Lambda functions and which event
source feeds which handler are declared here once. `infra/` turns this into CDK constructs; the
local runtime (`ezgh dev`, the tests) turns it into moto resources and pollers. Nothing is wired
twice.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from ezgh_engine.core.leases import NO_LEASE
from ezgh_engine.core.messages import GROUP_MAX_MESSAGES


@dataclass(frozen=True)
class Index:
    """A global secondary index: its key attributes and what it copies (`projection` "ALL":
    every attribute; "INCLUDE": its keys, the table's and `non_key_attributes`).

    DynamoDB writes an index entry when a write adds, removes or changes the item's entry:
    its key or a projected attribute (`writes`); a write that changes nothing projected
    costs the index nothing. Projecting less keeps hot updates (leases, heartbeats) free."""

    name: str
    partition_key: str
    sort_key: str
    projection: Literal["ALL", "INCLUDE"] = "ALL"
    non_key_attributes: tuple[str, ...] = ()

    def entry(self, item: dict[str, Any] | None) -> dict[str, Any] | None:
        """The index entry of an item (plain values), or None when it has none (sparse)."""
        if not item or self.partition_key not in item or self.sort_key not in item:
            return None
        if self.projection == "ALL":
            return dict(item)
        keep = {"pk", "sk", self.partition_key, self.sort_key, *self.non_key_attributes}
        return {k: v for k, v in item.items() if k in keep}

    def writes(self, old: dict[str, Any] | None, new: dict[str, Any] | None) -> int:
        """How many index writes a change of an item from `old` to `new` costs: 0 when its
        entry is the same, 2 when its index key changed (a delete and a put), else 1."""
        before, after = self.entry(old), self.entry(new)
        if before == after:
            return 0
        if before is not None and after is not None:
            moved = any(before[k] != after[k] for k in (self.partition_key, self.sort_key))
            return 2 if moved else 1
        return 1


@dataclass(frozen=True)
class Table:
    """A DynamoDB table with string keys `pk` and `sk`."""

    key: str  # logical name, also the suffix of the physical name
    env_var: str  # where handlers find the physical name
    stream: bool = False
    indexes: tuple[Index, ...] = ()
    ttl_attribute: str = "ttl"


# SQS's longest message retention (its default is 4 days): every queue of the engine, its
# dead-letter queues and every EZGH queue keep a backlog this long.
SQS_MAX_RETENTION_SECONDS = 14 * 24 * 3600


@dataclass(frozen=True)
class Queue:
    key: str
    env_var: str  # holds the queue URL
    visibility_timeout_seconds: int = 60
    max_receive_count: int = 10
    retention_seconds: int = SQS_MAX_RETENTION_SECONDS


@dataclass(frozen=True)
class AsyncInvoke:
    """A function other functions invoke asynchronously (`lambda:InvokeFunction`,
    `InvocationType=Event`), and Scheduler targets directly: Lambda's event queue for it.

    A function error (the handler raised, its environment died, it ran past its timeout) is
    retried `retry_attempts` times (Lambda waits 1 then 2 minutes); an event that still fails,
    or that waited longer than `max_event_age_seconds` (throttled), goes to the queue
    `on_failure` as an invocation record (its `requestPayload` is the event). infra sets this
    as the function's EventInvokeConfig; the local runtime plays it (`local.lambda_async`).
    """

    on_failure: str  # a topology queue key
    retry_attempts: int = 2  # Lambda's 0-2
    max_event_age_seconds: int = 6 * 3600  # Lambda's 60 s to 6 hours
    # Who may invoke it this way (their roles get `lambda:InvokeFunction` on it, and its ARN
    # in `env_var`). Not the function itself: its own ARN in its environment is a cycle.
    invoked_by: tuple[str, ...] = ()
    env_var: str = "EZGH_INVOKER_FUNCTION_ARN"
    # Who makes Scheduler schedules that target it (their roles get only its ARN in `env_var`:
    # Scheduler's role invokes it, not theirs).
    targeted_by: tuple[str, ...] = ()


@dataclass(frozen=True)
class SyncInvoke:
    """A function other functions call synchronously (`lambda:InvokeFunction`,
    `InvocationType=RequestResponse`) and wait for its answer: no URL, so nothing but the
    roles of `invoked_by` (given `lambda:InvokeFunction` on it, and its ARN in `env_var`)
    can reach it. The local runtime's Lambda API answers these calls too
    (`local.lambda_async`)."""

    invoked_by: tuple[str, ...]
    env_var: str


@dataclass(frozen=True)
class Function:
    key: str
    handler: str  # dotted path "module:function", importable in the Lambda bundle and locally
    timeout_seconds: int = 30
    memory_mb: int = 512
    # Served at a Lambda function URL of its own (auth NONE: the handler checks its tokens
    # or signatures before anything else),
    # whose base URL handlers find in `url_env_var`.
    url_env_var: str | None = None
    # The functions given that URL (None: every other function). Deployed, a function that
    # reads another's URL depends on it, so two functions reading each other's would be a
    # cycle: the flows function's URL goes only where a job can start.
    url_readers: tuple[str, ...] | None = None
    # The local runtime's cap on this function's execution environments (child processes,
    # one request each at a time, made on demand): how many calls of it may run at once
    # under `ezgh dev` (Lambda's concurrency, scaled to one machine). More wait for one.
    local_concurrency: int = 4
    # Invoked asynchronously too (the stream starts runs, Scheduler fires long timers): see
    # `AsyncInvoke`. None: only its event sources and URL call it.
    async_invoke: AsyncInvoke | None = None
    # Called synchronously by other functions (see `SyncInvoke`). None: it is not.
    sync_invoke: SyncInvoke | None = None
    # Runs code a user directs (a flow's expressions and HTTP calls): it gets none of the
    # engine's configuration (tables, queues, bucket, the token secret, other functions'
    # URLs and ARNs), only `SANDBOX_ENV`, and its role grants nothing but its logs.
    sandboxed: bool = False


@dataclass(frozen=True)
class SqsSource:
    """An SQS event source mapping: `queue` feeds `function`."""

    queue: str
    function: str
    batch_size: int = 10
    kind: Literal["sqs"] = "sqs"


@dataclass(frozen=True)
class Match:
    """A stream filter's test of one attribute of the new image: its DynamoDB `type` ("S",
    "N" or "BOOL") and the values it may hold (as DynamoDB writes them: "0" for the number
    0, True for a true BOOL)."""

    name: str
    values: tuple[str | bool, ...]
    type: Literal["S", "N", "BOOL"] = "S"


@dataclass(frozen=True)
class StreamSource:
    """A DynamoDB stream event source mapping: `table`'s stream feeds `function`.

    With `filters`, only inserts and modifications whose new image passes every `Match` of
    one of them reach the function (Lambda FilterCriteria in AWS, the same test in the local
    poller), and, with `removals`, removals whose old image passes every `Match` of it.
    Everything else (events, index items, leases taken, steps merely running or done, other
    removals) would only cost an invocation each.
    """

    table: str
    function: str
    batch_size: int = 100
    filters: tuple[tuple[Match, ...], ...] = ()
    removals: tuple[Match, ...] = ()
    kind: Literal["stream"] = "stream"
    # Lambda's `MaximumBatchingWindowInSeconds`: how long the mapping gathers records before
    # it invokes (0: at once). The local reader invokes at once whatever this says.
    batching_window_seconds: int = 0
    # Records the handler keeps failing on go to a dead-letter queue (retried, then kept for
    # an operator). False: a reader that never fails its batch (showing the work, not doing
    # it) gets neither retries nor a queue, nor its alarm's cost.
    keep_failed: bool = True

    def filter_patterns(self) -> list[dict[str, Any]]:
        """The Lambda event filter patterns (any one passes); empty to deliver everything."""
        patterns: list[dict[str, Any]] = [
            {"eventName": ["INSERT", "MODIFY"], "dynamodb": {"NewImage": _image_pattern(f)}}
            for f in self.filters
        ]
        if self.removals:
            patterns.append(
                {"eventName": ["REMOVE"], "dynamodb": {"OldImage": _image_pattern(self.removals)}}
            )
        return patterns

    def matches(self, record: dict[str, Any]) -> bool:
        """Whether a stream record passes `filter_patterns` (for the local poller)."""
        if not self.filters and not self.removals:
            return True
        change = record.get("dynamodb") or {}
        if record.get("eventName") == "REMOVE":
            return bool(self.removals) and _passes(change.get("OldImage") or {}, self.removals)
        if record.get("eventName") not in ("INSERT", "MODIFY"):
            return False
        return any(_passes(change.get("NewImage") or {}, f) for f in self.filters)


def _image_pattern(matches: tuple[Match, ...]) -> dict[str, Any]:
    return {m.name: {m.type: list(m.values)} for m in matches}


def _passes(image: dict[str, Any], matches: tuple[Match, ...]) -> bool:
    return all((image.get(m.name) or {}).get(m.type) in m.values for m in matches)


@dataclass(frozen=True)
class Recurring:
    """A schedule of the stack itself (none of a user's): EventBridge Scheduler fires
    `function` asynchronously with `message` (a `core.messages` body, JSON) at every
    occurrence of `expression`, in the timers' schedule group. infra makes it a
    `AWS::Scheduler::Schedule`; the local runtime creates it in its emulated Scheduler."""

    name: str
    expression: str  # Scheduler's `cron(...)`, UTC
    function: str  # a topology function with `async_invoke` (Scheduler's role may invoke it)
    message: str


@dataclass(frozen=True)
class Topology:
    tables: tuple[Table, ...]
    queues: tuple[Queue, ...]
    functions: tuple[Function, ...]
    sources: tuple[SqsSource | StreamSource, ...]
    recurring: tuple[Recurring, ...] = ()
    bucket_env_var: str = "EZGH_PAYLOAD_BUCKET"
    scheduler_group_env_var: str = "EZGH_SCHEDULER_GROUP"
    scheduler_role_env_var: str = "EZGH_SCHEDULER_ROLE_ARN"
    extra_env: tuple[str, ...] = field(default=())

    def table(self, key: str) -> Table:
        return next(t for t in self.tables if t.key == key)

    def queue(self, key: str) -> Queue:
        return next(q for q in self.queues if q.key == key)

    def function(self, key: str) -> Function:
        return next(f for f in self.functions if f.key == key)


# The runs table's indexes (docs/architecture.md, "The runs indexes"). `gsi1` copies whole
# items: flows' job and failed-item entries, and runs written before the narrow indexes
# (read as one more shard until they are moved or gone). The runs' own indexes are narrow
# and write-sharded: each run is listed under `RUNS_INDEX_SHARDS` keys per project chosen
# by its ID, all sorted by `<createdAt>#<runId>` (`RUNS_SORT_KEY`), and each copies only
# what a list filters on, so no lease, heartbeat or outcome write touches them; only the
# status index's entry moves when the status does. Their order is the order an existing
# stack creates them in (one per deploy: docs/deploy.md).
RUNS_INDEX_SHARDS = 8
RUNS_SORT_KEY = "rSort"
_LISTED = ("appId", "appName", "workflow")
RUNS_LEGACY_INDEX = Index("gsi1", "gsi1pk", "gsi1sk")
RUNS_INDEX = Index("runs", "rAll", RUNS_SORT_KEY, "INCLUDE", _LISTED)
RUNS_BY_STATUS = Index("runsByStatus", "rStatus", RUNS_SORT_KEY, "INCLUDE", (*_LISTED, "status"))
RUNS_BY_WORKFLOW = Index("runsByWorkflow", "rWf", RUNS_SORT_KEY, "INCLUDE", _LISTED)
RUNS_BY_APP = Index("runsByApp", "rApp", RUNS_SORT_KEY, "INCLUDE", _LISTED)
RUNS_NARROW_INDEXES = (RUNS_INDEX, RUNS_BY_STATUS, RUNS_BY_WORKFLOW, RUNS_BY_APP)

RUNS_TABLE = Table(
    key="runs",
    env_var="EZGH_RUNS_TABLE",
    stream=True,
    indexes=(RUNS_LEGACY_INDEX, *RUNS_NARROW_INDEXES),
)
REGISTRY_TABLE = Table(
    key="registry",
    env_var="EZGH_REGISTRY_TABLE",
    indexes=(Index("gsi1", "gsi1pk", "gsi1sk"),),
)

INVOCATIONS_QUEUE = Queue(
    key="invocations",
    env_var="EZGH_INVOCATIONS_QUEUE_URL",
    # Longer than the invoker's timeout, so a message is not redelivered while an invocation
    # is still in flight; a crashed invoker's message comes back after this.
    visibility_timeout_seconds=960,
    max_receive_count=100,
)

# Queues: run-ended notifications wait here while the `notify` function sends them to
# the app's queue; failures come back after a growing visibility timeout, for up to 24 hours.
NOTIFICATIONS_QUEUE = Queue(
    key="notifications",
    env_var="EZGH_NOTIFICATIONS_QUEUE_URL",
    visibility_timeout_seconds=60,
    max_receive_count=1000,  # SQS's maximum; the handler itself drops after 24 hours
)

# api and steps: enough environments for concurrent requests, long polls (`tasks/poll`
# waits up to 20 s inside api) and an app's parallel step calls.
API_FUNCTION = Function(
    "api", "functions.api.handler:handler", timeout_seconds=29, local_concurrency=16
)
# The step calls of invocations (`POST /v1/invocations/steps`, docs/protocol.md section 2),
# the engine's most frequent request: at a function URL, not through the HTTP API, so a step
# pays no API Gateway request fee. It answers nothing else.
STEPS_FUNCTION = Function(
    "steps",
    "functions.steps.handler:handler",
    timeout_seconds=29,
    memory_mb=512,
    url_env_var="EZGH_STEPS_URL",
    local_concurrency=16,
)
STREAM_FUNCTION = Function("stream", "functions.stream.handler:handler", timeout_seconds=60)
# An invocation spends its time waiting on the app (the workflow runs there, and its step
# calls go to `steps`), not on a CPU. The local SQS poller takes as many batches at once as
# this allows (as Lambda's SQS mapping scales the function up to its concurrency); more did
# not help on a 2-core machine (docs/benchmarks.md, throughput), where the runtime process's
# own CPU is the limit.
#
# The stream starts an invocation with an asynchronous invoke of this function (no SQS
# message: 3 requests fewer per start), and Scheduler's long timers and cron fires target it
# directly; what needs a delay (short timers, backoffs, held messages, task watches) still goes through the
# invocations queue, which is also where Lambda puts an event it gave up on.
#
# One environment makes up to `GROUP_MAX_MESSAGES` (10) pushes at once, each on a thread of
# its own: the stream hands it the starts of a batch of records as one event (a group), and
# its queue mapping hands it batches of as many (service/invocation_queue.py). So its
# concurrency is a tenth of the pushes in flight under load, not one per run
# (docs/architecture.md, "The invoker"). Its timeout is still the invoke timeout's margin:
# a group's pushes run side by side, not one after another. 256 MB holds ten at once: the
# runtime's ~90 MB, and per push its request (at most 768 KB from protocol 1.5) and its
# answer (a Lambda app's at most 6 MB, parsed one at a time when over 1 MiB: a valid one
# takes about 25 MB then, `adapters.push`): under 200 MB at worst. More memory only buys
# CPU: a group's own work (about 30 ms of a vCPU per push) is spread over its pushes.
INVOKER_FUNCTION = Function(
    "invoker",
    "functions.invoker.handler:handler",
    timeout_seconds=900,
    memory_mb=256,
    local_concurrency=8,
    # The api makes the cron schedules, which fire the invoker directly (no SQS request per fire).
    async_invoke=AsyncInvoke(
        on_failure="invocations", invoked_by=("stream",), targeted_by=("api",)
    ),
)

# Delivers EZGH queue messages to subscriptions. Its event source mappings (one per
# subscription) are made at run time by the api through `adapters.event_sources`.
# Its timeout must not exceed a subscribed queue's visibility timeout (Lambda refuses the
# mapping otherwise): 30 s, the queues' default visibility timeout.
DELIVER_FUNCTION = Function(
    "deliver", "functions.deliver.handler:handler", timeout_seconds=30, local_concurrency=8
)
NOTIFY_FUNCTION = Function("notify", "functions.notify.handler:handler", timeout_seconds=30)
# EzFlow's graph interpreter: the engine's own push app (workflow `flow`, written with our
# SDK) in every project, served at a function URL of its own like any push app's Lambda;
# its handler refuses every request the engine did not sign before doing anything else.
# The engine's app for it has no record (service/flow_hosting.py): the invoker finds it
# by this URL. Its timeout is the invoker's wait for a push app
# (config.invoke_timeout_seconds).
FLOWS_FUNCTION = Function(
    "flows",
    "functions.flows.handler:handler",
    timeout_seconds=300,
    memory_mb=512,
    url_env_var="EZGH_FLOWS_URL",
    # Who calls it: the invoker (a job's invocations and its parallel branches).
    url_readers=("invoker",),
    local_concurrency=8,
)

# Every run ends by its one-year limit: this hourly sweep ends the runs past it
# (service/year_limits.py), so no run holds a schedule of its own for it. Minute 7, not 0,
# away from the top of the hour, where cron schedules bunch.
YEAR_LIMIT_SWEEP = Recurring(
    name="year-limits",
    expression="cron(7 * * * ? *)",
    function="invoker",
    message='{"type":"year-limit-sweep","scheduledTime":"<aws.scheduler.scheduled-time>"}',
)

# What runs do, as metrics, log lines and trace segments (service/observe.py): the second
# reader of the runs table's stream, beside the outbox, so that showing the work never holds
# it and the outbox's filter stays narrow.
OBSERVE_FUNCTION = Function(
    "observe", "functions.observe.handler:handler", timeout_seconds=60, memory_mb=256
)

# A flow's user-directed code (JMESPath, `http.request`): the flows function calls it for
# each node that renders a template, computes an expression or sends a request
# (`adapters.sandbox`, `interpreter/usercode.py`). Sandboxed: neither the token secret nor
# a table is within its reach. Its timeout covers `http.request`'s longest (60 s).
SANDBOX_FUNCTION = Function(
    "sandbox",
    "functions.sandbox.handler:handler",
    timeout_seconds=75,
    memory_mb=256,
    local_concurrency=8,
    sync_invoke=SyncInvoke(invoked_by=("flows",), env_var="EZGH_SANDBOX_FUNCTION_ARN"),
    sandboxed=True,
)
# The only engine variables a sandboxed function gets (besides the runtime's `AWS_*` and
# `POWERTOOLS_*`): whether loopback and private hosts are allowed (`ezgh dev`).
SANDBOX_ENV = ("EZGH_ALLOW_LOOPBACK_APPS",)

# The observe function's reading of the runs stream: every run and step item's change (not
# events, index items or removals), gathered for up to 30 s, so a busy stack pays one
# invocation for up to 1,000 changes (metrics are per minute anyway). DynamoDB Streams
# serves two readers of a shard at once: this one and the outbox.
OBSERVE_SOURCE = StreamSource(
    table="runs",
    function="observe",
    batch_size=1000,
    filters=((Match("type", ("run",)),), (Match("type", ("step",)),)),
    batching_window_seconds=30,
    keep_failed=False,
)

TOPOLOGY = Topology(
    tables=(RUNS_TABLE, REGISTRY_TABLE),
    queues=(INVOCATIONS_QUEUE, NOTIFICATIONS_QUEUE),
    functions=(
        API_FUNCTION,
        STEPS_FUNCTION,
        STREAM_FUNCTION,
        INVOKER_FUNCTION,
        DELIVER_FUNCTION,
        NOTIFY_FUNCTION,
        FLOWS_FUNCTION,
        SANDBOX_FUNCTION,
        OBSERVE_FUNCTION,
    ),
    sources=(
        # What service/stream.py reacts to: run items without a lease, steps that start to
        # wait (timers, branches) and parallel steps that end (their run is asked for its
        # next invocation). Events, index items and other steps running or done don't.
        StreamSource(
            table="runs",
            function="stream",
            filters=(
                # Not while an invocation holds the lease (taking it, backing off, a timer
                # that wakes a step and invokes at once): what it owes is sent when it ends.
                (Match("type", ("run",)), Match("leaseUntil", (str(NO_LEASE),), "N")),
                (Match("type", ("step",)), Match("status", ("sleeping", "retrying", "waiting"))),
                (
                    Match("type", ("step",)),
                    Match("branch", (True,), "BOOL"),
                    Match("status", ("completed", "failed", "cancelled")),
                ),
            ),
            # A run item's removal (its TTL, or DeleteRun): the rest of the run goes with it
            # (service/retention.py).
            removals=(Match("type", ("run",)),),
        ),
        # As many as one group (handled at once: service/invocation_queue.py).
        SqsSource(queue="invocations", function="invoker", batch_size=GROUP_MAX_MESSAGES),
        SqsSource(queue="notifications", function="notify", batch_size=1),
        OBSERVE_SOURCE,
    ),
    recurring=(YEAR_LIMIT_SWEEP,),
)


def table_output(table: Table) -> str:
    """The stack output naming a table's physical name (infra writes it, `ezgh bootstrap`
    reads it)."""
    return f"{table.key.capitalize()}TableName"


def queue_output(queue: Queue) -> str:
    """The stack output naming a queue's URL."""
    return f"{queue.key.capitalize()}QueueUrl"


API_URL_OUTPUT = "ApiUrl"
STEPS_URL_OUTPUT = "StepsUrl"
BUCKET_OUTPUT = "PayloadBucketName"
TOKEN_SECRET_OUTPUT = "TokenSecretArn"
