"""`Worker`: polls a pull app's tasks (lands in a later issue)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from .workflow import Workflow


class Worker:
    """Runs the workflows of a pull app by polling its task queue.

    The polling loop lands with pull apps; `run` raises `NotImplementedError` for now.
    """

    def __init__(
        self,
        app_id: str,
        workflows: Iterable[Workflow],
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        **options: Any,
    ) -> None:
        self.app_id = app_id
        self.workflows = list(workflows)
        self.api_key = api_key
        self.base_url = base_url
        self.options = options

    def run(self) -> None:
        """Poll and run tasks until stopped."""
        raise NotImplementedError("pull apps land in a later issue")
