"""Requests and dollars of what a `Recorder` saw, at the prices of `bench/prices.py`."""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any

from ezgh_engine.topology import TOPOLOGY, StreamSource

from bench import prices as p
from bench.instrument import (
    AppRequest,
    AwsCall,
    Invocation,
    index_units,
    read_bytes,
    request_units,
)

# Requests that cost nothing and are not counted as requests: the stream mapping's reads are
# free, the local Scheduler's own bookkeeping is emulation (on AWS the service fires and
# deletes a schedule itself), and the local poller's GetQueueUrl is not something AWS does.
_SCHEDULER_EMULATION = {"ListSchedules", "GetSchedule", "DeleteSchedule", "GetQueueUrl"}


def counted(call: AwsCall) -> bool:
    if call.origin == "esm:stream":
        return False
    if call.service == "lambda" and call.operation == "Invoke":
        # An asynchronous invoke (the stream's, or Scheduler firing a Lambda target) is
        # billed as the invocation it makes, counted from the handler (prices.py).
        return False
    return not (call.origin == "scheduler" and call.operation in _SCHEDULER_EMULATION)


@dataclass
class Bill:
    """Requests by service (`requests`), by service.operation (`operations`), dollars by
    line (`usd`), and the quantities behind them."""

    requests: Counter[str] = field(default_factory=Counter)
    operations: Counter[str] = field(default_factory=Counter)
    usd: dict[str, float] = field(default_factory=dict)
    wru: float = 0.0  # index copies included (`index_wru`)
    rru: float = 0.0
    # The write units of the index copies DynamoDB made of the writes (bench/keys.py).
    index_wru: float = 0.0
    # The transactional half of `wru`: what the same writes would cost outside transactions.
    transact_wru_premium: float = 0.0
    ddb_bytes_read: int = 0
    ddb_bytes_written: int = 0
    lambda_seconds: dict[str, float] = field(default_factory=dict)
    lambda_cpu_seconds: dict[str, float] = field(default_factory=dict)  # of lambda_seconds
    lambda_invocations: Counter[str] = field(default_factory=Counter)
    app_requests: int = 0
    app_bytes_sent: int = 0
    app_bytes_received: int = 0
    stream_reads: int = 0
    origins: Counter[str] = field(default_factory=Counter)  # "origin service.operation" -> n
    origin_usd: defaultdict[str, float] = field(
        default_factory=lambda: defaultdict(float)
    )  # origin -> dollars
    lambda_gb_usd: defaultdict[str, float] = field(
        default_factory=lambda: defaultdict(float)
    )  # function -> GB-s dollars
    lambda_request_usd: defaultdict[str, float] = field(default_factory=lambda: defaultdict(float))
    lambda_requests: Counter[str] = field(default_factory=Counter)  # billed, by function
    lambda_without_requests: Counter[str] = field(default_factory=Counter)
    app_seconds: float = 0.0
    # What the run's observability wrote to CloudWatch Logs (bench/telemetry.py).
    log_bytes: int = 0
    wru_by_item: defaultdict[str, float] = field(
        default_factory=lambda: defaultdict(float)
    )  # "RUN", "STEP", "EVT", ...

    @property
    def total_requests(self) -> int:
        """Billable AWS requests: everything but the engine -> app calls."""
        return sum(n for service, n in self.requests.items() if service != "app")

    @property
    def total_usd(self) -> float:
        return sum(self.usd.values())

    def as_dict(self) -> dict[str, Any]:
        return {
            "requests": dict(self.requests),
            "operations": dict(sorted(self.operations.items())),
            "usd": {k: round(v, 12) for k, v in self.usd.items()},
            "usd_total": round(self.total_usd, 12),
            "dynamodb_wru": self.wru,
            "dynamodb_index_wru": self.index_wru,
            "dynamodb_transact_wru_premium": self.transact_wru_premium,
            "dynamodb_rru": self.rru,
            "dynamodb_wru_by_item": dict(self.wru_by_item),
            "dynamodb_bytes_read": self.ddb_bytes_read,
            "dynamodb_bytes_written": self.ddb_bytes_written,
            "lambda_invocations": dict(self.lambda_invocations),
            "lambda_requests": dict(self.lambda_requests),
            "lambda_seconds": {k: round(v, 4) for k, v in self.lambda_seconds.items()},
            "lambda_cpu_seconds": {k: round(v, 4) for k, v in self.lambda_cpu_seconds.items()},
            "lambda_gb_s_usd": {k: round(v, 12) for k, v in self.lambda_gb_usd.items()},
            "app_requests": self.app_requests,
            "app_bytes_sent": self.app_bytes_sent,
            "app_bytes_received": self.app_bytes_received,
            "app_seconds": round(self.app_seconds, 4),
            "cloudwatch_logs_bytes": self.log_bytes,
            "lambda_invocations_without_requests": dict(self.lambda_without_requests),
            "stream_reads_free": self.stream_reads,
            "by_origin": dict(sorted(self.origins.items())),
            "usd_by_origin": {k: round(v, 12) for k, v in sorted(self.origin_usd.items())},
        }


def _chunks(size: int, chunk: int) -> int:
    return max(1, math.ceil(size / chunk))


# Functions whose stream mapping gathers records for a while before it invokes (topology
# `StreamSource.batching_window_seconds`: the observe function): the local reader invokes at
# once, so deployed, the invocations of one window are one request.
WINDOWS = {
    s.function: s.batching_window_seconds
    for s in TOPOLOGY.sources
    if isinstance(s, StreamSource) and s.batching_window_seconds
}


def batched_requests(invocations: list[Invocation]) -> dict[int, int]:
    """The billed requests of each invocation (by `id`) of a windowed function: 1 for the
    first of a window (which opens at it and lasts the function's window), 0 for the others
    in it. A run alone, as the bench runs them: a busy stack shares a window among runs, so
    this is the most a run pays. Their GB-seconds are billed as measured."""
    found: dict[int, int] = {}
    for function, window in WINDOWS.items():
        opened: float | None = None
        for inv in sorted((i for i in invocations if i.function == function), key=lambda i: i.at):
            first = opened is None or inv.at >= opened + window
            opened = inv.at if first else opened
            found[id(inv)] = 1 if first else 0
    return found


def bill(
    calls: list[AwsCall],
    invocations: list[Invocation],
    app_requests: list[AppRequest],
    scheduler_fires: int,
    sizes: dict[tuple[str, str, str], int],
    log_bytes: int = 0,
) -> Bill:
    b = Bill()
    usd: defaultdict[str, float] = defaultdict(float)
    if log_bytes:
        b.log_bytes = log_bytes
        usd["logs"] = log_bytes / 1e9 * p.CLOUDWATCH_LOGS_USD_PER_GB_INGESTED
        b.origin_usd["cloudwatch-logs"] += usd["logs"]
    for call in calls:
        if call.origin == "esm:stream":
            b.stream_reads += 1
            continue
        if not counted(call):
            continue
        b.requests[call.service] += 1
        b.operations[f"{call.service}.{call.operation}"] += 1
        b.origins[f"{call.origin} {call.service}.{call.operation}"] += 1
        before = sum(usd.values())
        if call.service == "dynamodb":
            wru, rru = request_units(call.accesses, sizes)
            for access in call.accesses:
                if access.kind == "write":
                    kind = access.key[2].split("#", 1)[0] if access.key else "?"
                    units = request_units([access], sizes)[0]
                    b.wru_by_item[kind or "?"] += units
                    if access.transactional:
                        b.transact_wru_premium += units / 2
            copies = sum(index_units(a, sizes) for a in call.accesses)
            b.index_wru += copies
            b.wru_by_item["index copies"] += copies
            wru += copies
            b.wru += wru
            b.rru += rru
            usd["dynamodb"] += wru * p.DYNAMODB_USD_PER_WRU + rru * p.DYNAMODB_USD_PER_RRU
            b.ddb_bytes_read += sum(read_bytes(a, sizes) for a in call.accesses)
            b.ddb_bytes_written += sum(
                max(a.request_size, sizes.get(a.key, 0) if a.key else 0)
                for a in call.accesses
                if a.kind == "write"
            )
        elif call.service == "sqs":
            payload = max(call.request_bytes, call.response_bytes if call.messages else 0)
            usd["sqs"] += _chunks(payload, p.SQS_CHUNK_BYTES) * p.SQS_USD_PER_REQUEST
        elif call.service == "s3":
            price = p.S3_USD_PER_PUT if call.operation in p.S3_PUT_CLASS else p.S3_USD_PER_GET
            usd["s3"] += price
        elif call.service == "scheduler":
            usd["scheduler"] += p.SCHEDULER_USD_PER_API_CALL
        b.origin_usd[call.origin] += sum(usd.values()) - before
    if scheduler_fires:
        b.requests["scheduler-fire"] += scheduler_fires
        usd["scheduler"] += scheduler_fires * p.SCHEDULER_USD_PER_INVOCATION
    memory = {f.key: f.memory_mb for f in TOPOLOGY.functions}
    requests = batched_requests(invocations)
    for inv in invocations:
        b.lambda_invocations[inv.function] += 1
        if inv.aws_calls == 0:
            b.lambda_without_requests[inv.function] += 1
        b.lambda_seconds[inv.function] = b.lambda_seconds.get(inv.function, 0.0) + inv.seconds
        cpu = min(inv.cpu_seconds, inv.seconds)
        b.lambda_cpu_seconds[inv.function] = b.lambda_cpu_seconds.get(inv.function, 0.0) + cpu
        billed = math.ceil(inv.seconds * 1000) / 1000
        gb_s = billed * memory.get(inv.function, 512) / 1024
        gb_usd = gb_s * p.LAMBDA_USD_PER_GB_SECOND_ARM64
        billed_requests = requests.get(id(inv), 1)
        request = p.LAMBDA_USD_PER_REQUEST * billed_requests
        usd["lambda"] += request + gb_usd
        b.lambda_requests[inv.function] += billed_requests
        b.lambda_gb_usd[inv.function] += gb_usd
        b.lambda_request_usd[inv.function] += request
        b.origin_usd[f"function:{inv.function}"] += request + gb_usd
        b.requests["lambda"] += billed_requests
        if inv.function == "api":
            b.requests["http-api"] += 1
            fee = _chunks(inv.request_bytes, p.HTTP_API_CHUNK_BYTES) * p.HTTP_API_USD_PER_REQUEST
            usd["http-api"] += fee
            b.origin_usd["function:api"] += fee
    for req in app_requests:
        b.app_requests += 1
        b.app_bytes_sent += req.request_bytes
        b.app_bytes_received += req.response_bytes
        b.app_seconds += req.seconds
    b.requests["app"] = b.app_requests
    b.usd = dict(usd)
    return b
