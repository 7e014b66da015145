"""How large a JSON text is where AWS carries it, and the AWS limits that bound it. Pure.

A Lambda function's answer, and a function URL's request, travel as a JSON document whose
`body` is the HTTP body as one JSON string: every `"` and `\\` of the body is escaped once
more there (the Python 3.12 runtime writes the rest as UTF-8). Lambda's 6 MB applies to that
document, so what an answer or an invoke request may hold is measured by `carried_size`, not
by the body's own length: a body of quotes takes twice its length.
"""

from __future__ import annotations

import json
from typing import Any

# A synchronous Lambda invocation's request and answer (a function URL's too): 6 MB.
LAMBDA_PAYLOAD_BYTES = 6 * 1024 * 1024
# One SQS message (a pull app's task), as SQS counts it: the body's UTF-8 bytes.
SQS_MESSAGE_BYTES = 256 * 1024
# DynamoDB's largest item: names and values, in UTF-8 bytes.
DYNAMODB_ITEM_BYTES = 400 * 1024


def json_text(value: Any) -> str:
    """The compact JSON text of `value`, as the engine writes bodies and stores values."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def carried_size(text: str) -> int:
    """The bytes `text` takes inside a Lambda payload's JSON string: its UTF-8 bytes plus
    one escape for each `"` and `\\` (JSON text has no raw control characters)."""
    return len(text.encode("utf-8", "surrogatepass")) + text.count('"') + text.count("\\")


def value_size(value: Any) -> int:
    """`carried_size` of a JSON value's text."""
    return carried_size(json_text(value))
