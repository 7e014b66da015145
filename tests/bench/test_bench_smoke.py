"""`python -m bench` end to end at its smallest: one step, one sleep. Checks the shape of the
JSON only; these are benchmarks, so nothing here depends on how fast the machine is."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.__main__ import main

pytestmark = pytest.mark.e2e


def test_bench_writes_figures_for_one_step(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    out = tmp_path / "bench.json"
    assert (
        main(
            [
                "--sizes",
                "1",
                "--histories",
                "",
                "--latency-steps",
                "0",
                "--no-dbos",
                "--no-short-sleep",
                "--no-idle",  # tests/bench/test_bench_idle.py prices the idle month
                "--json",
                str(out),
            ]
        )
        == 0
    )
    figures = json.loads(out.read_text())
    size = figures["sizes"]["1"]
    assert size["steps"] == 1
    assert size["requests_per_step"] > 0
    assert size["usd_per_million_steps"] > 0
    assert size["usd_per_million_runs"] > 0
    by_service = size["requests_per_step_by_service"]
    assert by_service["dynamodb"] > 0 and by_service["http-api"] > 0
    assert by_service["scheduler-fire"] > 0  # the 1h sleep went through the Scheduler
    memory = size["memory"]["steps"]  # GB-s by memory, CPU part stretched
    assert memory["cpu_seconds"] <= memory["seconds"]
    assert (
        memory["at_mb"]["128"]["ms_per_invocation"] >= memory["at_mb"]["1024"]["ms_per_invocation"]
    )
    retention = figures["retention"]  # the purge of the run once its item expires
    assert retention["requests_per_run"] > 0 and "BatchWriteItem" in retention["operations"]
    stored = retention["stored"]  # what the run keeps until then, billed as storage
    assert stored["items"] > 0 and stored["table_bytes"] > stored["items"] * 100
    assert stored["index_bytes"] > 0  # the run item's copy in the runs index
    assert retention["storage_usd_per_million_runs"] > 0
    after = retention["usd_per_million_runs"] + retention["storage_usd_per_million_runs"]
    assert retention["after_end_usd_per_million_runs"] == pytest.approx(after)
    assert "$/M steps" in capsys.readouterr().out


def test_bench_counts_every_branch_and_seeds_a_history():
    """A gather's branch invocations run on the threads of an invoker's group: each
    branch's lease take is counted, attributed to the invoker and to the code that made it.
    A seeded history completes with its steps replayed, not run, and its invocation
    after the sleep is measured."""
    from bench.engine import Engine

    with Engine() as engine:
        fan = engine.run_fan(3)
        leases = [
            c
            for c in engine.recorder.snapshot()[0]
            if c.origin == "function:invoker" and "take_branch_lease" in c.site
        ]
        seeded = engine.run_seeded(5)
    assert fan.completed and fan.branch_invocations == 3
    assert len(leases) == 3
    assert seeded.steps == 6 and seeded.total.total_requests > 0
    assert seeded.total.app_requests >= 1  # the invoke request after the sleep
