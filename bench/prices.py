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
    "cloudwatch": "https://aws.amazon.com/cloudwatch/pricing/",
    "secretsmanager": "https://aws.amazon.com/secrets-manager/pricing/",
    "kms": "https://aws.amazon.com/kms/pricing/",
    "lambda-sqs-scaling": "https://docs.aws.amazon.com/lambda/latest/dg/services-sqs-scaling.html",
    "sqs-polling": "https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/best-practices-using-appropriate-polling-mode.html",
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
# An asynchronous invocation (`Invoke` with `InvocationType=Event`: the stream starting the
# invoker, Scheduler's Lambda target) is a request like any, billed once: the invocation it
# makes is counted where the handler runs (LAMBDA_USD_PER_REQUEST + its GB-s), so the
# `Invoke` call itself adds nothing. Lambda's event queue, its retries' waiting and its
# on-failure record (an SQS SendMessage, billed by SQS) carry no fee of their own.
LAMBDA_USD_PER_ASYNC_INVOKE_CALL = 0.0

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
# A schedule whose target is a Lambda function (long timers and cron fires target the invoker)
# bills that one Scheduler invocation plus the Lambda invocation it starts (asynchronous,
# above); a queue target bills the invocation plus SQS's send, receive and delete.

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

# --- what a deployment costs while it does nothing (bench/idle.py) ---------------------------
# A month is 30 days for request counts (43,200 minutes); monthly fees are per month.
SECONDS_PER_MONTH = 30 * 24 * 3600

# SQS long polling: a ReceiveMessage waits up to 20 s and is billed whether or not it returns
# a message ("Short polling is billed the same as long polling"), so an idle long-poller makes
# one billed request per 20 s.
SQS_LONG_POLL_SECONDS = 20

# Lambda's SQS event source mapping (standard mode), from "Configuring scaling behavior for
# SQS event source mappings" (docs.aws.amazon.com/lambda/latest/dg/services-sqs-scaling.html):
# "Lambda uses long polling to poll a queue until it becomes active ... When traffic is low,
# Lambda scales back the processing to five concurrent batches, and can optimize to as few as
# 2 concurrent batches to reduce the SQS calls ... this optimization is not available when you
# enable the maximum concurrency setting." So an idle mapping long-polls with 2-5 pollers, 5
# when `ScalingConfig.MaximumConcurrency` is set (every subscription sets it). Provisioned
# mode (ProvisionedPollerConfig) is billed per event poller unit instead; nothing here uses it.
ESM_IDLE_POLLERS = (2, 5)
ESM_IDLE_POLLERS_WITH_MAX_CONCURRENCY = (5, 5)

# Lambda's DynamoDB stream mapping reads the stream for free (see above): an idle stream costs
# nothing. STS (AssumeRole) has no charge.
STS_USD_PER_REQUEST = 0.0

# Monthly fees of provisioned resources (us-east-1, list): a standard-resolution CloudWatch
# alarm, per metric it evaluates; a Secrets Manager secret ($0.05 per 10,000 API calls on top:
# a cold start reads it once, so none while idle); a customer-managed KMS key.
CLOUDWATCH_ALARM_USD_PER_MONTH = 0.10
SECRETS_MANAGER_USD_PER_SECRET_MONTH = 0.40
KMS_KEY_USD_PER_MONTH = 1.00
# Storage, per GB-month: zero for a deployment that stores nothing (the idle figure), shown
# so the reader can add what they keep. DynamoDB Standard table storage, point-in-time
# recovery (on the table size), CloudWatch Logs, S3 Standard.
DYNAMODB_USD_PER_GB_MONTH = 0.25
DYNAMODB_PITR_USD_PER_GB_MONTH = 0.20
LOGS_USD_PER_GB_MONTH = 0.03
S3_USD_PER_GB_MONTH = 0.023

# What shows the runs (docs/architecture.md, "Observability"). CloudWatch Logs ingestion (the
# functions' log lines and EMF documents, standard class), per GB; custom metrics, per metric
# (a name and dimension values) and month, prorated by the hours it is sent (none idle);
# a dashboard per month (an account's first three, of up to 50 metrics each, are free);
# X-Ray, per trace recorded (PutTraceSegments itself has no fee).
CLOUDWATCH_LOGS_USD_PER_GB_INGESTED = 0.50
CLOUDWATCH_CUSTOM_METRIC_USD_PER_MONTH = 0.30
CLOUDWATCH_DASHBOARD_USD_PER_MONTH = 3.00
XRAY_USD_PER_TRACE_RECORDED = 5.00 / 1e6
SOURCES["xray"] = "https://aws.amazon.com/xray/pricing/"
