"""`ezgh workflows …` against the local runtime, in process (`main([...])`)."""

from __future__ import annotations

import json

import pytest
from ezgh_engine.cli.main import main

pytestmark = pytest.mark.e2e


@pytest.fixture()
def ezgh(engine, capsys, monkeypatch, tmp_path):
    for name, value in engine.env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.chdir(tmp_path)  # no stray .ezgh/dev.env

    def run(*argv: str, expect: int = 0):
        capsys.readouterr()
        code = main(["workflows", *argv])
        out, err = capsys.readouterr()
        assert code == expect, (code, out, err)
        if "--json" in argv and code == 0:
            return json.loads(out)
        return out + err

    return run


def test_apps_commands(engine, ezgh):
    listed = ezgh("apps", "list", "--json")["apps"]
    assert [a["name"] for a in listed] == ["e2e"]
    text = ezgh("apps", "list")
    assert text.splitlines()[0].split()[:3] == ["NAME", "ID", "SLUG"] and "e2e" in text
    app = ezgh("apps", "get", "e2e", "--json")
    assert app["status"] == "synced" and "sequence" in app["workflows"]
    assert ezgh("apps", "get", app["slug"], "--json")["id"] == app["id"]
    created = ezgh("apps", "create", "workers", "--kind", "pull", "--json")
    assert created["kind"] == "pull" and created["signingKey"]
    assert "not_found" in ezgh("apps", "get", "nope", expect=1)
    assert ezgh("apps", "sync", "e2e", "--json")["status"] == "synced"
    assert "need --notify-queue" in ezgh("apps", "update", "e2e", "--notify-on", "failed", expect=1)
    off = ezgh("apps", "update", "e2e", "--no-notify", "--json")
    assert off["notifications"] is None
    ezgh("apps", "delete", "workers")
    assert [a["name"] for a in ezgh("apps", "list", "--json")["apps"]] == ["e2e"]


def test_runs_commands(engine, ezgh, client):
    run = ezgh(
        "runs",
        "start",
        "--app",
        "e2e",
        "--workflow",
        "sequence",
        "--input",
        '{"n": 2}',
        "--run-key",
        "cli-1",
        "--json",
    )
    assert run["status"] == "running" and run["runKey"] == "cli-1"
    done = client.wait_for_run(run["id"], timeout=30, interval=0.1)
    assert done["status"] == "completed"
    got = ezgh("runs", "get", run["id"], "--json")
    assert got["id"] == run["id"] and len(got["steps"]) == 2
    assert "completed" in ezgh("runs", "get", run["id"])
    listed = ezgh("runs", "list", "--app", "e2e", "--status", "completed", "--json")
    assert [r["id"] for r in listed["runs"]] == [run["id"]]
    assert run["id"] in ezgh("runs", "list")
    events = ezgh("runs", "events", run["id"], "--json")["events"]
    assert events[0]["type"] == "run.started" and events[-1]["type"] == "run.completed"
    assert "run.completed" in ezgh("runs", "events", run["id"])
    assert "invalid_state" in ezgh("runs", "cancel", run["id"], expect=1)
    assert "409" in ezgh("runs", "retry", run["id"], expect=1)
    assert "--input: not valid JSON" in ezgh(
        "runs", "start", "--app", "e2e", "--workflow", "sequence", "--input", "{", expect=1
    )


def test_schedules_commands(engine, ezgh):
    s = ezgh(
        "schedules",
        "create",
        "--app",
        "e2e",
        "--workflow",
        "sequence",
        "--cron",
        "0 9 * * 1-5",
        "--timezone",
        "Europe/Paris",
        "--input",
        '{"n": 1}',
        "--json",
    )
    assert s["slug"].startswith("wfs_") and s["timezone"] == "Europe/Paris"
    assert [x["id"] for x in ezgh("schedules", "list", "--json")["schedules"]] == [s["id"]]
    assert s["slug"] in ezgh("schedules", "list")
    assert ezgh("schedules", "get", s["slug"], "--json")["cron"] == "0 9 * * 1-5"
    updated = ezgh("schedules", "update", s["id"], "--cron", "*/10 * * * *", "--json")
    assert updated["cron"] == "*/10 * * * *"
    assert ezgh("schedules", "pause", s["id"], "--json")["status"] == "paused"
    assert ezgh("schedules", "resume", s["slug"], "--json")["status"] == "active"
    assert "validation_error" in ezgh(
        "schedules",
        "create",
        "--app",
        "e2e",
        "--workflow",
        "sequence",
        "--cron",
        "bad cron",
        expect=1,
    )
    ezgh("schedules", "delete", s["id"])
    assert ezgh("schedules", "list", "--json")["schedules"] == []


def test_settings_from_the_state_dir(engine, capsys, monkeypatch, tmp_path):
    for name in engine.env:
        monkeypatch.delenv(name, raising=False)
    (tmp_path / "dev.env").write_text("\n".join(f"{k}={v}" for k, v in engine.env.items()) + "\n")
    assert main(["workflows", "apps", "list", "--json", "--state-dir", str(tmp_path)]) == 0
    assert json.loads(capsys.readouterr().out)["apps"][0]["name"] == "e2e"
    monkeypatch.chdir(tmp_path)
    assert main(["workflows", "apps", "list", "--state-dir", str(tmp_path / "none")]) == 1
    assert "no api url" in capsys.readouterr().err


def test_json_errors_are_json(ezgh, capsys):
    err = ezgh("apps", "get", "no-such-app", "--json", expect=1)
    error = json.loads(err)["error"]
    assert error["code"] == "not_found" and error["status"] == 404
    assert error["message"]
    assert ezgh("apps", "get", "no-such-app", expect=1).startswith("error: ")


def test_missing_settings_name_the_state_dir_in_use(engine, capsys, monkeypatch, tmp_path):
    for name in engine.env:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)
    custom = tmp_path / "elsewhere"
    assert main(["workflows", "apps", "list", "--json", "--state-dir", str(custom)]) == 1
    error = json.loads(capsys.readouterr().err)["error"]
    assert f"ezgh dev --state-dir {custom}" in error["message"]
    assert str(custom / "dev.env") in error["message"]
    assert main(["workflows", "apps", "list"]) == 1
    assert "run `ezgh dev` (which writes .ezgh/dev.env" in capsys.readouterr().err
