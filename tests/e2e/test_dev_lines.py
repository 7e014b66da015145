"""`ezgh dev` shows its work: a line per run start, invocation, step end, wait and run end on
its terminal (`--quiet`: none there, still in STATE_DIR/telemetry/lines.log, with the EMF
documents beside them). The lines come from the same emission points as the metrics (the
observe function, the invoker), in the `ezgh dev` process's execution environments.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from ezgh_engine.clock import SkipClock

from tests.e2e.test_dev_restart import Dev, _ended, _step

pytestmark = pytest.mark.e2e


@pytest.fixture()
def dev(tmp_path: Path) -> Iterator[Dev]:
    engine = Dev(tmp_path / "state", SkipClock())
    yield engine
    engine.close()


def _run_lines(text: str, run_id: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if f"run {run_id} " in line]


def _wait_for(dev: Dev, run_id: str, last: str) -> list[str]:
    deadline = time.monotonic() + 60
    while True:
        lines = _run_lines("".join(dev.output), run_id)
        if any(last in line for line in lines):
            return lines
        assert time.monotonic() < deadline, "".join(dev.output[-40:])
        time.sleep(0.1)


def test_ezgh_dev_prints_each_run_start_invocation_step_wait_and_end(dev: Dev) -> None:
    dev.start()
    run_id = dev.start_run("nap", {})
    dev.wait_run(run_id, _step("nap", "sleeping"))
    _wait_for(dev, run_id, "waits     nap#1 sleep until")
    dev.clock.advance(timedelta(days=3, seconds=1))
    dev.wait_run(run_id, _ended)
    lines = _wait_for(dev, run_id, "ended     completed")
    print("\n".join(lines))
    kinds = [line.split()[2] for line in lines]
    # The observe function's lines, in their order; the invoker prints its own from another
    # execution environment, so where they fall among these depends on which ran first.
    observed = [kind for kind in kinds if kind != "invoked"]
    assert observed[0] == "started" and observed[-1] == "ended"
    assert kinds.count("invoked") == 2
    assert any("step      before#1 run completed in" in line for line in lines)
    assert any("step      nap#1 sleep completed in 3 d 0 h 0 min" in line for line in lines)
    telemetry = dev.state_dir / "telemetry"
    assert _run_lines((telemetry / "lines.log").read_text(), run_id) == lines
    names = {
        name
        for line in (telemetry / "metrics.jsonl").read_text().splitlines()
        for name in json.loads(line)
    }
    assert {"RunsStarted", "RunsCompleted", "StepDuration", "InvocationLatency"} <= names


def test_quiet_prints_none_and_still_writes_them(dev: Dev) -> None:
    dev.start("--quiet")
    run_id = dev.start_run("nap", {"for": "1s"})
    dev.wait_run(run_id, _ended)
    path: Path = dev.state_dir / "telemetry" / "lines.log"
    deadline = time.monotonic() + 60
    while "ended" not in "".join(_run_lines(path.read_text() if path.exists() else "", run_id)):
        assert time.monotonic() < deadline
        time.sleep(0.1)
    assert _run_lines("".join(dev.output), run_id) == []
