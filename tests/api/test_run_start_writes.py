"""A run's start: without a run key it is one conditional Put (a transaction of
one item was billed twice the write units); with a key the run and its key stay one
transaction. Either way a second start of the same ID or key is refused."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from ezgh_engine import clock
from ezgh_engine.adapters import aws, runs_store
from ezgh_engine.core.models import Run

from tests.api.steps_helpers import new_run

WRITES = {"PutItem", "UpdateItem", "TransactWriteItems", "DeleteItem", "BatchWriteItem"}


def _new_run(run_key: str | None = None) -> Run:
    return new_run(input={"n": 1}, run_key=run_key)


def _writes(action: Any) -> list[str]:
    seen: list[str] = []
    stop = aws.observe(lambda call: seen.append(call["operation"]))
    try:
        action()
    finally:
        stop()
    return [op for op in seen if op in WRITES]


def test_a_run_without_a_key_starts_with_one_plain_conditional_put(aws_env: None) -> None:
    run = _new_run()
    assert _writes(lambda: runs_store.create_run(run, now_epoch_s=clock.now_ms() // 1000)) == [
        "PutItem"
    ]
    stored = runs_store.get_run(run.id, with_steps=False)
    assert stored is not None and stored.input == {"n": 1}
    with pytest.raises(runs_store.RunExists):
        runs_store.create_run(replace(run, input={"n": 2}), now_epoch_s=clock.now_ms() // 1000)
    again = runs_store.get_run(run.id, with_steps=False)
    assert again is not None and again.input == {"n": 1}


def test_a_run_with_a_key_and_its_key_are_one_transaction(aws_env: None) -> None:
    run = _new_run(run_key="order-1")
    assert _writes(lambda: runs_store.create_run(run, now_epoch_s=clock.now_ms() // 1000)) == [
        "TransactWriteItems"
    ]
    other = replace(_new_run(run_key="order-1"), project_id=run.project_id)
    with pytest.raises(runs_store.RunKeyTaken):
        runs_store.create_run(other, now_epoch_s=clock.now_ms() // 1000)
    assert runs_store.get_run(other.id, with_steps=False) is None
