"""The two sides of the invocation protocol agree: the engine's package
(`ezgh_engine.protocol`) and its mirror in the SDK (`ezgh_workflows._internal.protocol`) speak
the same version, name the same step ops, and each op and outcome the SDK builds parses on
the engine's side as what the SDK meant."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from pathlib import Path

import ezgh_workflows._internal as sdk_internal
import pytest
from ezgh_engine import protocol
from ezgh_engine.protocol import ops
from ezgh_engine.protocol import outcomes as engine_outcomes
from ezgh_workflows._internal import protocol as sdk

ERROR = {"code": "user", "name": "Boom", "message": "no"}
_OP_LITERAL = re.compile(r"""["']op["']\s*:\s*["'](\w+)["']""")


def test_both_sides_speak_one_version() -> None:
    assert sdk.PROTOCOL_VERSION == protocol.PROTOCOL_VERSION
    # One home on the engine's side: no module but the protocol package defines it.
    engine = Path(protocol.__file__).parent.parent
    defined = [
        path.relative_to(engine).as_posix()
        for path in engine.rglob("*.py")
        if re.search(
            r"^\s*PROTOCOL_VERSION\s*[:=]|import PROTOCOL_VERSION as", path.read_text(), re.M
        )
    ]
    assert defined == ["protocol/__init__.py"]


def test_the_sdk_sends_exactly_the_ops_the_engine_knows() -> None:
    sent = set()
    for path in Path(sdk_internal.__file__).parent.glob("*.py"):
        sent |= set(_OP_LITERAL.findall(path.read_text()))
    assert sent == set(ops.OP_KINDS)


@pytest.mark.parametrize(
    ("built", "expected"),
    [
        (sdk.op_start("a#1", "a"), ops.Start("a#1", "a")),
        (sdk.op_start("a#1", "a", attempt=2), ops.Start("a#1", "a", 2)),
        (sdk.op_complete("a#1", {"n": 1}), ops.Complete("a#1", '{"n":1}')),
        (
            sdk.op_complete("a#1", 1, inline={"name": "a", "order": "o", "startedAt": "t"}),
            ops.Complete("a#1", "1", ops.InlineStart("a", "o", "t")),
        ),
        (sdk.op_record("v#1", "v", [1]), ops.Record("v#1", "v", "[1]")),
        (sdk.op_callback("c#1", "c", 60), ops.Callback("c#1", "c", 60)),
    ],
)
def test_each_op_the_sdk_builds_parses_as_meant(built: dict[str, object], expected: object) -> None:
    assert ops.parse_op(built) == expected


def test_a_fail_keeps_its_retry_budget_and_a_reject_its_error() -> None:
    fail = ops.parse_op(sdk.op_fail("a#1", ERROR, retryable=True, attempt=2, retries=3))
    assert isinstance(fail, ops.Fail) and (fail.retryable, fail.attempt, fail.retries) == (
        True,
        2,
        3,
    )
    reject = ops.parse_op(sdk.op_fail_wait("s#1", "s", "sleep", ERROR))
    assert isinstance(reject, ops.Reject) and reject.error.to_api()["name"] == "Boom"


@pytest.mark.parametrize(
    ("answer", "kind"),
    [
        (sdk.completed(1, "dep"), "completed"),
        (sdk.failed(ERROR, "dep"), "failed"),
        (sdk.aborted("why", "dep"), "aborted"),
        (sdk.cancelled("dep"), "cancelled"),
        (sdk.branch_ended("b#1", "dep"), "branch"),
        (
            sdk.suspended([{"stepId": "s#1", "name": "s", "kind": "sleep", "seconds": 5}], None),
            "suspended",
        ),
    ],
)
def test_each_outcome_the_sdk_answers_parses_on_the_engine_side(
    answer: dict[str, object], kind: str
) -> None:
    assert answer["protocol"] == protocol.PROTOCOL_VERSION
    parsed = engine_outcomes.parse(answer, datetime(2026, 1, 1, tzinfo=UTC))
    assert parsed.kind == kind


def test_the_sdk_calls_the_paths_the_steps_function_serves() -> None:
    """Step calls and (1.5) the history and payload reads: the SDK's paths are the ones the
    steps function lets through, and the API serves them too (a pull worker's `api.url`)."""
    from ezgh_workflows._internal import transport

    from functions.steps.handler import INVOCATION_PATHS

    sdk_paths = {transport.STEPS_PATH, transport.HISTORY_PATH, transport.PAYLOAD_PATH}
    assert sdk_paths == INVOCATION_PATHS


def test_an_app_gets_the_requests_of_the_version_it_said() -> None:
    assert protocol.spoken_with("1.5") == protocol.PROTOCOL_VERSION == sdk.PROTOCOL_VERSION
    assert protocol.spoken_with("2.0") == protocol.PROTOCOL_VERSION
    for older in ("1.4", "1.3", "1.2", None, "", "x"):
        assert protocol.spoken_with(older) == "1.4"
