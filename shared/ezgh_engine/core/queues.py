"""EZGH Queues, pure: queue and subscription records, message rules and message shapes.

No boto3 and no I/O here: the rules that decide what a request may send, and the shapes the
seed docs fix (the message a workflow or an HTTPS endpoint receives, a run-ended notification).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit

from ezgh_engine import ids

QUEUE_NAME_RE = re.compile(r"^[a-z0-9-]{1,64}$")
# SQS's own limits on a message: its size (body and attributes together), its attributes.
MAX_MESSAGE_BYTES = 256 * 1024
MAX_ATTRIBUTES = 10
MAX_BATCH = 10
ATTRIBUTE_NAME_RE = re.compile(r"^[A-Za-z0-9_.-]{1,256}$")
# FIFO MessageGroupId / MessageDeduplicationId: 1 to 128 printable ASCII characters.
FIFO_ID_RE = re.compile(r"^[\x21-\x7e]{1,128}$")
# What SQS accepts in a body or a string attribute (XML 1.0 characters).
_SQS_TEXT_RE = re.compile("^[\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]*$")
# The engine's own attribute: the `messageId` of a message sent under an Idempotency-Key,
# the same on every copy a resend after a crash may store (consumers dedupe on it). Names
# starting `ezgh.` are the engine's: a send may not set them.
MESSAGE_ID_ATTRIBUTE = "ezgh.messageId"
RESERVED_ATTRIBUTE_PREFIX = "ezgh."
# wait_for_message keys, and so correlation attribute values.
MESSAGE_KEY_RE = re.compile(r"^[A-Za-z0-9_.:-]{1,256}$")

DEFAULT_MAX_RECEIVE_COUNT = 10
DEFAULT_VISIBILITY_TIMEOUT = 30
DEFAULT_MAX_CONCURRENCY = 10
MAX_CONCURRENCY = 1000

NO_RUN_TO_RESUME = "No run to resume (message)"


class DeliveryFailed(Exception):
    """A subscription's message was not delivered; `status` is what the subscription shows."""

    def __init__(self, status: str) -> None:
        super().__init__(status)
        self.status = status


def start_run_id(project_id: str, queue_id: str, message_id: str) -> str:
    """The run (or job) a `start` subscription makes of a message: one per message, so a
    redelivery starts nothing new."""
    return ids.derived_id("queue-start", project_id, queue_id, message_id)


@dataclass(frozen=True)
class QueueRecord:
    """An EZGH queue: an SQS queue (FIFO when `fifo`) with its own dead-letter queue."""

    id: str
    org_id: str
    project_id: str
    name: str
    fifo: bool
    max_receive_count: int
    visibility_timeout_seconds: int
    url: str
    arn: str
    dlq_url: str
    dlq_arn: str
    created_at: str

    def to_api(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "name": self.name,
            "fifo": self.fifo,
            "maxReceiveCount": self.max_receive_count,
            "visibilityTimeoutSeconds": self.visibility_timeout_seconds,
            "createdAt": self.created_at,
        }


def redacted_url(url: str) -> str:
    """`scheme://host[:port]` of a URL: what every reader may see of a target."""
    parts = urlsplit(url)
    try:
        port = f":{parts.port}" if parts.port else ""
    except ValueError:
        port = ""
    return f"{parts.scheme}://{parts.hostname or ''}{port}"


@dataclass(frozen=True)
class Subscription:
    """A queue's delivery to an HTTPS endpoint or a workflow (start or resume mode)."""

    id: str
    org_id: str
    project_id: str
    queue_id: str
    target: dict[str, Any]
    max_concurrency: int
    paused: bool
    mapping_id: str
    created_at: str
    version: int = 1
    last_failure: str | None = None
    last_failure_at: str | None = None
    last_failure_message_id: str | None = None
    # When a delivery last succeeded after a failure (written only then): the failure, if
    # older, is past.
    last_delivered_at: str | None = None
    # An https target's signing secret, sealed (`service.subscriptions`); never answered.
    sealed_secret: str | None = None

    @property
    def failing(self) -> bool:
        """Its last delivery failed: no delivery has succeeded since its last failure."""
        if not self.last_failure:
            return False
        delivered = self.last_delivered_at
        return not delivered or delivered < (self.last_failure_at or "")

    def to_api(self, *, show_url: bool = True) -> dict[str, Any]:
        """The API's shape. Without `show_url` (a key that may not manage it), an https
        target's URL is cut to its scheme and host: its path or query may hold a token."""
        target = dict(self.target)
        if not show_url and isinstance(target.get("url"), str):
            target["url"] = redacted_url(target["url"])
            target["urlRedacted"] = True
        failure = None
        if self.last_failure:
            failure = {
                "message": self.last_failure,
                "at": self.last_failure_at,
                "messageId": self.last_failure_message_id,
            }
        return {
            "id": self.id,
            "queueId": self.queue_id,
            "target": target,
            "maxConcurrency": self.max_concurrency,
            "state": "paused" if self.paused else "active",
            "paused": self.paused,
            # The seed: "status shows the last failure, e.g. No run to resume (message)";
            # once a later delivery succeeded, `ok` again (`lastFailure` still tells it).
            "status": self.last_failure if self.failing and self.last_failure else "ok",
            "lastFailure": failure,
            "createdAt": self.created_at,
        }


# --- messages ------------------------------------------------------------------------------


@dataclass(frozen=True)
class OutgoingMessage:
    """One validated message of a send request."""

    body: str
    attributes: dict[str, str]
    group_id: str | None = None
    dedup_id: str | None = None

    def size(self) -> int:
        """Its size as SQS counts it: body, attribute names, types and values."""
        attrs = sum(
            len(k.encode()) + len(b"String") + len(v.encode()) for k, v in self.attributes.items()
        )
        return len(self.body.encode()) + attrs


class MessageError(ValueError):
    """A message breaks a rule; `field` names where (e.g. `messages[2].groupId`)."""

    def __init__(self, field_name: str, problem: str) -> None:
        super().__init__(f"{field_name}: {problem}")
        self.field = field_name
        self.problem = problem


def check_messages(raw: Any, *, fifo: bool) -> list[OutgoingMessage]:
    """Validate every message of a send request before any is sent; MessageError otherwise."""
    if not isinstance(raw, list) or not 1 <= len(raw) <= MAX_BATCH:
        raise MessageError("messages", f"send 1 to {MAX_BATCH} messages")
    checked = []
    for i, message in enumerate(raw):
        where = f"messages[{i}]"
        if not isinstance(message, dict):
            raise MessageError(where, "must be an object {body, attributes?, groupId?, dedupId?}")
        body = message.get("body")
        if not isinstance(body, str):
            raise MessageError(f"{where}.body", "must be a string (send JSON as text)")
        if not body:
            raise MessageError(f"{where}.body", "must not be empty")
        if not _SQS_TEXT_RE.match(body):
            raise MessageError(f"{where}.body", "contains characters SQS does not accept")
        attributes = message.get("attributes")
        if attributes is None:
            attributes = {}
        if not isinstance(attributes, dict):
            raise MessageError(f"{where}.attributes", "must be an object of string values")
        if len(attributes) > MAX_ATTRIBUTES:
            raise MessageError(f"{where}.attributes", f"at most {MAX_ATTRIBUTES} attributes")
        for name, value in attributes.items():
            _check_attribute(f"{where}.attributes.{name}", name, value)
        group_id, dedup_id = message.get("groupId"), message.get("dedupId")
        for key, value in (("groupId", group_id), ("dedupId", dedup_id)):
            if value is None:
                continue
            if not fifo:
                raise MessageError(f"{where}.{key}", "only a FIFO queue takes groupId and dedupId")
            if not isinstance(value, str) or not FIFO_ID_RE.match(value):
                raise MessageError(f"{where}.{key}", "1 to 128 printable ASCII characters")
        if fifo and group_id is None:
            raise MessageError(f"{where}.groupId", "is required on a FIFO queue")
        out = OutgoingMessage(body, dict(attributes), group_id, dedup_id)
        if out.size() > MAX_MESSAGE_BYTES:
            raise MessageError(
                where, f"is {out.size()} bytes; body and attributes may be at most 256 KiB"
            )
        checked.append(out)
    return checked


def _check_attribute(where: str, name: Any, value: Any) -> None:
    if not isinstance(name, str) or not ATTRIBUTE_NAME_RE.match(name):
        raise MessageError(where, "attribute names are 1 to 256 of A-Z a-z 0-9 _ - .")
    lowered = name.lower()
    if (
        lowered.startswith(("aws.", "amazon."))
        or name.startswith(".")
        or name.endswith(".")
        or ".." in name
    ):
        raise MessageError(where, "attribute names may not start with AWS./Amazon. or misuse '.'")
    if lowered.startswith(RESERVED_ATTRIBUTE_PREFIX):
        raise MessageError(where, "attribute names starting with ezgh. are the engine's")
    if not isinstance(value, str):
        raise MessageError(where, "attribute values must be strings")
    if not value:
        raise MessageError(where, "attribute values must not be empty")
    if not _SQS_TEXT_RE.match(value):
        raise MessageError(where, "contains characters SQS does not accept")


def iso_from_ms(ms: int | str) -> str:
    stamp = datetime.fromtimestamp(int(ms) / 1000, tz=UTC)
    return stamp.strftime("%Y-%m-%dT%H:%M:%S.") + f"{stamp.microsecond // 1000:03d}Z"


def delivered_message(record: dict[str, Any], queue: QueueRecord) -> dict[str, Any]:
    """The seed's message shape from a Lambda SQS record:
    `{messageId, body, attributes, sentAt, queueId, groupId?, seq?}`."""
    attrs = record.get("attributes") or {}
    attributes = {
        name: value.get("stringValue", "")
        for name, value in (record.get("messageAttributes") or {}).items()
        if isinstance(value, dict) and "stringValue" in value
    }
    # A message sent under an Idempotency-Key has the engine's own ID, the same on each copy.
    own_id = attributes.pop(MESSAGE_ID_ATTRIBUTE, None)
    message: dict[str, Any] = {
        "messageId": own_id or record["messageId"],
        "body": record.get("body", ""),
        "attributes": attributes,
        "sentAt": iso_from_ms(attrs["SentTimestamp"]) if attrs.get("SentTimestamp") else None,
        "queueId": queue.id,
    }
    if queue.fifo:
        if attrs.get("MessageGroupId") is not None:
            message["groupId"] = attrs["MessageGroupId"]
        if attrs.get("SequenceNumber") is not None:
            message["seq"] = str(attrs["SequenceNumber"])
    return message


# --- run-ended notifications ---------------------------------------------------------------


def notification_body(run: dict[str, Any], *, max_bytes: int = MAX_MESSAGE_BYTES) -> dict[str, Any]:
    """The seed's `workflows.run.ended` body from a run's fields (API names).

    `output` is inlined while the message stays within `max_bytes`, else `outputRef`.
    """
    body: dict[str, Any] = {
        "type": "workflows.run.ended",
        "runId": run["runId"],
        "appId": run["appId"],
        "workflow": run["workflow"],
        "status": run["status"],
        "attempt": int(run["attempt"]),
    }
    if run["status"] in ("failed", "timedOut") and run.get("error"):
        body["error"] = run["error"]
    if run["status"] == "completed":
        if run.get("outputRef"):
            body["outputRef"] = run["outputRef"]
        elif "output" in run:
            body["output"] = run["output"]
    body["startedAt"] = run.get("startedAt")
    body["endedAt"] = run.get("endedAt")
    if "output" in body and len(encode(body).encode()) > max_bytes:
        del body["output"]
        body["outputRef"] = "output"  # the run's output path, for GetPayload
    return body


def encode(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)
