"""Execution environments: each topology function in child processes, as Lambda runs it.

A call past its function's timeout is ended (its process killed) and treated as Lambda
treats a timeout: the SQS message comes back after its visibility timeout, an HTTP caller
gets a 504. An engine restart kills the handlers in flight.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import httpx
import pytest
from ezgh_engine import clock
from ezgh_engine.adapters import aws
from ezgh_engine.local import environments
from ezgh_engine.local.runtime import LocalRuntime
from ezgh_engine.topology import TOPOLOGY, Function, Queue, SqsSource, Topology

HANDLERS = "tests.local.env_handlers"
TOPOLOGY_UNDER_TEST = Topology(
    tables=TOPOLOGY.tables,
    queues=(
        Queue("quick", "EZGH_TEST_QUICK_QUEUE_URL", visibility_timeout_seconds=3),
        Queue("patient", "EZGH_TEST_PATIENT_QUEUE_URL", visibility_timeout_seconds=3),
    ),
    functions=(
        Function("api", f"{HANDLERS}:api", timeout_seconds=2),
        Function("quick", f"{HANDLERS}:worker", timeout_seconds=1),
        Function("patient", f"{HANDLERS}:worker", timeout_seconds=60),
    ),
    sources=(
        SqsSource(queue="quick", function="quick", batch_size=1),
        SqsSource(queue="patient", function="patient", batch_size=1),
    ),
)


@pytest.fixture(scope="module")
def runtime(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalRuntime]:
    rt = LocalRuntime(
        port=0,
        state_dir=tmp_path_factory.mktemp("ezgh"),
        clock=clock.SkipClock(),
        bootstrap=lambda: ("org-1", "project-1", "key-1"),
        topology=TOPOLOGY_UNDER_TEST,
    )
    rt.start()
    yield rt
    rt.stop()


@pytest.fixture()
def engine(runtime: LocalRuntime) -> LocalRuntime:
    runtime.reset()
    return runtime


# Budgets of waits for what takes a second or two: backstops, which a loaded machine must
# not reach (at load 15 these used up to 31 % of 10 s). A hanging handler sleeps 60 s, so a
# process still there after `GONE_WITHIN` was not killed at its timeout.
BACKSTOP = 45
GONE_WITHIN = 45


def _send(queue_env: str, folder: Path, hang: int, **more: object) -> None:
    body = {"dir": str(folder), "hang": hang, **more}
    aws.client("sqs").send_message(QueueUrl=os.environ[queue_env], MessageBody=json.dumps(body))


def _attempts(engine: LocalRuntime, folder: Path, pattern: str, timeout: float) -> list[Path]:
    return engine.wait_for(lambda: sorted(folder.glob(pattern)), timeout=timeout)


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def _pid(path: Path) -> int:
    return int(path.stem.split("-")[1])


def test_concurrent_calls_run_in_processes_of_their_own(engine: LocalRuntime) -> None:
    with httpx.Client(timeout=BACKSTOP) as http:
        pids = {http.get(f"{engine.api_url}/who").json()["pid"] for _ in range(3)}
    assert os.getpid() not in pids
    assert len(pids) == 1  # one at a time: the warm environment serves them all


def test_a_call_past_its_timeout_is_ended_and_its_message_comes_back(
    engine: LocalRuntime, tmp_path: Path
) -> None:
    _send("EZGH_TEST_QUICK_QUEUE_URL", tmp_path, hang=1)
    (first,) = _attempts(engine, tmp_path, "1-*.start", timeout=BACKSTOP)
    assert int(first.read_text()) <= 1000  # the context tells the function's own timeout
    engine.wait_for(lambda: _gone(_pid(first)), timeout=GONE_WITHIN)  # killed at its timeout
    (second,) = _attempts(engine, tmp_path, "2-*.done", timeout=BACKSTOP)  # after the visibility
    assert not list(tmp_path.glob("1-*.done"))
    assert _pid(first) != os.getpid() and _pid(second) != _pid(first)
    engine.wait_idle(timeout=BACKSTOP)


def test_an_http_call_past_its_timeout_is_a_504_in_the_api_shape(engine: LocalRuntime) -> None:
    answer = httpx.get(f"{engine.api_url}/slow", timeout=30)
    assert answer.status_code == 504
    assert answer.json()["error"]["code"] == "internal_error"
    assert httpx.get(f"{engine.api_url}/v1/health", timeout=BACKSTOP).status_code == 200


def test_a_restart_kills_the_handlers_in_flight(engine: LocalRuntime, tmp_path: Path) -> None:
    _send("EZGH_TEST_PATIENT_QUEUE_URL", tmp_path, hang=1)
    (first,) = _attempts(engine, tmp_path, "1-*.start", timeout=BACKSTOP)
    assert not _gone(_pid(first))
    engine.restart_engine()
    engine.wait_for(lambda: _gone(_pid(first)), timeout=GONE_WITHIN)
    (second,) = _attempts(engine, tmp_path, "2-*.done", timeout=BACKSTOP)
    assert not list(tmp_path.glob("1-*.done")) and _pid(second) != _pid(first)
    engine.wait_idle(timeout=BACKSTOP)


def test_each_environment_logs_its_aws_calls_tagged_with_its_function(
    engine: LocalRuntime, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log_dir = tmp_path / "calls"
    monkeypatch.setenv("EZGH_AWS_CALL_LOG", str(log_dir))
    engine.restart_engine()  # environments read it at their start
    _send("EZGH_TEST_QUICK_QUEUE_URL", tmp_path, hang=0, aws=True)
    (done,) = _attempts(engine, tmp_path, "1-*.done", timeout=BACKSTOP)
    lines = (log_dir / f"quick-{_pid(done)}.jsonl").read_text().splitlines()
    calls = [json.loads(line) for line in lines]
    assert {"function": "quick", "service": "sqs", "operation": "ListQueues"} in [
        {k: c[k] for k in ("function", "service", "operation")} for c in calls
    ]
    monkeypatch.delenv("EZGH_AWS_CALL_LOG")
    engine.restart_engine()
    engine.wait_idle(timeout=BACKSTOP)


def test_a_shared_skip_clock_moves_every_reader() -> None:
    skip = clock.SkipClock()
    skip.advance(timedelta(days=1))
    reader = clock.SharedOffsetClock(skip.share())  # as an environment opens it
    assert abs((reader.now() - skip.now()).total_seconds()) < 1
    skip.advance(timedelta(hours=5))
    assert abs((reader.now() - skip.now()).total_seconds()) < 1
    assert reader.now() - clock.SystemClock().now() > timedelta(days=1, hours=4)


def test_a_call_while_one_is_prewarmed_waits_for_it_instead_of_forking_another(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A prewarmed environment is ready before a new one could be (one process is made at a
    time): a call that finds one being made takes it. A second call makes its own."""
    made: list[object] = []
    go = threading.Event()

    class SlowStart:
        def __init__(self, context: object, function: Function, setup: object) -> None:
            go.wait(BACKSTOP)
            made.append(self)

        def alive(self) -> bool:
            return True

        def close(self) -> None:
            pass

    monkeypatch.setattr(environments, "Environment", SlowStart)
    pool = environments.Pool(Function("api", f"{HANDLERS}:api"), lambda: None, context=None)  # type: ignore[arg-type,return-value]
    pool.prewarm(1)
    got: list[object] = []
    caller = threading.Thread(target=lambda: got.append(pool.acquire()))
    caller.start()
    assert not _joined(caller, 0.3)  # waiting for the one being made
    go.set()
    assert _joined(caller, BACKSTOP)
    assert got == made and pool.cold_starts == 0
    assert pool.acquire() is made[1]  # none idle, none being made: a cold start of its own
    assert pool.cold_starts == 1


def _joined(thread: threading.Thread, timeout: float) -> bool:
    thread.join(timeout)
    return not thread.is_alive()


def test_the_forkserver_reads_the_models_and_drops_the_users_aws_variables() -> None:
    """What the forkserver imports last (`local._warm`) runs before any emulator exists
    (`ezgh dev` starts it first): it reads botocore's models without credentials and keeps
    none of the `AWS_*` variables it inherited (a user's profile or keys)."""
    script = (
        "import os\n"
        "from ezgh_engine.local import _warm\n"
        "from ezgh_engine.adapters import aws\n"
        "print(sorted(k for k in os.environ if k.startswith('AWS_')), bool(aws._loaders))\n"
    )
    user = {"AWS_PROFILE": "someones-real-profile", "AWS_ACCESS_KEY_ID": "AKIAUSER"}
    done = subprocess.run(
        [sys.executable, "-c", script],
        env={**os.environ, **user},
        capture_output=True,
        text=True,
        timeout=BACKSTOP,
        check=True,
    )
    assert done.stdout.split() == ["[]", "True"]
