"""Session-wide wiring shared by every suite.

- AWS's DynamoDB Local, started once per session on demand: suites that touch DynamoDB run on
  moto and, under the `ddblocal` marker, on DynamoDB Local as well (`-m ddblocal` for only
  those, `-m "not ddblocal"` to skip them).
- One run of tests/e2e also records each function's AWS requests: tests/infra/test_iam_calls.py
  checks them against the synthesized IAM policies. In a session that runs the whole of
  tests/e2e (the README's test command) the e2e runtime records into `EZGH_E2E_CALL_LOG`, and
  the IAM test reads that recording instead of running the e2e suite again in a child process.
"""

from __future__ import annotations

import gc
import os
import tempfile
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from tests.ddblocal import DynamoDBLocal

E2E_CALL_LOG = "EZGH_E2E_CALL_LOG"

# DynamoDB Local: every test that runs on a backend-parametrized fixture (tests/ddblocal.py
# `BACKENDS`: tests/api's `aws_env`, tests/sdk's `engine_plant`, tests/e2e's `runtime`) runs on
# moto and, under the `ddblocal` marker, on AWS's DynamoDB Local, so a new store or handler
# test cannot silently stay on moto. A module whose DynamoDB use is incidental to what it
# checks (permission checks over every operation, fuzzing, a CLI's printing, the SDK's own
# logic) says so itself, with the reason: `pytestmark = pytest.mark.moto_only("why")`; its
# DynamoDB Local variants are left out (`EZGH_DDBLOCAL=all` runs them too).
MOTO_ONLY = "moto_only"


def _share_botocore_models() -> None:
    """One botocore data loader for every session the test process makes.

    The engine makes each boto3 client from a new `Session` (`adapters.aws.client`) and every
    test forgets them (`reset_clients`), so each test had a new loader re-parse
    `endpoints.json` and the service models and list the data directories again: about half
    of tests/api's time. A `Loader` only reads and caches what it loads (the `sdk-extras`
    merge is the same merge each time), so one per search path serves every session.
    """
    from botocore import loaders, session

    if getattr(session.create_loader, "_ezgh_shared", False):
        return
    create = loaders.create_loader
    made: dict[str | None, loaders.Loader] = {}
    lock = threading.Lock()

    class Paths(list[Any]):
        """Search paths that keep one copy of each: every boto3 Session appends its own."""

        def append(self, path: Any) -> None:
            if path not in self:
                super().append(path)

    def create_loader(search_path_string: str | None = None) -> loaders.Loader:
        with lock:
            if search_path_string not in made:
                loader = create(search_path_string)
                loader._search_paths = Paths(loader.search_paths)
                made[search_path_string] = loader
            return made[search_path_string]

    create_loader._ezgh_shared = True  # type: ignore[attr-defined]
    session.create_loader = create_loader


_share_botocore_models()


def _moto_as_the_runtime_leaves_it() -> None:
    """Patch in-process moto as every local runtime does (`local.emulator`): a lock around
    each DynamoDB request, no instance tracking, no whole-table copy per transaction or sort
    per query, plain items unserialized, each handler's method names listed once, SQS's
    retention check without all queue attributes, each queue's messages changed under its
    lock.

    A runtime's `Emulator.start()` installs these process-wide for good, so before this the
    tests/api modules ran on patched moto on a worker that had started a runtime before them
    and on moto's own elsewhere (tests/api/test_fuzz_openapi.py, the first group of a
    worker: its CPU was most of it moto's serializer and `inspect.getmembers`). Now every
    test sees one moto whatever ran before it on its worker; tests/local checks each patch
    against moto's own answers."""
    from ezgh_engine.local import emulator

    emulator.serialize_dynamodb()
    emulator.lighten_dynamodb()
    emulator.bound_stream_iterators()
    emulator.quicker_dispatch()
    emulator.lighten_sqs()
    emulator.serialize_sqs_queues()


_moto_as_the_runtime_leaves_it()


def _share_default_tls_context() -> None:
    """One default TLS context per process for the httpx clients and transports the tests
    and the in-process engine make (an SDK client per test, the local runtime's app client
    per reset, tests/api's loopback transport per push): each made its own, loading the CA
    bundle, about 0.1 s of CPU (half of a local runtime's `reset()`). Only the default
    (`verify=True`, no client certificate) is shared, keyed by the variables httpx reads;
    the engine's own transports already share theirs (`adapters.push._tls_context`)."""
    from httpx._transports import default

    if getattr(default.create_ssl_context, "_ezgh_shared", False):
        return
    create = default.create_ssl_context
    made: dict[tuple[bool, str | None, str | None], Any] = {}
    lock = threading.Lock()

    def create_ssl_context(verify: Any = True, cert: Any = None, trust_env: bool = True) -> Any:
        if verify is not True or cert is not None:
            return create(verify=verify, cert=cert, trust_env=trust_env)
        key = (trust_env, os.environ.get("SSL_CERT_FILE"), os.environ.get("SSL_CERT_DIR"))
        with lock:
            if key not in made:
                made[key] = create(verify=verify, cert=cert, trust_env=trust_env)
            return made[key]

    create_ssl_context._ezgh_shared = True  # type: ignore[attr-defined]
    default.create_ssl_context = create_ssl_context


_share_default_tls_context()


def pytest_configure(config: pytest.Config) -> None:
    if not os.environ.get(E2E_CALL_LOG):
        os.environ[E2E_CALL_LOG] = tempfile.mkdtemp(prefix="ezgh-e2e-calls-")


def pytest_collection_finish(session: pytest.Session) -> None:
    """Collect the garbage less often over a heap that stays: what the imports and the
    collection made (botocore's models, moto, schemathesis, the items) goes to the permanent
    generation, and a collection waits for 50,000 new objects (700 by default). The
    collector's own CPU in tests/api/test_authorization_matrix.py and test_requests.py on
    moto: 4.4 s -> 2.0 s of 33 s. Only when garbage is collected changes, never what."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(50_000, 20, 20)


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config: pytest.Config) -> None:
    """Keep the interpreter's exit from garbage-collecting the whole heap: a test process
    holds moto's state, botocore's models, a runtime's threads, and the collections of its
    teardown took seconds (an e2e module's process: 3.9 s from the session's end to its
    exit, 0.8 s frozen) on the way out of every worker and of the IAM phase. Every
    report is written by now, and what is left uncollected goes with the process."""
    gc.freeze()


# Under pytest-xdist (`--dist loadgroup --no-loadscope-reorder`, as scripts/test.sh runs the
# suite) each group runs whole on one worker, and the groups are handed out longest first.
# A group is a module (a module-scoped fixture, an emulator or a synth, is made once), except
# where tests share a package-scoped runtime (moto's process-global state is used by one
# runtime at a time, and making one costs seconds):
# - tests/e2e: one group per backend of its parametrized runtime (each worker that runs a
#   group makes that backend's runtime once); its tests without a runtime (the `ezgh dev`
#   subprocess ones) are groups of their module;
# - tests/console: one group (one Chromium and one runtime);
# - tests/faults: a group per module (a runtime each: the campaign's modules are long);
# - the CDK synth modules (`CDK_MODULES`): one group, one jsii process.
# The groups are ours, not xdist's `xdist_group` marks: xdist 3.8 names a marked test's group
# by appending it to `item._nodeid`, which pytest 9.2 no longer reads, so the marks grouped
# nothing (every test went to either worker, and each worker made every runtime, synth and
# browser, the e2e ones once per switch of backend). `pytest_xdist_make_scheduler` below
# groups by node ID instead.
WHOLE_PACKAGES = ("tests/console/",)
# The modules that synthesize the CDK stack are one group, so that one worker pays once for
# aws_cdk's import and its jsii node process, most of a synth's cost (in one process: 15.4 s
# of CPU for both, 15.6 s and 10.6 s apart).
CDK_MODULES = frozenset({"tests/infra/test_stack.py", "tests/bench/test_bench_idle.py"})
CDK_GROUP = "cdk"
PER_BACKEND_PACKAGES = ("tests/e2e/",)
BACKEND_IDS = frozenset({"moto", "ddblocal"})  # tests/ddblocal.py BACKENDS' param IDs

# Rough seconds per group on an idle 2-core machine (a run's per-group wall times at load 6.7,
# 2026-12-04, scaled by 0.61, the idle run's phase 1 over that run's; only the order depends
# on them): the longest go first so that the workers end together. Others count
# `DEFAULT_TEST_SECONDS` a test, which is why every group of over about 3 s is named here: a
# long group left to the end would keep one worker busy after the others are done.
GROUP_SECONDS = {
    "tests/e2e[moto]": 133,
    "tests/faults/test_nothing_is_lost.py": 81,
    "tests/e2e[ddblocal]": 68,
    # 1,000 branches on DynamoDB Local, 150 on moto, 200 child runs on each: 170 s at load 6-8
    "tests/sdk/test_sdk_fanout.py": 100,
    "tests/api/test_fuzz_openapi.py": 61,
    "tests/faults/test_controls_under_faults.py": 60,
    "tests/console": 46,
    "tests/e2e/test_dev_restart.py": 28,
    "tests/api/test_authorization_matrix.py": 27,
    "tests/ts/test_sdk_ts.py": 20,  # tsc, an `ezgh dev` and Node's test runner
    CDK_GROUP: 25,  # tests/infra/test_stack.py 18, tests/bench/test_bench_idle.py 14, one synth
    "tests/local/test_persistence.py": 17,
    "tests/api/test_step_writes.py": 15,
    "tests/faults/test_control.py": 14,
    "tests/local/test_environments.py": 13,
    "tests/api/test_bad_input.py": 12,
    "tests/api/test_requests.py": 11,
    "tests/api/test_async_invocations.py": 11,
    "tests/infra/test_bundle.py": 9,
    "tests/golden/test_engine_side.py": 8,
    "tests/api/test_apps.py": 8,
    "tests/sdk/test_typing.py": 6,
    "tests/api/test_run_scopes.py": 5,
    "tests/api/test_queues.py": 5,
    "tests/api/test_resource_refs.py": 4,
    "tests/api/test_send_idempotency.py": 5,
    "tests/sdk/test_sdk_replay.py": 5,
    "tests/local/test_pollers.py": 5,
    "tests/bench/test_bench_throughput.py": 6,
    "tests/local/test_runtime.py": 4,
    "tests/bench/test_bench_smoke.py": 4,
    "tests/api/test_bootstrap_cli.py": 4,
}
DEFAULT_TEST_SECONDS = 0.1


def xdist_group(nodeid: str) -> str:
    """The worker group of the test `nodeid` (see `WHOLE_PACKAGES`). From the node ID alone:
    xdist's controller, which schedules, has the IDs but not the items. A tests/e2e test's
    runtime backend is its first parameter ID (the package-scoped fixture's parameters come
    before the test's own); `_check_groups` holds that against the items' parameters."""
    module, _, name = nodeid.partition("::")
    if module in CDK_MODULES:
        return CDK_GROUP
    for package in WHOLE_PACKAGES:
        if module.startswith(package):
            return package.rstrip("/")
    for package in PER_BACKEND_PACKAGES:
        if module.startswith(package) and "[" in name:
            first = name[name.index("[") + 1 :].replace("]", "-").split("-", 1)[0]
            if first in BACKEND_IDS:
                return f"{package.rstrip('/')}[{first}]"
    return module


def _check_groups(items: list[pytest.Item]) -> None:
    """Fail the collection if a tests/e2e test's group (read from its node ID) is not the
    backend its `runtime` fixture runs on: a grouping that split a runtime's tests across
    workers would make that runtime on both."""
    for item in items:
        callspec = getattr(item, "callspec", None)
        backend = callspec.params.get("runtime") if callspec is not None else None
        if not isinstance(backend, str) or not item.nodeid.startswith(PER_BACKEND_PACKAGES):
            continue
        group = xdist_group(item.nodeid)
        if not group.endswith(f"[{backend}]"):
            raise pytest.UsageError(f"{item.nodeid}: grouped as {group}, runs on {backend}")


def _longest_groups_first(items: list[pytest.Item]) -> None:
    """Order the groups by their `GROUP_SECONDS`, longest first, keeping each group's items
    together and in pytest's order (which keeps a parametrized fixture's uses together).
    Every worker sorts the same collection the same way, as xdist requires."""
    groups = {item: xdist_group(item.nodeid) for item in items}
    first: dict[str, int] = {}
    count: dict[str, int] = {}
    for index, item in enumerate(items):
        first.setdefault(groups[item], index)
        count[groups[item]] = count.get(groups[item], 0) + 1

    def seconds(group: str) -> float:
        return GROUP_SECONDS.get(group, DEFAULT_TEST_SECONDS * count[group])

    items.sort(key=lambda item: (-seconds(groups[item]), first[groups[item]]))


def _moto_only(item: pytest.Item) -> bool:
    """Whether the item's module left DynamoDB Local out (`MOTO_ONLY`, with its reason)."""
    marker = item.get_closest_marker(MOTO_ONLY)
    if marker is None:
        return False
    if not (marker.args and isinstance(marker.args[0], str) and marker.args[0].strip()):
        raise pytest.UsageError(f"{item.nodeid}: moto_only needs its reason")
    return True


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Leave out the DynamoDB Local variants of `moto_only` modules (unless
    EZGH_DDBLOCAL=all), then order the items by worker group (see `WHOLE_PACKAGES`)."""
    if os.environ.get("EZGH_DDBLOCAL") != "all":
        kept: list[pytest.Item] = []
        dropped: list[pytest.Item] = []
        for item in items:
            on_ddblocal = item.get_closest_marker("ddblocal") is not None
            (dropped if on_ddblocal and _moto_only(item) else kept).append(item)
        if dropped:
            config.hook.pytest_deselected(items=dropped)
            items[:] = kept
    _check_groups(items)
    _longest_groups_first(items)


@pytest.hookimpl(optionalhook=True, tryfirst=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """Under `--dist loadgroup`: xdist's scope scheduling with `xdist_group` as the scope.
    It hands a worker the next group (in collection order: longest first) when it has two
    tests left, so the workers end close together."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class GroupScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return xdist_group(nodeid)

    return GroupScheduling(config, log)


# Under `--dist loadgroup`, on xdist's controller: the workers each group's tests ran on.
_GROUP_WORKERS: dict[str, set[str]] = {}


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    node = getattr(report, "node", None)  # the worker, in the controller's copy of a report
    if node is not None and report.when == "setup":
        _GROUP_WORKERS.setdefault(xdist_group(report.nodeid), set()).add(node.gateway.id)


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Fail a passing `--dist loadgroup` session whose groups did not each run whole on one
    worker: the grouping is what keeps each runtime, synth and browser made once (it was
    silently lost once, with pytest 9.2's node IDs: see `xdist_group`)."""
    if session.config.getoption("dist", None) != "loadgroup" or exitstatus != 0:
        return
    split = {group: sorted(w) for group, w in _GROUP_WORKERS.items() if len(w) > 1}
    if split:
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.ensure_newline()
            for group, workers in sorted(split.items()):
                reporter.write_line(f"xdist group {group} ran on {', '.join(workers)}", red=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def ran_all_of_e2e(session: pytest.Session) -> bool:
    """Whether this session collected the e2e suite unfiltered (its recording is complete)."""
    option = session.config.option
    if getattr(option, "keyword", "") or getattr(option, "markexpr", ""):
        return False
    if getattr(option, "lf", False) or getattr(option, "deselect", None):
        return False
    return any(item.nodeid.startswith("tests/e2e/") for item in session.items)


@pytest.fixture(scope="session")
def dynamodb_local() -> Iterator[DynamoDBLocal]:
    """One in-memory DynamoDB Local for the session (killed at its end)."""
    server = DynamoDBLocal()
    try:
        server.start()
    except RuntimeError as error:
        pytest.fail(str(error), pytrace=False)
    yield server
    server.stop()
