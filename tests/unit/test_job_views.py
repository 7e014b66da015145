"""GetJob within one answer's size (`service.job_views`): values inline while they fit, in
order, the others as references; actions paged when their records alone do not fit."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import pytest
from ezgh_engine import config
from ezgh_engine.core import answers
from ezgh_engine.core.flows.jobs import Actor, JobInput, step_name
from ezgh_engine.core.models import Run, Step
from ezgh_engine.errors import ValidationError
from ezgh_engine.service import job_views

from tests.api.conftest import ENV

AT = "2026-01-01T00:00:00.000Z"
NODES = ["t", *(f"n{i}" for i in range(6))]
GRAPH = {
    "nodes": [{"id": "t", "moduleType": "trigger.manual"}]
    + [{"id": n, "moduleType": "transform", "config": {"expression": "in"}} for n in NODES[1:]],
    "edges": [{"source": a, "target": b} for a, b in itertools.pairwise(NODES)],
}
VALUE = "v" * 10_000


@pytest.fixture(autouse=True)
def _secret(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name, value in ENV.items():  # the settings (cursors are sealed with its secret)
        monkeypatch.setenv(name, value)
    config.reset_settings()
    yield
    config.reset_settings()


def _step(node: str, i: int) -> Step:
    name = step_name(node)
    return Step(id=f"{name}#1", name=name, kind="run", status="completed", attempt=1,
                order=f"{i:03d}", started_at=AT, ended_at=AT, output={"v": VALUE},
                has_output=True)  # fmt: skip


def _job() -> tuple[Run, JobInput]:
    job = JobInput("flow-1", "commit-1", AT, "main", {"v": VALUE}, "trk", Actor("k", "api"))
    steps = tuple(_step(n, i) for i, n in enumerate(NODES))
    run = Run(id="job-1", org_id="o", project_id="p", app_id="a", workflow="flow",
              status="running", input=job.to_run_input(), attempt=1, created_at=AT,
              started_at=AT, version=1, steps=steps)  # fmt: skip
    return run, job


def _answer(cursor: str | None = None) -> dict[str, Any]:
    run, job = _job()
    return job_views.job_answer(run, job, GRAPH, lambda step: None, actions_cursor=cursor)


def test_values_inline_while_they_fit_then_references(monkeypatch: pytest.MonkeyPatch) -> None:
    whole = _answer()
    assert [a["nodeId"] for a in whole["actions"]] == NODES and "nextActionsCursor" not in whole
    assert all("input" in a and "output" in a for a in whole["actions"])
    # Room for about five values: the job's input, then the first actions' values, in order.
    monkeypatch.setattr(answers, "ANSWER_BYTES", answers.size(whole) - 8 * len(VALUE))
    bounded = _answer()
    assert answers.size(bounded) <= answers.ANSWER_BYTES
    assert bounded["input"] == {"v": VALUE}
    acts = bounded["actions"]
    assert [a["nodeId"] for a in acts] == NODES  # every record still fits
    assert "output" in acts[0] and "outputRef" not in acts[0]
    last = acts[-1]
    assert last["inputRef"] == f"actions/{last['nodeId']}/input"
    assert last["outputRef"] == f"steps/node%3A{last['nodeId']}%231/output"


def test_actions_that_do_not_fit_are_paged(monkeypatch: pytest.MonkeyPatch) -> None:
    whole = _answer()
    record = answers.size(job_views._without_values(whole["actions"][0]))
    head = {k: v for k, v in whole.items() if k not in ("input", "actions")}
    head.update(inputRef="input", actions=[], nextActionsCursor="c" * 512)
    monkeypatch.setattr(answers, "ANSWER_BYTES", answers.size(head) + 2 * record + 4)
    seen: list[str] = []
    page = _answer()
    while True:
        assert 1 <= len(page["actions"]) <= 2 and answers.size(page) <= answers.ANSWER_BYTES
        seen += [a["nodeId"] for a in page["actions"]]
        if "nextActionsCursor" not in page:
            break
        page = _answer(page["nextActionsCursor"])
    assert seen == NODES
    with pytest.raises(ValidationError):
        _answer("not-a-cursor")


def test_an_input_built_from_a_stored_output_is_a_reference() -> None:
    run, job = _job()
    stored = run.steps[2]  # n1's output is stored outside the run
    moved = Step(**{**stored.__dict__, "output": None, "has_output": False,
                    "output_ref": "steps/node%3An1%231/w/output"})  # fmt: skip
    run = Run(**{**run.__dict__, "steps": (*run.steps[:2], moved, *run.steps[3:])})
    acts = {
        a["nodeId"]: a for a in job_views.job_answer(run, job, GRAPH, lambda s: None)["actions"]
    }
    assert acts["n1"]["outputRef"] == "steps/node%3An1%231/w/output" and "output" not in acts["n1"]
    assert acts["n2"]["inputRef"] == "actions/n2/input" and "input" not in acts["n2"]
    assert acts["n3"]["input"] == {"n2": {"v": VALUE}}
