"""The interpreter's pure rules for a job tree: what each flow.invoke node hands its child."""

from __future__ import annotations

import pytest
from ezgh_engine.core.flows.jobs import TREE_BUDGET
from ezgh_engine.interpreter.modules import child_budget


def _tree_size(budget: int, invokes: int, depth: int = 0) -> int:
    """The jobs a tree holds when each job has `invokes` flow.invoke nodes (all of them
    starting a child while its share of the budget allows)."""
    share = child_budget(budget, invokes)
    if share < 0 or depth >= 10:
        return 1
    return 1 + invokes * _tree_size(share, invokes, depth + 1)


@pytest.mark.parametrize("invokes", [1, 2, 3, 5, 10, 50, 200])
def test_a_tree_of_jobs_never_holds_more_than_its_budget(invokes: int) -> None:
    assert _tree_size(TREE_BUDGET, invokes) <= TREE_BUDGET + 1


def test_the_shares_of_a_jobs_children_never_exceed_what_it_was_given() -> None:
    for budget in range(0, 150):
        for invokes in range(1, 30):
            share = child_budget(budget, invokes)
            assert share < 0 or invokes * (share + 1) <= budget
