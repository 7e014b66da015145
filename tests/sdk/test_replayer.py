"""`Replayer` and histories (`RunHistory`, `fetch_history`) against the real engine in process:
runs in flight on one code (tests/e2e/deploy_v1.py), their histories read through the API
with a read-only key, replayed against new code (deploy_v2.py); then the new code deployed,
to see each run do what the replay said it would. tests/e2e/test_replay_check.py does the
same through the CLI against `ezgh dev`'s runtime."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from ezgh_engine import clock as engine_clock
from ezgh_workflows import Context, Replayer, RunHistory, workflow
from ezgh_workflows._internal import clock as sdk_clock
from ezgh_workflows._internal.history import fetch_history
from ezgh_workflows.testing import ReplayDivergence, WorkflowEnvironment
from harnesses import EngineHarness
from sdk_engine import Engine

from tests.e2e import deploy_v1, deploy_v2

THREE_DAYS = 3 * 86_400 + 60


class ApiReader:
    """`fetch_history`'s reads, through the engine's API handler with one key."""

    def __init__(self, engine: Engine, key: str | None = None) -> None:
        self.engine, self.key = engine, key

    def _get(self, path: str, query: dict[str, str] | None = None) -> Any:
        answer = self.engine.api("GET", path, key=self.key, query=query)
        assert answer.status == 200, answer.body
        return answer.body

    def get_run(self, run_id: str) -> Any:
        return self._get(f"/runs/{run_id}")

    def list_run_events(self, run_id: str, *, cursor: str | None = None, limit: Any = None) -> Any:
        return self._get(f"/runs/{run_id}/events", {"cursor": cursor} if cursor else None)

    def get_payload(self, run_id: str, path: str) -> Any:
        return self._get(f"/runs/{run_id}/payloads/{quote(path, safe='/%')}")


def read_only_key(engine: Engine) -> str:
    body = {"name": "ci-replay", "permissions": [{"action": "workflows.runs.read"}]}
    answer = engine.api("POST", "/apiKeys", body=body)
    assert answer.status == 201, answer.body
    return str(answer.body["key"])


@pytest.fixture
def in_flight(engine: Engine, monkeypatch: pytest.MonkeyPatch) -> tuple[EngineHarness, dict]:
    """One run of each deploy_v1 workflow, recorded by deployment `v1`, sleeping in its
    three-day `cooldown`."""
    monkeypatch.setattr(sdk_clock, "now", engine_clock.now)
    monkeypatch.setenv("EZGH_DEPLOYMENT_ID", "v1")
    deploy_v1.CALLS.clear()
    harness = EngineHarness(engine)
    harness.serve(*deploy_v1.WORKFLOWS)
    runs = {w.name: harness.start(w.name) for w in deploy_v1.WORKFLOWS}
    for run_id in runs.values():
        assert harness.run(run_id)["steps"][-1]["status"] == "sleeping"
    return harness, runs


def test_the_replay_says_what_each_run_will_do_on_the_new_code(
    engine: Engine, in_flight: tuple[EngineHarness, dict], monkeypatch: pytest.MonkeyPatch
) -> None:
    harness, runs = in_flight
    reader = ApiReader(engine, read_only_key(engine))
    histories = {name: fetch_history(reader, run_id) for name, run_id in runs.items()}
    replayer = Replayer(deploy_v2.app, deployment_id="v2")
    reports = {name: replayer.replay(history) for name, history in histories.items()}

    verdicts = {n: r.divergence.kind if r.divergence else None for n, r in reports.items()}
    assert verdicts == deploy_v2.EXPECTED
    assert {n for n, r in reports.items() if r.breaks} == {
        n for n, kind in deploy_v2.EXPECTED.items() if kind
    }
    shifted = reports["newsletter"].divergence
    assert shifted is not None and shifted.recorded and shifted.asked
    assert (shifted.recorded.id, shifted.recorded.deployment_id) == ("send#3", "v1")
    assert (shifted.asked.id, shifted.asked.position, shifted.asked.asked_as) == (
        "cooldown#1",
        4,
        3,
    )
    assert shifted.code_deployment_id == "v2"
    assert "another step's result" in shifted.next_invocation
    kind = reports["reminder"].divergence
    assert kind is not None and "fails with workflows.nondeterminism" in kind.next_invocation
    assert reports["digest"].outcome == "waits on cooldown#1"
    assert reports["invites"].outcome == "waits on cooldown#1"  # the old path, by its marker

    # The new code deployed: each run does what its replay said.
    monkeypatch.setenv("EZGH_DEPLOYMENT_ID", "v2")
    harness.serve(*deploy_v2.WORKFLOWS)
    harness.skip(THREE_DAYS)
    ended = {name: harness.wait(run_id) for name, run_id in runs.items()}
    assert ended["reminder"]["status"] == "failed"
    assert ended["reminder"]["error"]["code"] == "workflows.nondeterminism"
    assert ended["newsletter"]["output"] == {"tips": "welcome sent", "survey": "tips sent"}
    assert ended["notify"]["output"] == ["owner notified", "ben notified"]
    assert ended["profile"]["status"] == "completed" and deploy_v1.CALLS["load user"] == 2
    assert ended["invites-wrong"]["status"] == "completed"
    assert deploy_v1.CALLS["invite ana"] == 3  # invites once, invites-wrong twice
    assert ended["digest"]["output"] == "digest delivered" and deploy_v1.CALLS["archive"] == 1
    assert ended["invites"]["output"] == ["invited ana", "invited ben"]
    invites = harness.run(runs["invites"])["steps"]
    assert [s["id"] for s in invites][:3] == ["invite#1", "invite#2", "cooldown#1"]
    assert invites[-1]["id"] == "patched:invite-ids" and invites[-1]["output"] is False


def test_a_new_run_takes_the_patched_path(engine: Engine) -> None:
    harness = EngineHarness(engine)
    harness.serve(*deploy_v2.WORKFLOWS)
    run = harness.run(harness.start("invites"))
    assert [s["id"] for s in run["steps"]] == [
        "patched:invite-ids",
        "invite-ana",
        "invite-ben",
        "cooldown#1",
    ]
    history = fetch_history(ApiReader(engine), run["id"])
    Replayer(deploy_v2.app).check(history)  # the new code fits its own runs
    with pytest.raises(ReplayDivergence, match="invite#1"):
        Replayer(deploy_v1.app).check(history)  # and a rollback would not


def test_a_history_file_round_trips(
    engine: Engine, in_flight: tuple[EngineHarness, dict], tmp_path: Path
) -> None:
    _, runs = in_flight
    history = fetch_history(ApiReader(engine), runs["newsletter"])
    path = tmp_path / "run.json"
    path.write_text(history.dumps())
    data = json.loads(path.read_text())
    assert (data["format"], data["version"]) == ("ezgh-run-history", 1)
    assert [s["id"] for s in data["steps"]] == ["send#1", "send#2", "send#3", "cooldown#1"]
    assert data["steps"][0]["output"] == "welcome sent"
    assert {s["deploymentId"] for s in data["steps"]} == {"v1"}
    assert any(e["type"] == "run.started" for e in data["events"])
    assert RunHistory.load(path) == history
    Replayer(deploy_v1.app).check(path)
    with pytest.raises(ReplayDivergence) as diverged:
        Replayer(deploy_v2.WORKFLOWS).check(str(path))
    assert diverged.value.report.divergence and diverged.value.report.breaks


def test_a_large_output_is_read_back_into_the_history(engine: Engine) -> None:
    big = "x" * 500_000  # over the item's inline size: kept as a payload, `outputRef` in GetRun

    @workflow("big")
    async def big_wf(ctx: Context) -> Any:
        value = await ctx.step.run("make", lambda: big)
        await ctx.step.sleep("nap", "1h")
        return len(value)

    harness = EngineHarness(engine)
    harness.serve(big_wf)
    run_id = harness.start("big")
    assert "outputRef" in harness.run(run_id)["steps"][0]
    history = fetch_history(ApiReader(engine), run_id)
    assert history.steps[0]["output"] == big and "outputRef" not in history.steps[0]
    assert Replayer([big_wf]).replay(history).outcome == "waits on nap#1"


def test_ended_runs_are_checked_but_only_the_retryable_break() -> None:
    @workflow("wf")
    async def v1(ctx: Context) -> Any:
        await ctx.step.run("a", lambda: 1)
        await ctx.step.run("a", lambda: 2)
        if ctx.input == "fail":
            await ctx.step.run("boom", lambda: 1 / 0, retries=0)

    @workflow("wf")
    async def v2(ctx: Context) -> Any:
        await ctx.step.run("a", lambda: 2)  # the first `a` removed

    env = WorkflowEnvironment([v1])
    completed = env.start("wf").wait().history()
    failed = env.start("wf", "fail").wait().history()
    assert (completed.status, failed.status) == ("completed", "failed")
    reports = [Replayer([v2]).replay(h) for h in (completed, failed)]
    assert [r.divergence.kind if r.divergence else None for r in reports] == [
        "counter_shift",
        "counter_shift",
    ]
    assert [r.breaks for r in reports] == [False, True]  # a failed run may be retried


def test_a_skipped_step_of_its_own_name_is_safe() -> None:
    @workflow("wf")
    async def v1(ctx: Context) -> Any:
        await ctx.step.run("audit", lambda: "logged")
        await ctx.step.run("charge", lambda: "charged")
        await ctx.step.sleep("cooldown", "1d")

    @workflow("wf")
    async def v2(ctx: Context) -> Any:
        await ctx.step.run("charge", lambda: "charged")  # `audit` removed: nothing shifts
        await ctx.step.sleep("cooldown", "1d")

    history = WorkflowEnvironment([v1]).start("wf").history()
    report = Replayer([v2]).check(history)
    assert [s.id for s in report.skipped] == ["audit#1"] and not report.breaks


def test_the_replay_runs_no_step_and_stops_where_the_history_ends() -> None:
    ran: list[str] = []

    @workflow("wf")
    async def wf(ctx: Context) -> Any:
        await ctx.step.run("a", lambda: ran.append("a"))
        await ctx.step.sleep("cooldown", "1d")
        await ctx.step.run("b", lambda: ran.append("b"))

    history = WorkflowEnvironment([wf]).start("wf").history()
    ran.clear()
    assert Replayer([wf]).check(history).outcome == "waits on cooldown#1"
    data = history.to_json()
    data["steps"][1].update(status="completed", output=None)  # as if the sleep had ended
    report = Replayer([wf]).check(data)
    assert report.outcome == "the history ends at b#1 (start)" and ran == []


def test_a_workflow_the_code_lacks_breaks() -> None:
    history = WorkflowEnvironment([deploy_v1.digest]).start("digest").history()
    report = Replayer([deploy_v1.newsletter]).replay(history)
    assert report.breaks and report.divergence
    assert "workflows.unknown_workflow" in report.divergence.next_invocation


def test_a_replay_waits_where_the_run_waits() -> None:
    """Each kind of pending step replays as the wait it is (none is run, none diverges)."""

    @workflow("kid")
    async def kid(ctx: Context) -> Any:
        await ctx.step.sleep("nap", "1d")

    @workflow("wf")
    async def wf(ctx: Context) -> Any:
        await ctx.step.run("flaky", lambda: 1 / 0 if ctx.input == "retry" else 1, retries=3)
        callback = await ctx.step.create_callback("approve")
        if ctx.input == "callback":
            await callback.wait()
        if ctx.input == "child":
            await ctx.step.invoke("child", workflow="kid")
        if ctx.input == "message":
            await ctx.step.wait_for_message("paid", queue_id="q", key="k", timeout_seconds=99)
        await ctx.step.sleep("end", "1d")

    waits = {
        "retry": "flaky#1",
        "callback": "approve#1",
        "child": "child#1",
        "message": "paid#1",
        None: "end#1",
    }
    for case, step_id in waits.items():
        history = WorkflowEnvironment([wf, kid]).start("wf", case).history()
        assert Replayer([wf]).check(history).outcome == f"waits on {step_id}", case
    cancelling = WorkflowEnvironment([wf, kid]).start("wf").history().to_json()
    cancelling["run"]["status"] = "cancelling"  # the cancellation is this replay's to deliver
    report = Replayer([wf]).check(cancelling)
    assert report.outcome == "the history ends at end#1 (cancel)" and report.invoked_again


def test_a_parallel_step_in_its_branch_is_a_wait() -> None:
    @workflow("wf")
    async def wf(ctx: Context) -> Any:
        return await ctx.step.all([ctx.step.run("a", lambda: 1), ctx.step.run("b", lambda: 2)])

    data = WorkflowEnvironment([wf]).start("wf").history().to_json()
    branch = data["steps"][0]
    branch.update(status="waiting", attempt=0)  # as GetRun shows a branch not yet run
    del branch["output"]
    assert Replayer([wf]).check(data).outcome == "waits on a#1"
    branch.update(status="running", attempt=1)  # its branch invocation runs it now
    assert Replayer([wf]).check(data).outcome == "the history ends at a#1 (start)"
