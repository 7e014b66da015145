"""DynamoDB tables, one per `topology.Table`."""

from __future__ import annotations

from aws_cdk import RemovalPolicy
from aws_cdk import aws_dynamodb as dynamodb
from constructs import Construct
from ezgh_engine.topology import Table

_STRING = dynamodb.AttributeType.STRING


class Tables(Construct):
    """The engine's tables: on demand, PITR on, retained when the stack is deleted.

    `self.by_key` maps a topology table key ("runs") to its CDK table.
    """

    def __init__(self, scope: Construct, id: str, *, tables: tuple[Table, ...]) -> None:
        super().__init__(scope, id)
        self.by_key: dict[str, dynamodb.Table] = {t.key: self._table(t) for t in tables}

    def _table(self, spec: Table) -> dynamodb.Table:
        table = dynamodb.Table(
            self,
            spec.key.capitalize(),
            partition_key=dynamodb.Attribute(name="pk", type=_STRING),
            sort_key=dynamodb.Attribute(name="sk", type=_STRING),
            # On demand: nothing bills while idle but storage, and bursts need no tuning.
            billing_mode=dynamodb.BillingMode.PAY_PER_REQUEST,
            # The stream is the engine's outbox; the handler needs both images.
            stream=dynamodb.StreamViewType.NEW_AND_OLD_IMAGES if spec.stream else None,
            time_to_live_attribute=spec.ttl_attribute,
            point_in_time_recovery_specification=dynamodb.PointInTimeRecoverySpecification(
                point_in_time_recovery_enabled=True
            ),
            # Runs are durable (some last a year): deleting the stack must never delete them.
            removal_policy=RemovalPolicy.RETAIN,
        )
        for index in spec.indexes:
            narrow = index.projection == "INCLUDE"
            table.add_global_secondary_index(
                index_name=index.name,
                partition_key=dynamodb.Attribute(name=index.partition_key, type=_STRING),
                sort_key=dynamodb.Attribute(name=index.sort_key, type=_STRING),
                # Narrow indexes copy only what they list (topology.Index): a write that
                # changes nothing they hold writes no index entry.
                projection_type=(
                    dynamodb.ProjectionType.INCLUDE if narrow else dynamodb.ProjectionType.ALL
                ),
                non_key_attributes=list(index.non_key_attributes) if narrow else None,
            )
        return table
