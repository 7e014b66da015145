"""`ezgh workflows replay-check` and `runs export` against the local runtime (`ezgh dev`'s):
runs of deploy_v1.py in flight in their three-day `cooldown`, the gate run with a read-only
key as a CI step would, and then the new code deployed, so that each run does what the gate
said it would: a removed step in a counter sequence (silently another step's result), a
renamed step, a changed kind (`workflows.nondeterminism`), a step moved into a loop, an
explicit-ID change without a patch are caught; an appended step and an explicit-ID change
behind `patched()` pass."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest
from ezgh_engine.cli.main import main
from ezgh_engine.local import apps as local_apps
from ezgh_workflows import PushApp, Replayer
from ezgh_workflows.testing import ReplayDivergence

from tests.e2e import deploy_v1, deploy_v2
from tests.e2e.test_durable_runs import wait_ended, wait_sleeping

pytestmark = pytest.mark.e2e

APP = "deploy-demo"


class Deployed:
    """The app's endpoint, serving one version of the code at a time (a deploy swaps it)."""

    def __init__(self, *versions: PushApp) -> None:
        self.versions = versions
        self.current = versions[0]

    @property
    def signing_key(self) -> str | None:
        return self.current.signing_key

    @signing_key.setter
    def signing_key(self, value: str | None) -> None:
        for version in self.versions:
            version.signing_key = value

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        await self.current(scope, receive, send)


@pytest.fixture()
def deployed(engine: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    """deploy_v1's code served as the push app `deploy-demo` (deployment `v1`)."""
    monkeypatch.setenv("EZGH_DEPLOYMENT_ID", "v1")
    deploy_v1.CALLS.clear()
    endpoint = Deployed(deploy_v1.app, deploy_v2.app)
    served = local_apps.serve_app(APP, endpoint)
    api = local_apps.EngineApi(engine.api_url, engine.api_key, engine.org_id, engine.project_id)
    try:
        api.register(served)
        yield endpoint, served.record
    finally:
        served.server.shutdown()
        api.close()


@pytest.fixture()
def ezgh(engine: Any, client: Any, capsys: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Any):
    """`ezgh workflows …` in process, with a key that may only read runs (a CI secret)."""
    perms = [{"action": "workflows.runs.read"}]
    key = client.request("POST", "/apiKeys", json={"name": "ci", "permissions": perms})["key"]
    for name, value in {**engine.env, "EZGH_API_KEY": key}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.chdir(tmp_path)  # no stray .ezgh/dev.env

    def run(*argv: str, expect: int = 0) -> Any:
        capsys.readouterr()
        code = main(["workflows", *argv])
        out, err = capsys.readouterr()
        assert code == expect, (code, out, err)
        return json.loads(out) if "--json" in argv else out + err

    return run


def test_replay_check_catches_the_breaking_changes_and_passes_the_safe_ones(
    engine: Any,
    client: Any,
    deployed: Any,
    ezgh: Any,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Any,
) -> None:
    endpoint, record = deployed
    runs = {w.name: client.start_run(record["id"], w.name)["id"] for w in deploy_v1.WORKFLOWS}
    for run_id in runs.values():
        wait_sleeping(engine, client, run_id)

    check = ("replay-check", "--app", APP, "--deployment-id", "v2")
    found = ezgh(*check, "--module", "tests.e2e.deploy_v2:app", "--json", expect=1)
    verdicts = {r["workflow"]: (r["divergence"] or {}).get("kind") for r in found["runs"]}
    assert verdicts == deploy_v2.EXPECTED
    assert found["breaks"] == 5 and found["checked"] == len(runs)
    shifted = next(r for r in found["runs"] if r["workflow"] == "newsletter")["divergence"]
    assert shifted["recorded"]["id"] == "send#3" and shifted["recorded"]["deploymentId"] == "v1"
    assert shifted["asked"]["id"] == "cooldown#1" and shifted["codeDeploymentId"] == "v2"
    assert "another step's result" in shifted["nextInvocation"]
    text = ezgh(*check, "--module", "tests.e2e.deploy_v2:app", expect=1)
    assert "BREAK  newsletter" in text and "5 of 7 runs break" in text
    assert "fails with workflows.nondeterminism" in text
    assert "recorded:  #3 send#3 (run, completed) by deployment v1" in text

    # The code deployed now passes, and so does the new code with only its safe changes.
    assert "no run breaks" in ezgh(*check, "--module", "tests.e2e.deploy_v1:app")
    ezgh(*check, "--module", "tests.e2e.deploy_v2:safe_app")
    assert "--module MODULE:ATTR is needed" in ezgh(*check, expect=1)
    assert "ModuleNotFoundError" in ezgh(*check, "--module", "nope:app", expect=1)

    # A run's history as a file, replayed in a test.
    path = tmp_path / "newsletter.json"
    ezgh("runs", "export", runs["newsletter"], "--output", str(path))
    assert json.loads(path.read_text())["steps"][0]["output"] == "welcome sent"
    Replayer(deploy_v1.app).check(path)
    with pytest.raises(ReplayDivergence, match="send#3"):
        Replayer(deploy_v2.app).check(path)

    # Deployed anyway: each run does what the gate said.
    monkeypatch.setenv("EZGH_DEPLOYMENT_ID", "v2")
    endpoint.current = deploy_v2.app
    engine.clock.advance(timedelta(days=3, seconds=1))
    ended = {name: wait_ended(engine, client, run_id) for name, run_id in runs.items()}
    assert ended["reminder"]["status"] == "failed"
    assert ended["reminder"]["error"]["code"] == "workflows.nondeterminism"
    assert ended["newsletter"]["output"] == {"tips": "welcome sent", "survey": "tips sent"}
    assert ended["notify"]["output"] == ["owner notified", "ben notified"]
    assert deploy_v1.CALLS["load user"] == 2  # profile's renamed step ran again
    assert deploy_v1.CALLS["invite ana"] == 3  # invites-wrong sent its invitations again
    assert ended["digest"]["output"] == "digest delivered" and deploy_v1.CALLS["archive"] == 1
    assert ended["invites"]["output"] == ["invited ana", "invited ben"]
    assert {r["status"] for r in ended.values()} == {"completed", "failed"}
