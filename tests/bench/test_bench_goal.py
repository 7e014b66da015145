"""The bench's goal check (issue 18): a run's cost as a fixed part plus a floor per step,
from the measured sizes, and the step count from which a run meets $1.50 per million
steps. Synthetic figures on an exact line, so the answers are known."""

from __future__ import annotations

from typing import Any

import pytest

from bench.report import goal_check, steps_to_reach


def _sizes(fixed: float, floor: float, gb_fixed: float, gb_floor: float) -> dict[str, Any]:
    """Per-size figures as `size_figures` makes them, on the line `fixed + floor x n`
    ($ per million runs), of which Lambda's GB-s are `gb_fixed + gb_floor x n`."""
    out = {}
    for n in (1, 10, 100):
        run = fixed + floor * n
        out[str(n)] = {
            "steps": n,
            "usd_per_million_runs": run,
            "usd_per_million_steps": run / n,
            "usd_per_million_runs_lambda_gb_s": gb_fixed + gb_floor * n,
        }
    return out


def test_the_step_count_is_the_first_that_meets_the_goal() -> None:
    assert steps_to_reach(12.0, 1.18, 1.50) == 38  # 12/37 + 1.18 > 1.50 >= 12/38 + 1.18
    assert steps_to_reach(3.0, 1.2, 1.50) == 10  # exactly on the goal counts as met
    assert steps_to_reach(0.6, 1.3, 1.50) == 3  # 0.6 / 0.19999999999999996 rounds up to 4
    assert steps_to_reach(0.0, 1.0, 1.50) == 1
    assert steps_to_reach(5.0, 1.50, 1.50) is None  # the floor alone is the goal: never
    assert steps_to_reach(5.0, 2.0, 1.50) is None


def test_a_ten_step_run_over_the_goal_even_without_gb_s() -> None:
    g = goal_check(_sizes(fixed=12.0, floor=1.2, gb_fixed=2.0, gb_floor=0.3))
    assert g is not None
    assert g["goal_met"] is False and g["goal_steps_usd_per_million_steps"] == pytest.approx(2.4)
    a = g["all_in"]
    assert a["floor_usd_per_million_steps"] == pytest.approx(1.2)
    assert a["fixed_usd_per_million_runs"] == pytest.approx(12.0)
    assert a["floor_from_steps"] == [10, 100] and a["fixed_from_steps"] == 10
    assert a["steps_to_goal"] == 40
    b = g["without_lambda_gb_s"]  # 10 + 0.9 n: the load-independent part
    assert b["floor_usd_per_million_steps"] == pytest.approx(0.9)
    assert b["fixed_usd_per_million_runs"] == pytest.approx(10.0)
    assert b["steps_to_goal"] == 17
    assert b["usd_per_million_steps"]["10"] == pytest.approx(1.9)  # over with no GB-s at all
    assert g["measured_over_goal"] == (10, pytest.approx(2.4))
    assert g["measured_at_goal"] == (100, pytest.approx(1.32))


def test_a_cheap_run_meets_the_goal_and_one_size_gives_no_line() -> None:
    g = goal_check(_sizes(fixed=2.0, floor=1.0, gb_fixed=0.0, gb_floor=0.0))
    assert g is not None and g["goal_met"] is True and g["all_in"]["steps_to_goal"] == 4
    assert g["measured_over_goal"] == (1, pytest.approx(3.0))
    assert goal_check({"10": _sizes(2.0, 1.0, 0.0, 0.0)["10"]}) is None


def test_without_the_goal_size_the_fixed_cost_comes_from_the_smallest_run() -> None:
    sizes = _sizes(fixed=12.0, floor=1.2, gb_fixed=0.0, gb_floor=0.0)
    del sizes["10"]
    g = goal_check(sizes)
    assert g is not None and g["goal_met"] is None
    assert g["all_in"]["fixed_from_steps"] == 1
    assert g["all_in"]["fixed_usd_per_million_runs"] == pytest.approx(12.0)
