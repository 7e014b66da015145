"""The graph validator: every rule refuses with a message naming the node or edge at fault."""

from __future__ import annotations

from typing import Any

import pytest
from ezgh_engine.core.flows.validate import check_graph
from ezgh_engine.errors import ValidationError


def _graph(nodes: list[dict[str, Any]], edges: list[dict[str, Any]]) -> dict[str, Any]:
    return {"nodes": nodes, "edges": edges}


T = {"id": "start", "moduleType": "trigger.manual"}


def _transform(node_id: str, expression: str = "in") -> dict[str, Any]:
    return {"id": node_id, "moduleType": "transform", "config": {"expression": expression}}


def _refused(graph: dict[str, Any]) -> str:
    with pytest.raises(ValidationError) as caught:
        check_graph(graph)
    return caught.value.message


def test_a_valid_diamond_passes_with_comment_nodes_kept() -> None:
    graph = check_graph(
        _graph(
            [
                T,
                _transform("b"),
                _transform("c"),
                _transform("d"),
                {"id": "note", "moduleType": "comment", "config": {"text": "hi"}},
            ],
            [
                {"source": "start", "target": "b"},
                {"source": "start", "target": "c"},
                {"source": "b", "target": "d"},
                {"source": "c", "target": "d"},
            ],
        )
    )
    assert [n.id for n in graph.nodes] == ["start", "b", "c", "d", "note"]
    assert [n.id for n in graph.executable().nodes] == ["start", "b", "c", "d"]


def test_a_cycle_is_refused_naming_a_node_on_it() -> None:
    message = _refused(
        _graph(
            [T, _transform("a"), _transform("b")],
            [
                {"source": "start", "target": "a"},
                {"source": "a", "target": "b"},
                {"source": "b", "target": "a", "targetHandle": "back"},
            ],
        )
    )
    assert "cycle" in message and ("node a" in message or "node b" in message)


def test_a_self_loop_is_refused_naming_the_edge() -> None:
    message = _refused(
        _graph(
            [T, _transform("a")],
            [
                {"source": "start", "target": "a"},
                {"id": "loop", "source": "a", "target": "a", "targetHandle": "x"},
            ],
        )
    )
    assert "edge loop" in message and "cycle" in message


@pytest.mark.parametrize("triggers", [0, 2])
def test_exactly_one_trigger(triggers: int) -> None:
    nodes = [{"id": f"t{i}", "moduleType": "trigger.manual"} for i in range(triggers)]
    message = _refused(_graph([*nodes, _transform("a")], []))
    assert "exactly one trigger" in message


def test_an_unknown_module_type_names_the_node() -> None:
    message = _refused(_graph([T, {"id": "x", "moduleType": "python.eval"}], []))
    assert "node x" in message and "python.eval" in message


def test_an_edge_to_a_missing_node_names_the_edge() -> None:
    message = _refused(_graph([T], [{"id": "e1", "source": "start", "target": "ghost"}]))
    assert "edge e1" in message and "ghost" in message


def test_an_unknown_source_handle_is_refused() -> None:
    message = _refused(
        _graph(
            [T, _transform("a")],
            [{"id": "e1", "source": "start", "sourceHandle": "maybe", "target": "a"}],
        )
    )
    assert "edge e1" in message and "maybe" in message


def test_a_condition_edge_needs_true_or_false() -> None:
    cond = {"id": "c", "moduleType": "condition", "config": {"expression": "input.ok"}}
    message = _refused(
        _graph(
            [T, cond, _transform("a")],
            [
                {"source": "start", "target": "c"},
                {"id": "e2", "source": "c", "target": "a"},
            ],
        )
    )
    assert "edge e2" in message and "'true' or 'false'" in message


def test_two_edges_into_one_handle_are_refused() -> None:
    message = _refused(
        _graph(
            [T, _transform("a"), _transform("b")],
            [
                {"source": "start", "target": "a"},
                {"source": "start", "target": "b"},
                {"id": "dup", "source": "a", "target": "b", "targetHandle": "start"},
            ],
        )
    )
    assert "two edges into one handle" in message and "node b" in message


def test_an_edge_into_the_trigger_is_refused() -> None:
    message = _refused(
        _graph(
            [T, _transform("a")],
            [
                {"source": "start", "target": "a"},
                {"id": "back", "source": "a", "target": "start"},
            ],
        )
    )
    assert "edge back" in message and "takes no input" in message


def test_a_node_without_incoming_edges_is_refused() -> None:
    message = _refused(_graph([T, _transform("orphan")], []))
    assert "node orphan" in message


@pytest.mark.parametrize(
    ("node", "fragment"),
    [
        ({"id": "x", "moduleType": "transform"}, "config.expression is required"),
        ({"id": "x", "moduleType": "http.request", "config": {}}, "config.url is required"),
        (
            {
                "id": "x",
                "moduleType": "http.request",
                "config": {"url": "http://127.0.0.1/", "method": "BREW"},
            },
            "config.method must be one of",
        ),
        ({"id": "x", "moduleType": "delay", "config": {}}, "exactly one of seconds or until"),
        ({"id": "x", "moduleType": "delay", "config": {"seconds": "soon"}}, "type number"),
        ({"id": "x", "moduleType": "wait.event", "config": {}}, "timeoutSeconds is required"),
        (
            {
                "id": "x",
                "moduleType": "wait.event",
                "config": {"timeoutSeconds": 5, "queueId": "q"},
            },
            "go together",
        ),
        (
            {"id": "x", "moduleType": "queue.send", "config": {"queueId": "q", "messages": []}},
            "config.messages must hold",
        ),
        (
            {"id": "x", "moduleType": "workflow.invoke", "config": {"appId": "a"}},
            "config.workflow is required",
        ),
        ({"id": "x", "moduleType": "flow.invoke", "config": {}}, "config.flowId is required"),
        (
            {"id": "x", "moduleType": "transform", "config": {"expression": "in.[["}},
            "invalid JMESPath",
        ),
        (
            {"id": "x", "moduleType": "http.request", "config": {"url": "http://x/{{ in.[ }}"}},
            "invalid JMESPath",
        ),
        (
            {"id": "x", "moduleType": "transform", "config": {"expression": "multiply(in, `2`)"}},
            "unknown function multiply()",
        ),
        (
            {
                "id": "x",
                "moduleType": "queue.send",
                "config": {"queueId": "{{ upper(input.q) }}", "messages": [{"body": "b"}]},
            },
            "unknown function upper()",
        ),
        (
            {"id": "x", "moduleType": "condition", "config": {"expression": "length(in, in)"}},
            "function length() takes 1 argument(s), got 2",
        ),
        (
            {
                "id": "x",
                "moduleType": "http.request",
                "config": {"url": "http://x/", "retries": "{{ input.n }}"},
            },
            "config.retries must be an integer",
        ),
        (
            {"id": "x", "moduleType": "http.request", "config": {"url": "hooks.invalid/x"}},
            "config.url must be an absolute http(s) URL",
        ),
        (
            {"id": "x", "moduleType": "delay", "config": {"until": "next tuesday"}},
            "config.until must be an ISO 8601 time",
        ),
        (
            {
                "id": "x",
                "moduleType": "wait.event",
                "config": {"timeoutSeconds": 5, "queueId": "q", "key": "a key"},
            },
            "config.key must match",
        ),
    ],
)
def test_each_module_checks_its_config(node: dict[str, Any], fragment: str) -> None:
    message = _refused(_graph([T, node], [{"source": "start", "target": "x"}]))
    assert message.startswith("node x:") and fragment in message


def test_a_templated_number_is_accepted_at_commit_time() -> None:
    node = {"id": "x", "moduleType": "delay", "config": {"seconds": "{{ in.start.wait }}"}}
    check_graph(_graph([T, node], [{"source": "start", "target": "x"}]))


def test_duplicate_node_ids_are_refused() -> None:
    assert "duplicate" in _refused(_graph([T, _transform("a"), _transform("a")], []))


def test_shapes_are_refused_with_a_path() -> None:
    assert "graph.nodes" in _refused({"nodes": [], "edges": []})
    assert "nodes[0]" in _refused({"nodes": ["x"]})
    assert "edges[0]: source" in _refused({"nodes": [T], "edges": [{"target": "start"}]})
