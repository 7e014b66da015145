"""The bench's goal check: a run's cost as a fixed part plus a floor per step,
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
    assert a["fit_steps"] == [10, 100]  # the runs of the goal's 10 steps and more
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


def test_the_line_is_fitted_through_every_run_of_ten_steps_and_more() -> None:
    sizes = _sizes(fixed=12.0, floor=1.2, gb_fixed=0.0, gb_floor=0.0)
    sizes["30"] = {"steps": 30, "usd_per_million_runs": 12.0 + 36.0 + 3.0}  # 3 over the line
    sizes["50"] = {"steps": 50, "usd_per_million_runs": 12.0 + 60.0 - 3.0}  # 3 under it
    for f in sizes.values():
        f["usd_per_million_steps"] = f["usd_per_million_runs"] / f["steps"]
    a = goal_check(sizes)["all_in"]  # type: ignore[index]
    assert a["fit_steps"] == [10, 30, 50, 100]
    # The slope moves by (3 x (30 - 47.5) - 3 x (50 - 47.5)) / 4475 (the spread of the steps).
    assert a["floor_usd_per_million_steps"] == pytest.approx(1.2 - 60 / 4475)
    assert a["fixed_usd_per_million_runs"] == pytest.approx(12.0 + 47.5 * 60 / 4475)


def test_without_a_second_long_run_the_line_takes_the_shorter_ones() -> None:
    sizes = _sizes(fixed=12.0, floor=1.2, gb_fixed=0.0, gb_floor=0.0)
    del sizes["100"]
    g = goal_check(sizes)
    assert g is not None and g["goal_met"] is False
    assert g["all_in"]["fit_steps"] == [1, 10]
    assert g["all_in"]["fixed_usd_per_million_runs"] == pytest.approx(12.0)
    assert g["all_in"]["floor_usd_per_million_steps"] == pytest.approx(1.2)
