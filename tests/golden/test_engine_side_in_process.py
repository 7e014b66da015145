"""The engine held to the golden gather, deterministically: on the engine in process
(`tests/sdk/sdk_engine.py`, one handler at a time), the interleaving recorded is the one the
test makes, where the local runtime's concurrent handlers may make another (both correct):
both branches' requests are built before either runs, and the main run is invoked for
branch a's end while branch b's answer is not yet written (`Engine.meanwhile`). Its own module: the local runtime of `test_engine_side` and this
module's in-process moto must not overlap.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.golden import exchanges
from tests.golden.apps import ReplayingApp
from tests.golden.canon import Canon
from tests.golden.workflows import make_app
from tests.sdk.sdk_engine import KEY, Plant, StepsTransport, engine_of, plant


@pytest.fixture(scope="module")
def in_process() -> Iterator[Plant]:
    with plant() as made:
        yield made


def test_the_engine_in_process_answers_the_gather_as_recorded(in_process: Plant) -> None:
    exchange = exchanges.load("golden-gather")
    canon = Canon()
    with engine_of(in_process) as engine:
        replaying = ReplayingApp(exchange, canon, transport=StepsTransport(engine, None))
        engine.serve(make_app(signing_key=KEY))  # what the app syncs: the golden workflows
        run_id = engine.start(exchange["workflow"], exchanges.input_of(exchange))
        engine.app_asgi = replaying

        # The interleaving recorded: both branches' requests built before either ran (each
        # after its own lease take, which started its step), and the main run invoked for
        # a#1's end while b#1's answer (which carries its end) was not yet written.
        def branch_b_built_too(request: dict[str, Any]) -> None:
            if (request.get("branch") or {}).get("stepId") == "a#1":
                engine.meanwhile()

        def main_invoked_meanwhile(request: dict[str, Any], answer: Any) -> None:
            if (request.get("branch") or {}).get("stepId") == "b#1":
                engine.meanwhile()

        engine.before_delivery = branch_b_built_too
        engine.after_answer = main_invoked_meanwhile
        engine.pump(lambda: engine.ended(run_id))
        ended = engine.api("GET", f"/runs/{run_id}").body
    assert replaying.problems == []
    assert replaying.left == [], "recorded invocations the engine did not make"
    assert exchanges.ended_state(canon, ended) == exchange["run"]
