"""The messages of the invocations queue: one typed class per `type`, dumped and parsed here.

Every producer builds one of these classes and sends `dumps(message)` (or `dump(message)` as a
Scheduler target's input); the invoker's consumer (`service.invocation_queue`) reads a body
with `parse` once and dispatches on the class. The wire format is the one the queue has always
carried (`{"type": "invoke", "runId", "seq"}`, ...), so messages in flight across a deploy
still parse; fields a reader does not know are ignored.

A body that is not JSON, has an unknown `type` or lacks a field its type needs raises
`MalformedMessage`: no producer sends such a body, so no later delivery could succeed, and
the consumer drops it with an error log instead of letting it come back until the queue's
dead-letter limit.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar


class MalformedMessage(ValueError):
    """A queue message body that no producer of this engine could have sent."""


@dataclass(frozen=True)
class Retry:
    """A handler's answer: leave the message in the queue and deliver it after `after_seconds`."""

    after_seconds: float


@dataclass(frozen=True)
class Invoke:
    """Invoke the run to answer its reason `seq` (sent by the stream, the outbox, repair)."""

    TYPE: ClassVar[str] = "invoke"
    run_id: str
    seq: int


@dataclass(frozen=True)
class Timer:
    """A wake time came: a sleep ends, a retry is due, a wait or the run's limit times out
    (`step_id` is `$deadline` for the run's own limits)."""

    TYPE: ClassVar[str] = "timer"
    run_id: str
    step_id: str
    wake_at: str  # ISO 8601, exactly as the step (or run) holds it


@dataclass(frozen=True)
class Branch:
    """Run one parallel step of the run in an invocation of its own.

    Sent by a launch (`service.launches`), it also carries what the step's item needs,
    since the step has none until this message claims it (`steps_store.take_branch_lease`
    creates it): the run `attempt` that launched it and the launch's `values` of the step
    (name, order, history copy...), as (name, value) pairs. Sent for a step that has an
    item (a retry that came due, repair, an older engine's launch), it carries neither."""

    TYPE: ClassVar[str] = "branch"
    run_id: str
    step_id: str
    attempt: int | None = None
    values: tuple[tuple[str, Any], ...] = ()

    @property
    def creates(self) -> bool:
        """Whether the message may create its step's item (it carries what it needs)."""
        return self.attempt is not None and bool(self.values)


@dataclass(frozen=True)
class Cron:
    """A schedule fired (EventBridge Scheduler's target input; it fills `scheduledTime`)."""

    TYPE: ClassVar[str] = "cron"
    schedule_id: str
    scheduled_time: str | None = None


@dataclass(frozen=True)
class TaskWatch:
    """A pull app's task lease would end: deliver the task again if its worker is gone."""

    TYPE: ClassVar[str] = "task-watch"
    run_id: str
    seq: int
    epoch: int


@dataclass(frozen=True)
class YearLimitSweep:
    """End the runs past their one-year limit (the stack's hourly schedule fires it;
    Scheduler fills `scheduledTime`)."""

    TYPE: ClassVar[str] = "year-limit-sweep"
    scheduled_time: str | None = None


Message = Invoke | Timer | Branch | Cron | TaskWatch | YearLimitSweep

# A group carries at most this many messages: what one SQS batch and one `SendMessageBatch`
# carry, so a group that must go round the queue is one request and comes back as one
# batch; and as many pushes as one invoker environment makes at once (its memory is sized
# for them: topology `INVOKER_FUNCTION`).
GROUP_MAX_MESSAGES = 10
# A group's body at most (its messages are a hundred bytes or so each, a launch's branch
# message a few hundred: it carries its step's values): far under Lambda's
# 1 MB for an asynchronous event, and, inside the invocation record Lambda's event queue
# wraps a failed event in (under 2 KB besides it), under SQS's 256 KB message, so the
# on-failure queue takes any group the invoker gives up on.
GROUP_MAX_BYTES = 64 * 1024


@dataclass(frozen=True)
class Group:
    """Several messages in one asynchronous event (`{"type": "group", "messages": [...]}`):
    the starts one batch of stream records asks for, which the invoker answers at once,
    each on its own (a message's failure is its own retry). `malformed`: why elements that
    are none of ours were left out (the rest of the group still counts)."""

    TYPE: ClassVar[str] = "group"
    messages: tuple[Message, ...]
    malformed: tuple[str, ...] = ()


# Per class: (wire name, attribute, reader) for each field, in wire order.
_Field = tuple[str, str, Callable[[Any], Any]]


def _str(value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise MalformedMessage(f"expected a non-empty string, got {value!r}")
    return value


def _int(value: Any) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise MalformedMessage(f"expected an integer, got {value!r}")
    return value


def _optional_str(value: Any) -> str | None:
    # Scheduler substitutes the fire time; a placeholder or odd value only loses precision.
    return value if isinstance(value, str) else None


def _optional_int(value: Any) -> int | None:
    return None if value is None else _int(value)


def _pairs(value: Any) -> tuple[tuple[str, Any], ...]:
    """A branch's step values: a JSON object of plain values (strings, numbers, booleans)."""
    if not isinstance(value, dict):
        raise MalformedMessage(f"expected an object, got {value!r}")
    for key, item in value.items():
        if not isinstance(item, str | int | float | bool):
            raise MalformedMessage(f"{key}: expected a plain value, got {item!r}")
    return tuple(sorted(value.items()))


# Readers of fields a message may leave out (a message of an older engine), and of those a
# message leaves out when empty (the branch shape an older engine reads and sends).
_OPTIONAL = (_optional_str, _optional_int, _pairs)
_LEFT_OUT_EMPTY = (_optional_int, _pairs)


_FIELDS: dict[type[Any], tuple[_Field, ...]] = {
    Invoke: (("runId", "run_id", _str), ("seq", "seq", _int)),
    Timer: (("runId", "run_id", _str), ("stepId", "step_id", _str), ("wakeAt", "wake_at", _str)),
    Branch: (
        ("runId", "run_id", _str),
        ("stepId", "step_id", _str),
        ("attempt", "attempt", _optional_int),
        ("step", "values", _pairs),
    ),
    Cron: (("scheduleId", "schedule_id", _str), ("scheduledTime", "scheduled_time", _optional_str)),
    TaskWatch: (("runId", "run_id", _str), ("seq", "seq", _int), ("epoch", "epoch", _int)),
    YearLimitSweep: (("scheduledTime", "scheduled_time", _optional_str),),
}
_BY_TYPE: dict[str, type[Any]] = {cls.TYPE: cls for cls in _FIELDS}


def dump(message: Message) -> dict[str, Any]:
    """The message's JSON object, `type` first."""
    body: dict[str, Any] = {"type": message.TYPE}
    for wire, attr, read in _FIELDS[type(message)]:
        value = getattr(message, attr)
        if read in _LEFT_OUT_EMPTY and value in (None, ()):
            continue
        body[wire] = dict(value) if read is _pairs else value
    return body


def dumps(message: Message) -> str:
    """The message as the compact JSON body a queue message carries."""
    return json.dumps(dump(message), separators=(",", ":"))


def load(body: Any) -> Message:
    """The message of a decoded JSON object; `MalformedMessage` when it is none of ours."""
    if not isinstance(body, dict):
        raise MalformedMessage("a message is a JSON object")
    kind = body.get("type")
    cls = _BY_TYPE.get(kind) if isinstance(kind, str) else None
    if cls is None:
        raise MalformedMessage(f"unknown message type {kind!r}")
    values: dict[str, Any] = {}
    for wire, attr, read in _FIELDS[cls]:
        if wire not in body and read in _OPTIONAL:
            continue
        if wire not in body:
            raise MalformedMessage(f"{cls.TYPE} message without {wire!r}")
        try:
            values[attr] = read(body[wire])
        except MalformedMessage as exc:
            raise MalformedMessage(f"{cls.TYPE} message: {wire}: {exc}") from None
    message: Message = cls(**values)
    return message


def dumps_group(messages: Sequence[Message]) -> str:
    """The compact JSON body of a group of `messages` (see `Group`)."""
    body = {"type": Group.TYPE, "messages": [dump(m) for m in messages]}
    return json.dumps(body, separators=(",", ":"))


def load_event(body: Any) -> Message | Group:
    """`load`, or a `Group` of loaded messages (a group holds no group)."""
    if not isinstance(body, dict) or body.get("type") != Group.TYPE:
        return load(body)
    elements = body.get("messages")
    if not isinstance(elements, list) or not elements:
        raise MalformedMessage("group message without a non-empty 'messages' list")
    loaded: list[Message] = []
    malformed: list[str] = []
    for element in elements:
        try:
            if isinstance(element, dict) and element.get("type") == Group.TYPE:
                raise MalformedMessage("a group inside a group")
            loaded.append(load(element))
        except MalformedMessage as exc:
            malformed.append(f"{exc}: {str(element)[:200]!r}")
    return Group(tuple(loaded), tuple(malformed))


def parse(body: str) -> Message:
    """The message of a queue message body; `MalformedMessage` when it is none of ours."""
    try:
        decoded = json.loads(body)
    except ValueError:
        raise MalformedMessage("the body is not JSON") from None
    return load(decoded)
