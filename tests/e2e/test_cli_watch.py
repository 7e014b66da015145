"""`ezgh workflows runs watch`, `runs get --follow` and `runs start --wait`: a run's progress
as it goes, its outcome as the exit code (0 completed, 3 failed, 4 timed out, 5 cancelled),
and a waiting callback's URL (GetRun shows it to a key that may complete it)."""

from __future__ import annotations

import json
import threading

import httpx
import pytest
from ezgh_engine.cli.main import main
from ezgh_engine.cli.run_watch import OUTCOME_EXIT

from tests.e2e.test_durable_runs import wait_status

pytestmark = pytest.mark.e2e


@pytest.fixture()
def ezgh(engine, capsys, monkeypatch, tmp_path):
    for name, value in engine.env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.chdir(tmp_path)

    def run(*argv: str, expect: int = 0) -> tuple[str, str]:
        capsys.readouterr()
        code = main(["workflows", *argv, "--interval", "0.1"])
        out, err = capsys.readouterr()
        assert code == expect, (code, out, err)
        return out, err

    return run


def test_start_wait_prints_progress_and_exits_0_when_completed(engine, ezgh):
    out, _ = ezgh(
        "runs", "start", "--app", "e2e", "--workflow", "sequence", "--input", '{"n": 2}', "--wait"
    )
    lines = out.splitlines()
    print(out)
    assert lines[0].startswith("run ") and lines[0].endswith("sequence running")
    assert any(line.startswith("step ") and " run completed" in line for line in lines)
    assert lines[-1].split()[2].rstrip(":") == "completed"


def test_a_failed_run_exits_3_and_says_why(engine, ezgh):
    out, _ = ezgh(
        "runs",
        "start",
        "--app",
        "e2e",
        "--workflow",
        "charge",
        "--wait",
        expect=OUTCOME_EXIT["failed"],
    )
    assert "CardDeclinedError: Card declined" in out.splitlines()[-1]


def test_json_keeps_stdout_for_the_ended_run(engine, ezgh):
    out, err = ezgh(
        "runs", "start", "--app", "e2e", "--workflow", "charge", "--wait", "--json", expect=3
    )
    ended = json.loads(out)
    assert ended["status"] == "failed" and "run " in err


def test_watch_shows_a_callbacks_url_and_follows_it_to_the_end(engine, ezgh, client, app_id):
    run = client.start_run(app_id, "approval", {})
    wait_status(
        engine, client, run["id"], lambda r: r["steps"] and r["steps"][0]["status"] == "waiting"
    )
    url = client.get_run(run["id"])["steps"][0]["url"]  # the dev admin key may resume

    def complete_when_printed() -> None:
        engine.wait_for(lambda: printed["url"], 30)
        assert httpx.post(url, json={"ok": 1}, timeout=10).status_code == 200

    printed = {"url": False}
    original = print

    def spy(*args: object, **kwargs: object) -> None:
        if any(url in str(a) for a in args):
            printed["url"] = True
        original(*args, **kwargs)  # type: ignore[arg-type]

    import builtins

    helper = threading.Thread(target=complete_when_printed, daemon=True)
    helper.start()
    builtins.print = spy  # the watch prints through print()
    try:
        out, _ = ezgh("runs", "watch", run["id"])
    finally:
        builtins.print = original
    helper.join(30)
    assert f"step approve#1 callback waiting; POST a JSON body to {url}" in out
    assert out.splitlines()[-1] == f'run {run["id"]} completed: {{"body": {{"ok": 1}}}}'
    followed, _ = ezgh("runs", "get", run["id"], "--follow")
    assert followed.splitlines()[-1] == out.splitlines()[-1]


def test_a_cancelled_run_exits_5(engine, ezgh, client, app_id):
    run = client.start_run(app_id, "approval", {})
    wait_status(
        engine, client, run["id"], lambda r: r["steps"] and r["steps"][0]["status"] == "waiting"
    )
    client.cancel_run(run["id"])
    out, _ = ezgh("runs", "watch", run["id"], expect=OUTCOME_EXIT["cancelled"])
    assert out.splitlines()[-1] == f"run {run['id']} cancelled"
