"""How intents are written: one conditional write, a transaction, each alone."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from botocore.exceptions import ClientError

from ezgh_engine.adapters import ddb
from ezgh_engine.adapters.intents import Intent, Lease
from ezgh_engine.adapters.run_writes._base import STALE, AlreadyRecorded, _ddb
from ezgh_engine.adapters.run_writes._requests import _check_sizes, _lease_check, request
from ezgh_engine.errors import StaleInvocation


def _single(action: dict[str, Any]) -> None:
    """One conditional write; `ClientError` as DynamoDB answered (throttling made
    transient)."""
    ((kind, body),) = action.items()
    try:
        if kind == "Put":
            _ddb().put_item(**body)
        elif kind == "Update":
            _ddb().update_item(**body)
        elif kind == "Delete":
            _ddb().delete_item(**body)
        else:
            raise TypeError(f"{kind} is only written in a transaction")
    except ClientError as exc:
        if not ddb.is_condition_failure(exc):
            ddb.raise_transient(exc)
        raise


def _transaction(actions: Sequence[dict[str, Any]]) -> list[str]:
    """Write `actions` all or nothing: [] when written, else each action's cancellation
    code ('None' where it was fine) when a condition refused."""
    _check_sizes(actions)
    try:
        _ddb().transact_write_items(TransactItems=list(actions))
    except ClientError as exc:
        codes = ddb.cancellation_codes(exc)
        if "ConditionalCheckFailed" in codes:
            return codes
        ddb.raise_transient(exc)
        raise
    return []


def _first_refused(codes: Sequence[str]) -> int:
    return next(i for i, code in enumerate(codes) if code == "ConditionalCheckFailed")


def write(intents: Sequence[Intent]) -> None:
    """Step writes on their own conditions (no lease check: they hold the records
    together, see `service.steps`): one conditional write for one, else one transaction.
    `AlreadyRecorded(index)` when a condition refused (nothing was written)."""
    actions = [request(i) for i in intents]
    if len(actions) == 1:
        _check_sizes(actions)
        try:
            _single(actions[0])
        except ClientError as exc:
            if ddb.is_condition_failure(exc):
                raise AlreadyRecorded(0) from None
            raise
        return
    codes = _transaction(actions)
    if codes:
        raise AlreadyRecorded(_first_refused(codes))


def write_leased(lease: Lease, intents: Sequence[Intent]) -> dict[str, Any]:
    """Step writes of one op under `lease`; answer what a single update wrote (its new
    values: a start's attempt the store counted), else {}.

    A main invocation's: one transaction with the check that it still holds the run's lease
    (`StaleInvocation` when it does not). A branch invocation's: its step's own conditions
    hold the step's branch lease, so the op is one conditional write (a failure with its
    event: one transaction) and the caller checks the run is live. `AlreadyRecorded(index)`
    when a step's condition refused (nothing was written)."""
    if lease.branch_step is not None:
        return _write_returning([request(i) for i in intents])
    codes = _transaction([_lease_check(lease), *(request(i) for i in intents)])
    if not codes:
        return {}
    if codes[0] == "ConditionalCheckFailed":
        raise StaleInvocation(STALE)
    raise AlreadyRecorded(_first_refused(codes[1:]))


def _write_returning(actions: list[dict[str, Any]]) -> dict[str, Any]:
    """Like `write`, answering a single update's new values ({} otherwise)."""
    if len(actions) != 1:
        codes = _transaction(actions)
        if codes:
            raise AlreadyRecorded(_first_refused(codes))
        return {}
    _check_sizes(actions)
    ((kind, body),) = actions[0].items()
    try:
        if kind != "Update":
            _single(actions[0])
            return {}
        answer = _ddb().update_item(**body, ReturnValues="UPDATED_NEW")
    except ClientError as exc:
        if ddb.is_condition_failure(exc):
            raise AlreadyRecorded(0) from None
        ddb.raise_transient(exc)
        raise
    return ddb.from_item(answer.get("Attributes") or {})


def transact(intents: Sequence[Intent]) -> bool:
    """Write all or nothing; False when a condition refused (the race was lost). One item
    is one conditional write (a transaction bills each item twice)."""
    actions = [request(i) for i in intents]
    if len(actions) != 1:
        return not _transaction(actions)
    _check_sizes(actions)
    try:
        _single(actions[0])
    except ClientError as exc:
        if ddb.is_condition_failure(exc):
            return False
        raise
    return True


def write_each(intents: Sequence[Intent]) -> None:
    """Each alone, each harmless to repeat: an item refused because it exists (an
    earlier try wrote it) is left as it is."""
    for intent in intents:
        action = request(intent)
        _check_sizes([action])
        try:
            _single(action)
        except ClientError as exc:
            if not ddb.is_condition_failure(exc):
                raise
