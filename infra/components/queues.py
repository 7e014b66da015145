"""SQS queues, one per `topology.Queue`, each with its own dead-letter queue."""

from __future__ import annotations

from aws_cdk import Duration
from aws_cdk import aws_sqs as sqs
from constructs import Construct
from ezgh_engine.topology import SQS_MAX_RETENTION_SECONDS, Queue

# The longest SQS allows: a poisoned message stays inspectable for two weeks.
DLQ_RETENTION = Duration.seconds(SQS_MAX_RETENTION_SECONDS)


def secure_queue(scope: Construct, id: str, **props: object) -> sqs.Queue:
    """A queue with SQS-managed encryption at rest and a policy refusing plain HTTP."""
    return sqs.Queue(
        scope,
        id,
        encryption=sqs.QueueEncryption.SQS_MANAGED,
        enforce_ssl=True,
        **props,  # type: ignore[arg-type]
    )


class Queues(Construct):
    """`self.by_key` and `self.dlq_by_key` map a topology queue key to its queue and DLQ."""

    def __init__(self, scope: Construct, id: str, *, queues: tuple[Queue, ...]) -> None:
        super().__init__(scope, id)
        self.by_key: dict[str, sqs.Queue] = {}
        self.dlq_by_key: dict[str, sqs.Queue] = {}
        for spec in queues:
            name = spec.key.capitalize()
            dlq = secure_queue(self, f"{name}Dlq", retention_period=DLQ_RETENTION)
            self.dlq_by_key[spec.key] = dlq
            self.by_key[spec.key] = secure_queue(
                self,
                name,
                visibility_timeout=Duration.seconds(spec.visibility_timeout_seconds),
                # A backlog (an outage of the consumer) is kept, not deleted after 4 days.
                retention_period=Duration.seconds(spec.retention_seconds),
                dead_letter_queue=sqs.DeadLetterQueue(
                    queue=dlq, max_receive_count=spec.max_receive_count
                ),
            )
