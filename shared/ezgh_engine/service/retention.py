"""Retention: a run's data is deleted 30 days after it ends (seed 000).

The run item gets its TTL (its end + 30 days) when it ends. DynamoDB deletes it after that
(typically within two days), and the stream shows the REMOVE: `on_run_removed` then deletes
everything else of the run: its step, event and marker items (`RUN#<runId>`), its run-key
item (while it still names the run), its callback index items, and its S3 payloads. The
items' own TTLs (396 days) remain a backstop. Cost: one query of the run's partition, one
delete per item (25 a batch), and one S3 list and delete for a run that may have stored a
payload (its input or output referenced, or marked by `runs_store.put_payload` before any
other was stored); DeleteRun does the same at once (and always lists).
"""

from __future__ import annotations

import logging
from typing import Any

from botocore.exceptions import ClientError

from ezgh_engine import ids
from ezgh_engine.adapters import ddb, payloads
from ezgh_engine.adapters import run_items as items
from ezgh_engine.adapters import waits_store as ws
from ezgh_engine.adapters.aws import client
from ezgh_engine.config import settings
from ezgh_engine.errors import TransientError
from ezgh_engine.service.callbacks import token_for

log = logging.getLogger(__name__)


def _partition(run_id: str) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    kwargs: dict[str, Any] = {
        "TableName": settings().runs_table,
        "KeyConditionExpression": "pk = :pk",
        "ExpressionAttributeValues": {":pk": {"S": items.run_pk(run_id)}},
        "ConsistentRead": True,
    }
    while True:
        answer = client("dynamodb").query(**kwargs)
        out.extend(ddb.from_item(i) for i in answer.get("Items", []))
        if "LastEvaluatedKey" not in answer:
            return out
        kwargs["ExclusiveStartKey"] = answer["LastEvaluatedKey"]


def callback_keys(run_id: str, values: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """The `CALLBACK#` index keys of the run's callback steps among `values` (its items)."""
    keys = []
    for item in values:
        salt = item.get("cbSalt")
        if item.get("kind") == "callback" and salt and item.get("stepId"):
            token = token_for(run_id, str(item["stepId"]), str(salt))
            keys.append((ws.callback_pk(ids.sha256_hex(token)), "CALLBACK"))
    return keys


def message_wait_keys(run_id: str, values: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """The `MSGWAIT#` index keys of the run's message steps among `values` (its items):
    outside the run's partition, usually deleted when the wait ends, left if that failed."""
    keys = []
    for item in values:
        if item.get("kind") == "message" and item.get("queueId") and item.get("projectId"):
            pk = ws.msgwait_pk(str(item["projectId"]), str(item["queueId"]), item.get("msgKey", ""))
            keys.append((pk, f"{run_id}#{item.get('stepId') or _step_id(item)}"))
    return keys


def _step_id(item: dict[str, Any]) -> str:
    return str(item.get("sk", "")).removeprefix(items.STEP_PREFIX)


def _delete_keys(keys: list[tuple[str, str]]) -> None:
    table = settings().runs_table
    for start in range(0, len(keys), 25):
        batch = [
            {"DeleteRequest": {"Key": items.key(pk, sk)}} for pk, sk in keys[start : start + 25]
        ]
        pending: dict[str, Any] = {table: batch}
        for _ in range(5):  # unprocessed items (throttling) go again
            answer = client("dynamodb").batch_write_item(RequestItems=pending)
            pending = answer.get("UnprocessedItems") or {}
            if not pending:
                break
        if pending:  # fail the record: the stream delivers it again, and the purge is redone
            raise TransientError("DynamoDB left deletes of a run's items unprocessed")


def _delete_run_key(project_id: str, run_key: str, run_id: str, scope: str | None) -> None:
    """Free the run's key: its scoped item (`run_items.run_key_scope`) and, for a run started
    before keys were scoped, its project-wide one; each only while it names this run."""
    for where in dict.fromkeys((scope, None)):
        try:
            client("dynamodb").delete_item(
                TableName=settings().runs_table,
                Key=items.key(items.run_key_pk(project_id, run_key, where), "RUNKEY"),
                ConditionExpression="runId = :id",
                ExpressionAttributeValues={":id": {"S": run_id}},
            )
        except ClientError as exc:
            if not ddb.is_condition_failure(exc):
                raise


def delete_callbacks(run_id: str) -> None:
    """Delete the run's callback index items (DeleteRun, before the steps that name them)."""
    _delete_keys(callback_keys(run_id, _partition(run_id)))


def purge_run(
    run_id: str,
    project_id: str,
    run_key: str | None,
    *,
    with_payloads: bool = True,
    key_scope: str | None = None,
) -> None:
    """Delete every item and object a run left after its run item (idempotent); its S3
    objects only `with_payloads`."""
    values = _partition(run_id)
    keys = callback_keys(run_id, values) + message_wait_keys(run_id, values)
    keys += [(str(v["pk"]), str(v["sk"])) for v in values if v.get("sk") != items.RUN_SK]
    _delete_keys(keys)
    if run_key:
        _delete_run_key(project_id, run_key, run_id, key_scope)
    if with_payloads:
        payloads.delete_run_payloads(project_id, run_id)


def on_run_removed(old: dict[str, Any]) -> None:
    """The stream saw a run item deleted (its TTL, or DeleteRun): delete the rest."""
    run_id, project_id = old.get("id"), old.get("projectId")
    if not run_id or not project_id:
        return
    # A run that never stored a payload (none marked, no input or output reference) has no
    # objects to list: one S3 LIST ($5 per million) less per run.
    stored = old.get(items.PAYLOADS_ATTR) != items.PAYLOADS_NONE
    stored = stored or bool(old.get("inputRef") or old.get("outputRef"))
    scope = None
    if old.get("appId") and old.get("workflow"):
        scope = items.run_key_scope(str(old["appId"]), str(old["workflow"]))
    purge_run(
        str(run_id), str(project_id), old.get("runKey"), with_payloads=stored, key_scope=scope
    )
