"""Runs as the API answers them, each answer within Lambda's 6 MB (`core.answers`).

- GetRun: the run and its steps, values inline while they fit, in order (the run's input,
  its output, then each step's result); the others as references read with GetPayload
  (`inputRef: "input"`, `outputRef: "output"`, a step's `outputRef`). When the steps' records
  alone do not fit, the answer holds the first ones and `nextStepsCursor`, and
  `GET /runs/{runId}?stepsCursor=…` answers the run with the next ones.
- SearchRuns: the runs with their values inline while they fit, in order; a value kept in
  S3 is a reference (a list reads no payload).

A callback step that waits shows its `url` to a key that may complete it (`with_callback_urls`:
`workflows.runs.resume` on the run, `service.runs.may_resume`): the URL is a bearer
capability, so a key that may only read the run does not get it. The URL is made again from
the engine's token secret and the salt kept on the step (`service.callbacks`): no usable
secret is stored.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from ezgh_engine.adapters import ddb, payloads
from ezgh_engine.core import answers
from ezgh_engine.core.models import Run, Step
from ezgh_engine.errors import ValidationError
from ezgh_engine.service import callbacks

NEXT_STEPS = "nextStepsCursor"


def _steps_scope(run_id: str) -> str:
    return f"run-steps:{run_id}"


def _run_slots(run: Run, body: dict[str, Any]) -> list[answers.Slot]:
    slots = []
    if "input" in body:
        slots.append(answers.Slot(body, "input", "inputRef", payloads.RUN_INPUT_PATH))
    if "output" in body:
        slots.append(answers.Slot(body, "output", "outputRef", payloads.RUN_OUTPUT_PATH))
    return slots


def _step_slot(step: Step, body: dict[str, Any]) -> list[answers.Slot]:
    if "output" not in body:
        return []
    return [answers.Slot(body, "output", "outputRef", payloads.step_output_path(step.id))]


def run_answer(
    run: Run, *, steps_cursor: str | None = None, with_callback_urls: bool = False
) -> dict[str, Any]:
    """GetRun's answer: `run` (its input read already) with the page of its steps that
    `steps_cursor` opens (None: the first); `with_callback_urls`: a callback step with its
    `url` (for a key that may complete it)."""
    body = run.to_api(with_steps=False)
    slots = _run_slots(run, body)
    head = {k: v for k, v in body.items() if k not in ("input", "output")}
    head.update({s.ref_key: s.ref for s in slots})
    room = answers.ANSWER_BYTES - answers.size({**head, "steps": [], NEXT_STEPS: "c" * 512})
    steps = _after(run, steps_cursor)
    bodies = [_step_body(run, step, with_callback_urls) for step in steps]
    step_slots = [_step_slot(step, b) for step, b in zip(steps, bodies, strict=True)]
    records = [_without_values(b) for b in bodies]
    count = answers.fitting_count(records, room)
    body["steps"] = bodies[:count]
    if count < len(steps):
        last = steps[count - 1]
        key = {"order": {"S": last.order}, "id": {"S": last.id}}
        body[NEXT_STEPS] = ddb.encode_cursor(key, scope=_steps_scope(run.id))
    page_slots = [slot for group in step_slots[:count] for slot in group]
    answers.fit_values(body, [*slots, *page_slots])
    return body


def _step_body(run: Run, step: Step, with_callback_url: bool) -> dict[str, Any]:
    body = step.to_api()
    # Only while it may still complete it: after, the URL answers 409 and shows nothing.
    waiting = with_callback_url and step.status == "waiting"
    url = callbacks.url_for(run.id, step) if waiting else None
    if url:
        body["url"] = url
    return body


def _without_values(body: dict[str, Any]) -> dict[str, Any]:
    """A step's record with its result as a reference (what it takes at least)."""
    if "output" not in body:
        return body
    return {**{k: v for k, v in body.items() if k != "output"}, "outputRef": "s" * 300}


def _after(run: Run, cursor: str | None) -> list[Step]:
    """The run's steps (as its readers see them) after the step a cursor names."""
    steps = [run.step_view(step) for step in run.steps]
    if not cursor:
        return steps
    key = ddb.decode_cursor(cursor, scope=_steps_scope(run.id))
    try:
        after = (str(key["order"]["S"]), str(key["id"]["S"]))
    except (KeyError, TypeError):
        raise ValidationError("stepsCursor is not valid: pass this run's nextStepsCursor") from None
    return [step for step in steps if (step.order, step.id) > after]


def list_answer(runs: list[Run]) -> list[dict[str, Any]]:
    """SearchRuns' runs: values inline while they fit, in order (a value kept in S3, whose
    run has `input_ref`, is a reference)."""
    bodies = []
    slots: list[answers.Slot] = []
    for run in runs:
        unread = replace(run, input=None) if run.input_ref else run
        body = unread.to_api(with_steps=False)
        if run.input_ref:
            del body["input"]
            body["inputRef"] = run.input_ref
        bodies.append(body)
        slots += _run_slots(run, body)
    answers.fit_values({"runs": bodies, "nextCursor": "c" * 512}, slots)
    return bodies
