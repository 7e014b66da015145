"""`ezgh dev -v` as a user runs it, grepped for secrets: a run waits on a callback, the
callback is posted, junk and malformed requests arrive (a bad key, a forged invocation token,
an unknown method, a bad Content-Length on the callback's own path, a query string), and then
nothing the process printed (its log lines at DEBUG and its execution environments' output)
holds a callback token, a second API key, an invocation token, the token secret or the app's
signing key. The admin key is printed on purpose, in `EZGH_API_KEY=` and the console link
only. The state dir is the user's alone (0700, its files 0600)."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

pytestmark = pytest.mark.e2e
REPO = Path(__file__).resolve().parents[2]
# Every invocation token starts with the base64url of `{"r":"` (core/tokens.py).
INVOCATION_TOKEN = re.compile(r"eyJyIjoi[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{20,}")


def _start(state: Path) -> tuple[subprocess.Popen[str], list[str]]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "EZGH_"))}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO / "shared"), str(REPO / "sdk"), str(REPO)])
    command = [sys.executable, "-m", "ezgh_engine.cli", "dev", "-v", "--port", "0"]
    process = subprocess.Popen(
        [*command, "--state-dir", str(state), "--app", "tests.e2e.secrets_app:app"],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert process.stdout is not None
    output: list[str] = []
    for line in process.stdout:
        output.append(line)
        if "ready in" in line:
            return process, output
    raise AssertionError("".join(output))


def _until(probe: Any, what: str, seconds: float = 60) -> Any:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        value = probe()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"{what} did not happen within {seconds} s")


def _raw(url: str, data: bytes) -> None:
    """Send raw bytes to the front and read its answer (or its close)."""
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=30) as conn:
        conn.sendall(data)
        while conn.recv(65536):
            pass


def _traffic(values: dict[str, str], state: Path) -> dict[str, str]:
    """Run the callback's workflow with a second key, post its callback, send junk; answer the
    secrets that must appear nowhere."""
    api = values["EZGH_API_URL"]
    prefix = f"{api}/v1/organizations/{values['EZGH_ORG_ID']}/projects/{values['EZGH_PROJECT_ID']}"
    admin = {"Authorization": f"Bearer {values['EZGH_API_KEY']}"}
    made = httpx.post(
        f"{prefix}/apiKeys", headers=admin, json={"name": "ci", "permissions": [{"action": "*"}]}
    )
    assert made.status_code == 201, made.text
    key = made.json()["key"]
    auth = {"Authorization": f"Bearer {key}"}
    run = httpx.post(
        f"{prefix}/runs", headers=auth, json={"appId": "secrets-app", "workflow": "approval"}
    )
    assert run.status_code == 201, run.text
    run_url = f"{prefix}/runs/{run.json()['id']}"

    def published() -> str | None:
        steps = httpx.get(run_url, headers=auth).json()["steps"]
        return next((s.get("output") for s in steps if s["name"] == "publish"), None)

    callback_url = _until(published, "the callback's URL")
    token = callback_url.rsplit("/", 1)[1]
    httpx.post(f"{callback_url}?note=QUERYSECRET", json={"ok": True}, headers=auth)
    _until(lambda: httpx.get(run_url, headers=auth).json()["status"] == "completed", "the run")
    httpx.get(f"{prefix}/runs?cursor=QUERYSECRET", headers={"Authorization": "Bearer nope"})
    httpx.request("TRACE", callback_url)
    httpx.post(callback_url, json={"again": True})  # 409: already completed
    path = callback_url.removeprefix(api)
    _raw(api, f"POST {path} HTTP/1.1\r\nContent-Length: x\r\n\r\n".encode())
    saved = json.loads((state / "state.json").read_text())
    (app,) = saved["apps"].values()
    return {
        "second API key": key,
        "callback token": token,
        "token secret": saved["tokenSecret"],
        "app signing key": app["signingKey"],
        "query string": "QUERYSECRET",
    }


def test_ezgh_dev_logs_no_secret_and_keeps_its_state_private(tmp_path: Path) -> None:
    state = tmp_path / "state"
    process, output = _start(state)
    try:
        values = dict(line.strip().split("=", 1) for line in output if line.startswith("EZGH_"))
        secrets = _traffic(values, state)
    finally:
        process.send_signal(signal.SIGTERM)
        rest, _ = process.communicate(timeout=60)
    text = "".join(output) + rest
    assert process.returncode == 0, text
    for what, secret in secrets.items():
        assert secret not in text, f"{what} in the output"
    assert "POST /v1/callbacks/{token}" in text  # the requests were logged, redacted
    assert not INVOCATION_TOKEN.search(text), INVOCATION_TOKEN.search(text)
    admin = values["EZGH_API_KEY"]
    for line in text.splitlines():
        if admin in line:
            assert line.startswith("EZGH_API_KEY=") or "console (signed in)" in line, line
    assert stat.S_IMODE(state.stat().st_mode) == 0o700
    assert stat.S_IMODE((state / "aws").stat().st_mode) == 0o700
    for name in ("dev.env", "state.json", "lock", "aws/journal.log"):
        assert stat.S_IMODE((state / name).stat().st_mode) == 0o600, name
