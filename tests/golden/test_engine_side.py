"""The engine held to the golden exchanges: each scenario, run by the engine on the local
runtime against an app that replays the recorded step calls and answers, gets the recorded
invoke requests and the recorded answers to its step calls, and ends as recorded.

`golden-gather` is not replayed on the local runtime: when its two branches end close
together the engine may invoke the main run once or twice in between (both correct), so
its requests are not one fixed sequence there. `test_engine_side_in_process` replays it on
the engine in process, in the interleaving recorded.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from ezgh_engine.clock import SkipClock
from ezgh_engine.local.runtime import LocalRuntime

from tests.clients import workflows_client
from tests.golden import exchanges
from tests.golden.apps import ReplayingApp
from tests.golden.canon import Canon

TIMING_DEPENDENT = {"golden-gather"}


class SwitchingApp:
    """The app the runtime serves: forwards to the exchange being replayed."""

    signing_key: str | None = None

    def __init__(self) -> None:
        self.current: ReplayingApp | None = None

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan" or self.current is None:
            await ReplayingApp({"invocations": []}, Canon())(scope, receive, send)
            return
        await self.current(scope, receive, send)


@pytest.fixture(scope="module")
def served() -> Iterator[tuple[LocalRuntime, SwitchingApp]]:
    import tempfile
    from pathlib import Path

    app = SwitchingApp()
    with tempfile.TemporaryDirectory() as state:
        runtime = LocalRuntime(
            port=0, state_dir=Path(state), apps=[("golden", app)], clock=SkipClock()
        )
        runtime.start()
        try:
            yield runtime, app
        finally:
            runtime.stop()


@pytest.mark.parametrize("name", [n for n in exchanges.names() if n not in TIMING_DEPENDENT])
def test_the_engine_sends_the_recorded_requests_and_answers(
    name: str, served: tuple[LocalRuntime, SwitchingApp]
) -> None:
    runtime, app = served
    exchange = exchanges.load(name)
    client = workflows_client(runtime)
    canon = Canon()
    replaying = ReplayingApp(exchange, canon)
    app.current = replaying
    app_id = str(runtime.apps["golden"].record["id"])
    run = client.start_run(app_id, exchange["workflow"], exchanges.input_of(exchange))
    ended = exchanges.drive(runtime, client, run["id"])
    assert replaying.problems == []
    assert replaying.left == [], "recorded invocations the engine did not make"
    assert exchanges.ended_state(canon, ended) == exchange["run"]
