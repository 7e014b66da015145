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
    apps = canary.workflows.list_apps()["apps"]
    assert not [a for a in apps if a["name"].startswith(verify.CANARY_PREFIX)]
    assert canary.queues.request("GET", "/queues")["queues"] == []
    assert canary.queues.request("GET", "/subscriptions")["subscriptions"] == []


def test_the_canary_never_runs_through_an_app_someone_made_before_it(
    engine: LocalRuntime,
) -> None:
    """A key that may create apps makes `ezgh-canary` (the name the canary used to look for
    and use) first: the canary makes its own app under a name drawn when it starts, runs
    through it, and removes it, leaving the squatter's app untouched and never given a
    task."""
    admin = verify.Canary(_settings(engine))
    squatter = admin.workflows.request("POST", "/apiKeys", json={
        "name": "squatter", "permissions": [{"action": "workflows.apps.update"}]})  # fmt: skip
    squatted = verify.Canary({**_settings(engine), "api_key": squatter["key"]})
    made = squatted.workflows.create_app("ezgh-canary", "pull")
    report = verify.Canary(_settings(engine), timeout=60).run()

    assert report.passed, [c.to_json() for c in report.checks]
    synced = next(c for c in report.checks if c.name == "pull app synced")
    assert made["id"] not in synced.detail and verify.CANARY_PREFIX in synced.detail
    runs = admin.workflows.search_runs(limit=100)["runs"]
    assert runs and made["id"] not in {r["appId"] for r in runs}
    assert admin.workflows.get_app(made["id"])["status"] == "pending"  # never synced, no task
    names = [a["name"] for a in admin.workflows.list_apps()["apps"]]
    assert [n for n in names if n.startswith("ezgh-canary")] == ["ezgh-canary"]  # its own: gone


def test_each_canary_draws_a_name_nobody_can_guess() -> None:
    names = {verify.canary_name() for _ in range(50)}
    assert len(names) == 50
    for name in names:
        suffix = name.removeprefix(verify.CANARY_PREFIX)
        assert len(suffix) == 32 and int(suffix, 16) >= 0 and len(name) <= 64


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


def test_a_failed_canary_removes_what_it_made_too(
    engine: LocalRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    def fail(self: verify.Canary, app: dict[str, Any], queue_id: str) -> None:
        with self.check("run started"):
            raise RuntimeError("the run could not start")

    monkeypatch.setattr(verify.Canary, "_run", fail)
    canary = verify.Canary(_settings(engine), timeout=60)
    report = canary.run()
    assert not report.passed and report.checks[-1].name == "run started"
    assert "pull app synced" in [c.name for c in report.checks]  # it had made them
    apps = canary.workflows.list_apps()["apps"]
    assert not [a for a in apps if a["name"] == canary.name]
    assert canary.name not in [q["name"] for q in canary.queues.request("GET", "/queues")["queues"]]
    assert canary.queues.request("GET", "/subscriptions")["subscriptions"] == []
