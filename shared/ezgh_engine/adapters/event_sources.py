"""The event source registry: how a subscription's queue gets wired to the `deliver` function
at run time (subscriptions are created through the API, long after the stack was deployed).

Two implementations of one small interface, chosen by `EZGH_EVENT_SOURCES`:

- `lambda` (default, AWS): a Lambda event source mapping per subscription, made with
  `lambda.create_event_source_mapping` on the function named by `EZGH_DELIVER_FUNCTION_NAME`:
  batch size 1, `ReportBatchItemFailures`, `ScalingConfig.MaximumConcurrency` =
  maxConcurrency. AWS's minimum is 2, so a subscription's `maxConcurrency: 1` maps to 2 there
  (the answer still says 1; on a FIFO queue one message group is delivered one at a time anyway).
- `local` (`ezgh dev`, tests): the in-process `LocalEventSources`. The `LocalRuntime` installs
  itself as the host and gets an `SqsPoller` per mapping that calls the same `deliver` handler;
  `maxConcurrency` 1 is honoured exactly. With no host installed (API tests) the mappings are
  only recorded.

The mapping ID is kept with the subscription; pause/resume enables/disables the mapping,
changing maxConcurrency updates it, deleting the subscription deletes it.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, replace
from typing import Any, Protocol

from ezgh_engine import ids
from ezgh_engine.adapters import aws
from ezgh_engine.errors import ValidationError
from ezgh_engine.topology import DELIVER_FUNCTION

ENV_EVENT_SOURCES = "EZGH_EVENT_SOURCES"  # "lambda" (default) or "local"
ENV_DELIVER_FUNCTION = "EZGH_DELIVER_FUNCTION_NAME"
AWS_MIN_CONCURRENCY = 2


@dataclass(frozen=True)
class Mapping:
    """One queue → function mapping."""

    id: str
    queue_arn: str
    queue_url: str
    function: str  # topology function key
    batch_size: int
    max_concurrency: int
    enabled: bool


class EventSources(Protocol):
    def create(self, *, queue_arn: str, queue_url: str, max_concurrency: int, enabled: bool) -> str:
        """Map the queue to `deliver`; answers the mapping's ID."""
        ...

    def update(
        self, mapping_id: str, *, enabled: bool | None = None, max_concurrency: int | None = None
    ) -> None: ...

    def delete(self, mapping_id: str) -> None: ...


class LambdaEventSources:
    """Lambda event source mappings (AWS)."""

    def _client(self) -> Any:
        return aws.client("lambda")

    def create(self, *, queue_arn: str, queue_url: str, max_concurrency: int, enabled: bool) -> str:
        function = os.environ.get(ENV_DELIVER_FUNCTION)
        if not function:
            raise RuntimeError(f"environment variable {ENV_DELIVER_FUNCTION} is not set")
        client = self._client()
        try:
            answer = client.create_event_source_mapping(
                EventSourceArn=queue_arn,
                FunctionName=function,
                BatchSize=1,
                Enabled=enabled,
                FunctionResponseTypes=["ReportBatchItemFailures"],
                ScalingConfig={"MaximumConcurrency": max(AWS_MIN_CONCURRENCY, max_concurrency)},
            )
        except client.exceptions.InvalidParameterValueException as err:
            # Typically: the queue's visibility timeout is shorter than deliver's timeout.
            raise ValidationError(
                "this queue cannot be subscribed: its visibilityTimeoutSeconds must be at "
                f"least {DELIVER_FUNCTION.timeout_seconds} ({err.response['Error']['Message']})"
            ) from None
        return str(answer["UUID"])

    def update(
        self, mapping_id: str, *, enabled: bool | None = None, max_concurrency: int | None = None
    ) -> None:
        changes: dict[str, Any] = {}
        if enabled is not None:
            changes["Enabled"] = enabled
        if max_concurrency is not None:
            changes["ScalingConfig"] = {
                "MaximumConcurrency": max(AWS_MIN_CONCURRENCY, max_concurrency)
            }
        if changes:
            self._client().update_event_source_mapping(UUID=mapping_id, **changes)

    def delete(self, mapping_id: str) -> None:
        try:
            self._client().delete_event_source_mapping(UUID=mapping_id)
        except self._client().exceptions.ResourceNotFoundException:
            pass


class LocalHost(Protocol):
    """What the local runtime offers: start, change and stop a poller for a mapping."""

    def add_event_source(self, mapping: Mapping) -> None: ...

    def remove_event_source(self, mapping_id: str) -> None: ...


class LocalEventSources:
    """In-process mappings; a `LocalHost` (the `LocalRuntime`) runs them as pollers."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.mappings: dict[str, Mapping] = {}
        self.host: LocalHost | None = None

    def install(self, host: LocalHost | None) -> None:
        """Attach (or with None detach) the runtime that runs the pollers."""
        with self._lock:
            self.host = host

    def clear(self) -> None:
        """Forget every mapping (the runtime's state was reset); the host stops its pollers."""
        with self._lock:
            gone, self.mappings = list(self.mappings), {}
            host = self.host
        if host is not None:
            for mapping_id in gone:
                host.remove_event_source(mapping_id)

    def create(self, *, queue_arn: str, queue_url: str, max_concurrency: int, enabled: bool) -> str:
        mapping = Mapping(
            ids.new_id(), queue_arn, queue_url, DELIVER_FUNCTION.key, 1, max_concurrency, enabled
        )
        with self._lock:
            self.mappings[mapping.id] = mapping
            host = self.host
        if host is not None and enabled:
            host.add_event_source(mapping)
        return mapping.id

    def update(
        self, mapping_id: str, *, enabled: bool | None = None, max_concurrency: int | None = None
    ) -> None:
        with self._lock:
            old = self.mappings.get(mapping_id)
            if old is None:
                return
            new = replace(
                old,
                enabled=old.enabled if enabled is None else enabled,
                max_concurrency=old.max_concurrency if max_concurrency is None else max_concurrency,
            )
            self.mappings[mapping_id] = new
            host = self.host
        if host is None or new == old:
            return
        host.remove_event_source(mapping_id)  # a poller's concurrency is fixed: make a new one
        if new.enabled:
            host.add_event_source(new)

    def delete(self, mapping_id: str) -> None:
        with self._lock:
            self.mappings.pop(mapping_id, None)
            host = self.host
        if host is not None:
            host.remove_event_source(mapping_id)


LOCAL = LocalEventSources()
_LAMBDA = LambdaEventSources()


def event_sources() -> EventSources:
    """The implementation this process uses (see the module's docstring)."""
    return LOCAL if os.environ.get(ENV_EVENT_SOURCES) == "local" else _LAMBDA
