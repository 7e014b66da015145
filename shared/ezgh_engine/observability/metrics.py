"""Metrics in CloudWatch's embedded metric format, on Powertools' EMF provider.

`add` collects values in this process (one set per `Queue` dimension value, the others in
one set with only `service`); `flush` writes each set as one EMF document (`sinks`) and
empties it. A handler flushes once per invocation (`emit.flushing`), so a batch of 100
stream records is one document, not 100. A set whose metric holds `MAX_VALUES` values is
written at once (EMF allows 100 values per metric per document).

`POWERTOOLS_METRICS_DISABLED=true` turns metrics off (`-c ezgh:metrics=false` deployed).
"""

from __future__ import annotations

import os
import threading

from aws_lambda_powertools.metrics.provider.cloudwatch_emf.cloudwatch import (
    AmazonCloudWatchEMFProvider,
)

from ezgh_engine import stack_name
from ezgh_engine.observability import names, sinks

MAX_VALUES = 99
_lock = threading.Lock()
_sets: dict[str | None, AmazonCloudWatchEMFProvider] = {}


def enabled() -> bool:
    return os.environ.get("POWERTOOLS_METRICS_DISABLED", "").lower() not in ("1", "true")


def _set(queue: str | None) -> AmazonCloudWatchEMFProvider:
    found = _sets.get(queue)
    if found is None:
        namespace = os.environ.get(names.ENV_NAMESPACE) or names.NAMESPACE
        found = AmazonCloudWatchEMFProvider(namespace=namespace, service=stack_name.stack_prefix())
        if queue is not None:
            found.add_dimension(name="Queue", value=queue)
        _sets[queue] = found
    return found


def add(metric: names.Metric, value: float, *, queue: str | None = None) -> None:
    """Count `value` of `metric` (with its `Queue` when the metric is per queue)."""
    if not enabled():
        return
    with _lock:
        target = _set(queue if metric.per_queue else None)
        target.add_metric(name=metric.name, unit=metric.unit, value=value)
        full = len(target.metric_set[metric.name]["Value"]) >= MAX_VALUES
    if full:
        flush()


def flush() -> None:
    """Write every set that holds a value, as one EMF document each, and empty them."""
    with _lock:
        documents = []
        for found in _sets.values():
            if not found.metric_set:
                continue
            documents.append(found.serialize_metric_set())
            found.metric_set.clear()
    for document in documents:
        sinks.write_document(dict(document))


def reset() -> None:
    """Forget what was collected and the sets (tests; the stack's name may change)."""
    with _lock:
        _sets.clear()
