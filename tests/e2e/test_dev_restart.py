"""`ezgh dev --state-dir D` keeps everything across a restart and a `kill -9`.

Each test runs `ezgh dev` in a subprocess (its moto is its own) on a fixed port, with engine
time read from a `SkipClock.share()` file this test moves (`--clock-file`), so a three-day
sleep ends without waiting. Otherwise engine time passes as real time does: a run that moves
within seconds of a restart moved because the start re-armed it, not because a lease (6
minutes) or a timeout ran out.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from ezgh_engine.clock import SkipClock

pytestmark = pytest.mark.e2e
REPO = Path(__file__).resolve().parents[2]
APP = "tests.e2e.restart_app:restarts"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Dev:
    """One state dir, and the `ezgh dev` processes that use it, one at a time."""

    def __init__(self, state_dir: Path, clock: SkipClock) -> None:
        self.state_dir = state_dir
        self.clock = clock
        self.port = _free_port()
        self.process: subprocess.Popen[str] | None = None
        self.output: list[str] = []
        self.http = httpx.Client(timeout=30)

    def start(self, *extra: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "EZGH_"))}
        env["PYTHONPATH"] = os.pathsep.join([str(REPO / "shared"), str(REPO / "sdk"), str(REPO)])
        # Images taken while running every 8 KiB of journal: a `kill -9` restarts from the
        # newest one and the journal after it, taken while runs were mid-invocation.
        env["EZGH_DEV_IMAGE_BYTES"] = "8192"
        command = [sys.executable, "-m", "ezgh_engine.cli", "dev", "--port", str(self.port)]
        command += ["--state-dir", str(self.state_dir), "--app", APP]
        command += ["--clock-file", str(self.clock.share()), *extra]
        self.process = subprocess.Popen(
            command, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        assert self.process.stdout is not None
        self.output = []
        for line in self.process.stdout:
            self.output.append(line)
            if "ready in" in line or "could not start" in line:
                break
        assert any("ready in" in line for line in self.output), "".join(self.output)
        # Keep reading, so the process never blocks on a full pipe (and a failure shows it).
        threading.Thread(
            target=self.output.extend, args=(self.process.stdout,), daemon=True
        ).start()
        return self.env()

    def env(self) -> dict[str, str]:
        lines = (self.state_dir / "dev.env").read_text().splitlines()
        return dict(line.split("=", 1) for line in lines)

    def stop(self, sig: int = signal.SIGTERM) -> None:
        assert self.process is not None
        self.process.send_signal(sig)
        self.process.communicate(timeout=60)
        self.process = None

    def api(self, method: str, path: str, **kwargs: Any) -> Any:
        env = self.env()
        prefix = f"{env['EZGH_API_URL']}/v1/organizations/{env['EZGH_ORG_ID']}"
        answer = self.http.request(
            method,
            f"{prefix}/projects/{env['EZGH_PROJECT_ID']}{path}",
            headers={"Authorization": f"Bearer {env['EZGH_API_KEY']}"},
            **kwargs,
        )
        assert answer.status_code < 300, (answer.status_code, answer.text)
        return answer.json() if answer.content else None

    def app_id(self) -> str:
        apps = self.api("GET", "/apps")["apps"]
        return str(next(a["id"] for a in apps if a["name"] == "restarts"))

    def start_run(self, workflow: str, input: dict[str, Any]) -> str:
        body = {"appId": self.app_id(), "workflow": workflow, "input": input}
        return str(self.api("POST", "/runs", json=body)["id"])

    def run(self, run_id: str) -> dict[str, Any]:
        return dict(self.api("GET", f"/runs/{run_id}"))

    def wait_run(self, run_id: str, check: Any, timeout: float = 120) -> dict[str, Any]:
        """Poll until `check(run)`; `timeout` is a backstop (these take seconds), generous so
        that a loaded machine is not a failure."""
        deadline = time.monotonic() + timeout
        while True:
            run = self.run(run_id)
            if check(run):
                return run
            assert time.monotonic() < deadline, (run, "".join(self.output[-40:]))
            time.sleep(0.1)

    def close(self) -> None:
        if self.process is not None:
            self.process.kill()
            self.process.communicate(timeout=30)
        self.http.close()


def _step(name: str, status: str) -> Any:
    return lambda run: any(s["name"] == name and s["status"] == status for s in run["steps"])


def _ended(run: dict[str, Any]) -> bool:
    return run["status"] in ("completed", "failed", "cancelled", "timedOut")


@pytest.fixture()
def dev(tmp_path: Path) -> Iterator[Dev]:
    engine = Dev(tmp_path / "state", SkipClock())
    yield engine
    engine.close()


def _mid_run(dev: Dev, tmp_path: Path, tag: str) -> tuple[str, str, str, str, Path]:
    """A run sleeping three days, one waiting for a callback, one waiting for a message on a
    queue a subscription resumes runs from."""
    queue = f"replies-{tag}"
    queue_id = dev.api("POST", "/queues", json={"name": queue})["id"]
    target = {
        "kind": "workflow",
        "mode": "resume",
        "appId": dev.app_id(),
        "workflow": "message",
        "correlationAttribute": "orderKey",
    }
    dev.api("POST", "/subscriptions", json={"queueId": queue, "target": target})
    url_file = tmp_path / f"callback-url-{tag}"
    sleeper = dev.start_run("nap", {})
    waiter = dev.start_run("callback", {"file": str(url_file)})
    listener = dev.start_run("message", {"queue": queue_id, "key": f"order:{tag}"})
    dev.wait_run(sleeper, _step("nap", "sleeping"))
    dev.wait_run(waiter, _step("approve", "waiting"))
    # The callback's step waits from its create call on, while the invocation goes on to
    # `publish`; that step's end is recorded with the invocation's answer. Wait for it, so
    # each run is at a known point when the process stops (the kill inside an invocation is
    # `_inside_an_invocation`'s, on purpose).
    dev.wait_run(waiter, _step("publish", "completed"))
    dev.wait_run(listener, _step("paid", "waiting"))
    return queue, sleeper, waiter, listener, url_file


def _complete_after_restart(dev: Dev, tag: str, runs: tuple[str, str, str, str, Path]) -> None:
    queue, sleeper, waiter, listener, url_file = runs
    answer = dev.http.post(url_file.read_text(), json={"ok": True})
    assert answer.status_code == 200, answer.text
    sent = {"body": "paid", "attributes": {"orderKey": f"order:{tag}"}}
    dev.api("POST", f"/queues/{queue}/messages", json={"messages": [sent]})
    done = dev.wait_run(waiter, _ended)
    assert done["status"] == "completed" and done["output"] == {"body": {"ok": True}}, done
    done = dev.wait_run(listener, _ended)  # before the clock moves past its wait's timeout
    assert done["status"] == "completed" and done["output"]["message"]["body"] == "paid", done
    assert dev.run(sleeper)["status"] == "running"
    dev.clock.advance(timedelta(days=3, minutes=1))
    done = dev.wait_run(sleeper, _ended)
    assert done["status"] == "completed" and done["output"] == "rested", done


HOLDS = ("hold", "hold-branches")  # a step blocked in the main invocation, in a branch's
# Under the dead invocation's lease (360 s: the invoke timeout plus a minute).
RELEASED_WITHIN = 240


def _inside_invocations(dev: Dev, gate: Path) -> list[tuple[str, Path]]:
    """Runs whose invocations are in flight: each one's `block` step's body has begun and
    waits for `gate`, which does not exist yet; its `once` step has completed."""
    held = []
    for workflow in HOLDS:
        log = gate.with_name(f"{gate.name}-{workflow}.log")  # one per stop
        run_id = dev.start_run(workflow, {"log": str(log), "gate": str(gate)})
        held.append((run_id, log))
    for run_id, log in held:
        deadline = time.monotonic() + 120  # (a backstop: it takes seconds)
        while not (log.exists() and "block" in log.read_text().split()):
            assert time.monotonic() < deadline, (dev.run(run_id), "".join(dev.output[-40:]))
            time.sleep(0.05)
        dev.wait_run(run_id, _step("once", "completed"), timeout=120)
    return held


def _resumes_at_once(dev: Dev, run_id: str, log: Path) -> None:
    """The dead process's lease is released at the start: the run completes within seconds
    (without the release it would wait out the lease, the 300 s invoke timeout plus a
    minute), its completed step did not run again, the step in flight ran again (at least
    once), and it ended once. The wait's budget is the lease's, less two minutes for the
    stop and the start (the lease was taken before them): a run that waits out the lease
    fails it, and a slow machine has minutes, not seconds, to finish one that did not."""
    done = dev.wait_run(run_id, _ended, timeout=RELEASED_WITHIN)
    assert done["status"] == "completed" and done["output"] == "unblocked", done
    assert sorted(log.read_text().split()) == ["block", "block", "once"]
    attempts = {s["name"]: (s["status"], s["attempt"]) for s in done["steps"]}
    assert attempts == {"once": ("completed", 1), "block": ("completed", 2)}, done["steps"]
    events = dev.api("GET", f"/runs/{run_id}/events")["events"]
    ends = [
        e["type"] for e in events if e["type"].startswith("run.") and e["type"] != "run.started"
    ]
    assert ends == ["run.completed"], [e["type"] for e in events]


def _poll_health_then_use_dev_env(dev: Dev, seen: list[tuple[int, int]], stop: Any) -> None:
    """From before the process listens until told to stop: each time health answers 200,
    read dev.env at once and call the API with its key (the script the issue describes)."""
    url = f"http://127.0.0.1:{dev.port}/v1/health"
    with httpx.Client(timeout=5) as http:
        while not stop.is_set():
            try:
                health = http.get(url).status_code
            except httpx.TransportError:
                time.sleep(0.01)  # not listening yet
                continue
            if health != 200:
                seen.append((health, 0))
                continue
            env = dev.env()
            prefix = f"{env['EZGH_API_URL']}/v1/organizations/{env['EZGH_ORG_ID']}"
            answer = http.get(
                f"{prefix}/projects/{env['EZGH_PROJECT_ID']}/apps",
                headers={"Authorization": f"Bearer {env['EZGH_API_KEY']}"},
            )
            seen.append((health, answer.status_code))
            return


def _refused(state_dir: Path, port: int, *extra: str) -> str:
    """Run another `ezgh dev` that must refuse to start; its output."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "EZGH_"))}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO / "shared"), str(REPO / "sdk"), str(REPO)])
    command = [sys.executable, "-m", "ezgh_engine.cli", "dev", "--port", str(port)]
    command += ["--state-dir", str(state_dir), "--app", APP, *extra]
    try:
        done = subprocess.run(
            command, cwd=REPO, env=env, capture_output=True, text=True, timeout=120
        )
    except subprocess.TimeoutExpired as running:  # it started: stop it (the test fails)
        raise AssertionError(f"ezgh dev {extra} started: {running.stdout!r}") from None
    assert done.returncode == 1, (done.returncode, done.stdout, done.stderr)
    assert "ezgh dev: could not start:" in done.stdout, (done.stdout, done.stderr)
    return done.stdout


def _second_dev_refused(dev: Dev, tmp_path: Path) -> None:
    """A second `ezgh dev` on a state dir in use would replay it and append to its journal
    beside the first (or, with `--reset`, delete it under the first): it is refused at once,
    naming the process that holds it, and the first goes on with its state whole. A port in
    use is refused before the state dir is touched, naming the port."""
    assert dev.process is not None
    journal = dev.state_dir / "aws" / "journal.log"
    dev_env, journaled = (dev.state_dir / "dev.env").read_text(), journal.read_bytes()
    for extra in ((), ("--reset",)):
        out = _refused(dev.state_dir, _free_port(), *extra)
        assert f"{dev.state_dir} is in use by ezgh dev (pid {dev.process.pid}" in out, out
    assert (dev.state_dir / "dev.env").read_text() == dev_env
    assert journal.read_bytes().startswith(journaled)  # the first may have appended since
    other = tmp_path / "other"
    out = _refused(other, dev.port)
    assert f"port {dev.port} is in use" in out, out
    assert not (other / "aws").exists() and not (other / "dev.env").exists()


def test_restarts_mid_run_lose_nothing_and_reset_starts_empty(dev: Dev, tmp_path: Path) -> None:
    """One state dir through a second `ezgh dev` refused, a Ctrl-C, a `kill -9` and a
    `--reset` (each start of `ezgh dev` costs seconds, so they share them): after each
    restart the same key works, the app and its signing key are kept, and the sleeping and
    waiting runs of before complete; then `--reset` starts empty, and health answers 200
    only once the new dev.env's key works."""
    first = dev.start()
    _second_dev_refused(dev, tmp_path)  # two on one state dir: refused, nothing changed
    app_id = dev.app_id()
    for how, sig in (("ctrl-c", signal.SIGINT), ("kill-9", signal.SIGKILL)):
        runs = _mid_run(dev, tmp_path, how)
        # Both land inside invocations: step bodies are running, and blocked until
        # the gate opens after the stop: Ctrl-C must not wait for them (it would forever).
        gate = tmp_path / f"gate-{how}"
        held = _inside_invocations(dev, gate)
        dev.stop(sig)
        gate.touch()  # each blocked step's next attempt finds its gate open
        again = dev.start()
        assert any("from an image and the" in line for line in dev.output), how
        assert again == first, how  # dev.env is stable: the same key works
        assert dev.app_id() == app_id, how  # the app, its runs and its signing key are kept
        for run_id, log in held:
            _resumes_at_once(dev, run_id, log)
        _complete_after_restart(dev, how, runs)
    dev.stop(signal.SIGKILL)
    seen: list[tuple[int, int]] = []
    stop = threading.Event()
    poller = threading.Thread(target=_poll_health_then_use_dev_env, args=(dev, seen, stop))
    poller.start()
    try:
        second = dev.start("--reset")
        poller.join(30)  # it ends at its first 200 (ready, so health is 200 now)
    finally:
        stop.set()
        poller.join(30)
    assert second["EZGH_API_KEY"] != first["EZGH_API_KEY"]
    assert second["EZGH_PROJECT_ID"] != first["EZGH_PROJECT_ID"]
    assert dev.api("GET", "/runs")["runs"] == []  # six runs before
    assert dev.api("GET", "/queues")["queues"] == []
    # The old dev.env stood until the new one was written: health stayed 503 until then.
    assert seen and seen[-1] == (200, 200), seen
    assert {health for health, _ in seen[:-1]} <= {503}, seen
