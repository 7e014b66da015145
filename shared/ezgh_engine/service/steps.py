"""Step calls from an invocation (docs/protocol.md section 2): start, complete, fail, record,
callback, cancel, reject. The edge: a call's token is verified and its ops parsed once into
typed requests (`protocol.ops`); `service.step_ops` plans and writes them (one module per op
over one executor, see `step_ops.plan`).

A call's ops are written in one write when they can be (the fast path); when a step's
condition refuses it (a resent call, a step another invocation recorded), the ops are applied
one by one under the lease, each answering what is recorded. The same ops may ride an
invocation's answer (protocol 1.3, `ops`, parsed once by `protocol.ops.parse_answer_ops`):
`answer_writes` gives their writes, written ahead of the outcome's commit,
and `apply_answer_ops` applies them one by one when a step refuses its write.
"""

from __future__ import annotations

from typing import Any

from ezgh_engine import clock
from ezgh_engine.adapters.intents import Intent
from ezgh_engine.config import settings
from ezgh_engine.core import tokens
from ezgh_engine.core.protocol_rules import end_differs
from ezgh_engine.protocol import ops as protocol_ops
from ezgh_engine.service.step_ops import checks, executor
from ezgh_engine.service.step_ops.plan import Caller

MAX_OPS = protocol_ops.MAX_OPS


def apply_ops(token: str, body: Any) -> dict[str, Any]:
    """Apply a batch of step ops for the invocation the token names; answer their results."""
    claims = tokens.verify(settings().token_secret, token, clock.now_ms())
    call = protocol_ops.parse_call(body)
    requests = [protocol_ops.parse_op(op, claims.step_id) for op in call.ops]
    return {"results": executor.apply_batch(Caller(claims, call.deployment_id), requests)}


def answer_writes(
    claims: tokens.InvocationClaims, deployment_id: str | None, ops: protocol_ops.AnswerOps
) -> list[list[Intent]]:
    """The writes of the ops an invocation's answer carries (the steps it ended since its
    last step call, parsed by `protocol.ops.parse_answer_ops`), one list per op (a failure
    is its step and its event), each under the step's own conditions."""
    return executor.end_writes(Caller(claims, deployment_id), ops.requests)


def check_not_taken_over(claims: tokens.InvocationClaims) -> None:
    """`StaleInvocation` when the run ended or a newer epoch holds it: the read a step call
    makes (half a read unit), before an answer's step ends are written ahead of its
    outcome's commit, whose condition is the same (its epoch, a live run). A lease that
    merely ran out, with no newer invocation, still takes its answer, as the commit does."""
    checks.check_not_taken_over(claims)


def apply_answer_ops(
    claims: tokens.InvocationClaims, deployment_id: str | None, ops: protocol_ops.AnswerOps
) -> list[str]:
    """Apply an answer's ops one by one (after their writes ahead of the outcome's commit
    were refused); the IDs of the steps recorded with another outcome than the ops say.
    Raises `StaleInvocation` when the lease was lost."""
    caller = Caller(claims, deployment_id)
    results = [executor.apply_one(caller, request) for request in ops.requests]
    pairs = zip(ops.wire, results, strict=True)
    return [op["stepId"] for op, result in pairs if end_differs(op, result)]
