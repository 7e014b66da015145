"""Cancels, RetryRun, DeleteRun, retention by TTL and steps longer than the invoke
timeout, generated and applied under seeded faults (tests/faults/controls.py): 0 wrong
statuses, 0 stuck, nothing left of a removed run, no step run beside itself.

CI-sized by default (one batch of 8 runs); `EZGH_FAULTS_CONTROL_RUNS=N` runs a longer one."""

from __future__ import annotations

import json
import os

import pytest
from ezgh_engine.local.faults import FaultPlan
from hypothesis import HealthCheck, Phase, given, seed, settings
from hypothesis import strategies as st

from tests.faults import controls
from tests.faults.conftest import BACKOFF_SCALE

pytestmark = [pytest.mark.faults, pytest.mark.e2e]

BATCH = 8
RUNS = int(os.environ.get("EZGH_FAULTS_CONTROL_RUNS", str(BATCH)))


def test_controls_under_faults_end_every_run_as_its_control_says(runtime, request):
    fault_seed = int(request.config.getoption("--fault-seed"))
    total = controls.ControlFigures()
    index = [0]

    @seed(fault_seed + 14)
    @settings(
        max_examples=max(1, -(-RUNS // BATCH)),
        database=None,
        deadline=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(drawn=controls.batch(BATCH))
    def campaign(drawn):
        i = index[0]
        index[0] += 1
        plan = FaultPlan.everything(
            fault_seed * 1000 + 500 + i,
            0.05,
            throttle=0.02,
            kill=0.1,
            timer_late=0.2,
            # per Idempotency-Key'd start or send (a few dozen a batch): rare events
            idem_claim_fail=0.1,
            idem_answer_fail=0.15,
            idem_crash=0.15,
            backoff_scale=BACKOFF_SCALE,  # throttle bursts in 5 % of slots, as the rest
        )
        figures = controls.run_controlled_batch(runtime, drawn, plan, label=f"k{i}")
        if figures.problems:
            figures.problems.append(f"k{i} cases: {json.dumps(drawn)}")
        total.add(figures)

    campaign()
    report = {
        "runs_with_children": total.runs,
        "controls": dict(total.controls),
        "cancels_refused": total.cancels_refused,
        "completed": total.completed,
        "wrong_status": total.wrong_status,
        "stuck": total.stuck,
        "duplicated": total.duplicated,
        "left_over": total.left_over,
        "unfinished_out_of_time": total.unfinished,
        "long_steps": total.long_steps,
        "idempotent_sends": total.sends,
        "faults": dict(total.faults),
        "faults_total": sum(n for k, n in total.faults.items() if ":" not in k),
    }
    print("\ncontrolled fault suite figures:", json.dumps(report, indent=2))
    if total.notes:
        print("unfinished when the time budget ran out:\n" + "\n".join(total.notes))
    assert not total.problems, "\n".join(total.problems)
    assert total.wrong_status == total.stuck == total.duplicated == total.left_over == 0
    assert sum(total.faults.values()) > 0


def test_deleting_the_app_midway_ends_every_live_run_failed(runtime, request):
    """DeleteApp at a drawn round of a controlled batch: each run ends as its control says,
    or, if it was live then, `failed` with `workflows.app_deleted`; none stuck, none left
    with a step pending (the stuck shapes of a deleted app's runs)."""
    fault_seed = int(request.config.getoption("--fault-seed"))
    seen: list[controls.ControlFigures] = []

    @seed(fault_seed + 15)
    @settings(
        max_examples=1,
        database=None,
        deadline=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(drawn=controls.batch(5), at=st.integers(1, 3))
    def campaign(drawn, at):
        plan = FaultPlan.everything(
            fault_seed * 1000 + 900, 0.03, throttle=0.01, kill=0.05, backoff_scale=BACKOFF_SCALE
        )
        figures = controls.run_controlled_batch(
            runtime, drawn, plan, label="app", delete_app_round=at
        )
        if figures.problems:
            figures.problems.append(f"app cases: {json.dumps(drawn)}, deleted at round {at}")
        seen.append(figures)

    campaign()
    [figures] = seen
    print("\napp deletion batch:", figures.runs, "runs,", figures.completed, "completed")
    assert figures.app_deleted
    assert not figures.problems, "\n".join(figures.problems)
