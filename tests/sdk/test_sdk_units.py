"""Pure modules: values, durations, identity, signing, deployment IDs, workflow names."""

from __future__ import annotations

import math
from datetime import UTC, date, datetime, timedelta, timezone
from decimal import Decimal
from enum import StrEnum
from typing import Any

import pytest
from ezgh_workflows import Workflow, workflow
from ezgh_workflows._internal import values
from ezgh_workflows._internal.deployment import detect_deployment_id
from ezgh_workflows._internal.duration import parse_duration
from ezgh_workflows._internal.errors import (
    DuplicateStepNameError,
    InvalidValueError,
    OutputTooLargeError,
)
from ezgh_workflows._internal.identity import StepIds, validate_explicit_id, validate_name
from ezgh_workflows._internal.signing import sign, sign_v2, verify


class Color(StrEnum):
    RED = "red"


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, None),
        (True, True),
        (3, 3),
        (2.5, 2.5),
        ("s", "s"),
        (Color.RED, "red"),
        ([1, (2,)], [1, [2]]),
        ({"k": ()}, {"k": []}),
        (date(2026, 2, 3), "2026-02-03"),
        (
            datetime(2026, 2, 3, 4, 5, tzinfo=timezone(timedelta(hours=2))),
            "2026-02-03T04:05:00+02:00",
        ),
    ],
)
def test_allowed_values(value: Any, expected: Any) -> None:
    assert values.roundtrip(value) == expected


@pytest.mark.parametrize(
    "value",
    [
        datetime(2026, 1, 1),
        Decimal(1),
        {1},
        frozenset(),
        b"x",
        bytearray(b"x"),
        math.nan,
        -math.inf,
        object(),
        {("t",): 1},
        complex(1, 2),
    ],
)
def test_forbidden_values(value: Any) -> None:
    with pytest.raises(InvalidValueError):
        values.encode(value)


def test_circular_values_are_refused() -> None:
    loop: list[Any] = []
    loop.append(loop)
    with pytest.raises(InvalidValueError):
        values.encode(loop)


def test_size_limit_is_one_mebibyte_encoded() -> None:
    values.encode("x" * (1_048_576 - 2))  # two quotes: exactly 1 MiB
    with pytest.raises(OutputTooLargeError):
        values.encode("x" * (1_048_576 - 1))
    with pytest.raises(OutputTooLargeError):
        values.encode("é" * 600_000)  # counted in UTF-8 bytes


def test_iso_times() -> None:
    moment = datetime(2026, 10, 13, 20, 0, 0, 123456, tzinfo=timezone(timedelta(hours=2)))
    assert values.iso_utc(moment) == "2026-10-13T18:00:00.123Z"
    assert values.parse_iso("2026-10-13T18:00:00.123Z") == datetime(
        2026, 10, 13, 18, 0, 0, 123000, tzinfo=UTC
    )


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("3d", 259200),
        ("1h30m", 5400),
        ("90s", 90),
        ("2w", 1209600),
        ("1.5s", 1.5),
        ("250ms", 0.25),
        ("1d2h3m4s", 93784),
        (10, 10),
        (2.5, 2.5),
        (timedelta(hours=1), 3600),
        ("365d", 31536000),
        (0, 0),
    ],
)
def test_durations(text: Any, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize(
    "text",
    [
        "",
        "3",
        "d",
        "3 d",
        " 3d",
        "3D",
        "1m1h",
        "1h1h",
        "-1s",
        "1y",
        "366d",
        "3d!",
        "1e3s",
        math.nan,
        math.inf,
        -1,
        True,
        None,
        [1],
        timedelta(days=-1),
        timedelta(days=366),
    ],
)
def test_bad_durations(text: Any) -> None:
    with pytest.raises(ValueError):
        parse_duration(text)


def test_step_ids() -> None:
    ids = StepIds()
    assert [ids.allocate("a", None) for _ in range(3)] == ["a#1", "a#2", "a#3"]
    assert ids.allocate("b", None) == "b#1"
    assert ids.allocate("a", "custom") == "custom"
    assert ids.allocate("a", None) == "a#4"
    with pytest.raises(DuplicateStepNameError):
        ids.allocate("other", "custom")


def test_name_and_id_validation() -> None:
    assert validate_name("é" * 128) == "é" * 128
    for bad in ("", "é" * 129, "a\x00b", None):
        with pytest.raises(ValueError):
            validate_name(bad)
    assert validate_explicit_id("A-z_0.9:x") == "A-z_0.9:x"
    assert validate_explicit_id("x" * 128)
    for bad_id in ("", "x" * 129, "a#1", "a/b", "a\n", 1):
        with pytest.raises(ValueError):
            validate_explicit_id(bad_id)


def test_signatures() -> None:
    body = b'{"a":1}'
    sig = sign_v2("k", "100", "POST", "/", "", body)
    assert sig.startswith("v2=") and len(sig) == 67
    assert verify("k", "100", sig, body, now=100) is None
    assert verify("k", "100", sig, body, now=400) is None
    assert verify("k", "100", sig, body, now=401) is not None
    assert verify("k", "100", sig, b'{"a":2}', now=100) is not None
    assert verify("other", "100", sig, body, now=100) is not None
    assert verify("k", "100", "v2=é", body, now=100) is not None
    assert verify("k", "100", "v2=\udc80", body, now=100) is not None
    assert verify("k", None, sig, b"", now=100) is not None


def test_v2_signatures_cover_method_path_and_invocation() -> None:
    body = b'{"type":"invoke","invocationId":"i1"}'
    sig = sign_v2("k", "100", "POST", "/hooks", "i1/3", body)
    ok = {"method": "POST", "path": "/hooks", "invocation": "i1/3"}
    assert verify("k", "100", sig, body, now=100, **ok) is None
    for changed in ({"path": "/other"}, {"method": "PUT"}, {"invocation": "i1/4"}):
        assert verify("k", "100", sig, body, now=100, **{**ok, **changed}) is not None


def test_the_first_form_alone_is_refused() -> None:
    body = b'{"a":1}'
    problem = verify("k", "100", sign("k", "100", body), body, now=100)
    assert problem is not None and "1.4" in problem
    both = f"{sign('k', '100', body)},{sign_v2('k', '100', 'POST', '/', '', body)}"
    assert verify("k", "100", both, body, now=100) is None


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({}, None),
        ({"EZGH_DEPLOYMENT_ID": "mine", "VERCEL_DEPLOYMENT_ID": "dpl_1"}, "mine"),
        ({"VERCEL_DEPLOYMENT_ID": "dpl_1"}, "dpl_1"),
        ({"AWS_LAMBDA_FUNCTION_NAME": "fn", "AWS_LAMBDA_FUNCTION_VERSION": "7"}, "fn:7"),
        ({"AWS_LAMBDA_FUNCTION_NAME": "fn"}, None),
        ({"K_SERVICE": "api", "K_REVISION": "api-00002-xyz"}, "api:api-00002-xyz"),
        ({"FLY_APP_NAME": "app", "FLY_MACHINE_VERSION": "01H"}, "app:01H"),
        ({"FLY_APP_NAME": "app", "FLY_IMAGE_REF": "registry/app:dep"}, "app:registry/app:dep"),
        ({"RENDER_SERVICE_ID": "srv-1", "RENDER_GIT_COMMIT": "abc"}, "srv-1:abc"),
        ({"RENDER_DEPLOY_ID": "dep-1"}, "dep-1"),
    ],
)
def test_deployment_ids(env: dict[str, str], expected: str | None) -> None:
    assert detect_deployment_id(env) == expected


def test_deployment_id_reads_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EZGH_DEPLOYMENT_ID", "from-env")
    assert detect_deployment_id() == "from-env"


def test_workflow_names_and_calls() -> None:
    @workflow("ok_name-1")
    def plain(ctx: Any) -> str:
        """Docs."""
        return f"called {ctx}"

    assert isinstance(plain, Workflow)
    assert plain.name == "ok_name-1" and not plain.is_async
    assert plain("x") == "called x"
    assert plain.__doc__ == "Docs."
    for bad in ("", "has space", "x" * 65, "dot.name"):
        with pytest.raises(ValueError):
            workflow(bad)
