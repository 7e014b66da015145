"""The interpreter's planning: inputs through handles, readiness, condition routing, SKIPPED
propagation and sink outputs, with no engine at all."""

from __future__ import annotations

from typing import Any

from ezgh_engine.core.flows.planning import COMPLETED, SKIPPED, Done, Plan, pure_output
from ezgh_engine.core.flows.templating import scope
from ezgh_engine.core.flows.validate import check_graph


def _node(node_id: str, module: str = "transform", **config: Any) -> dict[str, Any]:
    return {"id": node_id, "moduleType": module, "config": config or {"expression": "in"}}


def _plan(nodes: list[dict[str, Any]], edges: list[dict[str, Any]]) -> Plan:
    return Plan(check_graph({"nodes": nodes, "edges": edges}))


def _diamond() -> Plan:
    return _plan(
        [
            _node("t", "trigger.manual"),
            _node("b"),
            _node("c"),
            _node("d"),
            {"id": "note", "moduleType": "comment"},
        ],
        [
            {"source": "t", "target": "b"},
            {"source": "t", "target": "c"},
            {"source": "b", "target": "d", "targetHandle": "left"},
            {"source": "c", "target": "d", "targetHandle": "right"},
        ],
    )


def test_comment_nodes_are_stripped_before_execution() -> None:
    plan = _diamond()
    assert plan.order == ("t", "b", "c", "d")


def test_a_diamond_runs_its_branches_together_and_the_join_gets_both_inputs() -> None:
    plan = _diamond()
    assert plan.ready({}) == (["t"], [])
    done = {"t": Done(COMPLETED, {"x": 1})}
    assert plan.ready(done) == (["b", "c"], [])
    assert plan.node_input("b", done) == {"t": {"x": 1}}
    done["b"] = Done(COMPLETED, "B")
    assert plan.ready(done) == (["c"], [])  # d waits for c
    done["c"] = Done(COMPLETED, "C")
    assert plan.ready(done) == (["d"], [])
    assert plan.node_input("d", done) == {"left": "B", "right": "C"}
    done["d"] = Done(COMPLETED, {"joined": True})
    assert plan.ready(done) == ([], [])
    assert plan.job_output(done) == {"d": {"joined": True}}


def _routed() -> Plan:
    return _plan(
        [
            _node("t", "trigger.manual"),
            _node("c", "condition", expression="input.ok"),
            _node("yes"),
            _node("no"),
            _node("no2"),
            _node("join"),
        ],
        [
            {"source": "t", "target": "c"},
            {"source": "c", "sourceHandle": "true", "target": "yes"},
            {"source": "c", "sourceHandle": "false", "target": "no"},
            {"source": "no", "target": "no2"},
            {"source": "yes", "target": "join"},
            {"source": "no2", "target": "join"},
        ],
    )


def test_a_condition_skips_the_untaken_branch_and_everything_only_behind_it() -> None:
    plan = _routed()
    done = {"t": Done(COMPLETED, {"ok": True}), "c": Done(COMPLETED, {"result": True})}
    runnable, skipped = plan.ready(done)
    assert runnable == ["yes"] and skipped == ["no", "no2"]
    done |= {n: Done(SKIPPED) for n in skipped}
    done["yes"] = Done(COMPLETED, "Y")
    # join is reachable through the taken branch too: it runs, with only that input
    assert plan.ready(done) == (["join"], [])
    assert plan.node_input("join", done) == {"yes": "Y"}


def test_skipped_is_derived_from_the_recorded_outputs_alone() -> None:
    plan = _routed()
    assert plan.skipped({"t": {}, "c": {"result": False}}) == ["yes"]
    # "join" waits for "no2", which has not run: not skipped
    assert plan.skipped({"t": {}, "c": {"result": True}, "yes": 1}) == ["no", "no2"]


def test_sinks_that_were_skipped_are_not_in_the_output() -> None:
    plan = _plan(
        [
            _node("t", "trigger.manual"),
            _node("c", "condition", expression="input.ok"),
            _node("a"),
            _node("b"),
        ],
        [
            {"source": "t", "target": "c"},
            {"source": "c", "sourceHandle": "true", "target": "a"},
            {"source": "c", "sourceHandle": "false", "target": "b"},
        ],
    )
    done = {
        "t": Done(COMPLETED),
        "c": Done(COMPLETED, {"result": False}),
        "a": Done(SKIPPED),
        "b": Done(COMPLETED, 2),
    }
    assert plan.sinks() == ("a", "b")
    assert plan.job_output(done) == {"b": 2}


def test_pure_modules_compute_their_output() -> None:
    plan = _routed()
    data = scope({"ok": 0}, {"t": {"ok": 0}}, "trk")
    assert pure_output(plan.node("t"), data) == {"ok": 0}
    # JMESPath truth: 0 is true, so is any non-empty value
    assert pure_output(plan.node("c"), data) == {"result": True}
    assert pure_output(plan.node("c"), scope({}, {}, "trk")) == {"result": False}
    assert pure_output(plan.node("yes"), data) == {"t": {"ok": 0}}
