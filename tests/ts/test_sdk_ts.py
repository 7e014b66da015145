"""The TypeScript SDK (`sdk-ts/`, `@ezgh/workflows`) in the project's suite.

Its own tests are TypeScript, run by Node's test runner: this module type-checks and builds
them with `tsc --strict` (the compiler scripts/test-deps.sh installs from sdk-ts's
package-lock.json), then runs

- the golden exchanges (tests/golden/exchanges, the recordings the Python SDK is held to)
  and the unit tests, with no engine;
- the seed docs' TypeScript examples against an `ezgh dev` started here on a free loopback
  port, with the engine's time in a `SkipClock.share()`-style file (`--clock-file`) the Node
  tests move, served through the Fetch, Node and Lambda handlers and by a pull worker; runs
  of eight 1 MiB results (protocol 1.5); `step.patched` across a deploy, whose TypeScript
  histories the Python test kit's `Replayer` (what `ezgh workflows replay-check` runs) then
  reads as its own.

A Node test that is skipped fails here: each must run.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from ezgh_workflows import Context, Replayer, WorkflowsClient, workflow
from ezgh_workflows._internal.history import RunHistory, fetch_history

from tests.golden import exchanges

REPO = Path(__file__).resolve().parents[2]
SDK = REPO / "sdk-ts"
TSC = SDK / "node_modules" / ".bin" / "tsc"
NODE = shutil.which("node")
SUMMARY = re.compile(r"^# (tests|pass|fail|cancelled|skipped|todo) (\d+)$", re.MULTILINE)


def _run(command: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, cwd=SDK, text=True, capture_output=True, check=False, **kwargs)  # type: ignore[call-overload]


@pytest.fixture(scope="module")
def built() -> Path:
    """Type-check and build the SDK and its tests (`tsc --strict`, from tsconfig*.json)."""
    assert NODE, "node is not on PATH (Node 20 or later)"
    assert TSC.exists(), "sdk-ts has no node_modules: run bash scripts/test-deps.sh"
    for config in ("tsconfig.json", "tsconfig.test.json"):
        done = _run([str(TSC), "-p", config, "--strict"])
        assert done.returncode == 0, f"tsc -p {config}:\n{done.stdout}{done.stderr}"
    return SDK / "build" / "test"


def _node_tests(files: list[Path], env: dict[str, str]) -> dict[str, int]:
    """Run Node's test runner on `files`; its summary counts (asserting it passed)."""
    assert NODE
    done = _run([NODE, "--test", *map(str, files)], env=env, timeout=600)
    counts = {name: int(n) for name, n in SUMMARY.findall(done.stdout)}
    assert done.returncode == 0 and counts.get("fail") == 0, (
        done.stdout[-20000:] + done.stderr[-5000:]
    )
    assert counts.get("skipped") == 0 and counts.get("todo") == 0, done.stdout[-20000:]
    return counts


def _engine_free_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "EZGH_"))}


def test_golden_exchanges_and_unit_tests(built: Path) -> None:
    files = sorted(p for p in built.glob("*.test.js") if p.name != "e2e.test.js")
    counts = _node_tests(files, _engine_free_env())
    recorded = sum(len(exchanges.load(name)["invocations"]) for name in exchanges.names())
    assert counts["pass"] > recorded, counts  # one test per recorded invocation, and more


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture()
def dev(tmp_path: Path) -> Iterator[dict[str, str]]:
    """`ezgh dev` on a free loopback port with a skip clock; its environment, then stopped."""
    clock_file = tmp_path / "clock"
    clock_file.write_bytes(struct.pack("<d", 0.0))
    env = _engine_free_env()
    env["PYTHONPATH"] = os.pathsep.join([str(REPO / "shared"), str(REPO / "sdk"), str(REPO)])
    state = tmp_path / "state"
    command = [sys.executable, "-m", "ezgh_engine.cli", "dev", "--port", str(_free_port())]
    command += ["--state-dir", str(state), "--clock-file", str(clock_file)]
    process = subprocess.Popen(
        command, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    assert process.stdout is not None
    output: list[str] = []
    try:
        for line in process.stdout:
            output.append(line)
            if "ready in" in line or "could not start" in line:
                break
        assert any("ready in" in line for line in output), "".join(output)
        # Keep reading, so the engine never blocks on a full pipe (and a failure shows it).
        threading.Thread(target=output.extend, args=(process.stdout,), daemon=True).start()
        lines = (state / "dev.env").read_text().splitlines()
        yield {
            **env,
            **dict(line.split("=", 1) for line in lines if "=" in line),
            "EZGH_TEST_CLOCK_FILE": str(clock_file),
        }
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=30)


@pytest.mark.e2e
def test_seed_examples_against_ezgh_dev(built: Path, dev: dict[str, str]) -> None:
    counts = _node_tests([built / "e2e.test.js"], dev)
    # Two tests for each of the three ways of serving a push app, a pull worker's two ways of
    # waiting for tasks and its parallel steps, eight results of 1 MiB pushed and pulled, and
    # `step.patched`.
    assert counts["pass"] == 12, counts
    _replay_the_patched_runs(dev)


@workflow("invites")
async def invites_patched(ctx: Context) -> str:
    """The Python twin of e2e.test.ts's `invitesV2`: the code with the patch."""
    patched = await ctx.step.patched("invite-ids")
    for r in ctx.input["recipients"]:
        if patched:
            await ctx.step.run("invite", lambda r=r: f"sent {r}", id=f"invite-{r}")
        else:
            await ctx.step.run("invite", lambda r=r: f"sent {r}")
    await ctx.step.sleep("cooldown", "3d")
    return "new path" if patched else "old path"


@workflow("invites")
async def invites_cleaned(ctx: Context) -> str:
    """The next deploy: the old path and the `patched` call removed."""
    for r in ctx.input["recipients"]:
        await ctx.step.run("invite", lambda r=r: f"sent {r}", id=f"invite-{r}")
    await ctx.step.sleep("cooldown", "3d")
    return "new path"


def _replay_the_patched_runs(dev: dict[str, str]) -> None:
    """The runs the TypeScript SDK recorded with `step.patched`, exported as `ezgh workflows
    runs export` exports them and replayed by the Python kit: its patch markers are known as
    such (the code with the patch fits both runs; once the old path is gone, the run that
    took it breaks and the other, whose marker the code no longer asks for, fits)."""
    client = WorkflowsClient(
        api_key=dev["EZGH_API_KEY"],
        organization_id=dev["EZGH_ORG_ID"],
        project_id=dev["EZGH_PROJECT_ID"],
        base_url=dev["EZGH_API_URL"],
    )
    found = client.search_runs(workflow="invites")["runs"]
    histories = [fetch_history(client, run["id"]) for run in found]
    by_path: dict[bool, RunHistory] = {}
    for history in histories:
        markers = [s for s in history.steps if s["id"] == "patched:invite-ids"]
        assert len(markers) == 1 and markers[0]["kind"] == "value", history.steps
        by_path[markers[0]["output"]] = history
    assert sorted(by_path) == [False, True], [h.steps for h in histories]
    for history in histories:
        report = Replayer([invites_patched]).check(history)
        assert report.replayed == report.recorded, report
    assert Replayer([invites_cleaned]).check(by_path[True]).divergence is None
    divergence = Replayer([invites_cleaned]).replay(by_path[False]).divergence
    assert divergence is not None and divergence.recorded is not None, divergence
    assert divergence.recorded.id == "invite#1", divergence
