"""Event source mappings, one per topology source: SQS queues and DynamoDB streams."""

from __future__ import annotations

import json
from typing import Any

from aws_cdk import Duration
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_lambda_event_sources as sources
from aws_cdk import aws_sqs as sqs
from constructs import Construct
from ezgh_engine.topology import SqsSource, StreamSource

from infra.components.queues import DLQ_RETENTION, secure_queue

# A stream batch that keeps failing blocks its shard (the outbox stops for those runs).
# Bisecting isolates the bad record; after this many retries or this age it goes to the DLQ.
STREAM_RETRY_ATTEMPTS = 10
# A change older than this has lost its meaning for the outbox; a day leaves time to fix a bug.
STREAM_MAX_RECORD_AGE = Duration.hours(24)


class EventSources(Construct):
    """Wires each topology source to its function.

    Every stream source gets its own failure queue (`self.stream_dlqs`, keyed by table key):
    records that exhaust their retries land there as metadata (shard, sequence numbers), so an
    operator can find and replay them.
    """

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        specs: tuple[SqsSource | StreamSource, ...],
        functions: dict[str, lambda_.Function],
        queues: dict[str, sqs.Queue],
        tables: dict[str, dynamodb.Table],
    ) -> None:
        super().__init__(scope, id)
        self.stream_dlqs: dict[str, sqs.Queue] = {}
        for spec in specs:
            function = functions[spec.function]
            if isinstance(spec, SqsSource):
                _check_visibility(queues[spec.queue], function, spec)
                function.add_event_source(
                    sources.SqsEventSource(
                        queues[spec.queue],
                        batch_size=spec.batch_size,
                        # One failed message must not send its whole batch round again.
                        report_batch_item_failures=True,
                    )
                )
            elif not spec.keep_failed:
                function.add_event_source(
                    sources.DynamoEventSource(
                        tables[spec.table],
                        # What it shows begins at its deploy: no day-old history replayed.
                        starting_position=lambda_.StartingPosition.LATEST,
                        batch_size=spec.batch_size,
                        max_batching_window=Duration.seconds(spec.batching_window_seconds),
                        report_batch_item_failures=True,
                        # A batch shown twice would count its metrics twice.
                        retry_attempts=0,
                        filters=_filters(spec),
                    )
                )
            else:
                dlq = secure_queue(
                    self, f"{spec.table.capitalize()}StreamDlq", retention_period=DLQ_RETENTION
                )
                self.stream_dlqs[spec.table] = dlq
                function.add_event_source(
                    sources.DynamoEventSource(
                        tables[spec.table],
                        starting_position=lambda_.StartingPosition.TRIM_HORIZON,
                        batch_size=spec.batch_size,
                        report_batch_item_failures=True,
                        bisect_batch_on_error=True,
                        retry_attempts=STREAM_RETRY_ATTEMPTS,
                        max_record_age=STREAM_MAX_RECORD_AGE,
                        on_failure=sources.SqsDlq(dlq),
                        filters=_filters(spec),
                    )
                )


def _filters(spec: StreamSource) -> list[dict[str, Any]] | None:
    """The topology's filters as Lambda FilterCriteria (JSON-encoded patterns, any passes)."""
    patterns = spec.filter_patterns()
    return [{"pattern": json.dumps(p)} for p in patterns] or None


def _check_visibility(queue: sqs.Queue, function: lambda_.Function, spec: SqsSource) -> None:
    """Fail at synth, not at deploy: Lambda refuses a queue whose visibility timeout is
    shorter than the function's timeout (a message would reappear mid-invocation)."""
    visibility, timeout = queue.node.default_child, function.timeout
    assert isinstance(visibility, sqs.CfnQueue) and timeout is not None
    seconds = visibility.visibility_timeout
    if isinstance(seconds, int | float) and seconds < timeout.to_seconds():
        raise ValueError(
            f"queue {spec.queue!r}: visibility timeout {seconds}s is shorter than function "
            f"{spec.function!r}'s timeout {timeout.to_seconds()}s"
        )
