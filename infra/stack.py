"""The EZGH Workflows stack: every resource generated from `ezgh_engine.topology`."""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any

from aws_cdk import ArnFormat, CfnElement, CfnOutput, Duration, Stack
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from constructs import Construct
from ezgh_engine import config
from ezgh_engine import topology as topology_module
from ezgh_engine.adapters import sqs_queues, task_queues
from ezgh_engine.adapters.event_sources import ENV_DELIVER_FUNCTION
from ezgh_engine.api.app import route_keys
from ezgh_engine.cli import teardown
from ezgh_engine.observability import traces
from ezgh_engine.service import pull
from ezgh_engine.topology import (
    API_FUNCTION,
    DELIVER_FUNCTION,
    FLOWS_FUNCTION,
    INVOCATIONS_QUEUE,
    RUNS_NARROW_INDEXES,
    RUNS_TABLE,
    STEPS_FUNCTION,
    TOPOLOGY,
    StreamSource,
    Table,
    Topology,
)

from infra.components.alarms import Alarms
from infra.components.api import Api, Throttle
from infra.components.dashboard import Dashboard
from infra.components.functions import Functions
from infra.components.payloads import Payloads
from infra.components.queues import Queues
from infra.components.scheduler import Scheduler
from infra.components.sources import EventSources
from infra.components.tables import Tables
from infra.components.token_secret import TokenSecret
from infra.nag import matching, suppress
from infra.permissions import ACCESS, INDEX_ACTIONS, TABLE_ACTIONS, Access

# SQS names are at most 80 characters: `<prefix>-q-<uuid>-dlq.fifo` leaves 32 for the prefix.
MAX_PREFIX = 80 - len(sqs_queues.QUEUE_INFIX) - 36 - len("-dlq.fifo")


def runtime_prefix(stack_name: str) -> str:
    """The prefix of the queues the engine creates at run time: the stack's name, so each
    stack's IAM covers its own queues only. Checked here, not when the first queue fails."""
    if not re.fullmatch(r"[A-Za-z0-9-]+", stack_name) or len(stack_name) > MAX_PREFIX:
        raise ValueError(
            f"stack name {stack_name!r} must be at most {MAX_PREFIX} letters, digits or '-': "
            "it prefixes the SQS queues the engine creates at run time"
        )
    return stack_name


# Reserved concurrency of the functions anyone on the internet can invoke: the steps function
# at its function URL (auth NONE: every request is an invocation, even one the handler then
# refuses for its token) and the api behind the HTTP API. Reserving caps each at its number,
# so a flood of requests cannot take the account's whole concurrency (1000 by default) and
# starve the stream, invoker, deliver and notify functions that move runs forward; it also
# guarantees the two their share. 0 removes a reservation (accounts whose concurrency quota
# is too low to reserve: Lambda keeps 100 unreserved). Context: ezgh:<key>Concurrency.
# The flows function (EzFlow's interpreter) is public too: a push app at its function URL.
# The functions' `LOG_LEVEL` (`-c ezgh:logLevel`): INFO writes a run's start, end,
# invocations and failures; DEBUG adds a line per completed step and wait.
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
PUBLIC_CONCURRENCY = {STEPS_FUNCTION.key: 200, API_FUNCTION.key: 100, FLOWS_FUNCTION.key: 100}


def declared_tables(tables: tuple[Table, ...], runs_indexes: int) -> tuple[Table, ...]:
    """The tables as this deploy declares them: the runs table with the first `runs_indexes`
    of its narrow indexes (CloudFormation creates at most one index per update, so an
    existing stack adds them one deploy at a time: docs/deploy.md)."""
    kept = RUNS_NARROW_INDEXES[:runs_indexes]
    return tuple(
        replace(t, indexes=tuple(i for i in t.indexes if i not in RUNS_NARROW_INDEXES or i in kept))
        for t in tables
    )


class EzghStack(Stack):
    """Tables, queues, bucket, scheduler, functions, their sources, the API and alarms.

    `code_dir` is the Lambda asset folder (infra/bundle.py builds it; tests pass a placeholder).
    The stack is environment-agnostic: account and region come from the CLI's credentials.
    """

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        code_dir: str,
        topology: Topology = TOPOLOGY,
        alarm_topic_arn: str | None = None,
        alarms: bool = True,
        reserved_concurrency: dict[str, int] | None = None,
        throttle: Throttle | None = None,
        key_rate_limit: int | None = None,
        trace_sample_rate: float = 0.0,
        metrics: bool = True,
        dashboard: bool = False,
        log_level: str = "INFO",
        runs_indexes: int = len(RUNS_NARROW_INDEXES),
        **kwargs: Any,
    ) -> None:
        super().__init__(scope, id, **kwargs)
        if log_level not in LOG_LEVELS:
            raise ValueError(
                f"ezgh:logLevel must be one of {', '.join(LOG_LEVELS)}, not {log_level}"
            )
        self.topology = topology
        self.prefix = runtime_prefix(self.stack_name)
        self.user_queue_prefix = sqs_queues.name_prefix(self.prefix)
        self.task_queue_prefix = task_queues.name_prefix(self.prefix)
        if not 0 <= runs_indexes <= len(RUNS_NARROW_INDEXES):
            raise ValueError(f"ezgh:runsIndexes must be from 0 to {len(RUNS_NARROW_INDEXES)}")
        self.runs_indexes = runs_indexes
        self.tables = Tables(self, "Tables", tables=declared_tables(topology.tables, runs_indexes))
        self.queues = Queues(self, "Queues", queues=topology.queues)
        self.payloads = Payloads(self, "Payloads")
        self.token_secret = TokenSecret(self, "TokenSecret")
        invocations = self.queues.by_key[INVOCATIONS_QUEUE.key]
        self.scheduler = Scheduler(self, "Scheduler", target=invocations)

        self.functions = Functions(
            self,
            "Functions",
            functions=topology.functions,
            code=lambda_.Code.from_asset(code_dir),
            environment=self._environment(),
            reserved=PUBLIC_CONCURRENCY if reserved_concurrency is None else reserved_concurrency,
            log_level=log_level,
        )
        api_function = self.functions.by_key[API_FUNCTION.key]
        self.api = Api(self, "Api", handler=api_function, routes=route_keys(), throttle=throttle)
        if key_rate_limit is not None:  # service/rate_limits.py; its default otherwise
            api_function.add_environment(config.ENV_KEY_RATE_LIMIT, str(key_rate_limit))
        # Subscriptions map queues to `deliver` at run time (adapters/event_sources.py).
        self.functions.by_key[API_FUNCTION.key].add_environment(
            ENV_DELIVER_FUNCTION, self.functions.by_key[DELIVER_FUNCTION.key].function_name
        )
        for key, function in self.functions.by_key.items():
            # Added after the API exists: the URL is a token built from the API's id, and the
            # API's integration references the function, so this order avoids a cycle.
            if not topology.function(key).sandboxed:
                function.add_environment(config.ENV_API_URL, self.api.url)
        self._observability(trace_sample_rate, metrics)
        self._consumers_update_first(topology)
        self.function_urls = self._function_urls()
        self.task_worker_role = self._task_worker_role()

        self.sources = EventSources(
            self,
            "Sources",
            specs=topology.sources,
            functions=self.functions.by_key,
            queues=self.queues.by_key,
            tables=self.tables.by_key,
        )
        self._grant_all()
        self._async_invokes()
        for recurring in topology.recurring:  # Scheduler's role may invoke it (above)
            target = self.functions.by_key[recurring.function]
            made = self.scheduler.add_recurring(recurring, target.function_arn)
            made.node.add_dependency(self.scheduler.role)
        self._sync_invokes()
        self._suppress_stream_dlqs()

        dlqs = {k.capitalize(): q for k, q in self.queues.dlq_by_key.items()}
        dlqs.update({f"{k.capitalize()}Stream": q for k, q in self.sources.stream_dlqs.items()})
        # A function that only shows the work (a stream reader that keeps no failure) gets
        # no alarm: its errors lose nothing, and each alarm bills $0.10 a month, idle or not.
        shows_only = {
            s.function
            for s in topology.sources
            if isinstance(s, StreamSource) and not s.keep_failed
        }
        functions = {
            k.capitalize(): f for k, f in self.functions.by_key.items() if k not in shows_only
        }
        if alarms:  # $0.10 a month each, the largest part of the idle cost (bench/idle.py)
            Alarms(self, "Alarms", dlqs=dlqs, functions=functions, topic_arn=alarm_topic_arn)
        if dashboard:  # $3 a month past an account's first three (bench/idle.py)
            Dashboard(
                self,
                "Dashboard",
                name=f"{self.prefix}-runs",
                service=self.prefix,
                queues=self.queues.by_key,
                functions=self.functions.by_key,
            )
        self._outputs()

    def _consumers_update_first(self, topology: Topology) -> None:
        """A function that invokes another asynchronously (the stream starting the invoker)
        is updated after it: the messages a new sender writes may be in a shape only the
        new receiver reads (a parallel step's branch message that creates its step), and
        CloudFormation updates a resource only after those it depends on (and rolls back in
        the reverse order), so no old receiver ever gets one."""
        for spec in topology.functions:
            if spec.async_invoke is None:
                continue
            receiver = self.functions.by_key[spec.key]
            for sender in spec.async_invoke.invoked_by:
                self.functions.by_key[sender].node.add_dependency(receiver)

    def _observability(self, trace_sample_rate: float, metrics: bool) -> None:
        """What the functions show of the runs (docs/deploy.md, "Seeing what runs do"): the
        share of runs whose trace goes to X-Ray (each trace is billed), and the EMF metrics
        (on unless `-c ezgh:metrics=false`)."""
        if not 0 <= trace_sample_rate <= 1:
            raise ValueError(f"ezgh:traceSampleRate must be from 0 to 1, not {trace_sample_rate}")
        for key, function in self.functions.by_key.items():
            if self.topology.function(key).sandboxed:
                continue
            if trace_sample_rate:
                function.add_environment(traces.ENV_SAMPLE_RATE, f"{trace_sample_rate:g}")
            if not metrics:
                function.add_environment("POWERTOOLS_METRICS_DISABLED", "true")

    def _task_worker_role(self) -> iam.Role:
        """The role whose sessions are pull workers' queue credentials.

        Only the api function may assume it (`service/pull.queue_access`), each time with a
        session policy naming one app's queue; the role itself allows receive and delete on
        this stack's task queues and nothing else. Workers long-poll with these credentials
        instead of waiting inside the api function.
        """
        api = self.functions.by_key[API_FUNCTION.key]
        assert api.role is not None
        role = iam.Role(
            self,
            "TaskWorkerRole",
            assumed_by=iam.ArnPrincipal(api.role.role_arn),
            # Role chaining (a Lambda role assuming this one) caps sessions at one hour.
            max_session_duration=Duration.hours(1),
            description="EZGH Workflows: pull workers receive and delete their app's tasks",
        )
        role.add_to_policy(
            iam.PolicyStatement(
                actions=list(pull.WORKER_QUEUE_ACTIONS),
                resources=[self.format_arn(service="sqs", resource=f"{self.task_queue_prefix}*")],
            )
        )
        role.grant_assume_role(api.role)
        api.add_environment(pull.ENV_TASK_WORKER_ROLE, role.role_arn)
        prefix = re.escape(self.task_queue_prefix)
        suppress(
            role,
            "IAM5",
            f"This stack's pull apps' task queues (sqs `{self.task_queue_prefix}*`): "
            "every session the api vends narrows it to one app's queue (a session policy).",
            applies_to=[matching(rf"^Resource::arn:<AWS::Partition>:sqs:.*:{prefix}\*$")],
            children=True,
        )
        return role

    def _function_urls(self) -> dict[str, lambda_.FunctionUrl]:
        """Function URLs of the functions the topology serves at one (the steps function, the
        flows function): auth NONE, as the handler verifies the invocation token or the
        request signature of every call. The spec's `url_readers` (default: every other
        function) find the URL in its `url_env_var` (not the function itself: that would be
        a cycle, and it never needs its own URL)."""
        urls: dict[str, lambda_.FunctionUrl] = {}
        for spec in self.topology.functions:
            if not spec.url_env_var:
                continue
            url = self.functions.by_key[spec.key].add_function_url(
                auth_type=lambda_.FunctionUrlAuthType.NONE
            )
            urls[spec.key] = url
            for key, function in self.functions.by_key.items():
                readers = spec.url_readers
                reads = readers is None and not self.topology.function(key).sandboxed
                if key != spec.key and (reads or (readers is not None and key in readers)):
                    function.add_environment(spec.url_env_var, url.url)
        return urls

    def _environment(self) -> dict[str, str]:
        """What `ezgh_engine.config.settings()` reads, for every function alike."""
        env = {t.env_var: self.tables.by_key[t.key].table_name for t in self.topology.tables}
        env.update({q.env_var: self.queues.by_key[q.key].queue_url for q in self.topology.queues})
        env[config.ENV_INVOCATIONS_QUEUE_ARN] = self.queues.by_key[INVOCATIONS_QUEUE.key].queue_arn
        env[self.topology.bucket_env_var] = self.payloads.bucket.bucket_name
        env[self.topology.scheduler_group_env_var] = self.scheduler.group_name
        env[self.topology.scheduler_role_env_var] = self.scheduler.role.role_arn
        # Handlers read the secret's value on first use (config.Settings.token_secret).
        env[config.ENV_TOKEN_SECRET_ARN] = self.token_secret.secret.secret_arn
        # Names of the queues the engine creates at run time, to which IAM is scoped.
        env[config.ENV_STACK_PREFIX] = self.prefix
        if self.runs_indexes < len(RUNS_NARROW_INDEXES):  # an upgrade part-way (deploy.md)
            env[config.ENV_LEGACY_RUNS_INDEX] = "1"
        return env

    def _grant_all(self) -> None:
        declared, deployed = set(ACCESS), {f.key for f in self.topology.functions}
        if declared != deployed:
            raise ValueError(
                f"infra/permissions.py ACCESS {sorted(declared)} must name exactly the "
                f"topology's functions {sorted(deployed)}"
            )
        for key, function in self.functions.by_key.items():
            self._grant(function, ACCESS[key])

    def _grant(self, function: lambda_.Function, access: Access) -> None:
        role = function.role
        assert role is not None  # Functions gives each function its own role
        wildcards: list[str] = []  # IAM5 findings this grant causes, each explained below
        for key, level in access.tables.items():
            table = self.tables.by_key[key]
            role.add_to_principal_policy(
                iam.PolicyStatement(actions=list(TABLE_ACTIONS[level]), resources=[table.table_arn])
            )
            role.add_to_principal_policy(
                iam.PolicyStatement(
                    actions=list(INDEX_ACTIONS), resources=[f"{table.table_arn}/index/*"]
                )
            )
            wildcards.append(rf"^Resource::<{self._logical_id(table)}\.Arn>/index/\*$")
        for key in access.batch_reads:
            role.add_to_principal_policy(
                iam.PolicyStatement(
                    actions=["dynamodb:BatchGetItem"],
                    resources=[self.tables.by_key[key].table_arn],
                )
            )
        if access.deletes_runs:
            runs = self.tables.by_key[RUNS_TABLE.key]
            role.add_to_principal_policy(
                iam.PolicyStatement(actions=["dynamodb:BatchWriteItem"], resources=[runs.table_arn])
            )
        if access.payloads:
            bucket = self.payloads.bucket
            # Exact actions rather than bucket.grant_read_write's wildcards. ListBucket lets a
            # missing key answer NoSuchKey instead of AccessDenied, and lists a run's payloads.
            actions = ["s3:GetObject"]
            if access.payloads in ("read_delete", "read_write"):
                actions += ["s3:DeleteObject"]
            if access.payloads == "read_write":
                actions += ["s3:PutObject"]
            role.add_to_principal_policy(
                iam.PolicyStatement(actions=actions, resources=[bucket.arn_for_objects("*")])
            )
            role.add_to_principal_policy(
                iam.PolicyStatement(actions=["s3:ListBucket"], resources=[bucket.bucket_arn])
            )
            wildcards.append(rf"^Resource::<{self._logical_id(bucket)}\.Arn>/\*$")
        for key in access.send_to:
            self.queues.by_key[key].grant(function, "sqs:SendMessage")
        if access.schedules:
            self.scheduler.grant_manage_schedules(function)
            group = re.escape(self.scheduler.group_name)
            wildcards.append(rf"^Resource::arn:<AWS::Partition>:scheduler:.*:schedule/{group}/\*$")
        if access.token_secret:
            self.token_secret.secret.grant_read(function)
        if access.user_queues:
            role.add_to_principal_policy(
                iam.PolicyStatement(
                    actions=list(access.user_queues),
                    resources=[
                        self.format_arn(service="sqs", resource=f"{self.user_queue_prefix}*")
                    ],
                )
            )
            prefix = re.escape(self.user_queue_prefix)
            wildcards.append(rf"^Resource::arn:<AWS::Partition>:sqs:.*:{prefix}\*$")
        if access.task_queues:  # one task queue per pull app
            role.add_to_principal_policy(
                iam.PolicyStatement(
                    actions=list(access.task_queues),
                    resources=[
                        self.format_arn(service="sqs", resource=f"{self.task_queue_prefix}*")
                    ],
                )
            )
            prefix = re.escape(self.task_queue_prefix)
            wildcards.append(rf"^Resource::arn:<AWS::Partition>:sqs:.*:{prefix}\*$")
        if access.event_source_mappings:
            self._grant_event_source_mappings(role, wildcards)
        if wildcards:
            suppress(
                role,
                "IAM5",
                "Scoped to this stack's own resources: a table's indexes (table/<name>/index/*, "
                "for GSI queries), objects in the payload bucket (keys are per run), and "
                "schedules in this stack's schedule group (one per long timer), the EZGH queues "
                f"users create at run time (sqs `{self.user_queue_prefix}*`), pull apps' "
                f"task queues (sqs `{self.task_queue_prefix}*`) and the `deliver` "
                "function's event source mappings (conditioned on its ARN).",
                applies_to=[matching(w) for w in wildcards],
                children=True,
            )

    def _async_invokes(self) -> None:
        """The functions invoked asynchronously (topology `AsyncInvoke`): their
        event queue's retries and on-failure queue, `lambda:InvokeFunction` for the functions
        that invoke them (with the ARN in their environment) and for Scheduler's role (long
        timers and cron fires target the function); the ARN alone for the functions that make
        those schedules (`targeted_by`)."""
        for spec in self.topology.functions:
            if spec.async_invoke is None:
                continue
            invoke = spec.async_invoke
            function = self.functions.by_key[spec.key]
            on_failure = self.queues.by_key[invoke.on_failure]
            config_ = lambda_.CfnEventInvokeConfig(
                self,
                f"{spec.key.capitalize()}AsyncInvoke",
                function_name=function.function_name,
                qualifier="$LATEST",
                maximum_retry_attempts=invoke.retry_attempts,
                maximum_event_age_in_seconds=invoke.max_event_age_seconds,
                destination_config=lambda_.CfnEventInvokeConfig.DestinationConfigProperty(
                    on_failure=lambda_.CfnEventInvokeConfig.OnFailureProperty(
                        destination=on_failure.queue_arn
                    )
                ),
            )
            # Lambda sends the on-failure record with the function's role: its grant to send
            # to that queue (permissions.py `send_to`) must exist before the config.
            if invoke.on_failure not in ACCESS[spec.key].send_to:
                raise ValueError(
                    f"{spec.key}: its on-failure queue {invoke.on_failure!r} must be in its "
                    "send_to (Lambda sends the record with the function's role)"
                )
            role = function.role
            assert role is not None
            config_.node.add_dependency(role)
            statement = iam.PolicyStatement(
                actions=["lambda:InvokeFunction"], resources=[function.function_arn]
            )
            self.scheduler.role.add_to_policy(statement)
            for key in invoke.invoked_by:
                caller = self.functions.by_key[key]
                caller.add_to_role_policy(statement)
                caller.add_environment(invoke.env_var, function.function_arn)
            for key in invoke.targeted_by:  # schedules' target: the ARN, no grant
                if key not in invoke.invoked_by:
                    self.functions.by_key[key].add_environment(
                        invoke.env_var, function.function_arn
                    )

    def _sync_invokes(self) -> None:
        """The functions called synchronously (topology `SyncInvoke`): `lambda:InvokeFunction`
        on it for exactly the functions that call it, with its ARN in their environment."""
        for spec in self.topology.functions:
            if spec.sync_invoke is None:
                continue
            function = self.functions.by_key[spec.key]
            statement = iam.PolicyStatement(
                actions=["lambda:InvokeFunction"], resources=[function.function_arn]
            )
            for key in spec.sync_invoke.invoked_by:
                caller = self.functions.by_key[key]
                caller.add_to_role_policy(statement)
                caller.add_environment(spec.sync_invoke.env_var, function.function_arn)

    def _grant_event_source_mappings(self, role: iam.IRole, wildcards: list[str]) -> None:
        """Manage mappings of the `deliver` function only (IAM's `lambda:FunctionArn` key).

        CreateEventSourceMapping takes no resource ARN, so its resource is "*" under the
        condition; the others act on `event-source-mapping:<uuid>` ARNs.
        """
        deliver = self.functions.by_key[DELIVER_FUNCTION.key]
        condition = {"ArnLike": {"lambda:FunctionArn": deliver.function_arn}}
        role.add_to_principal_policy(
            iam.PolicyStatement(
                actions=["lambda:CreateEventSourceMapping"], resources=["*"], conditions=condition
            )
        )
        role.add_to_principal_policy(
            iam.PolicyStatement(
                actions=[
                    "lambda:UpdateEventSourceMapping",
                    "lambda:DeleteEventSourceMapping",
                    "lambda:GetEventSourceMapping",
                ],
                resources=[
                    self.format_arn(
                        service="lambda",
                        resource="event-source-mapping",
                        resource_name="*",
                        arn_format=ArnFormat.COLON_RESOURCE_NAME,
                    )
                ],
                conditions=condition,
            )
        )
        wildcards.append(r"^Resource::arn:<AWS::Partition>:lambda:.*:event-source-mapping:\*$")

    def _logical_id(self, construct: Construct) -> str:
        """The CloudFormation logical id of an L2 construct's resource (as cdk-nag names it)."""
        resource = construct.node.default_child
        assert isinstance(resource, CfnElement)
        return re.escape(self.get_logical_id(resource))

    def _suppress_stream_dlqs(self) -> None:
        for dlq in self.sources.stream_dlqs.values():
            suppress(
                dlq,
                "SQS3",
                "This queue is itself a dead-letter destination: the on-failure target of a "
                "DynamoDB stream event source mapping, which cdk-nag does not recognise.",
            )

    def _outputs(self) -> None:
        CfnOutput(
            self,
            topology_module.API_URL_OUTPUT,
            value=self.api.url,
            description="The engine's API base URL",
        )
        for spec in self.topology.tables:
            CfnOutput(
                self,
                topology_module.table_output(spec),
                value=self.tables.by_key[spec.key].table_name,
                description=f"set {spec.env_var} to this to run `ezgh` against the deployment",
            )
        for queue in self.topology.queues:
            CfnOutput(
                self,
                topology_module.queue_output(queue),
                value=self.queues.by_key[queue.key].queue_url,
                description=f"set {queue.env_var} to this to run `ezgh` against the deployment",
            )
        for key, url in self.function_urls.items():
            CfnOutput(
                self,
                topology_module.STEPS_URL_OUTPUT if key == "steps" else f"{key.capitalize()}Url",
                value=url.url,
                description=f"the {key} function's URL"
                + (" (SDK step calls)" if key == "steps" else " (EzFlow's interpreter app)"),
            )
        # `ezgh ops teardown --stack` finds the queues and mappings made at run time by these.
        CfnOutput(self, teardown.PREFIX_OUTPUT, value=self.prefix)
        CfnOutput(
            self,
            teardown.DELIVER_OUTPUT,
            value=self.functions.by_key[DELIVER_FUNCTION.key].function_name,
        )
        CfnOutput(self, topology_module.BUCKET_OUTPUT, value=self.payloads.bucket.bucket_name)
        CfnOutput(
            self, topology_module.TOKEN_SECRET_OUTPUT, value=self.token_secret.secret.secret_arn
        )
