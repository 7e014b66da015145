"""Large values live in the S3 payload bucket; items keep a path (`outputRef`)."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import quote

from botocore.exceptions import ClientError

from ezgh_engine.adapters.aws import client
from ezgh_engine.config import settings
from ezgh_engine.errors import NotFound

RUN_OUTPUT_PATH = "output"
RUN_INPUT_PATH = "input"


def step_output_path(step_id: str, writer: str | None = None) -> str:
    """The payload path of a step's output; the step ID is percent-encoded (it may hold '#').
    With `writer` (an ID unique to the write), each candidate output has a path of its own,
    so one that loses the step's conditional write never replaces the one that won (the
    step's `outputRef` names the winner's)."""
    step = quote(step_id, safe="")
    return f"steps/{step}/{quote(writer, safe='')}/output" if writer else f"steps/{step}/output"


def _key(project_id: str, run_id: str, path: str) -> str:
    return f"{project_id}/{run_id}/{path}"


def put(project_id: str, run_id: str, path: str, text: str) -> None:
    client("s3").put_object(
        Bucket=settings().payload_bucket,
        Key=_key(project_id, run_id, path),
        Body=text.encode(),
        ContentType="application/json",
    )


def get_text(project_id: str, run_id: str, path: str) -> str:
    try:
        answer = client("s3").get_object(
            Bucket=settings().payload_bucket, Key=_key(project_id, run_id, path)
        )
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") in {"NoSuchKey", "404"}:
            raise NotFound(f"no payload {path!r} for run {run_id}") from None
        raise
    return str(answer["Body"].read().decode())


def get(project_id: str, run_id: str, path: str) -> Any:
    return json.loads(get_text(project_id, run_id, path))


def delete_run_payloads(project_id: str, run_id: str) -> None:
    s3 = client("s3")
    bucket = settings().payload_bucket
    prefix = f"{project_id}/{run_id}/"
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        keys = [{"Key": obj["Key"]} for obj in page.get("Contents", [])]
        if keys:
            s3.delete_objects(Bucket=bucket, Delete={"Objects": keys, "Quiet": True})
