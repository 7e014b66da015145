"""A run's API view: an ended run lists no step still pending."""

from __future__ import annotations

from ezgh_engine.core.models import Run, RunError, Step


def _run(status: str, *steps: Step, ended_at: str | None = None) -> Run:
    return Run(
        id="r",
        org_id="o",
        project_id="p",
        app_id="a",
        workflow="w",
        status=status,  # type: ignore[arg-type]
        input={},
        attempt=1,
        created_at="2026-01-01T00:00:00.000Z",
        started_at="2026-01-01T00:00:00.000Z",
        version=1,
        ended_at=ended_at,
        error=RunError("workflows.step_in_step", "StepInStepError", "nested"),
        steps=steps,
    )


def _step(name: str, status: str, **extra: object) -> Step:
    return Step(
        id=f"{name}#1",
        name=name,
        kind="run",
        status=status,  # type: ignore[arg-type]
        attempt=1,
        order=name,
        started_at="2026-01-01T00:00:01.000Z",
        **extra,  # type: ignore[arg-type]
    )


def test_an_ended_runs_pending_steps_show_as_cancelled_at_its_end() -> None:
    """The end is written first and its pending steps are cancelled by writes after it (each
    its own conditional write): a read between saw a `failed` run with its outer step of a
    `workflows.step_in_step` still `running`. The view shows what that cleanup writes."""
    ended = "2026-01-01T00:00:02.000Z"
    run = _run(
        "failed",
        _step("done", "completed", ended_at="2026-01-01T00:00:01.500Z", has_output=True),
        _step("outer", "running"),
        _step("nap", "sleeping", wake_at="2026-01-02T00:00:00.000Z"),
        ended_at=ended,
    )
    steps = {s["name"]: s for s in run.to_api()["steps"]}
    assert steps["done"]["status"] == "completed"
    assert steps["done"]["endedAt"] == "2026-01-01T00:00:01.500Z"
    for name in ("outer", "nap"):
        assert steps[name]["status"] == "cancelled", steps[name]
        assert steps[name]["endedAt"] == ended
        assert steps[name]["error"]["code"] == "workflows.cancelled"
        assert "wakeAt" not in steps[name]


def test_a_live_runs_steps_show_as_they_are() -> None:
    run = _run("running", _step("outer", "running"), _step("nap", "sleeping"))
    assert [s["status"] for s in run.to_api()["steps"]] == ["running", "sleeping"]
