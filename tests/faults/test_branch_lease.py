"""A branch invocation that outlives its hold on its step, through the whole stack (the
fault suite's runtime, its push app and the SDK): the engine clock is skipped past the
step's lease while the app holds the invocation, so the SDK's step call is refused as
stale and the invocation answers `aborted`. The step must go to the branch's next
delivery and the run give its fault-free output (lost17: `invoke_branch` failed such a
step as `BranchNotRun`, and the run with it)."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest
from ezgh_engine.core import leases
from ezgh_engine.local.faults import FaultPlan
from ezgh_engine.local.runtime import LocalRuntime

from tests.faults import app as fault_app
from tests.faults.conftest import INVOKE_TIMEOUT_SECONDS
from tests.faults.harness import run_batch

pytestmark = [pytest.mark.faults, pytest.mark.e2e]

PROGRAM = [
    {
        "op": "parallel",
        "name": "s0",
        "branches": [{"fail": 0, "retries": 0}, {"fail": 1, "retries": 1}],
    }
]


class LateBranch:
    """The push app, but its first branch invocation reaches the SDK only after the engine
    clock passed that invocation's lease (and token)."""

    def __init__(self, inner: Any, clock: Any) -> None:
        self.inner = inner
        self.clock = clock
        self.skipped: list[str] = []
        self.lease = timedelta(milliseconds=leases.lease_ms(float(INVOKE_TIMEOUT_SECONDS)))

    @property
    def signing_key(self) -> str | None:
        return self.inner.signing_key  # type: ignore[no-any-return]

    @signing_key.setter
    def signing_key(self, value: str | None) -> None:
        self.inner.signing_key = value

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope.get("method") != "POST":
            await self.inner(scope, receive, send)
            return
        message = await receive()
        request = json.loads(message.get("body") or b"{}")
        if request.get("branch") and not self.skipped:
            self.skipped.append(request["branch"]["stepId"])
            self.clock.advance(self.lease + timedelta(seconds=1))
        given = [False]

        async def replay() -> dict[str, Any]:
            if not given[0]:
                given[0] = True
                return dict(message)
            return dict(await receive())

        await self.inner(scope, replay, send)


def test_a_branch_invocation_whose_lease_ran_out_under_it_is_delivered_again(
    runtime: LocalRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    late = LateBranch(fault_app.served.inner, runtime.clock)
    monkeypatch.setattr(fault_app.served, "inner", late)
    figures = run_batch(runtime, [PROGRAM], FaultPlan(seed=5), label="late", restart=False)
    assert late.skipped  # the first branch invocation did outlive its lease
    assert not figures.problems, "\n".join(figures.problems)
    assert figures.completed == 1 and figures.lost == 0
