"""`ezgh ops verify` runs its canary through the engine and reports every check."""

from __future__ import annotations

import json
from typing import Any

import ezgh_workflows
import pytest
from ezgh_engine.cli import verify
from ezgh_engine.cli.main import main
from ezgh_engine.local.runtime import LocalRuntime

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.real_time,
    pytest.mark.moto_only(
        "the canary's report (in real time): what it runs is tests/e2e/test_durable_runs.py's, on both"
    ),
]  # the canary times a real sleep


def _settings(engine: LocalRuntime) -> dict[str, str]:
    return {
        "api_url": engine.api_url,
        "api_key": engine.api_key,
        "org_id": engine.org_id,
        "project_id": engine.project_id,
    }


class _Workers:
    """The canary's workers, as made: the long poll each was given, and whether its `run`
    had returned."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.made: list[Any] = []
        self.ended: list[Any] = []
        workers = self

        class Recorded(ezgh_workflows.Worker):  # type: ignore[misc]
            def __init__(self, *args: Any, **kwargs: Any) -> None:
                super().__init__(*args, **kwargs)
                workers.made.append(self)

            def run(self) -> None:
                try:
                    super().run()
                finally:
                    workers.ended.append(self)

        monkeypatch.setattr(ezgh_workflows, "Worker", Recorded)


def test_the_canary_passes_every_check_and_cleans_up(
    engine: LocalRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[verify.Check] = []
    workers = _Workers(monkeypatch)
    report = verify.Canary(_settings(engine), timeout=60, echo=seen.append).run()

    assert report.passed, [c.to_json() for c in report.checks]
    names = [c.name for c in report.checks]
    assert names[:2] == ["api health", "api key"]
    for step, _ in verify.STEP_CHECKS:
        assert any(name.startswith(f"{step}:") for name in names)
    assert names[-1] == "run completed"
    assert seen == report.checks  # reported as they happen
    assert all(c.seconds >= 0 for c in report.checks)
    sleep = next(c for c in report.checks if c.name.startswith("sleep:"))
    assert sleep.seconds >= verify.SLEEP_SECONDS - 0.5
    # Its cleanup is quick: the worker's stop waits out the receive in progress (it once
    # waited out a 20 s long poll), so the worker polls briefly, and it had ended by the
    # canary's return. (Not timed: that would fail on a slow machine.)
    assert [w.poll_wait_seconds for w in workers.made] == [verify.WORKER_POLL_SECONDS]
    assert verify.WORKER_POLL_SECONDS <= 1
    assert workers.ended == workers.made
    # What it made is gone again: no canary app, queue or subscription is left behind.
    canary = verify.Canary(_settings(engine))
    assert not [a for a in canary.workflows.list_apps()["apps"] if a["name"] == verify.CANARY_APP]
    assert canary.queues.request("GET", "/queues")["queues"] == []
    assert canary.queues.request("GET", "/subscriptions")["subscriptions"] == []


def test_a_failing_check_stops_the_canary_and_says_what_it_saw(
    engine: LocalRuntime, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # A key that may read apps but not create them: the canary fails at its app, exit 1.
    admin = verify.Canary(_settings(engine))
    made = admin.workflows.request(
        "POST",
        "/apiKeys",
        json={"name": "reader", "permissions": [{"action": "workflows.runs.read"}]},
    )
    for name, value in {**engine.env, "EZGH_API_KEY": made["key"]}.items():
        monkeypatch.setenv(name, value)
    code = main(["ops", "verify", "--json", "--timeout", "5"])
    body = json.loads(capsys.readouterr().out)

    assert code == 1 and body["passed"] is False
    failed = body["checks"][-1]
    assert failed["passed"] is False
    assert "403" in failed["detail"]
    assert all(c["passed"] for c in body["checks"][:-1])


def test_unreachable_settings_are_exit_2(
    monkeypatch: pytest.MonkeyPatch, tmp_path, capsys: pytest.CaptureFixture[str]
) -> None:
    for name in ("EZGH_API_URL", "EZGH_API_KEY", "EZGH_ORG_ID", "EZGH_PROJECT_ID"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)
    assert main(["ops", "verify"]) == 2
    assert "no api url" in capsys.readouterr().err
