"""Pull workers of one app for the local runtime's end-to-end tests: each runs on a thread of
its own against the runtime's API, and all stop when the test ends."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

from ezgh_engine.local.runtime import LocalRuntime
from ezgh_workflows import Worker, WorkflowsClient


class PullWorkers:
    """The workers a test starts (`worker`) for pull app `app_id`, serving `workflows`."""

    def __init__(
        self,
        engine: LocalRuntime,
        client: WorkflowsClient,
        app_id: str,
        workflows: Sequence[Any],
    ) -> None:
        self.app_id = app_id
        self._engine = engine
        self._client = client
        self._workflows = list(workflows)
        self._started: list[tuple[Worker, threading.Thread]] = []

    def worker(self, cls: type[Worker] = Worker, **kw: Any) -> Worker:
        """A worker of class `cls` (options `kw`), running on its own thread from now on."""
        engine = self._engine
        w = cls(
            self.app_id,
            self._workflows,
            api_key=engine.api_key,
            base_url=engine.api_url,
            organization_id=engine.org_id,
            project_id=engine.project_id,
            poll_wait_seconds=1,
            **kw,
        )
        t = threading.Thread(target=w.run, daemon=True)
        t.start()
        self._started.append((w, t))
        return w

    def synced(self) -> None:
        """Wait until a worker's announce has synced the app's workflows."""
        self._engine.wait_for(
            lambda: self._client.get_app(self.app_id)["status"] == "synced", timeout=30
        )

    def join(self, worker: Worker) -> None:
        """Wait until `worker` (stopped) has ended the tasks it had in progress."""
        for w, t in self._started:
            if w is worker:
                t.join(timeout=60)
                assert not t.is_alive(), "the worker's tasks did not end"

    def stop(self) -> None:
        """Stop every worker and wait for its thread."""
        for w, _ in self._started:
            w.stop()
        for _, t in self._started:
            t.join(timeout=15)
