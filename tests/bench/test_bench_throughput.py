"""`python -m bench.throughput` end to end at its smallest: a few concurrent runs on
`ezgh dev`'s runtime with the journal on, its client in a process of its own. Checks that every
run completes and the figures' shape and arithmetic; nothing depends on how fast the machine is
(the rates are the bench's to report, not a test's to judge)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.throughput import main

pytestmark = pytest.mark.e2e


def test_throughput_bench_reports_runs_and_steps_per_second(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)  # the bench's state dir is made next to the working directory
    out = tmp_path / "throughput.json"
    assert main(["--runs", "4", "--steps", "3", "--json", str(out)]) == 0
    figures = json.loads(out.read_text())
    assert figures["runs"] == figures["completed"] == 4 and figures["steps_per_run"] == 3
    assert figures["persist"] is True and figures["journal_records"] > 0
    assert figures["runs_per_second"] > 0
    per_second = 4 * 3 / figures["seconds"]  # each figure rounded to hundredths
    assert figures["steps_per_second"] == pytest.approx(per_second, rel=0.01, abs=0.011)
    line = capsys.readouterr().out
    assert "4 completed" in line and "runs/s" in line and "steps/s" in line, line
    assert [p.name for p in tmp_path.iterdir()] == ["throughput.json"]  # the state dir removed
