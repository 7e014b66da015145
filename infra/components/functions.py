"""Lambda functions, one per `topology.Function`, all from one code asset."""

from __future__ import annotations

from collections.abc import Mapping

from aws_cdk import Duration, RemovalPolicy
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from constructs import Construct
from ezgh_engine.topology import Function

from infra.nag import suppress

# The bundle's wheels are built for this runtime and architecture (see infra/bundle.py).
RUNTIME = lambda_.Runtime.PYTHON_3_12
ARCHITECTURE = lambda_.Architecture.ARM_64
LOG_RETENTION = logs.RetentionDays.ONE_MONTH


def lambda_handler(spec: Function) -> str:
    """Topology's "pkg.module:function" as Lambda wants it: "pkg.module.function"."""
    module, _, attr = spec.handler.partition(":")
    if not module or not attr:
        raise ValueError(f"handler {spec.handler!r} of {spec.key!r} is not 'module:function'")
    return f"{module}.{attr}"


class Functions(Construct):
    """`self.by_key` maps a topology function key to its Lambda function.

    Each function has its own role (so grants stay per function) and its own log group with a
    retention, instead of the AWS managed basic-execution policy, which allows every log group.
    """

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        functions: tuple[Function, ...],
        code: lambda_.Code,
        environment: Mapping[str, str],
        log_level: str = "INFO",
        reserved: Mapping[str, int] | None = None,
    ) -> None:
        super().__init__(scope, id)
        self.by_key: dict[str, lambda_.Function] = {}
        reserved = reserved or {}
        for spec in functions:
            self.by_key[spec.key] = self._function(
                spec, code, environment, log_level, reserved.get(spec.key)
            )

    def _function(
        self,
        spec: Function,
        code: lambda_.Code,
        environment: Mapping[str, str],
        log_level: str,
        reserved: int | None,
    ) -> lambda_.Function:
        name = spec.key.capitalize()
        log_group = logs.LogGroup(
            self, f"{name}Logs", retention=LOG_RETENTION, removal_policy=RemovalPolicy.DESTROY
        )
        role = iam.Role(
            self,
            f"{name}Role",
            assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"),
            description=f"EZGH Workflows {spec.key} function",
        )
        log_group.grant_write(role)
        function = lambda_.Function(
            self,
            name,
            runtime=RUNTIME,
            architecture=ARCHITECTURE,
            code=code,
            handler=lambda_handler(spec),
            timeout=Duration.seconds(spec.timeout_seconds),
            memory_size=spec.memory_mb,
            role=role,
            log_group=log_group,
            tracing=lambda_.Tracing.ACTIVE,
            # The public entry points' cap (and guarantee): see PUBLIC_CONCURRENCY in stack.py.
            reserved_concurrent_executions=reserved or None,
            # No vpc: outside a VPC there is no NAT gateway, so idle cost stays zero.
            # A sandboxed function (a flow's user-directed code) gets none of the engine's
            # configuration: no table, queue or secret is named in its reach.
            environment={
                **({} if spec.sandboxed else environment),
                "POWERTOOLS_SERVICE_NAME": f"ezgh-{spec.key}",
                "POWERTOOLS_METRICS_NAMESPACE": "EZGH",
                "LOG_LEVEL": log_level,
            },
            description=f"EZGH Workflows {spec.key} ({spec.handler})",
        )
        suppress(
            function,
            "L1",
            "Pinned to Python 3.12 on purpose: the bundle's compiled wheels (pydantic-core) are "
            "built for cp312/aarch64 (infra/bundle.py); move the runtime and the bundle together.",
        )
        suppress(
            role,
            "IAM5",
            "Only for actions that take no resource ARN: X-Ray PutTraceSegments and "
            "PutTelemetryRecords (active tracing), on the stream function DynamoDB "
            "ListStreams (stream event source), and on the api lambda:CreateEventSourceMapping "
            "under a lambda:FunctionArn condition naming the deliver function. tests/infra "
            "asserts no other '*'.",
            applies_to=["Resource::*"],
            children=True,
        )
        return function
