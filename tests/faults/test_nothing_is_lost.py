"""Generated workflows under seeded faults lose nothing, duplicate nothing, and
none is stuck; their outputs are the fault-free ones (tests/faults/harness.py)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from ezgh_engine.local.faults import KINDS, FaultPlan
from hypothesis import HealthCheck, Phase, given, seed, settings
from hypothesis import strategies as st

from tests.faults import dsl
from tests.faults.conftest import BACKOFF_SCALE, INVOKE_TIMEOUT_SECONDS
from tests.faults.harness import Figures, run_batch

pytestmark = [pytest.mark.faults, pytest.mark.e2e]

BATCH = 10  # programs run at once against one engine
FAULT_PROBABILITY = 0.06
# The share of 20-second slots of engine time that are a throttle burst of one service
# (DynamoDB, Lambda, Scheduler or SQS: 20-50 % of its requests answered throttled).
THROTTLE_BURSTS = 0.8
HANG_SECONDS = float(INVOKE_TIMEOUT_SECONDS) + 2


def test_generated_runs_lose_nothing_under_faults(runtime, request):
    runs = int(request.config.getoption("--runs"))
    fault_seed = int(request.config.getoption("--fault-seed"))
    batches = max(1, -(-runs // BATCH))
    total = Figures()
    index = [0]

    @seed(fault_seed)
    @settings(
        max_examples=batches,
        database=None,
        deadline=None,
        phases=[Phase.generate],  # no shrinking: a failure prints its programs and seed
        suppress_health_check=list(HealthCheck),
    )
    @given(programs=st.lists(dsl.programs, min_size=BATCH, max_size=BATCH))
    def campaign(programs):
        i = index[0]
        index[0] += 1
        plan = FaultPlan.everything(
            fault_seed * 1000 + i,
            FAULT_PROBABILITY,
            throttle=0.02,  # per DynamoDB call: many per step
            throttle_burst=THROTTLE_BURSTS,  # per 20 s of engine time: 20-50 % of a service
            backoff_scale=BACKOFF_SCALE,
            # Past the invoke timeout by a margin, so a hang is always a timed-out delivery
            # (at the default 3 s, under the suite's 6 s limit, whether it was one depended on
            # how loaded the machine was).
            hang_seconds=HANG_SECONDS,
            kill=0.15,  # per recorded step end, timers per fire: rarer events
            timer_duplicate=0.3,
            timer_late=0.3,
        )
        figures = run_batch(runtime, programs, plan, label=f"b{i}")
        if figures.problems:
            figures.problems.append(f"b{i} programs: {json.dumps(programs)}")
        total.add(figures)

    campaign()
    report = {
        "seed": fault_seed,
        "batches": index[0],
        "generated_runs": index[0] * BATCH,
        "runs_with_children": total.runs,
        "completed": total.completed,
        "lost": total.lost,
        "duplicated": total.duplicated,
        "stuck": total.stuck,
        "dead_lettered": total.dead_lettered,
        "unfinished_out_of_time": total.unfinished,
        "restarts": total.restarts,
        "step_executions": total.step_executions,
        "re_executions_at_least_once": total.re_executions,
        "faults": {kind: total.faults.get(kind, 0) for kind in KINDS},
        "throttled_in_bursts": {
            k.split(":", 1)[1]: n
            for k, n in total.faults.items()
            if k.startswith("throttle_burst:")
        },
        "faults_total": sum(n for k, n in total.faults.items() if ":" not in k),
    }
    print("\nfault suite figures:", json.dumps(report, indent=2))
    if total.notes:  # a slow machine: named, never counted as lost
        print("unfinished when the time budget ran out:\n" + "\n".join(total.notes))
    target = os.environ.get("EZGH_FAULTS_REPORT")
    if target:
        Path(target).write_text(json.dumps({**report, "problems": total.problems}, indent=2))
    assert not total.problems, "\n".join(total.problems)
    assert total.lost == total.duplicated == total.stuck == total.dead_lettered == 0
    assert sum(total.faults.values()) > 0
    assert total.completed > 0  # a campaign where nothing ended proves nothing
