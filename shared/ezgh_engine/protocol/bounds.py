"""How large what the invocation protocol carries may be (protocol 1.5). Pure.

From 1.5 an invoke request has a size of its own, whatever the run holds: values kept
outside the run's items travel as references, and a history that does not fit arrives in
pages the SDK reads (docs/protocol.md, section 1.3). These are the sizes, measured as
`core.sizes.carried_size` measures a body where AWS carries it.
"""

from __future__ import annotations

from ezgh_engine.core.sizes import LAMBDA_PAYLOAD_BYTES, SQS_MESSAGE_BYTES

# An invoke request to a push app: well under a function URL's 6 MB, and under the 1 MB an
# Application Load Balancer passes to a Lambda target and nginx's default body limit, so a
# 1.5 request reaches an app behind any of them.
PUSH_REQUEST_BYTES = 768 * 1024
# A pull app's task is one SQS message: the request, its `taskId` and `leaseSeconds`.
PULL_TASK_BYTES = 192 * 1024
# One answer of the history call (a page of ended steps) or of the payload call (one value
# of at most 1 MiB, escaped): a Lambda answer, under its 6 MB.
HISTORY_PAGE_BYTES = 1024 * 1024
# The steps one history page reads at most (a DynamoDB query page of the run's steps).
HISTORY_PAGE_ITEMS = 100

assert PULL_TASK_BYTES < SQS_MESSAGE_BYTES and PUSH_REQUEST_BYTES < LAMBDA_PAYLOAD_BYTES
