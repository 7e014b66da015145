"""The interpreter's planning: graph order, each node's input through the edges' handles,
condition routing with SKIPPED propagation, readiness, and the sink outputs.

The state is `done`: node id -> `Done` (a node that `COMPLETED` with its output, or was
`SKIPPED`). Everything here is a function of the executable graph and `done`, so the
interpreter (deciding what runs next) and the job view (showing which nodes were skipped)
reach the same answer from the same recorded outputs.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from ezgh_engine.core.flows.graph import Edge, Graph, Node
from ezgh_engine.core.flows.templating import evaluate

DoneStatus = Literal["COMPLETED", "SKIPPED"]
COMPLETED: DoneStatus = "COMPLETED"
SKIPPED: DoneStatus = "SKIPPED"


@dataclass(frozen=True)
class Done:
    """A node that has been decided: completed (with its output) or skipped."""

    status: DoneStatus
    output: Any = None


def truthy(value: Any) -> bool:
    """JMESPath's truth: false, null, "", [] and {} are false; everything else (0 too) true."""
    return not (value is None or value is False or value in ("", [], {}))


class Plan:
    """What can be known of a graph before it runs: order, predecessors, edges, sinks."""

    def __init__(self, graph: Graph) -> None:
        self.graph = graph.executable()
        self.incoming: dict[str, tuple[Edge, ...]] = {
            n.id: tuple(e for e in self.graph.edges if e.target == n.id) for n in self.graph.nodes
        }
        self.outgoing: dict[str, tuple[Edge, ...]] = {
            n.id: tuple(e for e in self.graph.edges if e.source == n.id) for n in self.graph.nodes
        }
        self.order = self._topological()

    def _topological(self) -> tuple[str, ...]:
        """Kahn's algorithm, taking nodes in authored order: stable, the same on every replay."""
        left = {n.id: len(self.incoming[n.id]) for n in self.graph.nodes}
        order: list[str] = []
        while len(order) < len(left):
            free = [n for n, count in left.items() if count == 0 and n not in order]
            if not free:
                raise ValueError("graph has a cycle")  # the validator refuses these first
            order.append(free[0])
            for edge in self.outgoing[free[0]]:
                left[edge.target] -= 1
        return tuple(order)

    def node(self, node_id: str) -> Node:
        return self.graph.node(node_id)

    def predecessors(self, node_id: str) -> tuple[str, ...]:
        """The distinct source nodes of a node's incoming edges, in edge order."""
        return tuple(dict.fromkeys(e.source for e in self.incoming[node_id]))

    @staticmethod
    def edge_live(edge: Edge, done: Mapping[str, Done], source_type: str) -> bool:
        """Whether the edge carries a value: its source completed and, from a condition, the
        edge leaves by the handle the condition took."""
        source = done.get(edge.source)
        if source is None or source.status != COMPLETED:
            return False
        if source_type == "condition":
            taken = "true" if truthy((source.output or {}).get("result")) else "false"
            return edge.source_handle == taken
        return True

    def live_edges(self, node_id: str, done: Mapping[str, Done]) -> list[Edge]:
        return [
            e
            for e in self.incoming[node_id]
            if self.edge_live(e, done, self.node(e.source).module_type)
        ]

    def node_input(self, node_id: str, done: Mapping[str, Done]) -> dict[str, Any]:
        """One entry per live incoming edge: its handle (default the source id) -> the
        source's output."""
        return {e.key: done[e.source].output for e in self.live_edges(node_id, done)}

    def decide(self, node_id: str, done: Mapping[str, Done]) -> Literal["run", "skip"] | None:
        """None while a predecessor is undecided; then "run" if the node has no incoming edge
        (the trigger) or any live one, else "skip" (reachable only through untaken handles)."""
        preds = self.predecessors(node_id)
        if any(p not in done for p in preds):
            return None
        if not preds or self.live_edges(node_id, done):
            return "run"
        return "skip"

    def ready(self, done: Mapping[str, Done]) -> tuple[list[str], list[str]]:
        """(nodes to run now, in graph order; nodes newly skipped, skips propagated)."""
        state = dict(done)
        skipped: list[str] = []
        changed = True
        while changed:
            changed = False
            for node_id in self.order:
                if node_id not in state and self.decide(node_id, state) == "skip":
                    state[node_id] = Done(SKIPPED)
                    skipped.append(node_id)
                    changed = True
        runnable = [n for n in self.order if n not in state and self.decide(n, state) == "run"]
        return runnable, skipped

    def skipped(self, outputs: Mapping[str, Any]) -> list[str]:
        """Given the outputs of the nodes that completed, the nodes that are (so far) skipped."""
        done = {n: Done(COMPLETED, v) for n, v in outputs.items() if n in self.incoming}
        return self.ready(done)[1]

    def sinks(self) -> tuple[str, ...]:
        """Nodes with no outgoing edge, in graph order."""
        return tuple(n for n in self.order if not self.outgoing[n])

    def job_output(self, done: Mapping[str, Done]) -> dict[str, Any]:
        """A completed job's output: each sink node that ran -> its output."""
        return {
            n: done[n].output for n in self.sinks() if n in done and done[n].status == COMPLETED
        }


def pure_output(node: Node, scope: Mapping[str, Any]) -> Any:
    """The output of a module that only computes (trigger.manual, transform, condition)."""
    if node.module_type == "trigger.manual":
        return scope["input"]
    if node.module_type == "transform":
        return evaluate(str(node.config["expression"]), dict(scope))
    if node.module_type == "condition":
        return {"result": truthy(evaluate(str(node.config["expression"]), dict(scope)))}
    raise ValueError(f"{node.module_type} is not a pure module")
