"""Golden exchanges: what the engine and the SDK said to each other during real runs.

An exchange is one scenario (a workflow and its input, `workflows.SCENARIOS`) run to its end
on the local runtime with the real SDK, recorded in canonical form (`canon`):

    {"workflow", "input",
     "invocations": [{"request": <invoke body>,
                      "calls": [{"ops": [...], "results": [...]}   # step calls and (1.5)
                                | {"read": "history"|"payload",    # reads, in order
                                   "body": {...}, "answer": {...}}],
                      "answer": <the app's answer>}],               # in arrival order
     "run": {"status", "output", "error"}}

Both sides are held to them: `test_sdk_side` plays each request to the SDK with the recorded
answers to its step calls; `test_engine_side` has the engine run each scenario against an app
that replays the recorded step calls and answers. `python -m tests.golden.exchanges` records
them again (after a deliberate protocol change; review the diff).
"""

from __future__ import annotations

import json
import tempfile
import threading
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

from tests.clients import workflows_client
from tests.golden.canon import Canon

DIR = Path(__file__).parent / "exchanges"
ENDED = {"completed", "failed", "cancelled", "timedOut"}


def path_of(workflow: str) -> Path:
    return DIR / f"{workflow}.json"


def load(workflow: str) -> dict[str, Any]:
    return json.loads(path_of(workflow).read_text())


def input_of(exchange: dict[str, Any]) -> Any:
    """The scenario's input, as its run was started with (the exchange keeps it canonical)."""
    return Canon().to_real(exchange["input"])


def names() -> list[str]:
    return sorted(p.stem for p in DIR.glob("*.json"))


class Transcript:
    """The invocations of one scenario as they happen, in canonical form (thread-safe)."""

    def __init__(self, canon: Canon | None = None) -> None:
        self.canon = canon or Canon()
        self.invocations: list[dict[str, Any]] = []
        self._by_token: dict[str, dict[str, Any]] = {}
        self.lock = threading.RLock()

    def request(self, body: dict[str, Any]) -> dict[str, Any]:
        """Note an invoke request; the record its calls and answer go to."""
        with self.lock:
            record = {"request": self.canon.to_canonical(body), "calls": [], "answer": None}
            self.invocations.append(record)
            self._by_token[body["api"]["token"]] = record
            return record

    def call(self, token: str, ops: list[Any], results: list[Any]) -> None:
        with self.lock:
            entry = {"ops": self.canon.to_canonical(ops)}
            entry["results"] = self.canon.to_canonical(results)
            self._by_token[token]["calls"].append(entry)

    def read(self, token: str, what: str, body: Any, answer: Any) -> None:
        """A history or payload read (protocol 1.5) and the engine's answer."""
        with self.lock:
            entry = {"read": what, "body": self.canon.to_canonical(body)}
            entry["answer"] = self.canon.to_canonical(answer)
            self._by_token[token]["calls"].append(entry)

    def answer(self, token: str, answer: Any) -> None:
        with self.lock:
            self._by_token[token]["answer"] = self.canon.to_canonical(answer)


def drive(runtime: Any, client: Any, run_id: str, *, rounds: int = 12) -> dict[str, Any]:
    """Run `run_id` to its end on a skip-clock runtime: whenever everything is idle and the
    run has not ended, skip two hours (a sleep's or a retry's wake-up); the ended run."""
    for _ in range(rounds):
        runtime.wait_idle(timeout=60, include_delayed=False)
        run = client.get_run(run_id)
        if run["status"] in ENDED:
            return dict(run)
        runtime.clock.advance(timedelta(hours=2))
    raise AssertionError(f"run {run_id} did not end: {client.get_run(run_id)}")


def ended_state(canon: Canon, run: dict[str, Any]) -> dict[str, Any]:
    return canon.to_canonical({k: run.get(k) for k in ("status", "output", "error")})


def run_scenario(
    runtime: Any, client: Any, app_id: str, workflow: str, input: Any, transcript: Transcript
) -> dict[str, Any]:
    """Start `workflow` and drive it to its end; the exchange."""
    run = client.start_run(app_id, workflow, input)  # its first request numbers its IDs
    ended = drive(runtime, client, run["id"])
    return {
        "workflow": workflow,
        "input": Canon().to_canonical(input),  # a large input: `<'y' * 70000>`
        "invocations": transcript.invocations,
        "run": ended_state(transcript.canon, ended),
    }


def record_all(write: Callable[[str, dict[str, Any]], None]) -> None:
    """Record every scenario on a fresh local runtime with the real SDK."""
    from ezgh_engine.clock import SkipClock
    from ezgh_engine.local.runtime import LocalRuntime

    from tests.golden.apps import RecordingApp
    from tests.golden.workflows import SCENARIOS

    recorder = RecordingApp()
    with tempfile.TemporaryDirectory() as state:
        runtime = LocalRuntime(
            port=0, state_dir=Path(state), apps=[("golden", recorder)], clock=SkipClock()
        )
        runtime.start()
        try:
            client = workflows_client(runtime)
            app_id = str(runtime.apps["golden"].record["id"])
            for workflow, input in SCENARIOS.items():
                recorder.transcript = Transcript()
                exchange = run_scenario(
                    runtime, client, app_id, workflow, input, recorder.transcript
                )
                write(workflow, exchange)
        finally:
            runtime.stop()


def main() -> None:
    DIR.mkdir(exist_ok=True)

    def write(workflow: str, exchange: dict[str, Any]) -> None:
        path_of(workflow).write_text(json.dumps(exchange, indent=1, sort_keys=True) + "\n")
        print(f"recorded {path_of(workflow)} ({len(exchange['invocations'])} invocations)")

    record_all(write)


if __name__ == "__main__":
    main()
