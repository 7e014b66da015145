"""Event source mappings made at run time (queue subscriptions), run as local pollers.

In AWS the api creates a Lambda event source mapping per subscription. Locally the same
adapter call (`adapters.event_sources.LOCAL`, selected by `EZGH_EVENT_SOURCES=local`) lands
here, in-process: each mapping becomes an `SqsPoller` on the subscription's queue calling the
same handler (`deliver`) with the same events, batch size and concurrency. The runtime installs
this host on start, and drops every mapping on reset and stop (their queues are gone then).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

from ezgh_engine.adapters import event_sources
from ezgh_engine.local.pollers import Activity, SqsPoller

if TYPE_CHECKING:
    from ezgh_engine.local.faults import FaultPlan


class _Environment(Protocol):
    def apply_env(self, env: Mapping[str, str | None]) -> None: ...


class Host(Protocol):
    """What the mappings need of the runtime that hosts them (`local.runtime.LocalRuntime`):
    named here, so this module does not import the runtime that imports it."""

    @property
    def emulator(self) -> _Environment: ...
    @property
    def invokers(self) -> Mapping[str, Callable[[dict[str, Any]], Any]]: ...
    @property
    def activity(self) -> Activity: ...
    @property
    def faults(self) -> FaultPlan | None: ...
    def mappings_changed(self) -> None: ...


class SubscriptionPoller(SqsPoller):
    """An `SqsPoller` on a user's queue: it never puts a wake-up message on it."""

    def interrupt(self) -> None:
        """Never send to a user's queue; a long poll ends by itself within `wait_seconds`."""


class SubscriptionSources:
    """The `LocalHost` of `event_sources.LOCAL`: one poller per enabled mapping."""

    def __init__(self, runtime: Host) -> None:
        self._runtime = runtime
        self._lock = threading.Lock()
        self.pollers: dict[str, SubscriptionPoller] = {}

    def install(self) -> None:
        self._runtime.emulator.apply_env({event_sources.ENV_EVENT_SOURCES: "local"})
        event_sources.LOCAL.install(self)

    def add_event_source(self, mapping: event_sources.Mapping) -> None:
        poller = SubscriptionPoller(
            name=f"subscription:{mapping.id}",
            queue_url=mapping.queue_url,
            queue_arn=mapping.queue_arn,
            invoke=self._runtime.invokers[mapping.function],
            activity=self._runtime.activity,
            batch_size=mapping.batch_size,
            max_concurrency=mapping.max_concurrency,
        )
        poller.faults = self._runtime.faults
        with self._lock:
            old = self.pollers.pop(mapping.id, None)
            self.pollers[mapping.id] = poller
        if old is not None:
            old.stop(timeout=0)
        poller.start()
        self._runtime.mappings_changed()

    def remove_event_source(self, mapping_id: str) -> None:
        with self._lock:
            poller = self.pollers.pop(mapping_id, None)
        if poller is not None:
            poller.stop(timeout=0)
        self._runtime.mappings_changed()

    def restore(self, mappings: list[dict[str, object]]) -> None:
        """After a restart with the state kept: the mappings the journal last held, and a
        poller for each enabled one."""
        for values in mappings:
            mapping = event_sources.Mapping(**values)  # type: ignore[arg-type]
            event_sources.LOCAL.mappings[mapping.id] = mapping
        self.restart()

    def clear(self, *, wait: bool = False) -> None:
        """Drop every mapping and stop their pollers (before a reset, or on stop)."""
        event_sources.LOCAL.clear()
        with self._lock:
            pollers, self.pollers = list(self.pollers.values()), {}
        for poller in pollers:
            poller.stop(timeout=0)
        if wait:
            for poller in pollers:
                poller.stop(timeout=3)

    def clear_pollers(self) -> None:
        """Stop every poller, keeping the mappings (an engine restart makes new ones)."""
        with self._lock:
            pollers, self.pollers = list(self.pollers.values()), {}
        for poller in pollers:
            poller.stop(timeout=0)

    def restart(self) -> None:
        """After an engine restart: new pollers, for the current handlers, for every mapping
        (the old ones stop; messages they held come back after their visibility timeout)."""
        for mapping in list(event_sources.LOCAL.mappings.values()):
            if mapping.enabled:
                self.add_event_source(mapping)

    def uninstall(self) -> None:
        self.clear(wait=True)
        event_sources.LOCAL.install(None)
