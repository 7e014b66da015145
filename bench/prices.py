"""AWS list prices, us-east-1, written down once. Everything in bench/ prices through these.

Checked 2026-11-30 against the public pricing pages below (on-demand, no free tier, no
savings plans: the free tiers are per account and vanish at the scale these figures are for).
"""

from __future__ import annotations

PRICES_DATE = "2026-11-30"
REGION = "us-east-1"

SOURCES = {
    "dynamodb": "https://aws.amazon.com/dynamodb/pricing/on-demand/",
    "lambda": "https://aws.amazon.com/lambda/pricing/",
    "sqs": "https://aws.amazon.com/sqs/pricing/",
    "apigateway": "https://aws.amazon.com/api-gateway/pricing/",
    "scheduler": "https://aws.amazon.com/eventbridge/pricing/",
    "s3": "https://aws.amazon.com/s3/pricing/",
}

# DynamoDB on demand (prices since the November 2024 cut). One write request unit (WRU) writes
# up to 1 KB of item; one read request unit (RRU) reads up to 4 KB strongly consistent, or
# 8 KB eventually consistent (half a unit per 4 KB). Transactional reads and writes cost two
# units per unit of size. A Query is charged on the summed size of the items it read, rounded
# up to 4 KB, not per item. A failed conditional write still consumes its WRUs.
DYNAMODB_USD_PER_WRU = 0.625 / 1e6
DYNAMODB_USD_PER_RRU = 0.125 / 1e6
DYNAMODB_WRU_BYTES = 1024
DYNAMODB_RRU_BYTES = 4096
# GetRecords calls made by Lambda's event source mapping on a DynamoDB stream are free.
DYNAMODB_STREAM_READS_BY_LAMBDA_USD = 0.0

# Lambda on arm64 (first pricing tier: 7.5 billion GB-seconds a month), per request and per
# GB-second, billed per millisecond at the function's configured memory (topology.py).
LAMBDA_USD_PER_REQUEST = 0.20 / 1e6
LAMBDA_USD_PER_GB_SECOND_ARM64 = 0.0000133334

# SQS standard queue: per request, each 64 KB chunk of a payload is one request. The
# requests of Lambda's SQS event source mapping (ReceiveMessage, DeleteMessageBatch) are
# billed like any others.
SQS_USD_PER_REQUEST = 0.40 / 1e6
SQS_CHUNK_BYTES = 64 * 1024

# API Gateway HTTP API, first 300 million requests a month; metered per 512 KB.
HTTP_API_USD_PER_REQUEST = 1.00 / 1e6
HTTP_API_CHUNK_BYTES = 512 * 1024

# EventBridge Scheduler: per scheduled invocation (a schedule firing its target). Assumption,
# from the pricing page: creating, updating and deleting schedules carries no request fee
# ("you pay for invocations"), and `ActionAfterCompletion: DELETE` is done by the service.
SCHEDULER_USD_PER_INVOCATION = 1.00 / 1e6
SCHEDULER_USD_PER_API_CALL = 0.0

# S3 Standard requests.
S3_USD_PER_PUT = 0.005 / 1000  # PUT, COPY, POST, LIST
S3_USD_PER_GET = 0.0004 / 1000  # GET, HEAD and the rest
S3_PUT_CLASS = {
    "PutObject",
    "CopyObject",
    "ListObjectsV2",
    "ListObjects",
    "CreateMultipartUpload",
    "UploadPart",
    "CompleteMultipartUpload",
}

# Anchors (their own public list prices, same date), per million billed units.
ANCHORS = [
    ("AWS Step Functions Standard", "state transition", 25.0, 25.0),
    ("AWS Lambda durable functions", "operation", 8.0, 8.0),
    ("Temporal Cloud", "action", 25.0, 50.0),
]
