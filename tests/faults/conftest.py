"""The fault suite's runtime: a `LocalRuntime` on a `SkipClock`, moto's SQS timers on the
engine clock, a short invoke timeout (so a hanging app costs seconds), and `--runs`/`--fault-seed`.
"""

from __future__ import annotations

import faulthandler
import os
import signal
from collections.abc import Iterator

import pytest
from ezgh_engine import config
from ezgh_engine.clock import SkipClock
from ezgh_engine.local.emulator import sqs_on_engine_clock
from ezgh_engine.local.runtime import LocalRuntime
from ezgh_workflows import WorkflowsClient

from tests.clients import workflows_client
from tests.faults import app as fault_app

# Short, so `long` steps reach it without minutes of waiting; not shorter, because the limit is
# wall-clock (the invoker's wait on the app) and a trivial invocation took over 2 s on a
# machine at load 20, failing steps the program never meant to be long.
INVOKE_TIMEOUT_SECONDS = "6"
# Retry waits (botocore's in the functions, the SDK's in the app) shrink as the invoke
# timeout does, from the 300 s it is deployed with: a step whose end a throttle holds for a
# few seconds would otherwise overrun the 6 s and fail `StepTimedOut`.
BACKOFF_SCALE = float(INVOKE_TIMEOUT_SECONDS) / 300
faulthandler.register(signal.SIGUSR1, all_threads=True)  # `kill -USR1 <pid>`: thread dump


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("faults")
    # CI-sized by default (two batches, each bounded by EZGH_FAULTS_BATCH_SECONDS of driving);
    # `--runs 200` or EZGH_FAULTS_RUNS=200 for the long campaign.
    group.addoption(
        "--runs",
        type=int,
        default=int(os.environ.get("EZGH_FAULTS_RUNS") or 20),
        help="generated runs in the fault suite (default 20, or EZGH_FAULTS_RUNS)",
    )
    group.addoption("--fault-seed", type=int, default=8, help="seed of programs and faults")


@pytest.fixture(scope="package")
def runtime(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalRuntime]:
    saved = os.environ.get(config.ENV_INVOKE_TIMEOUT)
    os.environ[config.ENV_INVOKE_TIMEOUT] = INVOKE_TIMEOUT_SECONDS
    config.reset_settings()
    sqs_on_engine_clock(True)
    rt = LocalRuntime(
        port=0,
        state_dir=tmp_path_factory.mktemp("ezgh"),
        apps=[("faults", fault_app.served)],
        clock=SkipClock(),
    )
    try:
        rt.start()
        yield rt
    finally:
        rt.set_faults(None)
        rt.stop()
        sqs_on_engine_clock(False)
        if saved is None:
            os.environ.pop(config.ENV_INVOKE_TIMEOUT, None)
        else:
            os.environ[config.ENV_INVOKE_TIMEOUT] = saved
        config.reset_settings()


@pytest.fixture()
def engine(runtime: LocalRuntime) -> LocalRuntime:
    runtime.set_faults(None)
    runtime.reset()
    fault_app.reset()
    return runtime


@pytest.fixture()
def client(engine: LocalRuntime) -> WorkflowsClient:
    return workflows_client(engine)


@pytest.fixture()
def app_id(engine: LocalRuntime) -> str:
    return str(engine.apps["faults"].record["id"])
