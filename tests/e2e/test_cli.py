"""`ezgh workflows …` against the local runtime, in process (`main([...])`)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from ezgh_engine.cli.main import main

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.moto_only(
        "the CLI's printing: the calls it makes run on both in tests/api and tests/e2e"
    ),
]


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


# --- serve your app yourself (docs/push-apps.md) -------------------------------------------


def _uvicorn(app):
    """`app` under uvicorn on 127.0.0.1 (a free port), in a thread; (url, server)."""
    import socket
    import threading

    import uvicorn

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    config = uvicorn.Config(app, log_level="warning", lifespan="off")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    while not server.started:
        thread.join(0.02)
    return f"http://127.0.0.1:{sock.getsockname()[1]}", server, thread


def test_serve_your_push_app_yourself(engine, ezgh, monkeypatch, client):
    from ezgh_workflows import Context, PushApp, workflow

    @workflow("greet")
    async def greet(ctx: Context) -> str:
        who = await ctx.step.run("who", lambda: ctx.input["who"])
        return f"hello {who}"

    # 1. Create it with no URL yet: the key is shown once, with the next commands.
    text = ezgh("apps", "create", "mine")
    lines = text.splitlines()
    key = lines[lines.index("signing key (shown once, keep it):") + 1].strip()
    assert f"export EZGH_SIGNING_KEY={key}" in text
    assert "ezgh workflows apps update mine --url" in text and "apps sync mine" in text
    assert "app_not_synced" in ezgh("apps", "sync", "mine", expect=1)  # no URL yet: says so
    # 2. Serve it under uvicorn with that key, tell the engine where, sync, run.
    monkeypatch.setenv("EZGH_SIGNING_KEY", key)
    url, server, thread = _uvicorn(PushApp([greet]))
    try:
        ezgh("apps", "update", "mine", "--url", url)
        synced = ezgh("apps", "sync", "mine", "--json")
        assert synced["status"] == "synced" and synced["workflows"] == ["greet"]
        run = ezgh(
            "runs",
            "start",
            "--app",
            "mine",
            "--workflow",
            "greet",
            "--input",
            '{"who": "you"}',
            "--json",
        )
        done = engine.wait_for(
            lambda: (r := client.get_run(run["id"]))["status"] != "running" and r, timeout=60
        )
        assert done["status"] == "completed" and done["output"] == "hello you", done
    finally:
        server.should_exit = True
        thread.join(10)
    # 3. The other order: a URL at create prints the key and the sync to run.
    text = ezgh("apps", "create", "theirs", "--url", url)
    assert "export EZGH_SIGNING_KEY=" in text and "apps sync theirs" in text
    assert "ezgh workflows apps update theirs --url http" not in text


def test_a_reader_that_stops_early_gets_no_traceback(engine, client, app_id, tmp_path):
    """`ezgh … | head`: head exits after its lines and the pipe closes under the command. Here
    the reader is gone before the command writes at all, so every command's first write
    meets the closed pipe: it stops quietly (status 141, as a shell reports a command that
    SIGPIPE stopped), whatever it was printing."""
    run = client.start_run(app_id, "sequence", {"n": 2})
    client.wait_for_run(run["id"], timeout=30, interval=0.1)
    env = {**os.environ, **engine.env}
    for argv in (
        ["workflows", "runs", "get", run["id"]],
        ["workflows", "runs", "get", run["id"], "--json"],
        ["workflows", "runs", "events", run["id"]],
        ["queues", "list"],
        ["workflows", "--help"],
    ):
        ezgh = subprocess.Popen(
            [sys.executable, "-m", "ezgh_engine.cli", *argv],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=tmp_path,
            env=env,
        )
        assert ezgh.stdout is not None and ezgh.stderr is not None
        ezgh.stdout.close()
        err = ezgh.stderr.read().decode()
        code = ezgh.wait(timeout=60)
        assert "Traceback" not in err and "BrokenPipe" not in err, (argv, err)
        assert code in (0, 141), (argv, code, err)  # 0: --help, which argparse ends itself


def test_values_are_printed_in_jsons_spelling(engine, ezgh, client, app_id):
    """A run's `null` input and a `false`/`true` among its values read as JSON spells them,
    not as Python's `None`/`False`/`True`."""
    run = client.start_run(app_id, "plain", None)
    client.wait_for_run(run["id"], timeout=30, interval=0.1)
    text = ezgh("runs", "get", run["id"])
    assert "input        null" in text and "None" not in text
    from ezgh_engine.cli.common import record, table

    lines: list[str] = []

    class Out:
        def write(self, text: str) -> None:
            lines.extend(line for line in text.splitlines() if line.strip())

    record({"input": None, "ok": True, "paused": False, "n": 1.5}, out=Out())
    table([{"a": True, "b": None}], ("a", "b"), out=Out())
    assert [line.split() for line in lines] == [
        ["input", "null"],
        ["ok", "true"],
        ["paused", "false"],
        ["n", "1.5"],
        ["A", "B"],
        ["true", "-"],
    ]
