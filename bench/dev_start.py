"""`python -m bench.dev_start [--runs 100] [--repeat 3] [--compare]`: how long `ezgh dev` takes
to start with a kept state (the target: under 2 s whatever the state), also after a crash.

Starts `ezgh dev --app examples.onboarding:app` on a fresh state dir, runs `--runs` onboarding
runs to their end (the cooldown shortened to 1 s) and kills it (`kill -9`: no clean stop, so
no image of the stop): the next start loads the newest image taken while it ran
(`local/checkpoints.py`) and replays the journal after it. Then it stops that one cleanly
and starts it again `--repeat` times (from the image of the stop), and once more after a
`kill -9` right after a start. Each start is timed from the process's spawn to
`GET /v1/health` answering 200 (the engine accepts work: `dev.env` written, its key used,
the apps registered and synced). The first life's log gives the checkpoints it took and how
long each held requests back. `--compare` runs the crash case again with checkpoints off
(`EZGH_DEV_IMAGE_BYTES=0`: the start replays the whole journal, as before them). Prints the
figures and the state's sizes; docs/benchmarks.md ("Start-up of `ezgh dev`") has the
measured ones.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import re
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class Dev:
    """One `ezgh dev` process on `state_dir`."""

    def __init__(self, state_dir: Path, port: int, env: dict[str, str] | None = None) -> None:
        self.state_dir = state_dir
        self.port = port
        self.env = dict(env or {})
        self.process: subprocess.Popen[bytes] | None = None
        self.cpu = self.cpu_main = 0.0  # CPU seconds until healthy: all, its own process

    def start(self) -> float:
        """Spawn it; answer the seconds until it is healthy (and keep in `cpu` the CPU
        seconds it and its children used until then: a figure the machine's load does not
        stretch)."""
        env = {**os.environ, "ONBOARDING_COOLDOWN": "1s", "PYTHONUNBUFFERED": "1", **self.env}
        began = time.perf_counter()
        command = [sys.executable, "-m", "ezgh_engine.cli.main", "dev", "--port", str(self.port)]
        command += ["--state-dir", str(self.state_dir), "--app", "examples.onboarding:app"]
        self.process = subprocess.Popen(
            command,
            cwd=REPO,
            env=env,
            stdout=open(self.log, "ab"),  # noqa: SIM115
            stderr=subprocess.STDOUT,
        )
        while time.perf_counter() - began < 120:
            if self.process.poll() is not None:
                raise RuntimeError(f"ezgh dev exited: see {self.log}")
            if _healthy(self.port):
                ready = time.perf_counter() - began
                self.cpu = _cpu_seconds(self.process.pid)
                self.cpu_main = _cpu_seconds(self.process.pid, family=False)
                return ready
            time.sleep(0.02)
        raise TimeoutError("ezgh dev was not healthy within 120 s")

    @property
    def log(self) -> Path:
        return self.state_dir.parent / "dev.log"

    def stop(self, sig: int = signal.SIGTERM) -> float:
        assert self.process is not None
        began = time.perf_counter()
        self.process.send_signal(sig)
        self.process.wait(timeout=120)
        self.process = None
        return time.perf_counter() - began


def _healthy(port: int) -> bool:
    """Does `GET /v1/health` answer 200? Asked with `http.client`: an HTTP client library
    made per poll (every 20 ms) would load a CA bundle each time, CPU taken from the start
    it times on a machine of two cores."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=1)
    try:
        connection.request("GET", "/v1/health")
        answer = connection.getresponse()
        answer.read()
        return answer.status == 200
    except OSError:
        return False
    finally:
        connection.close()


def _cpu_seconds(root: int, *, family: bool = True) -> float:
    """User and system CPU seconds of process `root` and (`family`) its live descendants
    (the execution environments' forkserver and its children), from /proc."""
    tick = os.sysconf("SC_CLK_TCK")
    parents: dict[int, int] = {}
    used: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parents[int(entry.name)] = int(fields[1])
        used[int(entry.name)] = int(fields[11]) + int(fields[12])  # utime, stime
    if not family:
        return used.get(root, 0) / tick
    members, pending = {root}, [root]
    while pending:
        parent = pending.pop()
        for pid, ppid in parents.items():
            if ppid == parent and pid not in members:
                members.add(pid)
                pending.append(pid)
    return sum(used.get(pid, 0) for pid in members) / tick


def _run_many(state_dir: Path, count: int) -> None:
    from ezgh_workflows import WorkflowsClient

    env = dict(
        line.split("=", 1) for line in (state_dir / "dev.env").read_text().splitlines() if line
    )
    client = WorkflowsClient(
        api_key=env["EZGH_API_KEY"],
        organization_id=env["EZGH_ORG_ID"],
        project_id=env["EZGH_PROJECT_ID"],
        base_url=env["EZGH_API_URL"],
    )
    app = next(a for a in client.list_apps()["apps"] if "onboarding" in a.get("workflows", []))
    runs = [client.start_run(app["id"], "onboarding", {"userId": f"u{i}"}) for i in range(count)]
    for run in runs:
        ended = client.wait_for_run(run["id"], timeout=600, interval=0.5)
        if ended["status"] != "completed":
            raise RuntimeError(f"run {run['id']} ended {ended['status']}")


def _sizes(state_dir: Path) -> dict[str, int]:
    aws = state_dir / "aws"
    return {p.name: p.stat().st_size for p in sorted(aws.glob("*")) if p.is_file()}


_CHECKPOINT = re.compile(
    r"image of the journal's first (\d+) bytes \((\d+) bytes\) in ([\d.]+)s, requests held ([\d.]+)s"
)
_RESTORED = re.compile(r"restored (\d+) request\(s\) in ([\d.]+)s from (.*)")


def _log_figures(log: Path) -> dict[str, Any]:
    """The checkpoints a life took (journal bytes, image bytes, seconds, seconds requests
    were held) and how each start restored its state, from `ezgh dev`'s log."""
    text = log.read_text(errors="replace")
    checkpoints = [
        {"journal": int(a), "image": int(b), "s": float(c), "held_s": float(d)}
        for a, b, c, d in _CHECKPOINT.findall(text)
    ]
    restores = [f"{a} requests in {b}s from {c}" for a, b, c in _RESTORED.findall(text)]
    return {"checkpoints": checkpoints, "restores": restores}


def _crash_mid_session(tmp: Path, runs: int, env: dict[str, str]) -> dict[str, Any]:
    """A session of `runs` runs, `kill -9`, a start: its time and CPU, the state's sizes,
    the checkpoints the session took and what the start restored."""
    state_dir = tmp / "state"
    dev = Dev(state_dir, _free_port(), env)
    first = dev.start()
    began = time.perf_counter()
    _run_many(state_dir, runs)
    session = time.perf_counter() - began
    sizes = _sizes(state_dir)
    dev.stop(signal.SIGKILL)
    started = dev.start()
    figures = {
        "first_start_s": round(first, 2),
        "session_s": round(session, 1),
        "start_after_kill_9_s": round(started, 2),
        "cpu_of_start_s": round(dev.cpu, 2),
        "cpu_of_its_main_process_s": round(dev.cpu_main, 2),
        "state_bytes_at_the_kill": sizes,
        **_log_figures(dev.log),
        "load_average": os.getloadavg()[0],
    }
    return figures | {"dev": dev}


def measure(runs: int, repeat: int, compare: bool = False) -> dict[str, Any]:
    figures: dict[str, Any] = {"runs": runs}
    if compare:
        with tempfile.TemporaryDirectory(prefix="ezgh-dev-start-") as tmp:
            off = _crash_mid_session(Path(tmp), runs, {"EZGH_DEV_IMAGE_BYTES": "0"})
            off.pop("dev").stop()
            figures["crash_without_checkpoints"] = off
    with tempfile.TemporaryDirectory(prefix="ezgh-dev-start-") as tmp:
        crash = _crash_mid_session(Path(tmp), runs, {})
        dev = crash.pop("dev")
        figures["crash_mid_session"] = crash
        stops = [dev.stop()]
        starts, cpus = [], []
        for _ in range(repeat):
            starts.append(dev.start())
            cpus.append((dev.cpu, dev.cpu_main))
            stops.append(dev.stop())
        dev.start()
        dev.stop(signal.SIGKILL)  # the image of the last stop, and this life's tail
        after_start = dev.start()
        after_start_cpu = (dev.cpu, dev.cpu_main)
        dev.stop()
        figures |= {
            "starts_from_image_s": [round(s, 2) for s in starts],
            "median_start_from_image_s": round(statistics.median(starts), 2),
            "cpu_of_starts_from_image_s": [round(c, 2) for c, _ in cpus],
            "cpu_of_their_main_process_s": [round(m, 2) for _, m in cpus],
            "start_after_a_start_and_kill_9_s": round(after_start, 2),
            "cpu_of_that_start_s": round(after_start_cpu[0], 2),
            "median_stop_s": round(statistics.median(stops), 2),
            "state_bytes": _sizes(dev.state_dir),
            "load_average": os.getloadavg()[0],
        }
        return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.dev_start", description=__doc__)
    parser.add_argument("--runs", type=int, default=100, help="onboarding runs in the state")
    parser.add_argument("--repeat", type=int, default=3, help="starts from the image to time")
    parser.add_argument(
        "--compare", action="store_true", help="also the crash case without checkpoints"
    )
    args = parser.parse_args(argv)
    figures = measure(args.runs, args.repeat, args.compare)
    print(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
