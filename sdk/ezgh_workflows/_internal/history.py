"""A run's history as a file (`RunHistory`): what ``ezgh workflows runs export RUN`` writes
and `Replayer` replays (docs/testing.md, "Histories as files").

The file is one JSON object:

```
{"format": "ezgh-run-history", "version": 1, "exportedAt": "<ISO time>",
 "run":    {GetRun's run without its steps; a large output read with GetPayload},
 "steps":  [GetRun's steps in the order they started, each large output read with GetPayload
            (``output``, never ``outputRef``), plus ``deploymentId``: the deployment that
            recorded the step, where the run's events tell],
 "events": [ListRunEvents' events, every page]}
```

Everything in it comes from the public API with a key that may read runs
(``workflows.runs.read``): `fetch_history`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from . import clock
from .values import iso_utc

FORMAT = "ezgh-run-history"
VERSION = 1
_STEP_FIELDS = ("id", "name", "kind", "status")


class RunsReader(Protocol):
    """What `fetch_history` reads with: a `WorkflowsClient`."""

    def get_run(self, run_id: str) -> Any: ...

    def list_run_events(
        self, run_id: str, *, cursor: str | None = None, limit: int | None = None
    ) -> Any: ...

    def get_payload(self, run_id: str, path: str) -> Any: ...


@dataclass(frozen=True)
class RunHistory:
    """A run and its recorded steps (see the module's docstring for the file format)."""

    run: dict[str, Any]
    steps: tuple[dict[str, Any], ...]
    events: tuple[dict[str, Any], ...] = ()
    exported_at: str | None = None

    @property
    def id(self) -> str:
        return str(self.run["id"])

    @property
    def workflow(self) -> str:
        return str(self.run["workflow"])

    @property
    def status(self) -> str:
        return str(self.run["status"])

    @classmethod
    def from_json(cls, data: Any) -> RunHistory:
        """Read a history file's object; `ValueError` naming what is wrong with it."""
        if not isinstance(data, Mapping) or data.get("format") != FORMAT:
            raise ValueError(f"not a run history: its 'format' must be {FORMAT!r}")
        if data.get("version") != VERSION:
            raise ValueError(f"run history version {data.get('version')!r} is not {VERSION}")
        run, steps = data.get("run"), data.get("steps")
        if not isinstance(run, Mapping) or not all(
            isinstance(run.get(k), str) for k in ("id", "workflow", "status")
        ):
            raise ValueError("a run history's 'run' needs 'id', 'workflow' and 'status'")
        if not isinstance(steps, list):
            raise ValueError("a run history's 'steps' must be a list")
        for index, step in enumerate(steps):
            if not isinstance(step, Mapping) or not all(
                isinstance(step.get(k), str) for k in _STEP_FIELDS
            ):
                raise ValueError(f"steps[{index}] needs 'id', 'name', 'kind' and 'status'")
        events = data.get("events") or []
        return cls(
            run=dict(run),
            steps=tuple(dict(s) for s in steps),
            events=tuple(dict(e) for e in events if isinstance(e, Mapping)),
            exported_at=data.get("exportedAt"),
        )

    @classmethod
    def load(cls, path: str | Path) -> RunHistory:
        """Read a history file."""
        return cls.from_json(json.loads(Path(path).read_text(encoding="utf-8")))

    def to_json(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "version": VERSION,
            "exportedAt": self.exported_at,
            "run": self.run,
            "steps": list(self.steps),
            "events": list(self.events),
        }

    def dumps(self) -> str:
        """The file's text."""
        return json.dumps(self.to_json(), indent=2, ensure_ascii=False) + "\n"


def fetch_history(reader: RunsReader, run_id: str) -> RunHistory:
    """A run's history through the public API (GetRun, ListRunEvents, GetPayload)."""
    run = dict(reader.get_run(run_id))
    steps = [_resolved(reader, run_id, dict(step)) for step in run.pop("steps", None) or []]
    run = _resolved(reader, run_id, run)
    events = _all_events(reader, run_id)
    for step in steps:
        step["deploymentId"] = deployment_of(step, events)
    return RunHistory(run, tuple(steps), tuple(events), iso_utc(clock.now()))


def _resolved(reader: RunsReader, run_id: str, item: dict[str, Any]) -> dict[str, Any]:
    """A run or step with a value given as a reference (``outputRef``, a run's
    ``inputRef``: kept outside the run, or no room in the answer) read back inline."""
    for ref_key, key in (("outputRef", "output"), ("inputRef", "input")):
        ref = item.pop(ref_key, None)
        if isinstance(ref, str):
            item[key] = reader.get_payload(run_id, ref)
    return item


def _all_events(reader: RunsReader, run_id: str) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    cursor: str | None = None
    while True:
        page = reader.list_run_events(run_id, cursor=cursor)
        events.extend(e for e in page.get("events", []) if isinstance(e, dict))
        cursor = page.get("nextCursor")
        if not cursor:
            return events


def deployment_of(step: Mapping[str, Any], events: list[dict[str, Any]]) -> str | None:
    """The deployment that recorded a step: the last event about the step that names one
    (a completion, a failure), else the last invocation event at or before the step
    started (a sleep or a wait is recorded by the invocation that suspended on it)."""
    about = [e for e in events if e.get("stepId") == step.get("id") and e.get("deploymentId")]
    if about:
        return str(about[-1]["deploymentId"])
    started = str(step.get("startedAt") or "")
    before = [
        e
        for e in events
        if str(e.get("type", "")).startswith("invocation.")
        and e.get("deploymentId")
        and str(e.get("at") or "") <= started
    ]
    return str(before[-1]["deploymentId"]) if before else None
